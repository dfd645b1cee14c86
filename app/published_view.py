"""The Predicted-vs-measured page's published section (Streamlit): collective measurements published by others
(nccl-tests tables) beside the collective-library model, their errors per system and their citations."""

from __future__ import annotations

from functools import partial

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app import exports
from app.data import citations
from app.data_published import BANDWIDTH_REGIME, published_frame, published_summary, published_verdict
from app.figures_measured import published_figure
from app.uploads import published_records


def _percent(columns: list[str]) -> dict:
    return {c: st.column_config.NumberColumn(c, format="percent") for c in columns}


@st.cache_data(show_spinner=False)
def _published() -> pd.DataFrame:
    """Every published point beside its environment's library prediction."""
    from runners import reference

    return published_frame(reference.published_comparison())


@st.cache_resource(show_spinner=False, max_entries=32)
def _published_figure(systems: tuple[str, ...], band: float) -> go.Figure:
    frame = _published()
    return published_figure(frame[frame["system"].isin(systems)], band=band)


def published_section() -> None:
    """The published collective measurements: scatter, per-system errors, where the model holds, citations."""
    frame = _published()
    st.caption("Collective measurements published by others (nccl-tests tables), each on the commscope "
               "environment preset that describes its system, predicted by that environment's collective "
               "library (NCCL 2.21's tuning model, as `costmodels.libraries` prices it). Bus bandwidth as "
               "nccl-tests reports it; error = predicted / measured - 1.")
    systems = list(dict.fromkeys(frame["system"]))
    c1, c2 = st.columns([3, 1])
    chosen = c1.multiselect("systems", systems, default=systems, key="meas_pub_systems")
    band = c2.slider("error band (+-%)", 0, 50, 10, step=1, key="meas_pub_band")
    view = frame[frame["system"].isin(chosen)]
    if view.empty:
        st.info("Choose at least one system.")
        return
    fig = _published_figure(tuple(chosen), band / 100)
    st.plotly_chart(fig, width="stretch", key="meas_pub_scatter")
    st.caption(f"Filled markers: the bandwidth regime (>= {BANDWIDTH_REGIME / 2**30:g} GiB); open: smaller "
               "messages. Points whose published busbw rounds to 0.00 GB/s are left out of the log axes. Above "
               "the y = x line the model is optimistic.")
    summary = published_summary(view)
    st.markdown(published_verdict(summary))
    st.dataframe(summary, hide_index=True, width="stretch", key="meas_pub_summary",
                 column_config=_percent(["median_abs_error", "mid_median_error", "bw_median_error",
                                         "bw_max_abs_error"]))
    d1, d2, d3 = st.columns(3)
    d1.download_button("points (CSV)", partial(exports.csv_with_header, view,
                                               {"what": "published collectives beside the library model"}),
                       file_name="published_vs_model.csv",
                       mime="text/csv", key="meas_dl_pub_csv", on_click="ignore")
    d2.download_button("per system (CSV)", partial(exports.csv_with_header, summary,
                                                   {"what": "published collectives: model errors per system"}),
                       file_name="published_errors.csv",
                       mime="text/csv", key="meas_dl_pub_summary", on_click="ignore")
    d3.download_button("figure (HTML, works offline)", partial(exports.offline_html, fig),
                       file_name="published_vs_model.html", mime="text/html", key="meas_dl_pub_html", on_click="ignore")
    with st.expander("every published point"):
        st.dataframe(view, hide_index=True, width="stretch", column_config=_percent(["busbw_error", "time_error"]))
    st.subheader("Sources")
    for c in [c for c in citations(published_records()) if c["system"] in chosen]:
        st.markdown(f"- **{c['system']}**: {c['source']}; {c['where']}. <{c['url']}>")
        if c["notes"]:
            st.caption(c["notes"])


