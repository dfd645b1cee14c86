"""The results store: schema validated on write and read, atomic appends, bad lines reported and skipped."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from runners import results as rs


def run(**over: object) -> dict:
    return {**rs.run_info("gloo", 2, 1, ["cpu"]), **over}


def collective(nbytes: int = 1024, **over: object) -> dict:
    config = {"op": "allreduce", "bytes": nbytes, "count": nbytes // 4, "dtype": "float32", "warmup": 2,
              "iterations": 5, "redop": "sum"}
    result = {"time_s": 1e-4, "algbw_GBps": nbytes / 1e-4 / 1e9, "busbw_GBps": nbytes / 1e-4 / 1e9, "wrong": 0}
    result.update(over)
    return rs.record("collective", config, result, run())


def test_run_info_carries_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rs.NETWORK_VARIABLE, json.dumps({"nodes": 2, "rate": "1gbit"}))
    info = rs.run_info("gloo", 4, 2, ["cpu"])
    for key in ("host", "backend", "world_size", "ranks_per_node", "devices", "torch", "nccl", "gloo", "network"):
        assert key in info
    assert info["network"] == {"nodes": 2, "rate": "1gbit"} and info["torch"].startswith("2.")
    assert info["gloo"].startswith("bundled with torch")


def test_round_trip_and_dataframe(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    assert rs.append(path, [collective(1024), collective(4096)]) == 2
    assert rs.append(path, [collective(8192)]) == 1
    loaded = rs.load(path)
    assert not loaded.bad and [r["config"]["bytes"] for r in loaded.records] == [1024, 4096, 8192]
    df = rs.dataframe(path)
    assert list(df["config.bytes"]) == [1024, 4096, 8192] and set(df["run.backend"]) == {"gloo"}
    assert path.read_text().count("\n") == 3  # one line per record


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r.update(kind="speed"), "kind must be one of collective, profile"),
    (lambda r: r["config"].pop("bytes"), "config.bytes is missing"),
    (lambda r: r["config"].update(bytes=-4), "config.bytes must be > 0, got -4"),
    (lambda r: r["result"].update(wrong=1.5), "result.wrong must be int, got 1.5"),
    (lambda r: r["result"].update(time_s=float("nan")), "result.time_s must be finite"),
    (lambda r: r["run"].update(world_size=True), "run.world_size must be int, got True"),
    (lambda r: r.update(schema="commscope.result/2"), "is not readable by this version"),
])
def test_bad_records_are_refused_on_write_and_nothing_is_written(tmp_path: Path, change, message: str) -> None:
    path = tmp_path / "r.jsonl"
    rs.append(path, [collective()])
    before = path.read_bytes()
    bad = collective()
    change(bad)
    with pytest.raises(rs.RecordError, match=message):
        rs.append(path, [collective(2048), bad])
    assert path.read_bytes() == before  # the good record before the bad one was not written either


def _disk_fills_up(monkeypatch: pytest.MonkeyPatch, after: int) -> list[int]:
    """os.write writes at most ``after`` bytes in all, then fails with ENOSPC; returns the sizes it was asked for."""
    real, asked, room = os.write, [], [after]

    def write(fd: int, data: bytes) -> int:
        asked.append(len(data))
        if room[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real(fd, bytes(data)[:room[0]])
        room[0] -= n
        return n

    monkeypatch.setattr(os, "write", write)
    return asked


@pytest.mark.parametrize("torn", [False, True])
def test_an_append_that_runs_out_of_space_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          torn: bool) -> None:
    path = tmp_path / "r.jsonl"
    rs.append(path, [collective(1024)])
    if torn:  # a torn last line: the separating newline is cut back off too
        with open(path, "ab") as fh:
            fh.write(b'{"schema": "commscope.res')
    before = path.read_bytes()
    records = [collective(2 ** k) for k in range(10, 18)]
    one = len(path.read_bytes()) if not torn else len(before) - 26
    asked = _disk_fills_up(monkeypatch, after=6 * one + 40)  # room for 6 of the 8 records and part of the 7th
    with pytest.raises(rs.CommscopeError, match=r"cannot append 8 record.* No space left on device; nothing "
                                                r"was written"):
        rs.append(path, records)
    assert asked[0] >= 8 * (one - 10)  # one buffer for all the records
    assert path.read_bytes() == before
    monkeypatch.undo()
    assert rs.append(path, records[:1]) == 1 and len(rs.load(path).records) == 2


def test_a_record_json_cannot_hold_fails_before_anything_is_written(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    rs.append(path, [collective()])
    before = path.read_bytes()
    for value in ({1, 2}, float("inf"), object()):
        bad = collective(4096)
        bad["config"]["note"] = value  # an extra field: the schema keeps it, JSON cannot
        with pytest.raises(rs.CommscopeError, match="cannot be written as JSON"):
            rs.append(path, [collective(2048), bad])
    assert path.read_bytes() == before


def test_corrupt_lines_are_reported_with_file_and_line_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    rs.append(path, [collective(1024)])
    good = path.read_text()
    wrong_kind = json.loads(good)
    wrong_kind["kind"] = "nonsense"
    path.write_text(good + "{not json\n" + json.dumps(wrong_kind) + "\n\n" + good + '{"schema": "commscope.result/1"')
    rs.append(path, [collective(2048)])  # after a torn last line: starts on a fresh line
    loaded = rs.load(path)
    assert [r["config"]["bytes"] for r in loaded.records] == [1024, 1024, 2048]
    assert [(b.line, b.reason.split(" (")[0].split(",")[0]) for b in loaded.bad] == [
        (2, "not JSON"), (3, "kind must be one of collective"), (6, "not JSON")]
    assert str(loaded.bad[0]).startswith(f"{path}:2: not JSON")


def test_missing_file_and_directory_are_named(tmp_path: Path) -> None:
    with pytest.raises(rs.CommscopeError, match="no results file"):
        rs.load(tmp_path / "none.jsonl")
    with pytest.raises(rs.CommscopeError, match=r"directory .* does not exist"):
        rs.append(tmp_path / "no" / "r.jsonl", [collective()])


def test_resume_key_ignores_time_and_id_but_not_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = collective(1024), collective(1024)
    assert a["id"] != b["id"] and rs.config_key(a) == rs.config_key(b)
    monkeypatch.setenv(rs.NETWORK_VARIABLE, json.dumps({"rate": "1gbit"}))
    assert rs.config_key(collective(1024)) != rs.config_key(a)
