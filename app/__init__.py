"""commscope's Streamlit app: explore the cost models, and see prediction beside measurement.

Figure builders (:mod:`app.figures` and ``app/figures_*.py``) are plain functions returning plotly
figures; pages under ``app/views`` only wire widgets to them (not ``app/pages``: Streamlit would list
a ``pages`` folder as a navigation of its own). Needs the ``[app]`` extra (streamlit, plotly, pandas).

Every figure uses plotly's "plotly_white" template, set here as plotly's default once: a new figure then shares it,
where ``update_layout(template="plotly_white")`` copies the whole template into each figure (20-50 ms a figure).
"""

from runners._extras import require as _require

for _module in ("plotly", "pandas"):
    _require(_module, "commscope's app")

import plotly.io as _pio  # noqa: E402 - after the check that plotly is installed

_pio.templates.default = "plotly_white"
