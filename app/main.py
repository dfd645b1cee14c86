"""Entry point of the Streamlit app (``commscope app`` runs ``streamlit run`` on this file).

Pages are registered here; add a page by adding a file under ``app/views`` and a line below (the
folder is not called ``pages``: Streamlit would list such a folder as a navigation of its own).
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

_ROOT = str(Path(__file__).resolve().parent.parent)
# streamlit runs this file as a script, again on every rerun: make ``app`` importable, once. An entry added per
# rerun grew sys.path by one per interaction, and every scan of it with it: Streamlit's AppTest reads the metadata
# of every distribution on sys.path for each new test app, and a page opened in 0.8 s, then 1.7 s after 40 opens
# (0.2 s each with one entry)
if __package__ in (None, "") and _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


PAGES = Path(__file__).resolve().parent / "views"


def _freeze_once() -> None:
    """Move what the imports created (sympy, plotly, streamlit: millions of objects) out of the cyclic
    garbage collector's reach, once per process: its full collections otherwise add ~200 ms to one
    rerun in twenty (measured with bench/bench_app.py)."""
    import gc

    import app

    if not getattr(app, "_gc_frozen", False):
        import plotly.graph_objects  # noqa: F401

        import convergence  # noqa: F401 - the heavy imports every page makes, before the freeze
        import costmodels  # noqa: F401

        gc.collect()
        gc.freeze()
        app._gc_frozen = True


_freeze_once()

st.set_page_config(page_title="commscope", layout="wide")
navigation = st.navigation([
    st.Page(PAGES / "collectives.py", title="Collectives", icon=":material/hub:", default=True),
    st.Page(PAGES / "iteration.py", title="Iteration", icon=":material/timeline:"),
    st.Page(PAGES / "convergence.py", title="Convergence", icon=":material/trending_down:"),
    st.Page(PAGES / "time_to_accuracy.py", title="Time to accuracy", icon=":material/timer:"),
    st.Page(PAGES / "large_models.py", title="Large models", icon=":material/memory:"),
    st.Page(PAGES / "measured.py", title="Predicted vs measured", icon=":material/compare_arrows:"),
    st.Page(PAGES / "environments.py", title="Environments", icon=":material/tune:"),
])
st.sidebar.title("commscope")
navigation.run()
