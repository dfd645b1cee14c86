"""``commscope emulate`` and ``runners.measure.emulate``: an emulated cluster of network namespaces shaped by tc.

The tests that build namespaces need root and iproute2 (CI runs them as root; a missing iproute2 is
installed with apt-get, and if that is impossible the tests fail saying why, they are never skipped).
After every test, ``ip netns list`` must hold none of this process's namespaces.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runners.cli import main
from runners.measure import emulate as em

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[1]
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def netns_list() -> list[str]:
    """Names that ``ip netns list`` prints."""
    out = subprocess.run([em.require_tools()["ip"], "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def ours(pid: int | None = None) -> list[str]:
    prefix = f"cs{os.getpid() if pid is None else pid}-"
    return [n for n in netns_list() if n.startswith(prefix)]


def _have_iproute2() -> bool:
    return all(shutil.which(t, path=SBIN_PATH) for t in ("ip", "tc"))


@pytest.fixture(scope="module")
def netadmin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Root and iproute2 (installed with apt-get when missing); a fresh cache dir for the host ceiling."""
    if os.geteuid() != 0:
        pytest.fail("the emulated-network tests need root (network namespaces, veth, tc); CI runs them as root. "
                    "Run pytest as root, or deselect them with -m 'not multiprocess'")
    if not _have_iproute2():
        apt = shutil.which("apt-get")
        if apt is None:
            pytest.fail("ip/tc (iproute2) are missing and there is no apt-get to install iproute2")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for args in (["update"], ["install", "-y", "--no-install-recommends", "iproute2"]):
            done = subprocess.run([apt, *args], capture_output=True, text=True, env=env, timeout=900)
            if done.returncode != 0:
                pytest.fail(f"cannot install iproute2: apt-get {' '.join(args)} failed: {done.stderr[-800:]}")
        if not _have_iproute2():
            pytest.fail("apt-get installed iproute2 but ip/tc are still not found")
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(cache))
    yield cache
    mp.undo()


@pytest.fixture(autouse=True)
def sigint_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt here, and the emulators these tests start get SIGINT's default action, even
    when the suite itself runs with SIGINT ignored (started in the background by a shell without job control,
    or under nohup: an ignored signal stays ignored across exec, a handled one does not)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@pytest.fixture(autouse=True)
