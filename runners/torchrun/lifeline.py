"""Child processes that cannot outlive the commscope process that started them.

A launcher (``commscope bench``/``train``/``constants``, a validation job's node side, ``commscope validate``'s
driver, ``commscope emulate``'s nodes) starts its child through :func:`wrap`: a tiny interpreter that asks the
kernel for SIGTERM when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``, kept across ``exec``), checks that the
parent is still the launcher (closing the race with a launcher that died first), then ``exec``\\ s the command.
:func:`supervised` runs it in its own session (one process group), turns SIGTERM and SIGHUP into
:class:`Terminated` while it runs, and on the way out stops the group: SIGTERM, ``grace_s`` seconds, SIGKILL; after
a normal exit any process left in the group is killed too. torchrun starts every rank in a session of its own, so
each rank calls :func:`follow_launcher` first: SIGTERM when torchrun dies, and an exit when torchrun (whose parent
must be the launcher named in ``COMMSCOPE_LAUNCHER_PID``) is already gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

LAUNCHER_VARIABLE = "COMMSCOPE_LAUNCHER_PID"  # set by a launcher for its torchrun: the ranks' grandparent
STOP_GRACE_S = 10.0
_PR_SET_PDEATHSIG = 1
EXIT_ORPHANED = 1  # a child whose launcher was already gone when it started

# The wrapper (``python -I -S -c _EXEC PARENT_PID COMMAND...``): standard library only, no site, no PYTHONPATH
_EXEC = """\
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(1, int(signal.SIGTERM), 0, 0, 0) != 0:
    sys.exit("commscope: error: prctl(PR_SET_PDEATHSIG) failed: " + os.strerror(ctypes.get_errno()))
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write("commscope: error: cannot run %s: %s\\n" % (sys.argv[2], exc.strerror))
    sys.exit(127)
"""


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP received while a supervised child ran (a KeyboardInterrupt, so cleanup code sees both)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def supported() -> bool:
    """Whether this system has a parent-death signal (Linux)."""
    return sys.platform.startswith("linux")


def die_with_parent(expected_parent: int | None = None, sig: int = signal.SIGTERM) -> bool:
    """Ask for ``sig`` when this process's parent dies; False when the parent is already not ``expected_parent``
    (it died before the request). True where there is no such signal (nothing to check)."""
    if not supported():
        return True
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return True  # an old kernel: nothing more can be done here
    return expected_parent is None or os.getppid() == expected_parent


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2:].split()[1])  # after "pid (comm) state"


def follow_launcher() -> None:
    """A torchrun rank: SIGTERM when torchrun dies; exit now when it is already gone (its parent must be the
    launcher named in ``COMMSCOPE_LAUNCHER_PID``, when a commscope launcher started it)."""
    launcher = os.environ.get(LAUNCHER_VARIABLE, "")
    alive = die_with_parent()
    parent = os.getppid()
    if supported() and launcher.isdigit() and (not alive or parent == 1 or parent_of(parent) != int(launcher)):
        sys.stderr.write(f"commscope: error: rank {os.environ.get('RANK', '?')}: its launcher (pid {launcher}) or "
                         "torchrun is gone; exiting\n")
        os._exit(EXIT_ORPHANED)


def wrap(argv: Sequence[str], parent: int | None = None) -> list[str]:
    """``argv`` started so that it gets SIGTERM when ``parent`` (default: this process) dies (unchanged off Linux)."""
    if not supported():
        return list(argv)
    return [sys.executable, "-I", "-S", "-c", _EXEC, str(os.getpid() if parent is None else parent), *argv]


@contextlib.contextmanager
def terminating() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` inside (main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum: int, frame: object) -> None:
        raise Terminated(signum)

    old = {s: signal.signal(s, raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _exited(pid: int, block: bool) -> bool:
    """Whether ``pid`` (our child) has exited, leaving it unreaped so that its pid, the group's id, stays ours."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG))
    except ChildProcessError:
        return True
    return info is not None and info.si_pid == pid


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to ``proc``'s process group, up to ``grace_s`` seconds for the leader to exit, then SIGKILL to the
    group; the leader is reaped."""
    if proc.returncode is None:
        if not _exited(proc.pid, block=False):
            _killpg(proc.pid, signal.SIGTERM)
            end = time.monotonic() + grace_s
            while not _exited(proc.pid, block=False) and time.monotonic() < end:
                time.sleep(0.02)
        _killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def supervised(argv: Sequence[str], grace_s: float = STOP_GRACE_S, **popen: Any) -> Iterator[subprocess.Popen]:
    """Start ``argv`` (through :func:`wrap`) in a session of its own and yield it. After the block: wait for it,
    kill whatever is left in its process group, reap it (``proc.returncode`` is its exit code); if the block
    raised (Ctrl-C, :class:`Terminated`, an error), :func:`stop_group` first. SIGTERM and SIGHUP raise
    :class:`Terminated` meanwhile."""
    with terminating():
        proc = subprocess.Popen(wrap(argv), start_new_session=True, **popen)
        try:
            yield proc
            _exited(proc.pid, block=True)
            _killpg(proc.pid, signal.SIGKILL)  # stragglers of the group; the unreaped leader keeps its id ours
            proc.wait()
        except BaseException:
            with _signals_ignored():
                stop_group(proc, grace_s)
            raise
        finally:
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP ignored while stopping (main thread only): a second Ctrl-C cannot cut it short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def run(argv: Sequence[str], grace_s: float = STOP_GRACE_S, **popen: Any) -> int:
    """:func:`supervised` ``argv`` to its end; its exit code (killed by signal S: -S). Raises
    :class:`Terminated` or KeyboardInterrupt after stopping it when this process is told to stop."""
    with supervised(argv, grace_s, **popen) as proc:
        pass
    return int(proc.returncode)
