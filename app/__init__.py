"""commscope's Streamlit app: explore the cost models, and see prediction beside measurement.

Figure builders (:mod:`app.figures`) are plain functions returning plotly figures; pages under
``app/pages`` only wire widgets to them. Needs the ``[app]`` extra (streamlit, plotly, pandas).
"""

from runners._extras import require as _require

for _module in ("plotly", "pandas"):
    _require(_module, "commscope's app")