def no_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "netadmin" in request.fixturenames:
        assert ours() == [], "namespaces of this test were left behind"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """In-process ``commscope ARGV``: exit code (SystemExit included), stdout, stderr."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commscope: error: "), err
    return lines[0]


# ------------------------------------------------------------------------------- parsing, model
@pytest.mark.parametrize(("text", "bps"), [
    ("1gbit", 10**9), ("200mbit", 200 * 10**6), ("64kbit", 64000), ("1.5gbit", 1_500_000_000), ("10Gbit", 10**10),
    ("1000000", 10**6), ("1e9", 10**9), ("8000bit", 8000), ("1mibit", 2**20), ("1tbit", 10**12), (2.5e8, 250_000_000),
    (" 100 mbit ", 10**8),
])
def test_parse_rate_units(text: str | float, bps: int) -> None:
    assert em.parse_rate(text) == bps


@pytest.mark.parametrize(("text", "says"), [
    ("fast", "cannot read --rate 'fast'"), ("1gb", "unknown unit 'gb'"), ("200mbps", "bytes per second"),
    ("0", "out of range"), ("-1gbit", "cannot read"), ("", "cannot read"), ("100bit", "out of range"),
    ("20tbit", "out of range"), (True, "not a rate"),
])
def test_parse_rate_errors_name_the_value_and_the_units(text: object, says: str) -> None:
    with pytest.raises(em.EmulationError) as info:
        em.parse_rate(text)  # type: ignore[arg-type]
    msg = str(info.value)
    assert says in msg
    if "cannot read" in says or "unit" in says:
        assert "bit, kbit, mbit, gbit" in msg


def test_parse_delay() -> None:
    assert em.parse_delay("20us") == pytest.approx(20e-6)
    assert em.parse_delay("1.5ms") == pytest.approx(1.5e-3)
    assert em.parse_delay("0.1s") == pytest.approx(0.1)
    assert em.parse_delay(0.002) == pytest.approx(0.002)
    for bad in ("20", "fast", "0us", "-1ms", "20ns"):
        with pytest.raises(em.EmulationError, match="--delay"):
            em.parse_delay(bad)


def test_wire_overhead_arithmetic_by_hand() -> None:
    """tbf counts 1514-byte frames for 1448 payload bytes (MTU 1500, TCP timestamps)."""
    assert em.wire_overhead(1500) == 1514 / 1448
    assert em.expected_beta(10**9, 1500) == pytest.approx(8e-9 * 1514 / 1448, rel=1e-15)
    assert em.expected_beta(10**9, 9000) == pytest.approx(8e-9 * 9014 / 8948, rel=1e-15)
    spec = em.build_spec(4, 1, "1gbit")
    assert spec["expected_beta_s_per_byte"] == pytest.approx(8e-9 * 1514 / 1448, rel=1e-15)
    assert (spec["frame_bytes"], spec["payload_bytes"], spec["wire_overhead"]) == (1514, 1448, 1514 / 1448)
    assert spec["world_size"] == 4 and spec["rate_bps"] == 10**9 and spec["rate"] == "1gbit"
    assert spec["host_ceiling_bps"] is None and spec["rate_above_ceiling"] is None
    json.dumps(spec, allow_nan=False)


def test_tbf_bucket_and_queue() -> None:
    """Bucket: 4 ms of the rate (rate / 250), at least 4 frames; queue: bucket + 20 ms at a node's eth0, + 50 ms
    at a bridge port (+ a round trip of delay), at least 64 frames."""
    fast = em.tbf_params(10**9, 1500)
    assert fast["burst_bytes"] == 500_000 and fast["limit_bytes"] == 500_000 + 2_500_000
    assert em.tbf_params(10**9, 1500, port=True)["limit_bytes"] == 500_000 + 6_250_000
    slow = em.tbf_params(10**7, 1500)
    assert slow["burst_bytes"] == 4 * 1514 and slow["limit_bytes"] == 4 * 1514 + 64 * 1514
    delayed = em.tbf_params(10**9, 1500, delay_s=0.005)
    assert delayed["limit_bytes"] == 500_000 + 3_750_000
    spec = em.build_spec(2, 1, "1gbit")
    assert spec["qdisc"]["tbf"]["limit_bytes"] == 3_000_000 and spec["qdisc"]["tbf_port"]["limit_bytes"] == 6_750_000
    assert em.tbf_params(10**9, 1500, burst=64 * 1024)["burst_bytes"] == 65536
    with pytest.raises(em.EmulationError, match="at least one frame"):
        em.tbf_params(10**9, 1500, burst=1000)


def test_node_settings_follow_the_tbf() -> None:
    """reno in every node; socket buffers hold at least 4 MiB and two full eth0 queues; TCP small queues hold
    half the eth0 queue beyond its bucket; RPS over every CPU."""
    tbf = em.tbf_params(10**9, 1500)
    settings = em.node_sysctls(tbf)
    assert settings == {"net.ipv4.tcp_congestion_control": "reno", "net.ipv4.tcp_rmem": "4096 131072 6000000",
                        "net.ipv4.tcp_wmem": "4096 16384 6000000", "net.ipv4.tcp_limit_output_bytes": "1250000",
                        "net.ipv4.tcp_slow_start_after_idle": "0"}
    slow = em.node_sysctls(em.tbf_params(10**7, 1500))
    assert slow["net.ipv4.tcp_wmem"] == "4096 16384 4194304" and slow["net.ipv4.tcp_limit_output_bytes"] == "48448"
    fast = em.tbf_params(10**10, 1500)
    assert em.node_sysctls(fast)["net.ipv4.tcp_wmem"] == f"4096 16384 {2 * fast['limit_bytes']}"
    assert em.node_sysctls(tbf, "bbr")["net.ipv4.tcp_congestion_control"] == "bbr"
    assert (em.rps_mask(1), em.rps_mask(2), em.rps_mask(8), em.rps_mask(36)) == ("1", "3", "ff", "f,ffffffff")
    spec = em.build_spec(2, 1, "1gbit")
    assert spec["tcp_congestion_control"] == "reno"
    assert spec["settings"] is None and spec["rate_check"] is None and spec["achieved_rate_fraction"] is None


# ------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize(("args", "says"), [
    (["--nodes", "0", "--rate", "1gbit"], "--nodes must be a whole number >= 1"),
    (["--nodes", "2", "--ranks-per-node", "0", "--rate", "1gbit"], "--ranks-per-node must be"),
    (["--nodes", "2", "--rate", "1gb"], "unknown unit 'gb' in --rate '1gb'"),
    (["--nodes", "2", "--rate", "1gbit", "--mtu", "100"], "--mtu must be"),
    (["--nodes", "2", "--rate", "1gbit", "--delay", "20"], "cannot read --delay '20'"),
])
def test_bad_settings_end_with_one_line(capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:
    code, out, err = cli(capsys, "emulate", *args, "--", "true")
    assert code == 2 and out == ""
    assert says in one_error_line(err)


def test_refuses_an_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "emulate", "--nodes", "2", "--rate", "1gbit", "--", "no-such-command-xyz")
    assert code == 2 and "command not found: 'no-such-command-xyz'" in one_error_line(err)


def test_refuses_when_not_root(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    before = netns_list() if _have_iproute2() else []
    code, out, err = cli(capsys, "emulate", "--nodes", "2", "--rate", "1gbit", "--", "true")
    assert code == 2 and out == ""
    assert "must run as root" in one_error_line(err)
    assert (netns_list() if _have_iproute2() else []) == before


def test_refuses_without_iproute2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.which
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "ip" else real(name, *a, **k))
    code, _, err = cli(capsys, "emulate", "--nodes", "2", "--rate", "1gbit", "--", "true")
    line = one_error_line(err)
    assert code == 2 and "needs the ip command of iproute2" in line and "apt-get install iproute2" in line


def test_delay_refused_without_netem(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                     netadmin: Path) -> None:
    monkeypatch.setattr("runners.measure.emulate.shaping.netem_available", lambda: False)
    code, out, err = cli(capsys, "emulate", "--nodes", "2", "--rate", "1gbit", "--delay", "20us", "--", "true")
    line = one_error_line(err)
    assert code == 2 and out == ""
    assert "netem" in line and "sch_netem" in line and "no delay-free run is started" in line


def test_delay_on_this_kernel(capsys: pytest.CaptureFixture[str], netadmin: Path) -> None:
    """netem is detected in a throwaway namespace (removed again); without it --delay is refused, with it
    a TCP handshake (one round trip) takes at least twice the one-way delay."""
    has = em.netem_available()
    assert not [n for n in netns_list() if n.endswith("-netem")]
    if not has:
        code, _, err = cli(capsys, "emulate", "--nodes", "2", "--rate", "1gbit", "--delay", "1ms", "--", "true")
        assert code == 2 and "netem" in one_error_line(err)
        return
    with em.emulated_cluster(2, 1, "1gbit", delay="5ms") as c:
        server = c.popen(0, [sys.executable, "-c", "import socket,time; s=socket.create_server(('',7000)); "
                             "print('up',flush=True); s.accept(); time.sleep(1)"], stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        done = c.exec(1, [sys.executable, "-c", "import socket,time; t=time.perf_counter(); "
                          f"socket.create_connection(('{c.master_addr}',7000)); print(time.perf_counter()-t)"],
                      check=True)
        assert float(done.stdout) >= 0.009
        assert c.spec["qdisc"]["netem"]["delay_s"] == pytest.approx(0.005)


# -------------------------------------------------------------------------------- host ceiling
def test_host_ceiling_is_cached_for_a_day(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake(mtu: int, tools: object) -> dict:
        calls.append(mtu)
        return {"bps": 5e9, "payload_bps": 5e9 * 1448 / 1514, "bytes": 1, "seconds": 0.6, "mtu": mtu}

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr("runners.measure.emulate.ceiling._measure_ceiling", fake)
    tools = {"ip": "ip", "tc": "tc"}
    first = em.host_ceiling(1500, tools=tools)
    assert first["bps"] == 5e9 and not first["cached"] and calls == [1500]
    path = tmp_path / "commscope" / "host_ceiling.json"
    stored = json.loads(path.read_text())["entries"]["mtu=1500"]
    assert stored["measured"].endswith("Z") and abs(stored["unix"] - time.time()) < 60
    assert em.host_ceiling(1500, tools=tools)["cached"] and calls == [1500]
    assert not em.host_ceiling(1500, tools=tools, reprobe=True)["cached"] and calls == [1500, 1500]
    assert not em.host_ceiling(9000, tools=tools)["cached"] and calls == [1500, 1500, 9000]
    data = json.loads(path.read_text())
    data["entries"]["mtu=1500"]["unix"] -= 2 * 86400
    path.write_text(json.dumps(data))
    assert not em.host_ceiling(1500, tools=tools)["cached"] and calls == [1500, 1500, 9000, 1500]
    path.write_text("{not json")
    assert not em.host_ceiling(1500, tools=tools)["cached"] and len(calls) == 5


def test_host_ceiling_is_measured(netadmin: Path) -> None:
    """A real probe: one unshaped TCP flow between two namespaces that are gone afterwards."""
    first = em.host_ceiling(1500)
    assert first["bps"] > 2e8 and first["bps"] == pytest.approx(first["payload_bps"] * 1514 / 1448)
    assert (netadmin / "commscope" / "host_ceiling.json").exists()
    assert em.host_ceiling(1500)["cached"]


def test_rate_above_ceiling_warns_and_is_recorded(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch, netadmin: Path) -> None:
    monkeypatch.setattr("runners.measure.emulate.cluster.host_ceiling",
                        lambda mtu, **k: {"bps": 1e9, "payload_bps": 9.5e8, "cached": True,
                                          "measured": "2026-01-01T00:00:00Z", "mtu": mtu})
    code, out, err = cli(capsys, "emulate", "--nodes", "2", "--rate", "900mbit", "--burst", "64KiB", "--", "sh", "-c",
                         'test "$COMMSCOPE_NODE_RANK" = 0 && echo "$COMMSCOPE_NETWORK" || true')
    assert code == 0
    assert "commscope: warning: --rate 900mbit is above 80%" in err
    spec = json.loads(out.removeprefix("[node 0] "))
    assert spec["host_ceiling_bps"] == 1e9 and spec["rate_above_ceiling"] is True
    assert spec["qdisc"]["tbf"]["burst_bytes"] == 65536


# ------------------------------------------------------------------------- settings, rate check
def _proc_sys(c: em.EmulatedCluster, node: int, key: str) -> str:
    return " ".join(c.exec(node, ["cat", "/proc/sys/" + key.replace(".", "/")], check=True).stdout.split())


def test_settings_are_set_read_back_and_recorded(netadmin: Path) -> None:
    """Congestion control, socket buffers, RPS and offloads are set in every namespace, whatever the host has,
    and the spec records what the kernel reads back (and the host's own values); the host keeps its own."""
    host_cc = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    every_cpu = 2 ** (os.cpu_count() or 1) - 1
    with em.emulated_cluster(3, 1, "1gbit", measure_ceiling=False, verify_rate=False) as c:
        settings, want = c.spec["settings"], em.node_sysctls(c.spec["qdisc"]["tbf"])
        for node in range(3):
            for key, value in want.items():
                assert _proc_sys(c, node, key) == value, key
                assert settings["sysctl"][key] == value
            masks = c.exec(node, ["sh", "-c", "cat /sys/class/net/eth0/queues/rx-*/rps_cpus"], check=True).stdout
            assert masks.split() and {int(m.replace(",", ""), 16) for m in masks.split()} == {every_cpu}
        ports = subprocess.run(["ip", "netns", "exec", c.bridge_namespace, "sh", "-c",
                                "cat /sys/class/net/p*/queues/rx-*/rps_cpus"], capture_output=True, text=True).stdout
        assert len(ports.split()) >= 3 and {int(m.replace(",", ""), 16) for m in ports.split()} == {every_cpu}
        assert set(settings["rps_cpus"]["node eth0"].values()) == {em.rps_mask()}
        assert set(settings["rps_cpus"]["bridge ports"].values()) == {em.rps_mask()}
        for where in ("node eth0", "bridge ports"):
            assert settings["offloads"][where] == {"sg": True, "tso": True, "gso": True, "gro": False}
        if shutil.which("ethtool", path=SBIN_PATH):
            shown = c.exec(1, ["ethtool", "-k", "eth0"], check=True).stdout
            assert "generic-receive-offload: off" in shown and "tcp-segmentation-offload: on" in shown
        assert settings["uniform"] and settings["errors"] == []
        assert settings["host"]["net.ipv4.tcp_congestion_control"] == host_cc
        assert settings["host"]["net.core.rmem_max"] == Path("/proc/sys/net/core/rmem_max").read_text().strip()
        assert c.spec["tcp_congestion_control"] == "reno" and c.spec["rate_check"] is None
        network = c.exec(2, [sys.executable, "-c", "import json; from runners.results import network_spec; "
                             "print(json.dumps(network_spec()))"], check=True).stdout
        assert json.loads(network)["settings"] == settings
        # a setting changed later is read back as it is (here GRO, which puts veth into NAPI mode)
        again = em.apply_settings(c, offloads={"gro": True})
        assert again["offloads"]["node eth0"]["gro"] is True and again["offloads"]["bridge ports"]["gro"] is True
    assert Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip() == host_cc


def test_a_congestion_control_the_kernel_refuses_is_an_error(netadmin: Path) -> None:
    with pytest.raises(em.EmulationError, match=r"refused .*no-such-cc"):
        with em.emulated_cluster(2, 1, "1gbit", measure_ceiling=False, congestion_control="no-such-cc"):
            pass


def test_rate_check_measures_the_link_and_sees_it_fall_short(netadmin: Path) -> None:
    """At start-up both directions of one link are timed: ~1.0 of rate x 1448/1514 on a healthy link. Halving
    node 0's receiving end behind the spec's back halves node 1 -> node 0 (the other direction suffers too: its
    ACKs queue behind that flow's data), and the check says the link falls short."""
    with em.emulated_cluster(2, 1, "200mbit", measure_ceiling=False) as c:
        check = c.spec["rate_check"]
        assert len(check["fractions"]) == 2 and c.spec["achieved_rate_fraction"] == min(check["fractions"])
        assert check["expected_payload_bps"] == pytest.approx(200e6 * 1448 / 1514)
        assert check["short"] is (check["achieved_rate_fraction"] < 0.95) and 1 <= len(check["attempts"]) <= 2
        assert check["achieved_rate_fraction"] == max(a["achieved_rate_fraction"] for a in check["attempts"])
        checks = [check]
        while checks[-1]["achieved_rate_fraction"] < 0.9 and len(checks) < 3:  # a busy moment of the shared host
            checks.append(em.check_rate(c))
        assert 0.9 <= max(x["achieved_rate_fraction"] for x in checks) <= 1.05, checks
        tbf = c.spec["qdisc"]["tbf"]
        subprocess.run(["tc", "-n", c.bridge_namespace, "qdisc", "replace", "dev", "p0", "root", "handle", "1:", "tbf",
                        "rate", "100mbit", "burst", str(tbf["burst_bytes"]), "limit", str(tbf["limit_bytes"])],
                       check=True)
        short = em.check_rate(c)
    assert 0.2 <= short["fractions"][0] <= 0.55, short
    assert short["short"] and short["achieved_rate_fraction"] == min(short["fractions"])
    assert len(short["attempts"]) == 2  # a short link is tried twice


def test_a_short_link_is_warned_about_and_recorded(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch, netadmin: Path) -> None:
    def short(cluster: em.EmulatedCluster, **kwargs: object) -> dict:
        return {"achieved_rate_fraction": 0.7, "fractions": [0.7, 0.96], "short": True, "threshold": 0.95,
                "payload_bps": [6.7e8, 9.2e8], "expected_payload_bps": 9.56e8, "probe": "simulated"}

    monkeypatch.setattr("runners.measure.emulate.cluster.check_rate", short)
    code, out, err = cli(capsys, "emulate", "--nodes", "2", "--rate", "1gbit", "--", "sh", "-c",
                         'test "$COMMSCOPE_NODE_RANK" = 0 && echo "$COMMSCOPE_NETWORK" || true')
    assert code == 0, err
    assert "commscope: warning: the emulated link carried 0.70 of --rate 1gbit" in err
    spec = json.loads(out.removeprefix("[node 0] "))
    assert spec["achieved_rate_fraction"] == 0.7 and spec["rate_check"]["short"] is True


def test_drops_and_retransmissions_are_reported_after_the_run(capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch, netadmin: Path) -> None:
    counts = {"tbf_drops": 3, "tcp_out_segments": 1000, "tcp_retransmitted_segments": 50}
    monkeypatch.setattr(em.EmulatedCluster, "link_counters", lambda self: counts)
    code, _, err = cli(capsys, "emulate", "--nodes", "2", "--rate", "1gbit", "--", "true")
    assert code == 0
    assert "the emulated links dropped 3 packets and the nodes retransmitted 50 of 1000 TCP segments (5.00%)" in err
    counts.update(tbf_drops=0, tcp_retransmitted_segments=1)
    code, _, err = cli(capsys, "emulate", "--nodes", "2", "--rate", "1gbit", "--", "true")
    assert code == 0 and "retransmitted" not in err


def test_one_node_has_no_link_to_check(netadmin: Path) -> None:
    with em.emulated_cluster(1, 2, "1gbit", measure_ceiling=False) as c:
        assert c.spec["achieved_rate_fraction"] is None and "one node" in c.spec["rate_check"]["skipped"]
        assert c.spec["settings"]["sysctl"]["net.ipv4.tcp_congestion_control"] == "reno"


# ------------------------------------------------------------------------------------- running
CHECK = r"""
import json, os, socket, sys, time
e = os.environ
rank = int(e["COMMSCOPE_NODE_RANK"])
assert (e["COMMSCOPE_NNODES"], e["COMMSCOPE_NPROC_PER_NODE"], e["WORLD_SIZE"]) == ("2", "2", "4"), e
assert (e["MASTER_ADDR"], e["MASTER_PORT"]) == ("10.231.0.1", "29500")
assert e["GLOO_SOCKET_IFNAME"] == e["NCCL_SOCKET_IFNAME"] == "eth0"
net = json.loads(e["COMMSCOPE_NETWORK"])
assert net["nodes"] == 2 and net["ranks_per_node"] == 2 and net["rate_bps"] == 200_000_000, net
port = int(e["MASTER_PORT"])
if rank == 0:
    srv = socket.create_server(("", port))
    srv.settimeout(20)
    conn, peer = srv.accept()
    msg = conn.recv(16).decode()
    conn.sendall(b"pong")
    print("served", msg, "to", peer[0])
else:
    for _ in range(250):
        try:
            c = socket.create_connection((e["MASTER_ADDR"], port), timeout=5)
            break
        except OSError:
            time.sleep(0.02)
    c.sendall(b"ping")
    print("got", c.recv(16).decode())
    print("to stderr", file=sys.stderr)
"""


def test_two_nodes_see_the_contract_and_reach_node0(capsys: pytest.CaptureFixture[str], netadmin: Path) -> None:
    code, out, err = cli(capsys, "emulate", "--nodes", "2", "--ranks-per-node", "2", "--rate", "200mbit",
                         "--", sys.executable, "-c", CHECK)
    assert code == 0, err
    assert "[node 0] served ping to 10.231.0.2" in out.splitlines()
    assert "[node 1] got pong" in out.splitlines()
    assert "[node 1] to stderr" in err.splitlines()


def test_exit_code_is_the_first_failure(capsys: pytest.CaptureFixture[str], netadmin: Path) -> None:
    code, _, err = cli(capsys, "emulate", "--nodes", "3", "--rate", "1gbit", "--grace", "3", "--", "sh", "-c",
                       'case "$COMMSCOPE_NODE_RANK" in 0) exit 0;; 1) sleep 0.3; exit 3;; 2) exit 5;; esac')
    assert code == 5 and "node 2 exited with code 5" in err
    code, _, err = cli(capsys, "emulate", "--nodes", "2", "--rate", "1gbit", "--grace", "0.2", "--", "sh", "-c",
                       'test "$COMMSCOPE_NODE_RANK" = 1 && exit 7; sleep 30')
    assert code == 7 and ours() == []


def test_api_cluster_and_teardown(netadmin: Path) -> None:
    host_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.count("\n")
    with em.emulated_cluster(2, 1, "1gbit") as c:
        assert c.namespaces == [f"{c.prefix}-n0", f"{c.prefix}-n1"] and c.bridge_namespace == f"{c.prefix}-br"
        assert sorted(ours()) == sorted([*c.namespaces, c.bridge_namespace])
        assert c.addresses == ["10.231.0.1", "10.231.0.2"] and c.master_addr == "10.231.0.1"
        assert subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.count("\n") == host_links
        qdisc = subprocess.run(["tc", "-n", c.bridge_namespace, "qdisc", "show", "dev", "p1"], capture_output=True,
                               text=True).stdout
        assert "tbf" in qdisc and "rate 1Gbit" in qdisc
        assert "10.231.0.2/24" in c.exec(1, ["ip", "-o", "addr", "show", "dev", "eth0"], check=True).stdout
        assert "mtu 1500" in c.exec(1, ["ip", "-o", "link", "show", "dev", "eth0"], check=True).stdout
        network = c.exec(1, [sys.executable, "-c", "import json; from runners.results import network_spec; "
                             "print(json.dumps(network_spec()))"], check=True).stdout
        assert json.loads(network) == c.spec
        procs = c.run(["sleep", "30"])
        assert [p.poll() for p in procs] == [None, None]
    assert [p.poll() for p in procs] == [-signal.SIGTERM] * 2
    assert ours() == []
    c.close()  # idempotent


def test_teardown_after_a_setup_failure(monkeypatch: pytest.MonkeyPatch, netadmin: Path) -> None:
    def broken(self: em.EmulatedCluster, netns: str, lines: list[str], what: str) -> None:
        raise em.EmulationError(f"{what} failed: simulated")

    monkeypatch.setattr(em.EmulatedCluster, "_tc", broken)
    with pytest.raises(em.EmulationError, match="simulated"), em.emulated_cluster(3, 1, "1gbit"):
        pass
    assert ours() == []


def test_a_signal_during_teardown_is_held_then_delivered(monkeypatch: pytest.MonkeyPatch, netadmin: Path) -> None:
    """Ctrl-C or SIGTERM while a cluster is torn down neither cuts the teardown short nor is lost: each arrives
    once every namespace is gone. (They were ignored: a Ctrl-C during the teardown of the host-ceiling probe
    cluster, which is built like this one, was dropped and the command then ran to its end.)"""
    from runners.measure.emulate import namespaces

    real, sent = namespaces._run, []

    def run(argv: list[str], what: str, *args: object, **kwargs: object) -> subprocess.CompletedProcess:
        if what == "deleting the namespaces":
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGINT):
                os.kill(os.getpid(), sig)
                sent.append(sig)
        return real(argv, what, *args, **kwargs)

    monkeypatch.setattr(namespaces, "_run", run)
    terms: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: terms.append(signum))
    try:
        probe = em.EmulatedCluster(2, 1, None, em.require_tools())
        probe._build(None, None)
        assert len(ours()) == 3
        with pytest.raises(KeyboardInterrupt):
            probe.close()
    finally:
        signal.signal(signal.SIGTERM, old)
    assert len(sent) == 3 and terms == [signal.SIGTERM]  # each held signal delivered once, after the teardown
    assert ours() == []


