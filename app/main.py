"""Entry point of the Streamlit app (``commscope app`` runs ``streamlit run`` on this file).

Pages are registered here; add a page by adding a file under ``app/views`` and a line below (the
folder is not called ``pages``: Streamlit would list such a folder as a navigation of its own).
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

if __package__ in (None, ""):  # streamlit runs this file as a script: make ``app`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


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
