"""The fuzz audit's failures (issue 19 item 5), each pinned: bad input is one ``commscope: error:`` line with exit
code 2 (never a traceback, a hang or a silent wrong answer), and nothing already written is lost."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import convergence as cv
import costmodels as cm
from runners import results as rs
from runners.cli import main

REFERENCE = Path(__file__).resolve().parent.parent / "runners/reference/validation/200mbit/records.jsonl"
DEEP = "[" * 100_000 + "]" * 100_000


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run a command that must fail: exit 2, nothing on stdout, one ``commscope: error:`` line; the message."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "", (code, out, err)
    assert err.startswith("commscope: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# ----------------------------------------------------------------------------------------------- size ranges
def test_a_range_that_never_ends_is_refused_and_the_least_factor_named() -> None:
    t0 = time.perf_counter()
    with pytest.raises(cm.CommscopeError, match=r"holds 1,386,30\d sizes, more than 10,000; use a factor") as info:
        cm.size_range(2**10, 2**30, 1.00001)
    assert time.perf_counter() - t0 < 0.5
    least = float(str(info.value).rsplit(" ", 1)[1])
    assert 9_000 < len(cm.size_range(2**10, 2**30, least)) <= 10_000  # the factor it names is enough


def test_bench_refuses_a_range_that_never_ends(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, "bench", "collectives", "--dry-run", "-b", "1K", "-e", "1G", "-f", "1.00001")
    assert "more than 10,000" in err


# ------------------------------------------------------------------------------------- JSON files, one line
def bad_files(tmp_path: Path) -> dict[str, Path]:
    files = {"utf8": b'{"alpha": "\xff\xfe"}', "garbage": b"\x00\x01garbage{{{", "deep": DEEP.encode()}
    out = {}
    for name, data in files.items():
        out[name] = tmp_path / f"{name}.json"
        out[name].write_bytes(data)
    return out


@pytest.mark.parametrize("kind", ["utf8", "garbage", "deep"])
@pytest.mark.parametrize("command", ["environment", "profile"])
def test_bad_json_files_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str,
                                     command: str) -> None:
    path = str(bad_files(tmp_path)[kind])
    argv = (["predict", "collective", "-a", "ring_allreduce", "--env", path, "-p", "8", "-s", "1MiB"]
            if command == "environment" else ["predict", "iteration", "--model", path, "--env", "10GbE", "-p", "8"])
    err = one_line_error(capsys, *argv)
    assert path in err
    assert {"utf8": "not UTF-8", "garbage": "not valid JSON", "deep": "nested too deeply"}[kind] in err


def test_environment_json_text_nested_too_deeply() -> None:
    with pytest.raises(cm.CommscopeError, match="nested too deeply"):
        cm.Environment.from_json(DEEP)


@pytest.mark.parametrize(("field", "value"), [
    ("layers", 5), ("layers", None), ("columns", 5), ("columns", [["name"]]), ("columns", None), ("dtype", [1]),
    ("dtype", {"a": 1}), ("metadata", [1, 2]), ("metadata", "ab"), ("metadata", 5), ("metadata", [[1, 2]]),
    ("device", 5), ("source", ["x"]), ("origin", {"a": 1}),
])
def test_profile_fields_of_the_wrong_type_are_refused(field: str, value: object) -> None:
    data = cm.profile("resnet50").to_dict()
    data[field] = value
    with pytest.raises(cm.CommscopeError, match=field):
        cm.ModelProfile.from_dict(data)


def test_profile_file_of_the_wrong_type_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = {**cm.profile("resnet50").to_dict(), "metadata": [1, 2]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert "metadata must be an object" in one_line_error(capsys, "predict", "iteration", "--model", str(path),
                                                          "--env", "10GbE", "-p", "8")


# --------------------------------------------------------------------------- results lines nested too deeply
def allreduce_lines(limit: int | None = None) -> list[str]:
    lines = [x for x in REFERENCE.read_text().splitlines() if '"kind":"collective"' in x and '"op":"allreduce"' in x]
    return lines[:limit]


def with_deep_line(path: Path) -> Path:
    good = allreduce_lines()
    path.write_text("\n".join([good[0], '{"a":' * 100_000 + "1" + "}" * 100_000, *good[1:]]) + "\n")
    return path


def test_load_reports_a_deep_line_as_file_line(tmp_path: Path) -> None:
    path = with_deep_line(tmp_path / "r.jsonl")
    loaded = rs.load(path)
    assert len(loaded.records) == len(allreduce_lines())
    assert [str(b) for b in loaded.bad] == [f"{path}:2: not a record (JSON nested too deeply)"]


def test_fit_skips_a_deep_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = with_deep_line(tmp_path / "r.jsonl")
    code, _, err = run(capsys, "fit", str(path), "--json")
    assert code == 0 and err == f"commscope: skipped {path}:2: not a record (JSON nested too deeply)\n"


def test_resume_skips_a_deep_line(tmp_path: Path) -> None:
    from runners.measure.sweep.loop import _plan
    from runners.measure.sweep.options import make_options

    path = with_deep_line(tmp_path / "r.jsonl")
    opts = make_options(op="allreduce", min_size="1KiB", max_size="2KiB", out=path, resume=True)
    run_info = rs.run_info("gloo", 2, 2, ["cpu", "cpu"])
    todo, notes = _plan(SimpleNamespace(world=2), opts, {"allreduce": ("native", None)}, run_info)
    assert len(todo) == 2 and f"first: {path}:2: not a record (JSON nested too deeply)" in notes[0]


# ------------------------------------------------------------------------------------------ outputs: --out
@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user may enter and write (tmp_path's parents are root's alone), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="commscope-fuzz-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        for p in (path, *path.iterdir()):
            p.chmod(0o755 if p.is_dir() else 0o644)
        shutil.rmtree(path)


def unprivileged(check: Callable[[], None]) -> str:
    """The error ``check`` raises (CommscopeError's message, '' if none), run as an unprivileged user: root may
    write read-only files, so as root it runs in a forked child as nobody."""
    if os.geteuid() != 0:
        try:
            check()
        except cm.CommscopeError as exc:
            return str(exc)
        return ""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, report, never return into pytest
        code = 0
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                check()
                message = ""
            except cm.CommscopeError as exc:
                message = str(exc)
            os.write(write, message.encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        message = f.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return message


def test_bench_out_a_directory_is_refused_before_the_sweep(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    err = one_line_error(capsys, "bench", "collectives", "--dry-run", "--out", str(tmp_path))
    assert "it is a directory" in err
    err = one_line_error(capsys, "bench", "collectives", "--dry-run", "--out", "/dev/null")
    assert "not a regular file" in err


def test_bench_out_read_only_is_refused_before_the_sweep(shared_dir: Path) -> None:
    from runners.measure.sweep.options import make_options

    ro_file = shared_dir / "r.jsonl"
    ro_file.write_text("")
    ro_file.chmod(0o444)
    (shared_dir / "ro").mkdir()
    (shared_dir / "ro").chmod(0o555)
    assert "Permission denied" in unprivileged(lambda: make_options(out=ro_file))
    assert "Permission denied" in unprivileged(lambda: make_options(out=shared_dir / "ro" / "new.jsonl"))
    assert unprivileged(lambda: make_options(out=shared_dir / "new.jsonl")) == ""  # a writable place passes
    assert not (shared_dir / "new.jsonl").exists() and len(list(shared_dir.iterdir())) == 2  # probes removed


def test_a_full_disk_keeps_the_old_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "it.json"
    trace.write_text("old trace\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    err = one_line_error(capsys, "predict", "iteration", "--model", "resnet50", "--env", "10GbE", "-p", "8",
                         "--trace", str(trace))
    assert "No space left on device; the old file is unchanged" in err
    assert trace.read_text() == "old trace\n" and [p.name for p in tmp_path.iterdir()] == ["it.json"]


# -------------------------------------------------------------------------------- overflow, huge p and n
@pytest.mark.parametrize("argv", [
    ["predict", "collective", "-a", "ring_allreduce", "--alpha", "1e308", "--beta", "1e308", "-p", "8", "-s", "1MiB"],
    ["predict", "iteration", "--model", "resnet50", "--alpha", "1e308", "--beta", "1e-9", "-p", "8"],
    ["predict", "tta", "--model", "resnet50", "--alpha", "1e308", "--beta", "1e-9", "-p", "8", "--eps", "1e-3"],
])
def test_overflowing_predictions_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert "overflow float64" in one_line_error(capsys, *argv, "--json")
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]  # no screen of numpy warnings first


@pytest.mark.parametrize("p", [2**41, 2**62, 2**62 + 1, 10**30, np.int64(2**62), np.uint64(2**63), [4, 2**62]])
def test_ranks_beyond_max_ranks_are_refused_whatever_their_type(p: object) -> None:
    with pytest.raises(cm.CommscopeError, match="1099511627776"):
        cm.busbw("allreduce", 2**20, 1e-3, p)  # was -2.1e9 B/s at 2^62 + 1 (int64 overflow)


def test_simulate_refuses_ranks_beyond_max_ranks() -> None:
    with pytest.raises(cm.CommscopeError, match="at most 1099511627776"):
        cm.simulate(cm.profile("resnet50"), cm.environment("10GbE"), 2**62, "wfbp")


def test_huge_p_and_n_are_one_line_or_answered(capsys: pytest.CaptureFixture[str]) -> None:
    one_line_error(capsys, "predict", "tta", "--model", "resnet50", "--env", "10GbE", "-p", str(2**62), "--eps", "1e-3")
    one_line_error(capsys, "predict", "collective", "-a", "ring_allreduce", "--env", "10GbE", "-p", str(10**30),
                   "-s", "1MiB")
    t0 = time.perf_counter()
    code, out, err = run(capsys, "predict", "convergence", "--eps", "1e-3", "--bound", "dpsgd", "--n", str(10**12),
                         "--json")
    assert code == 0 and err == "" and time.perf_counter() - t0 < 5
    row = json.loads(out)["results"][0]
    assert row["constants"]["gap"] == pytest.approx(4 / 3 * math.sin(math.pi / 1e12) ** 2 * 2, rel=1e-9)


# -------------------------------------------------------------------------------------- silent wrong answers
@pytest.mark.parametrize("t", [0, -1, float("nan"), "100", True])
def test_step_size_refuses_bad_horizons(t: object) -> None:
    with pytest.raises(cm.CommscopeError, match="T must be"):
        cv.bound("sgd").step_size(t, L=1.0, sigma=1.0, Delta=1.0, n=4)


@pytest.mark.parametrize(("eps", "constants"), [("1e-3", {}), (1e-3, {"L": "1"}), (1e-3, {"n": np.array(["4"])})])
def test_iterations_to_refuses_text(eps: object, constants: dict[str, object]) -> None:
    with pytest.raises(cm.CommscopeError, match="must be a number"):
        cv.bound("sgd").iterations_to(eps, **{"L": 1.0, "sigma": 1.0, "Delta": 1.0, "n": 4, **constants})


def test_fit_counts_a_duplicated_record_once(tmp_path: Path) -> None:
    from runners.measure import fit as fitting

    once, twice = tmp_path / "once.jsonl", tmp_path / "twice.jsonl"
    lines = allreduce_lines()
    once.write_text("\n".join(lines) + "\n")
    twice.write_text("\n".join(lines + lines) + "\n")
    a, b = fitting.fit(once), fitting.fit(twice)
    assert b.records == a.records == len(lines)
    for key, prm in a.parameters.items():
        assert b.parameters[key].ci95 == prm.ci95  # not narrowed by counting each measurement twice
    assert f"dropped {len(lines)} duplicated record(s)" in b.notes[0]


# -------------------------------------------------------------------------------------- slow or unbounded
def test_spectral_gaps_of_large_rings_and_tori_are_closed_forms() -> None:
    t0 = time.perf_counter()
    n = 10**12
    assert cv.spectral_gap("ring", n) == pytest.approx(8 / 3 * math.sin(math.pi / n) ** 2, rel=1e-9)
    r, c = 10**6, 10**6  # x = (4 sin^2(pi/c)) / 5 on the torus: gap = x (2 - x)
    x = 4 * math.sin(math.pi / c) ** 2 / 5
    assert cv.spectral_gap("torus", r * c) == pytest.approx(x * (2 - x), rel=1e-9)
    assert cv.spectral_gap("ring", 5000) > 0
    assert time.perf_counter() - t0 < 1.0  # was an O(n^3) eigen-solve (minutes at 5000, no memory at 10^12)


@pytest.mark.parametrize("topology", ["ring", "torus", "exponential", "complete"])
def test_spectral_gap_equals_the_eigenvalues_of_the_mixing_matrix(topology: str) -> None:
    for n in range(1, 65):
        w = cv.mixing_matrix(topology, n)
        lam = float(np.max(np.abs(np.linalg.eigvalsh(w - 1.0 / n)))) if n > 1 else 0.0
        assert cv.spectral_gap(topology, n) == pytest.approx(max(0.0, 1 - lam * lam), abs=1e-12), n


def test_simulate_refuses_a_horizon_without_bound() -> None:
    prob = cv.problem("quadratic", n=4)
    t0 = time.perf_counter()
    for t in (10**12, [10, 10**7]):
        with pytest.raises(cm.CommscopeError, match="T must be at most 1,000,000"):
            cv.simulate("sgd", prob, t)
    with pytest.raises(cm.CommscopeError, match="more than 1e"):
        cv.simulate("sgd", prob, 10**6, replicas=10**4)
    assert time.perf_counter() - t0 < 1.0


# ------------------------------------------------------------------ the re-run of the audit (bench/fuzz_cli.py)
@pytest.mark.parametrize(("argv", "says"), [
    (["--L", "inf", "--json"], "--L: L must be finite and > 0, got inf"),
    (["--zeta", "nan", "--json"], "--zeta: zeta must be finite and >= 0, got nan"),
    (["--constant", "D0=inf", "--json"], "D0 must be finite and > 0, got inf"),
    (["--H", "0"], "--H: H must be finite and >= 1, got 0.0"),
    (["--tau", "-1"], "--tau: tau must be finite and >= 0, got -1.0"),
])
def test_predict_convergence_refuses_constants_no_bound_can_take(capsys, argv, says) -> None:
    assert says in one_line_error(capsys, "predict", "convergence", "--eps", "1e-3", *argv)


def test_fuzz_rerun_failures_are_one_line_errors(capsys, tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    assert "nested too deeply" in one_line_error(capsys, "import", "nccl-tests", str(deep))
    assert "--batch-size must be from 1 to" in one_line_error(
        capsys, "profile", "--model", "mlp", "--out", str(tmp_path / "p.json"), "--batch-size", str(10**20))
    regular = tmp_path / "a_file"
    regular.write_text("x")
    assert "is a file, not a directory" in one_line_error(capsys, "validate", "--out", str(regular), "--ranks", "2")
    started = time.perf_counter()
    assert "gpus must be an integer from 1 to" in one_line_error(
        capsys, "plan", "llm", "-m", "llama3-8b", "--gpus", str(2**62), "--no-switch")
    assert time.perf_counter() - started < 30  # it used to count every number up to 2^62
    assert "overflow" in one_line_error(capsys, "crossover", "ring_allreduce", "recursive_doubling_allreduce", "-p",
                                        "8", "--alpha", "1e308", "--beta", "1e308", "--json")
    assert "density must be a density in (0, 1], got 2.0" in one_line_error(
        capsys, "train", "-a", "topk", "-m", "mlp", "--dry-run", "-O", "density=2")
