"""The Predicted vs measured page's answers across the three predictions (issue 16): records with (a), (b), (c), the
measured spread, the regimes and the error attribution, beside older records that carry (a) only; tables and
figures without Streamlit, and the page through AppTest with the reference run and with an upload."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

import costmodels as cm

pytest.importorskip("streamlit", reason="the [app] extra is part of the README's test set-up")
from app_pages import chart_specs, open_page, values
from streamlit.testing.v1 import AppTest

from app import data_measured as dm
from app import data_validation as dv
from app import figures_measured as fm
from runners import results, validate
from runners.validate.attribution import attribute

SHARES = {"100mbit": 0.7, "1gbit": 0.4, "2500mbit": 0.15}  # one environment per regime
# fractions of the prediction each term contributes, cycled over the cells so that each term gets named
MIXES = [(0.05, 0.6, 0.1, 0.01), (0.5, 0.1, 0.05, 0.02), (0.05, 0.1, 0.4, 0.01), (0.01, 0.02, 0.03, 0.3),
         (1e-4, 1e-4, 1e-4, 1e-4)]  # the last: a gap larger than every term, a "missing term"


def new_format(records: list[dict]) -> list[dict]:
    """The shipped (old-format) validation records with what ``runners.validate.compare`` adds since issue 16:
    three repetitions and their spread, the bsp communication share, predictions (b) (not for bsp) and (c),
    and the attribution (through ``runners.validate.attribution.attribute``)."""
    out = []
    for i, rec in enumerate(records):
        r = copy.deepcopy(rec)
        c, s = r["config"], r["result"]
        m = s["measured_s"]
        c.update(repeats=3, iteration_records=[c["iteration_record"], f"rep{i}b", f"rep{i}c"])
        s.update(measured_repeats_s=[0.98 * m, m, 1.03 * m], spread=0.5 * 0.05, comm_share_bsp=SHARES[c["environment"]])
        if c["technique"] != "bsp":
            s["predicted_calibrated_s"] = m * (1 + 0.01 * (i % 7 - 3))
            s["error_calibrated"] = s["predicted_calibrated_s"] / m - 1
        s["predicted_defaults_s"] = 1.2 * s["predicted_s"]
        s["error_defaults"] = s["predicted_defaults_s"] / m - 1
        pred = s.get("predicted_calibrated_s", s["predicted_s"])
        contrib = {"total": pred, **{t: f * pred for t, f in zip(dm.TERMS, MIXES[i % len(MIXES)], strict=True)}}
        s["attribution"] = {**attribute(m, contrib), "contributions_s": contrib,
                            "prediction": "calibrated" if "predicted_calibrated_s" in s else "sweep"}
        out.append(results.validate(r))
    return out


OLD_FORMAT = Path(__file__).parent / "data" / "validation_before_issue16.jsonl"  # the reference run before issue 16


@pytest.fixture(scope="module")
def old() -> list[dict]:
    return results.load(OLD_FORMAT).records


@pytest.fixture(scope="module")
def new(old) -> list[dict]:
    return new_format(old)


@pytest.fixture(scope="module")
def frame(new):
    return dm.validation_frame(new)


# ============================================================================== tables, figures
def test_frame_carries_the_three_predictions_spread_regime_and_attribution(new, frame) -> None:
    for r, row in zip(new, frame.to_dict("records"), strict=True):
        s = r["result"]
        assert row["repeats"] == 3 and row["spread"] == pytest.approx(0.025)
        assert row["comm_share_bsp"] == SHARES[row["environment"]]
        assert row["error_defaults"] == pytest.approx(s["error_defaults"])
        assert (math.isnan(row["predicted_calibrated_s"]) if row["technique"] == "bsp"
                else row["error_calibrated"] == pytest.approx(s["error_calibrated"]))
        assert row["term"] == s["attribution"]["term"] and row["attributed"] == s["attribution"]["prediction"]
        assert row["contrib_bandwidth_s"] == s["attribution"]["contributions_s"]["bandwidth"]
    assert dv.available(frame) == ["sweep", "calibrated", "defaults"]
    assert set(frame["term"]) >= {"latency", "bandwidth", "interference", "overhead", "missing term"}


def test_old_records_give_prediction_a_only(old) -> None:
    f = dm.validation_frame(old)
    assert dv.available(f) == ["sweep"] and not dv.has_attribution(f)
    assert f["predicted_calibrated_s"].isna().all() and (f["term"] == "").all()
    # the spread is half the p10..p90 range, the regime the bsp record's exposed communication over its time
    r = old[0]["result"]
    assert f["spread"].iloc[0] == pytest.approx(0.5 * (r["measured_p90_s"] - r["measured_p10_s"]) / r["measured_s"])
    bsp = f[(f["technique"] == "bsp") & (f["environment"] == "1gbit")].iloc[0]
    assert (f[f["environment"] == "1gbit"]["comm_share_bsp"] == bsp.exposed_comm_s / bsp.measured_s).all()
    acc = dv.accuracy_table(f, ["sweep"])
    assert [c for c in acc.columns if c.startswith("(")] == ["(a) sweep median |error|", "(a) sweep max |error|",
                                                               "(a) sweep within spread"]
    assert list(acc["environment"]) == ["100mbit", "1gbit", "2500mbit", "all"]
    assert dv.verdict(dv.ranking(f, ["sweep"])).startswith("**(a) sweep only**: median |error|")


def test_accuracy_ranking_and_winners_equal_the_cli_report(new, frame) -> None:
    keys = dv.available(frame)
    rows = validate.table_rows(new)
    acc = dv.accuracy_table(frame, keys).set_index("environment")
    rank = dv.ranking(frame, keys).set_index("key")
    for key in keys:
        label = dv.SHORT[key]
        for env_name, s in validate.summary(rows, key).items():
            assert acc.loc[env_name, f"{label} median |error|"] == pytest.approx(s["median_abs_error"])
            assert acc.loc[env_name, f"{label} max |error|"] == pytest.approx(s["max_abs_error"])
            assert acc.loc[env_name, f"{label} within spread"] == f"{s['within_spread']}/{s['n']}"
        w = validate.winners(rows, key)
        assert (rank.loc[key, "fastest right"], rank.loc[key, "contests"]) == (w["right"], w["n"]) == (w["right"], 3)
        assert rank.loc[key, "max regret"] == pytest.approx(w["max_regret"])  # what running the pick costs
        picks = dv.winner_cells(frame, keys).set_index("cell")[dv.SHORT[key]]
        for cell, c in w["cells"].items():  # a pick that is not the fastest shows its measured cost beside it
            mark = "within spread" if c["right"] else "wrong"
            assert picks[cell] == c["predicted"] + ("" if c["exact"] else f" ({c['regret']:+.1%}, {mark})")
    assert dv.ranking(frame, keys)["key"].iloc[0] == "calibrated"  # within 3% by construction: it ranks first
    assert "(b) calibrated, technique left out** is closest" in dv.verdict(dv.ranking(frame, keys))
    cells = dv.winner_cells(frame, keys)
    assert list(cells.columns) == ["cell", "measured fastest", "(a) sweep", "(b) calibrated", "(c) defaults"]
    reg = dv.regime_table(frame).set_index("environment")
    assert dict(reg["regime"]) == {"100mbit": "communication-bound", "1gbit": "mixed", "2500mbit": "compute-bound"}


def test_prediction_view_and_cells_mark_errors_within_the_spread(frame) -> None:
    view = dv.prediction_view(frame, "calibrated")
    assert np.allclose(view["predicted_s"].dropna(), frame["predicted_calibrated_s"].dropna())
    assert (view["within_spread"] == (view["error"].abs() <= 0.025)).all()
    cells = dv.cell_table(frame, ["sweep", "calibrated", "defaults"])
    assert {"term", "within spread", "error (a) sweep", "error (b) calibrated", "error (c) defaults"} <= set(cells)
    within = cells[cells["within spread"]]
    assert len(within) and within["term"].str.startswith("within spread: ").all()
    named = cells[~cells["within spread"]]["term"]
    assert named.str.match(r"^(latency|bandwidth|interference|overhead|missing term) [+-]\d+%$").all()
    assert dv.attribution_text("bandwidth", 0.18, False) == "bandwidth +18%"


def test_contributions_figure_stacks_the_terms_and_marks_the_gap(frame) -> None:
    contrib = dv.contributions(frame)
    assert len(contrib) == 5 * len(frame)  # four terms and the gap per cell
    fig = fm.contributions_figure(contrib)
    bars = [tr for tr in fig.data if tr.meta == "points"]
    assert [tr.name for tr in bars] == list(dm.TERMS) and fig.layout.barmode == "relative"
    gap = next(tr for tr in fig.data if tr.meta == "gap")
    assert np.allclose(gap.x, frame["gap_s"] * 1e3)
    bw = next(tr for tr in bars if tr.name == "bandwidth")  # the attributed term is outlined
    assert list(np.asarray(bw.marker.line.width) > 0) == list(frame["term"] == "bandwidth")


def test_scatter_bars_are_the_spread_and_open_markers_are_within_it(frame) -> None:
    view = dv.prediction_view(frame, "calibrated")
    fig = fm.scatter_figure(view)
    pts = [tr for tr in fig.data if tr.meta == "points"]
    assert sum(len(tr.x) for tr in pts) == view["predicted_s"].notna().sum()  # bsp has no (b)
    for tr in pts:
        assert np.allclose(tr.error_x.array, 0.025 * np.asarray(tr.x))
    opened = sum(s.endswith("-open") for tr in pts for s in tr.marker.symbol)
    assert opened == view["within_spread"].sum() > 0


# ===================================================================================== AppTest
def _upload(at: AppTest, records: list[dict]) -> AppTest:
    data = "".join(json.dumps(r, allow_nan=False) + "\n" for r in records).encode()
    at.radio(key="meas_source").set_value("upload").run()
    at.file_uploader(key="meas_upload").set_value(("validation.jsonl", data, "application/json")).run()
    assert not at.exception, at.exception
    return at


def test_page_with_old_records_shows_prediction_a_only(old) -> None:
    at = _upload(open_page("views/measured.py"), old)
    titles = [s.value for s in at.subheader]
    assert titles.index("Which prediction is right") < titles.index("Iteration time: predicted against measured")
    assert len(at.metric) == 1 and at.metric[0].value == "3 of 3"
    assert not [r for r in at.radio if r.key == "meas_prediction"]  # nothing to choose from
    assert "Which term accounts for the error" in titles
    assert not [d for d in at.dataframe if "attributed on" in d.value.columns]
    regimes = next(d.value for d in at.dataframe if "regime" in d.value.columns)
    assert set(regimes["regime"]) == {"communication-bound"}
    assert not at.warning and not at.error


def test_shipped_reference_run_shows_three_predictions() -> None:
    at = open_page("views/measured.py")
    assert not at.error
    # the metrics come ranked by how often each prediction names the fastest technique (an order the data sets)
    assert sorted(m.label for m in at.metric) == sorted(f"fastest predicted right, {validate.report.LABELS[k]}"
                                                        for k in ("calibrated", "sweep", "defaults"))
    regimes = next(d.value for d in at.dataframe if "regime" in d.value.columns)
    assert {"communication-bound", "mixed"} <= set(regimes["regime"])


def test_page_with_new_records_shows_three_predictions_and_the_terms(new) -> None:
    at = _upload(open_page("views/measured.py"), new)
    assert not at.error and not at.warning
    assert [m.label for m in at.metric] == [f"fastest predicted right, {validate.report.LABELS[k]}"
                                            for k in ("calibrated", "sweep", "defaults")]
    acc = next(d.value for d in at.dataframe if "environment" in d.value.columns and "cells" in d.value.columns)
    assert {f"{dv.SHORT[k]} median |error|" for k in dv.SHORT} <= set(acc.columns)
    cells = next(d.value for d in at.dataframe if "attributed on" in d.value.columns)
    assert len(cells) == len(new) and cells["term"].str.len().gt(0).all()
    assert len(at.get("plotly_chart")) == 3  # scatter, contributions, efficiency (no environment records)
    radio = at.radio(key="meas_prediction")
    assert radio.options == ["(a) sweep", "(b) calibrated", "(c) defaults"]
    scatter = chart_specs(at)[0]
    for choice in ("calibrated", "defaults"):
        radio.set_value(choice).run()
        assert not at.exception, at.exception
        assert chart_specs(at)[0] != scatter
    shown = sorted(y for tr in chart_specs(at)[0]["data"] if tr.get("meta") == "points" for y in values(tr["y"]))
    assert np.allclose(shown, sorted(r["result"]["predicted_defaults_s"] * 1e3 for r in new))
    at.radio(key="meas_prediction").set_value("calibrated").run()
    assert any("without prediction (b) calibrated" in w.value for w in at.warning)  # bsp has none


@pytest.mark.skipif(not hasattr(cm, "default_terms"), reason="costmodels.default_terms (issue 16) not there yet")
def test_page_reads_what_compare_writes() -> None:
    ms = 1e-3
    prof = cm.ModelProfile("toy", (cm.Layer("l0", 250, 1000.0, 1 * ms, 2 * ms), cm.Layer("l1", 500, 2000.0, 2 * ms,
                                                                                           4 * ms)),
                           "cpu", "float32", 32, "measured", "hand-written")
    env = cm.Environment(alpha=1e-3, beta=1e-6, gamma=0.0, library="gloo")
    run = results.run_info("gloo", 2, 1, ["cpu", "cpu"], local_world_size=1)

    def it(algorithm: str, t: float, exposed: float | None = None) -> dict:
        res = {"time_s": t, "time_p10_s": 0.95 * t, "time_p90_s": 1.05 * t}
        if exposed is not None:
            res["exposed_comm_s"] = exposed
        return results.record("iteration", {"algorithm": algorithm, "model": "toy", "batch_size": 32,
                                            "world_size": 2, "options": {}}, res, run, "test")

    recs = validate.compare([it("bsp", 0.020, 0.005), it("bsp", 0.021, 0.006), it("wfbp", 0.018), it("fusion", 0.017)],
                            prof, env, "host")
    f = dm.validation_frame(recs)
    assert dv.available(f) == ["sweep", "calibrated", "defaults"] and dv.has_attribution(f)
    at = _upload(open_page("views/measured.py"), recs)
    cells = next(d.value for d in at.dataframe if "attributed on" in d.value.columns)
    assert len(at.metric) == 3 and cells["term"].str.len().gt(0).all()


def test_sidebar_repredictions_carry_prediction_a_only() -> None:
    at = open_page("views/measured.py")
    at.radio(key="meas_predictions").set_value("sidebar").run()
    assert not at.exception, at.exception
    assert len(at.metric) == 1 and "(a) sweep only" in at.metric[0].label
