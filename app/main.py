"""Entry point of the Streamlit app (``commscope app`` runs ``streamlit run`` on this file).

Pages are registered here; add a page by adding a file under ``app/pages`` and a line below.
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

if __package__ in (None, ""):  # streamlit runs this file as a script: make ``app`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


PAGES = Path(__file__).resolve().parent / "pages"

st.set_page_config(page_title="commscope", layout="wide")
navigation = st.navigation([
    st.Page(PAGES / "collectives.py", title="Collectives", icon=":material/hub:", default=True),
])
st.sidebar.title("commscope")
navigation.run()
