"""Optional dependencies: import them, or stop with a message naming the extra that provides them."""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRAS = {"torch": "runners", "streamlit": "app", "plotly": "app", "pandas": "app"}


class MissingExtraError(ImportError):
    """A feature needs an optional dependency that is not installed."""


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming the pip extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = EXTRAS.get(module.split(".")[0], "all")
        raise MissingExtraError(
            f"{feature} needs {module.split('.')[0]}, which is not installed; "
            f"install it with: pip install 'commscope[{extra}]'"
        ) from exc
