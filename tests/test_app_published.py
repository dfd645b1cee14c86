"""Published collective measurements in the app: the tables and figure without Streamlit, the "Published
collectives" source of the Predicted vs measured page, and the published overlay of the Collectives page."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("streamlit", reason="the [app] extra is part of the README's test set-up")
from app_pages import MAIN, chart_specs, open_page, values
from streamlit.testing.v1 import AppTest

from app import data_published as dp
from app.data import citations, measured_points
from app.figures_measured import published_figure
from runners import reference

A100, H200, A3 = "8xA100-NVLink (stas00)", "8xH200-NVLink (stas00)", "2x8 H100 (A3 Mega)"
PCIE_AG = "2xRTX2080Ti-PCIe-noP2P allgather"


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return dp.published_frame(reference.published_comparison())


def test_published_frame_is_the_comparison(frame) -> None:
    rows = reference.published_comparison()
    assert len(frame) == len(rows) == len(reference.published_records())
    for row, r in zip(frame.itertuples(), rows, strict=True):
        assert row.system == r["system"] and row.bytes == r["bytes"]
        assert row.predicted_busbw_GBps == r["predicted_busbw_GBps"]
        assert row.choice == f"{r['algorithm']}/{r['protocol']}"
    assert set(frame.loc[frame["bytes"] >= 2**30, "regime"]) == {"bandwidth (>= 1 GiB)"}
    assert set(frame.loc[frame["bytes"] < 2**20, "regime"]) == {"small"}


def test_summary_says_where_the_model_holds(frame) -> None:
    s = dp.published_summary(frame).set_index("system")
    assert list(s.index) == reference.published_systems()
    bw = frame[frame["bytes"] >= 2**30]
    for system, g in bw.groupby("system"):
        assert s.loc[system, "bw_max_abs_error"] == pytest.approx(g["busbw_error"].abs().max())
        assert s.loc[system, "bw_median_error"] == pytest.approx(g["busbw_error"].median())
    assert s.loc[A100, "holds"] and s.loc[A3, "holds"]  # tests/test_published.py pins them within 10%
    assert s.loc[H200, "holds"] and s.loc[H200, "bw_choice"] == "nvls/Simple"
    assert s.loc[PCIE_AG, "holds"] and s.loc[PCIE_AG, "p"] == 2  # NCCL's SHM rate both ways (tests/test_published.py)
    assert s.loc[A100, "mid_median_error"] > 0.10  # the mid sizes ramp up more slowly than the model
    text = dp.published_verdict(dp.published_summary(frame))
    assert "holds within 10% on 8xA100-NVLink (stas00), 8xH200-NVLink (stas00), 2x8 H100 (A3 Mega)" in text
    assert "8xH100 nccl-tests allreduce (nccl-tests #290) (median error" in text  # the last system that holds
    assert "8xH200-NVLink (stas00) timed one call at a time on an idle device" in text and "(25 us" in text
    assert list(s["timing"]).count("one_call_idle_device") == 1
    assert "mid sizes" in text and "NVLS on H200" not in text and "in the bandwidth regime on" not in text
    only = dp.published_verdict(dp.published_summary(frame[frame["system"] == A100]))
    assert "NVLS" not in only and "PCIe" not in only
    assert dp.published_verdict(dp.published_summary(frame.iloc[:0])) == "No published points chosen."


@pytest.mark.parametrize("band", [0.0, 0.1, 0.25])
def test_published_figure(frame, band) -> None:
    fig = published_figure(frame, band=band)
    points = [tr for tr in fig.data if tr.meta == "points"]
    assert [tr.name for tr in points] == reference.published_systems()
    shown = frame[(frame["measured_busbw_GBps"] > 0)]  # busbw published as 0.00 has no place on log axes
    assert sum(len(tr.x) for tr in points) == len(shown) < len(frame)
    identity = [tr for tr in fig.data if tr.name == "y = x"]
    assert len(identity) == 1 and np.allclose(identity[0].x, identity[0].y)
    ratios = {round(float(tr.y[-1] / tr.x[-1]), 6) for tr in fig.data if tr.meta == "reference" and tr.name != "y = x"}
    assert ratios == ({round(1 + band, 6), round(1 - band, 6)} if band else set())
    a100 = next(tr for tr in points if tr.name == A100)
    big = frame.loc[(frame["system"] == A100), "bytes"].to_numpy() >= 2**30
    assert list(a100.marker.symbol) == ["circle" if b else "circle-open" for b in big]
    assert fig.layout.xaxis.type == fig.layout.yaxis.type == "log"


def test_citations_and_published_points() -> None:
    recs = reference.published_records()
    cites = citations(recs)
    assert [c["system"] for c in cites] == reference.published_systems()
    assert all(c["url"].startswith("https://") and c["source"] for c in cites)
    by = {c["system"]: c for c in cites}
    assert by[PCIE_AG]["source"] == by["2xRTX2080Ti-PCIe-noP2P allreduce"]["source"]  # not "same file as above"
    assert citations(reference.records("2500mbit")) == []  # measured here: nothing to cite
    pts = measured_points([r for r in recs if r["system"] == H200], "allreduce")
    assert set(pts["label"]) == {f"published: {H200}"} and set(pts["p"]) == {8} and len(pts) == 20


# ------------------------------------------------------------------------- Predicted vs measured
@pytest.fixture
def measured() -> AppTest:
    at = open_page("views/measured.py")
    at.radio(key="meas_source").set_value("published").run()
    assert not at.exception, at.exception
    return at


def test_published_section_renders(measured: AppTest) -> None:
    specs = chart_specs(measured)
    assert len(specs) == 1
    names = [tr["name"] for tr in specs[0]["data"]]
    assert names[:2] == ["y = x", "+-10%"] and names[3:] == reference.published_systems()
    summary = next(d.value for d in measured.dataframe if "bw_max_abs_error" in d.value.columns)
    assert list(summary["system"]) == reference.published_systems()
    text = " ".join(m.value for m in measured.markdown)
    assert "holds within 10%" in text and "2xRTX2080Ti-PCIe-noP2P allgather" in text
    for c in citations(reference.published_records()):  # every source is cited, with its link
        assert c["url"] in text and c["source"] in text
    assert not measured.error and not measured.warning
    assert [s.value for s in measured.subheader] == ["Sources"]  # the validation sections are not drawn


@pytest.mark.parametrize("change", [
    lambda at: at.multiselect(key="meas_pub_systems").set_value([A100, A3]),
    lambda at: at.slider(key="meas_pub_band").set_value(20),
])
def test_published_controls_change_the_chart(measured: AppTest, change) -> None:
    before = chart_specs(measured)
    change(measured).run()
    assert not measured.exception, measured.exception
    assert chart_specs(measured) != before


def test_published_section_with_no_system(measured: AppTest) -> None:
    measured.multiselect(key="meas_pub_systems").set_value([A3]).run()
    text = " ".join(m.value for m in measured.markdown)
    assert A3 in text and A100 not in text  # only the chosen systems' sources
    measured.multiselect(key="meas_pub_systems").set_value([]).run()
    assert not measured.exception and measured.info and not measured.get("plotly_chart")


# ----------------------------------------------------------------------------------- Collectives
@pytest.fixture
def collectives() -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=60).run()
    assert not at.exception, at.exception
    return at


def _names(at: AppTest) -> list[str]:
    return [tr["name"] for tr in chart_specs(at)[0]["data"]]


def test_published_system_sets_the_page(collectives: AppTest) -> None:
    at = collectives
    at.radio(key="coll_measured").set_value("published").run()  # the first system, at once
    assert not at.exception, at.exception
    assert at.sidebar.radio(key="env_mode").value == "preset"
    assert at.sidebar.selectbox(key="env_preset").value == "NVLink-A100" and at.number_input(key="coll_p").value == 8
    assert f"published: {A100}" in _names(at) and "library: nccl" in _names(at)
    cite = next(c for c in citations(reference.published_records()) if c["system"] == A100)
    assert any(cite["url"] in c.value for c in at.caption)
    at.selectbox(key="coll_published_system").set_value(PCIE_AG).run()
    assert not at.exception, at.exception
    assert at.sidebar.selectbox(key="env_preset").value == "PCIe3x16-noP2P"
    assert at.number_input(key="coll_p").value == 2 and at.selectbox(key="coll_primitive").value == "allgather"
    names = _names(at)
    assert f"published: {PCIE_AG}" in names and "ring_allgather" in names
    marks = next(tr for tr in chart_specs(at)[0]["data"] if tr["name"] == f"published: {PCIE_AG}")
    assert len(values(marks["x"])) == sum(r["system"] == PCIE_AG for r in reference.published_records())
    assert not any(c.value.startswith("Published points: same file") for c in at.caption)
    assert not any("timed one call at a time" in c.value for c in at.caption)  # nccl-tests: calls queued


def test_published_overlay_after_the_environment_moves(collectives: AppTest) -> None:
    at = collectives
    at.radio(key="coll_measured").set_value("published").run()
    at.selectbox(key="coll_published_system").set_value(H200).run()
    bands = [a["text"] for a in chart_specs(at)[0]["layout"]["annotations"] if a.get("name") == "band"]
    assert "nvls/Simple" in bands  # the H200's preset has NVLink SHARP: NCCL's NVLS from 2 MiB on
    # that table timed one call at a time: the page says its points hold PyTorch's host overhead per call
    assert any("timed one call at a time" in c.value and "about 25 us" in c.value for c in at.caption)
    at.sidebar.selectbox(key="env_preset").set_value("IB-NDR").run()
    assert not at.exception and at.sidebar.selectbox(key="env_preset").value == "IB-NDR"
    assert any("ran on **NVLink-H100** at p = 8" in c.value for c in at.caption)
    assert f"published: {H200}" in _names(at)
    at.radio(key="coll_metric").set_value("busbw_GBps").run()
    marks = next(tr for tr in chart_specs(at)[0]["data"] if tr["name"] == f"published: {H200}")
    want = [r["result"]["busbw_GBps"] for r in reference.published_records() if r["system"] == H200]
    assert np.allclose(sorted(values(marks["y"])), sorted(want))
    at.button(key="coll_published_back").click().run()
    assert not at.exception and at.sidebar.selectbox(key="env_preset").value == "NVLink-H100"
    assert [b.key for b in at.get("button")] == ["collectives_pin"]  # on the system's own environment: no way back
