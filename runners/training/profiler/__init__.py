"""The layer-wise profiler: a measured :class:`~costmodels.profiles.ModelProfile` of a model (:func:`profile_model`).
Entry points in :mod:`.entry`, the model measured in :mod:`.target`, hook timing in :mod:`.hooks`, per-layer times
and the profile in :mod:`.build`, the hooks' own cost in :mod:`.calibration`.
"""

from __future__ import annotations

from .calibration import describe_overhead
from .entry import profile_model, resolve_device

__all__ = ["describe_overhead", "profile_model", "resolve_device"]
