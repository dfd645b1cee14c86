"""No process outlives its launcher: torchrun and its ranks die with ``commscope bench``/``train`` (SIGKILL or
SIGTERM), a validation job with ``commscope validate``, and the parent-death wrapper of
:mod:`runners.torchrun.lifeline` on its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2:].split()[1])


def children() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = parent_of(int(entry.name))
            if parent is not None:
                out.setdefault(parent, []).append(int(entry.name))
    return out


SEEN: set[int] = set()  # every descendant a test looked at: the fixture kills those left, even when reparented


def descendants(pid: int) -> set[int]:
    tree, found, todo = children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    SEEN.update(found)
    return found


def running(pids: set[int]) -> set[int]:
    """Those of ``pids`` that still exist and are not zombies."""
    alive = set()
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2:].split()[0] != b"Z":
            alive.add(pid)
    return alive


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def runs(pid: int, module: str) -> bool:
    """Whether ``pid`` runs ``python -m module`` itself (torchrun's command line names it too)."""
    line = cmdline(pid)
    return f"-m {module} " in line and "torch.distributed.run" not in line


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts; whatever of them and of their descendants is left is killed at the end (by pid)."""
    procs: list[subprocess.Popen] = []
    SEEN.clear()
    yield procs
    for p in procs:
        descendants(p.pid)
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
    for pid in running(SEEN):
        with_cmd = cmdline(pid)
        if "runners" in with_cmd or "torch.distributed.run" in with_cmd:
            os.kill(pid, signal.SIGKILL)


def launch(procs: list[subprocess.Popen], *argv: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "runners.cli", *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    procs.append(proc)
    return proc


def wait_for_ranks(proc: subprocess.Popen, module: str, banner: str, ranks: int = 2, timeout: float = 60) -> set[int]:
    """Read the launcher's output until ``banner`` (the ranks are at work), then its descendants: torchrun and
    ``ranks`` processes running ``module``."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if banner in line or time.monotonic() > deadline:
            break
    assert any(banner in line for line in lines), "".join(lines[-30:])
    found = descendants(proc.pid)
    assert sum(runs(p, module) for p in found) == ranks, [cmdline(p) for p in found]
    assert any("torch.distributed.run" in cmdline(p) for p in found)
    return found


def assert_all_gone(pids: set[int], within: float = 8.0) -> None:
    end = time.monotonic() + within
    while running(pids) and time.monotonic() < end:
        time.sleep(0.05)
    left = running(pids)
    assert not left, {p: cmdline(p) for p in left}


BENCH = ("bench", "collectives", "--nproc", "2", "--backend", "gloo", "--op", "allreduce", "-b", "1KiB", "-e", "1KiB",
         "-w", "1", "-n", "10000000", "--timeout", "60")
TRAIN = ("train", "--nproc", "2", "--backend", "gloo", "--algorithm", "wfbp", "--model", "mlp", "--warmup", "0",
         "--iterations", "10000000", "--timeout", "60")


@pytest.mark.multiprocess
@pytest.mark.parametrize(("argv", "module", "banner"), [
    (BENCH, "runners.measure.sweep", "redop"),  # the table's header: rank 0 is measuring
    (TRAIN, "runners.training.runner", "# commscope train:"),
])
def test_sigkill_to_the_launcher_leaves_no_process(started: list[subprocess.Popen], argv: tuple[str, ...],
                                                   module: str, banner: str) -> None:
    proc = launch(started, *argv)
    pids = wait_for_ranks(proc, module, banner)
    proc.kill()
    proc.wait(timeout=5)
    assert_all_gone(pids)


@pytest.mark.multiprocess
def test_ranks_die_with_torchrun(started: list[subprocess.Popen]) -> None:
    """torchrun starts every rank in a session of its own; SIGKILL to torchrun alone must not leave them running."""
    proc = launch(started, *BENCH)
    pids = wait_for_ranks(proc, "runners.measure.sweep", "redop")
    (torchrun,) = [p for p in pids if "torch.distributed.run" in cmdline(p)]
    os.kill(torchrun, signal.SIGKILL)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 1 and "commscope: error: the sweep ended with exit code -9" in out, out[-2000:]
    assert_all_gone(pids, within=3.0)


@pytest.mark.multiprocess
def test_sigterm_to_the_launcher_stops_torchrun_and_its_ranks(started: list[subprocess.Popen]) -> None:
    proc = launch(started, *BENCH)
    pids = wait_for_ranks(proc, "runners.measure.sweep", "redop")
    proc.terminate()
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM, out[-2000:]
    assert "commscope: SIGTERM: stopped torchrun and its ranks" in out
    assert_all_gone(pids, within=2.0)


VALIDATE = """
import sys
from runners import validate as v
suite = v.Suite("long", "mlp", 16, (("bsp", {}),), iterations=10_000_000, warmup=0, sweep_sizes=("4", "64", 16.0),
                sweep_iters=(1, 2), latency_iters=2, profile_iters=(1, 2))
v.validate(suite, 2, sys.argv[1], timeout=60.0, command="test")
"""


@pytest.mark.multiprocess
def test_sigterm_to_validate_stops_its_job(started: list[subprocess.Popen], tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", VALIDATE, str(tmp_path / "v")], cwd=ROOT, env=env,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started.append(proc)
    log = tmp_path / "v" / "host" / "log.txt"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and "train bsp" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.2)
    assert "train bsp" in log.read_text(), log.read_text()[-2000:] if log.exists() else proc.communicate()[0]
    pids = descendants(proc.pid)
    assert sum(runs(p, "runners.validate.rank") for p in pids) == 3, [cmdline(p) for p in pids]  # node + ranks
    proc.terminate()
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "Traceback" in out  # this script does not catch Terminated; the CLI does
    assert_all_gone(pids, within=2.0)


@pytest.mark.multiprocess
def test_sigterm_to_commscope_validate_takes_down_the_emulator_and_its_network(started: list[subprocess.Popen],
                                                                               tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test needs root (commscope validate --emulate builds network namespaces); CI runs it as "
                    "root. Run pytest as root, or deselect it with -m 'not multiprocess'")
    out = tmp_path / "v"
    proc = launch(started, "validate", "--suite", "quick", "--ranks", "2", "--emulate", "1gbit", "--out", str(out))
    log = out / "1gbit" / "log.txt"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "@@ stage 1/" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.2)
    assert log.exists() and "@@ stage 1/" in log.read_text(), log.read_text()[-3000:] if log.exists() else ""
    pids = descendants(proc.pid)
    emulator = [p for p in pids if "runners.cli emulate" in cmdline(p)]
    nodes_and_ranks = [p for p in pids if runs(p, "runners.validate.rank") and p not in emulator]
    assert len(emulator) == 1 and len(nodes_and_ranks) == 4, [cmdline(p) for p in pids]  # 2 node sides, 2 ranks
    namespaces = [n for n in os.listdir("/run/netns") if n.startswith(f"cs{emulator[0]}-")]
    try:
        assert len(namespaces) == 3
        proc.terminate()
        text, _ = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, text[-3000:]
        assert "commscope: SIGTERM: stopped the validation job" in text
        assert_all_gone(pids, within=2.0)
        assert not [n for n in os.listdir("/run/netns") if n.startswith(f"cs{emulator[0]}-")]
    finally:  # what a failure left: the emulator (by its pid), then its namespaces
        if running(set(emulator)):
            os.kill(emulator[0], signal.SIGKILL)
            time.sleep(0.5)
        for n in os.listdir("/run/netns"):
            if n.startswith(f"cs{emulator[0]}-"):
                subprocess.run(["ip", "netns", "del", n], capture_output=True)


