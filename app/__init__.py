"""commscope's Streamlit app: explore the cost models, and see prediction beside measurement.

Figure builders (:mod:`app.figures` and ``app/figures_*.py``) are plain functions returning plotly
figures; pages under ``app/views`` only wire widgets to them (not ``app/pages``: Streamlit would list
a ``pages`` folder as a navigation of its own). Needs the ``[app]`` extra (streamlit, plotly, pandas).
"""

from runners._extras import require as _require

for _module in ("plotly", "pandas"):
    _require(_module, "commscope's app")
