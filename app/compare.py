"""Compare A against B: pin what a page shows now (A), change the environment or the model, and the page draws the
pinned curves (dashed, "A: ...") beside the current ones ("B: ...") on one plot.

The pin is the page's table as it was when pinned, with a label saying what it was (environment, model, p), kept in
the session under ``pin_<page>``; it survives page switches and is dropped with "unpin".
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st


def _key(page: str) -> str:
    return f"pin_{page}"


def pinned(page: str) -> tuple[str, pd.DataFrame] | None:
    """The page's pinned (label, table), or None."""
    return st.session_state.get(_key(page))


def controls(page: str, label: str, table: pd.DataFrame, where: Any = None) -> tuple[str, pd.DataFrame] | None:
    """The pin / unpin button (in ``where``) and a caption of what is compared; returns the pin (label, table) of
    configuration A, or None."""
    where = where or st
    pin = pinned(page)

    def _pin() -> None:
        st.session_state[_key(page)] = (label, table.copy())

    def _unpin() -> None:
        st.session_state.pop(_key(page), None)

    if pin is None:
        where.button("pin as A to compare", key=f"{page}_pin", on_click=_pin,
                     help="Keep these curves as configuration A; change the environment, model or p and the plot "
                          "shows A (dashed) against B (what the page shows now).")
        return None
    c1, c2 = where.columns([4, 1])
    c1.caption(f"Comparing **A** = {pin[0]} (pinned, dashed) with **B** = {label}.")
    c2.button("unpin A", key=f"{page}_unpin", on_click=_unpin)
    return pin
