"""Page state in the URL (``st.query_params``): a link opens the page as it was.

Every page names its controls with :class:`Param` specs keyed by widget key. :func:`restore` (first thing a page
does) applies the URL's parameters to the session state once per distinct URL: a link someone shared, or the
page reloaded; :func:`publish` (once the controls are drawn) writes the controls' values back. A value the URL
gives that a control cannot take is not applied; the page shows one warning line naming it (:func:`problems`).
The sidebar's environment is part of every page's state (:data:`ENVIRONMENT`).

Parsing and formatting are pure (:func:`parse`, :func:`fmt`); only :func:`restore` and :func:`publish` touch
Streamlit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st

WRITTEN = "_url_written"  # what this session last wrote to the URL (or applied from it)
PROBLEMS = "_url_problems"


@dataclass(frozen=True)
class Param:
    """How a control's value travels in the URL: ``kind`` is int, float, str, bool, list (of str), range (two
    ints) or frange (two floats); ``lo``/``hi`` bound numbers, ``options`` (or a function giving them) limit strings."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    options: Sequence[Any] | Callable[[], Sequence[Any]] | None = None

    def choices(self) -> Sequence[Any] | None:
        return self.options() if callable(self.options) else self.options


def _number(text: str, p: Param, integer: bool) -> float | int:
    try:
        v = float(text)
    except ValueError:
        raise ValueError("not a number") from None
    if not math.isfinite(v) or (integer and v != int(v)):
        raise ValueError("not an integer" if integer else "not a finite number")
    if (p.lo is not None and v < p.lo) or (p.hi is not None and v > p.hi):
        raise ValueError(f"outside [{p.lo:g}, {p.hi:g}]")
    return int(v) if integer else v


def parse(p: Param, text: str) -> Any:
    """The control's value from its URL text; ValueError (saying why) when it cannot take it."""
    options = p.choices()
    if p.kind == "int":
        return _number(text, p, True)
    if p.kind == "float":
        return _number(text, p, False)
    if p.kind == "bool":
        if text not in ("1", "0", "true", "false"):
            raise ValueError("not 1 or 0")
        return text in ("1", "true")
    if p.kind in ("range", "frange"):
        parts = text.split(",")
        if len(parts) != 2:
            raise ValueError("not two numbers a,b")
        a, b = (_number(x, p, p.kind == "range") for x in parts)
        if options is not None and not {a, b} <= set(options):
            raise ValueError("not among the slider's values")
        return (a, b)
    if p.kind == "list":
        items = [x for x in text.split(",") if x]
        bad = [x for x in items if options is not None and x not in options]
        if bad:
            raise ValueError(f"unknown {', '.join(bad)}")
        return items
    if options is not None and text not in options:
        # options that are numbers (e.g. a GPU's compute capability) travel as text
        match = [o for o in options if str(o) == text]
        if not match:
            raise ValueError("not one of the choices")
        return match[0]
    return text


def fmt(value: Any) -> str:
    """A control's value as URL text (the inverse of :func:`parse`)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(fmt(v) for v in value)
    if isinstance(value, float):
        return format(value, ".10g")
    return str(value)


def _fitted_names() -> list[str]:
    from app.sidebar import fitted_environments

    return list(fitted_environments())


def _presets() -> list[str]:
    import costmodels as cm

    return cm.environments()


ENVIRONMENT: dict[str, Param] = {  # the sidebar's controls (custom: the main ones)
    "env_mode": Param("str", options=("preset", "fitted", "custom")),
    "env_preset": Param("str", options=_presets),
    "env_fitted": Param("str", options=_fitted_names),
    "env_alpha": Param("float", 0.1, 200.0),
    "env_bw": Param("float", 0.05, 500.0),
    "env_gamma": Param("float", 0.0, 1e-6),
    "env_gpus": Param("int", 1, 64),
}
_ENV_SHOWN = {"preset": ("env_preset",), "fitted": ("env_fitted",),
              "custom": ("env_alpha", "env_bw", "env_gamma", "env_gpus")}


def restore(spec: Mapping[str, Param]) -> None:
    """Apply the URL's parameters to the session state, once per distinct URL; unusable ones are remembered for
    :func:`problems`. Call before any control is drawn."""
    params = st.query_params.to_dict()
    if not params or params == st.session_state.get(WRITTEN):
        return
    st.session_state[WRITTEN] = params
    bad = []
    for key, p in {**ENVIRONMENT, **spec}.items():
        if key not in params:
            continue
        try:
            value = parse(p, params[key])
        except ValueError as exc:
            bad.append(f"{key}={params[key]!r} ({exc})")
            continue
        st.session_state[key] = value
        if key.startswith("env_"):
            st.session_state["_keep_" + key] = value  # the sidebar's shadow of record (app.sidebar)
        if key.endswith("_library"):
            st.session_state[f"{key}_url"] = value  # app.sidebar.library_select takes it over the environment's
    st.session_state[PROBLEMS] = bad


def problems() -> str | None:
    """One line naming the URL parameters that were not applied (None when all were), shown once."""
    bad = st.session_state.pop(PROBLEMS, None)
    return f"Link parameters not applied: {'; '.join(bad)}." if bad else None


def publish(keys: Sequence[str]) -> None:
    """Write the sidebar's environment and the page's ``keys`` (those with a value) to the URL."""
    mode = st.session_state.get("env_mode", "preset")
    shown = ["env_mode", *_ENV_SHOWN.get(mode, ()), *keys]
    values = {k: fmt(st.session_state[k]) for k in shown if st.session_state.get(k) is not None}
    if st.query_params.to_dict() != values:
        st.query_params.from_dict(values)
    st.session_state[WRITTEN] = values
