"""commscope's convergence half: rate bounds of distributed SGD variants and time-to-accuracy.

Pure math (numpy, sympy, scipy), like :mod:`costmodels`, which it imports to turn iteration counts
into wall-clock time.

>>> import convergence as cv
>>> b = cv.bound("local_sgd")
>>> int(b.iterations_to(1e-2, L=1.0, sigma=1.0, Delta=1.0, n=16, H=8))
13043
"""

from __future__ import annotations

from costmodels.errors import CommscopeError

from . import (  # noqa: F401 (they register their bounds)
           bounds_choco,  # registers choco_sgd
           bounds_convex,
           bounds_lower,
           bounds_sign,
           sim_algorithms,
)
from .bounds import BOUNDS, Bound, bound, bounds
from .problems import PROBLEMS, Problem, problem
from .simulate import SIMULATIONS, SimulationResult, simulate, simulations
from .topology import TOPOLOGIES, mixing_matrix, spectral_gap
from .tta import TimeToAccuracy, WinnerMap, time_to_accuracy, winner_map  # noqa: F401 (time to accuracy)

__all__ = [
           "BOUNDS",
           "PROBLEMS",
           "SIMULATIONS",
           "TOPOLOGIES",
           "Bound",
           "CommscopeError",
           "Problem",
           "SimulationResult",
           "bound",
           "bounds",
           "mixing_matrix",
           "problem",
           "simulate",
           "simulations",
           "spectral_gap",
]