def test_the_wrapper_ties_a_child_to_its_parent(started: list[subprocess.Popen]) -> None:
    from runners.torchrun import lifeline  # noqa: F401  (the child imports it)

    middle = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                               "from runners.torchrun import lifeline\n"
                               "p = subprocess.Popen(lifeline.wrap(['sleep', '60']))\n"
                               "print(p.pid, flush=True)\ntime.sleep(60)\n"], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    started.append(middle)
    assert middle.stdout is not None
    child = int(middle.stdout.readline())
    time.sleep(0.3)
    assert "sleep 60" in cmdline(child)  # the wrapper exec'd the command in its own pid
    middle.kill()
    middle.wait()
    assert_all_gone({child}, within=3.0)


def test_the_wrapper_refuses_when_its_parent_is_already_gone() -> None:
    from runners.torchrun import lifeline

    done = subprocess.run(lifeline.wrap(["echo", "ran"], parent=os.getpid() + 1_000_000), capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1 and done.stdout == ""


def test_a_rank_whose_torchrun_is_gone_exits() -> None:
    from runners.torchrun import lifeline

    code = "from runners.torchrun.lifeline import follow_launcher; follow_launcher(); print('went on')"
    env = {**os.environ, "RANK": "3"}
    # launched by this process directly: its grandparent is not the launcher named
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, lifeline.LAUNCHER_VARIABLE:
                          str(os.getpid())}, capture_output=True, text=True, timeout=30)
    assert done.returncode == lifeline.EXIT_ORPHANED and "went on" not in done.stdout
    assert "rank 3: its launcher" in done.stderr
    # through a shell (standing in for torchrun) started by this process: it goes on
    done = subprocess.run(["sh", "-c", f'{sys.executable} -c "{code}"; exit $?'], cwd=ROOT,
                          env={**env, lifeline.LAUNCHER_VARIABLE: str(os.getpid())}, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0 and "went on" in done.stdout, done.stderr
