"""What an emulated cluster needs of the machine: root, and the ``ip`` and ``tc`` commands of iproute2 (run
here with their output captured); the error every part of the emulation raises.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Sequence

from costmodels.errors import CommscopeError

_names = itertools.count()  # numbers the namespaces of this process: cs<pid>-<k>-...


class EmulationError(CommscopeError):
    """The emulated network cannot be set up (not root, iproute2 or netem missing, bad settings)."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise EmulationError("commscope emulate must run as root (it creates network namespaces, veth "
                             "pairs and tc qdiscs); run it with sudo")


def require_tools() -> dict[str, str]:
    """Absolute paths of ``ip`` and ``tc``, or an error naming the package (iproute2)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
    tools = {name: shutil.which(name, path=path) for name in ("ip", "tc")}
    missing = [name for name, where in tools.items() if where is None]
    if missing:
        raise EmulationError(f"commscope emulate needs the {' and '.join(missing)} command"
                             f"{'s' if len(missing) > 1 else ''} of iproute2, not found; install the iproute2 "
                             "package (e.g. apt-get install iproute2)")
    return {k: str(v) for k, v in tools.items()}


def _run(argv: Sequence[str], what: str, input: str | None = None, check: bool = True,
         timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmulationError(f"{what} failed: {exc}") from None
    if check and done.returncode != 0:
        detail = " ".join((done.stderr or done.stdout).split()) or f"exit code {done.returncode}"
        raise EmulationError(f"{what} failed: {detail}")
    return done