# what the nodes of the SIGINT/SIGKILL tests run: say which node and process they are, then become ``sleep``
SAY_AND_SLEEP = 'echo "node $COMMSCOPE_NODE_RANK pid $$"; exec sleep {seconds}'


def _started_nodes(proc: subprocess.Popen, nodes: int, timeout: float) -> list[int]:
    """The pids of the nodes' ``sleep``, once every node of the emulator ``proc`` (running SAY_AND_SLEEP, its
    stdout a pipe) has said it started and each of them is ``sleep`` in the node namespace
    ``cs<proc.pid>-<k>-n<i>`` of one cluster. The nodes are found by what they say, not by the first namespaces
    that appear: the emulator's set-up runs helpers in namespaces of the same names (the host-ceiling probe
    cluster ``-0-`` with a fresh cache, the link settings, the start-up rate check). Fails the test (after
    killing the emulator) when that does not happen within ``timeout`` seconds."""
    import select

    assert proc.stdout is not None
    fd, buf, said = proc.stdout.fileno(), b"", {}
    deadline = time.monotonic() + timeout
    while len(said) < nodes and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 4096) if ready else b""
        if ready and not chunk:
            break  # the emulator ended
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if m := re.fullmatch(rb"\[node (\d+)\] node \1 pid (\d+)", line):  # forwarded with the [node i] prefix
                said[int(m[1])] = int(m[2])
    ip = em.require_tools()["ip"]
    cluster: set[str] = set()
    for node, pid in sorted(said.items()):
        while time.monotonic() < deadline and _comm(pid) != "sleep":
            time.sleep(0.01)
        where = subprocess.run([ip, "netns", "identify", str(pid)], capture_output=True, text=True).stdout.strip()
        if _comm(pid) == "sleep" and where.startswith(f"cs{proc.pid}-") and where.endswith(f"-n{node}"):
            cluster.add(where.rsplit("-", 1)[0])
    if sorted(said) != list(range(nodes)) or len(cluster) != 1:
        proc.kill()
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the nodes did not start in one emulated cluster within {timeout:g} s (said {said}, "
                    f"clusters {cluster}; exit {proc.returncode}): {buf!r} {out!r} {err!r}")
    return [said[i] for i in range(nodes)]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_sigint_stops_the_nodes_and_removes_everything(netadmin: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "runners.cli", "emulate", "--nodes", "2", "--rate", "1gbit",
                             "--", "sh", "-c", SAY_AND_SLEEP.format(seconds=30)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    pids = _started_nodes(proc, 2, timeout=60)  # set-up may probe the host first; slower on a loaded host
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        held = _holders_of(proc)
        proc.kill()
        pytest.fail(f"no exit and end of output within 10 s of SIGINT (emulator exit code {proc.poll()}); its "
                    f"stdout/stderr pipes held by {held}; output {proc.communicate(timeout=30)}")
    assert time.monotonic() - start < 5
    assert proc.returncode == 130 and "SIGINT" in err
    assert ours(proc.pid) == []
    time.sleep(0.1)
    assert not [p for p in pids if Path(f"/proc/{p}").exists()]


def _holders_of(proc: subprocess.Popen) -> list[str]:
    """The processes (pid, name, fd) other than this one that hold the pipes of ``proc``'s stdout and stderr:
    ``communicate()`` waits for every one of them to close them, not only for ``proc``."""
    pipes = {f"pipe:[{os.fstat(f.fileno()).st_ino}]" for f in (proc.stdout, proc.stderr) if f is not None}
    found = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        pid = fd_dir.parent.name
        if pid == str(os.getpid()):
            continue
        try:
            fds = [fd.name for fd in fd_dir.iterdir() if os.readlink(fd) in pipes]
        except OSError:
            continue
        if fds:
            found.append(f"{pid} ({_comm(int(pid))}) fd {','.join(fds)}")
    return found


def test_throughput_through_a_200mbit_link(netadmin: Path) -> None:
    """~25 MB from node 1 to node 0 run at 0.85-1.0 of rate * 1448/1514. Timed at the receiver after its
    first MiB (slow start, full buckets); two full token buckets (both ends) may still add 2 * burst bytes."""
    nbytes = 25_000_000
    with em.emulated_cluster(2, 1, "200mbit") as c:
        got = em.tcp_throughput(c, 1, 0, nbytes=nbytes + 2**20, skip=2**20)
        burst = c.spec["qdisc"]["tbf"]["burst_bytes"]
        counts = c.link_counters()
    assert counts["tcp_out_segments"] >= (nbytes + 2**20) / 1448 and counts["tbf_drops"] >= 0
    expected = 200e6 * 1448 / 1514
    ratio = got["payload_bps"] / expected
    assert got["bytes"] >= nbytes - 2**20
    assert 0.85 <= ratio <= 1.0 + 2 * burst / got["bytes"], ratio


def test_sweep_over_an_emulated_1gbit_link_fits_beta_within_10_percent(netadmin: Path, tmp_path: Path) -> None:
    """The issue's end-to-end run, smaller: emulate 2 nodes at 1 Gbit/s, sweep allreduce 1-16 MiB through
    torchrun, fit ring_allreduce. beta must be within 10% of 8 ns/byte (the framing overhead makes it
    8 x 1514/1448 = 8.36), every record carries the network spec, and the fit explains its own sweep
    (within 10% here, with few iterations on a shared 2-core host; bench/bench_emulated_link.py measures
    P1 against its 3% goal with the issue's full 1-64 MiB sweep). 11 timed iterations per size: a busy
    moment of the shared host can slow a few iterations in a row, and with 5 it could take the median of a
    size with it; 3 warm-up iterations let the connections leave slow start first. The records carry the
    link settings the emulator set and its start-up rate check."""
    from runners import results as rs
    from runners.measure import fit as fitting

    out, env_file = tmp_path / "r.jsonl", tmp_path / "env.json"
    commscope = [sys.executable, "-m", "runners.cli"]
    run = subprocess.run([*commscope, "emulate", "--nodes", "2", "--rate", "1gbit", "--", *commscope, "bench",
                          "collectives", "--op", "allreduce", "--min-size", "1MiB", "--max-size", "16MiB",
                          "--warmup", "3", "--iters", "11", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    loaded = rs.load(out)
    assert not loaded.bad and len(loaded.records) == 5
    assert all(r["run"]["network"]["rate_bps"] == 1e9 and r["run"]["world_size"] == 2 for r in loaded.records)
    network = loaded.records[0]["run"]["network"]
    assert network["tcp_congestion_control"] == "reno" and network["settings"]["uniform"]
    assert network["settings"]["sysctl"]["net.ipv4.tcp_congestion_control"] == "reno"
    assert isinstance(network["achieved_rate_fraction"], float) and len(network["rate_check"]["fractions"]) == 2
    result = fitting.fit(loaded.records, "allreduce", "ring_allreduce")
    result.environment.save(env_file)
    beta = result.environment.beta
    assert abs(beta / 8e-9 - 1) < 0.10, beta
    errors = fitting.prediction_errors(str(env_file), loaded.records, "allreduce", "ring_allreduce")
    assert errors.median <= 0.10, errors


def _dead_pid() -> int:
    """A pid that no process has now (a child that has exited and was reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    with pytest.raises(ProcessLookupError):
        os.kill(p.pid, 0)
    return p.pid


def test_sigkill_to_emulate_stops_its_nodes_and_the_next_run_removes_its_namespaces(
        capsys: pytest.CaptureFixture[str], netadmin: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "runners.cli", "emulate", "--nodes", "2", "--rate", "1gbit",
                             "--", "sh", "-c", SAY_AND_SLEEP.format(seconds=60)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        pids = _started_nodes(proc, 2, timeout=60)
        proc.kill()
        proc.wait(timeout=5)
        left = sorted(ours(proc.pid))
        assert len(left) == 3  # the emulator could not clean up: two nodes and the bridge
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.05)
        assert not [p for p in pids if Path(f"/proc/{p}").exists()], "the nodes outlived their emulator"
        code, _, err = cli(capsys, "emulate", "--nodes", "1", "--rate", "1gbit", "--", "true")
        assert code == 0, err
        said = [line for line in err.splitlines() if "stale" in line]
        assert len(said) == 1 and f"pid {proc.pid}" in said[0] and all(ns in said[0] for ns in left), err
        assert ours(proc.pid) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        for stream in (proc.stdout, proc.stderr):
            stream.close()  # type: ignore[union-attr]
        for ns in ours(proc.pid):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_only_commscope_namespaces_of_dead_pids_are_removed(netadmin: Path) -> None:
    dead = _dead_pid()
    stale = [f"cs{dead}-0-n0", f"cs{dead}-0-br"]
    kept = [f"cs{os.getpid()}-99-n0", f"cs{dead}-0-x", f"other{dead}-0-n0"]  # a live owner; not commscope's names
    ip = em.require_tools()["ip"]
    inside: subprocess.Popen | None = None
    try:
        for ns in stale + kept:
            subprocess.run([ip, "netns", "add", ns], check=True)
        subprocess.run([ip, "-n", stale[1], "link", "add", "p0", "type", "veth", "peer", "name", "eth0", "netns",
                        stale[0]], check=True)
        inside = subprocess.Popen([ip, "netns", "exec", stale[0], "sleep", "60"], start_new_session=True)
        time.sleep(0.2)
        assert em.stale_namespaces([*stale, *kept, f"cs{os.getpid()}-0-br"]) == sorted(stale)
        said = em.remove_stale(em.require_tools())
        assert said is not None and said.startswith("removed ") and all(ns in said for ns in stale), said
        assert str(dead) in said and not any(k in said for k in kept)
        names = netns_list()
        assert not set(stale) & set(names) and set(kept) <= set(names)
        assert inside.wait(timeout=5) == -signal.SIGKILL  # what ran in a stale namespace went with it
    finally:
        if inside is not None and inside.poll() is None:
            inside.kill()
        for ns in stale + kept:
            subprocess.run([ip, "netns", "del", ns], capture_output=True)
