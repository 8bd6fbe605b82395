"""The report's findings (pure): one row per setting from the posteriors summary and the utility table, every bound
with its confidence and delta, mechanisms compared at matched utility, and the plots' labels."""
from __future__ import annotations

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest
from summary_support import audit_summary

from lia_spark.present import charts, findings, plots
from lia_spark.present.point_labels import label_points
from lia_spark.records.audit_summary import BoundStatistics
from lia_spark.records.wording import NO_EVIDENCE, NOT_VALID

matplotlib.use("Agg")

SUMMARY = [
    {"mechanism": "rr", "epsilon": 2.0, "bag_size": 1, "mean_additive_advantage": 0.004, "abs_I_p98": 2.0,
     "share_infinite": 0.0, "rows": 10},
    {"mechanism": "llp", "epsilon": math.nan, "bag_size": 8, "mean_additive_advantage": 0.005, "abs_I_p98": math.inf,
     "share_infinite": 0.76, "rows": 10},
]
UTILITY = [
    {"mechanism": "rr", "epsilon": 2.0, "bag_size": 1, "auc": 0.60, "mean_additive_advantage": 0.9, "abs_I_p98": 9.0},
    {"mechanism": "rr", "epsilon": 4.0, "bag_size": 1, "auc": 0.66, "mean_additive_advantage": 0.015, "abs_I_p98": 4.0,
     "advantage_source": "rr_closed_form"},
    {"mechanism": "llp", "epsilon": math.nan, "bag_size": 8, "auc": 0.57, "mean_additive_advantage": 0.005,
     "abs_I_p98": math.inf},
]


def test_settings_table_joins_summary_advantages_with_utility_auc():
    table = findings.settings_table(SUMMARY, UTILITY).set_index("setting")
    assert list(table.index) == ["llp.epsinf.k8", "rr.eps2.k1", "rr.eps4.k1"]
    assert table.loc["rr.eps2.k1", "mean_additive_advantage"] == 0.004  # the summary wins over the utility table
    assert table.loc["rr.eps2.k1", "auc"] == 0.60
    assert table.loc["rr.eps4.k1", "mean_additive_advantage"] == 0.015 and math.isnan(table.loc["rr.eps4.k1",
                                                                                                 "share_infinite"])
    assert math.isinf(table.loc["llp.epsinf.k8", "abs_I_p98"]) and table.loc["llp.epsinf.k8", "share_infinite"] == 0.76
    # each row says where its advantages come from (findings.ADVANTAGE_SOURCES, the report's legend)
    assert list(table["advantage_source"]) == ["posteriors", "posteriors", "rr_closed_form"]
    assert set(table["advantage_source"]) <= set(findings.ADVANTAGE_SOURCES)


def _stats(mean: float, std: float = 0.0) -> BoundStatistics:
    return BoundStatistics(mean=mean, std=std, min=mean, max=mean, share_positive=float(mean > 0))


def test_bounds_table_lists_the_valid_bounds_first_with_confidence_delta_and_no_evidence_at_zero():
    summary = audit_summary("injected", confidence=0.95, delta=0.0, gdp_delta=1e-5, best={  # sorted, as in the file
        "eps_binomial_bonferroni": _stats(1.2, 0.1), "eps_binomial_paper": _stats(1.9),
        "eps_gdp_bonferroni": _stats(0.0), "eps_gdp_paper": _stats(1.8, 0.2), "mu_gdp_paper": _stats(0.4)})
    table = findings.bounds_table(summary).set_index("bound")
    assert list(table.index) == ["eps_binomial_bonferroni", "eps_gdp_bonferroni", "eps_binomial_paper",
                                 "eps_gdp_paper"]
    assert table.loc["eps_binomial_bonferroni", "delta"] == 0.0 and table.loc["eps_gdp_paper", "delta"] == 1e-5
    assert list(table["valid"]) == [findings.VALID] * 2 + [NOT_VALID] * 2
    assert list(table["note"]) == ["", NO_EVIDENCE, "", ""]  # a valid 0: nothing certified at this size
    assert (table["confidence"] == 0.95).all()


def test_matched_utility_is_the_highest_auc_every_mechanism_reaches(tmp_path):
    table = findings.settings_table(SUMMARY, UTILITY)
    target, at_target = findings.matched_auc(table)
    assert target == pytest.approx(0.57)  # llp's only point; rr's curve runs from 0.60 up
    assert at_target == {"llp": pytest.approx(0.005), "rr": pytest.approx(0.004)}  # rr held at its lowest AUC point
    path = findings.matched_utility_plot(table, path=str(tmp_path / "m.png"))
    assert path and (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    assert findings.matched_utility_plot(table[table["mechanism"] == "rr"], path=str(tmp_path / "x.png")) is None
    interpolated = findings.matched_auc(pd.DataFrame({"mechanism": ["a", "a", "b"], "auc": [0.5, 0.7, 0.6],
                                                      "mean_additive_advantage": [0.0, 0.2, 0.3]}))
    assert interpolated == (pytest.approx(0.6), {"a": pytest.approx(0.1), "b": pytest.approx(0.3)})


def test_rr_cdf_is_a_step_at_epsilon_not_an_empty_line():
    """Every RR row has |I| = eps: the line rises from 0 to 1 at eps (before, one point drew nothing)."""
    x, share = plots.cdf_steps(np.full(50, 2.0))
    assert x[0] == 0.0 and x[-1] > 2.0 and list(share) == [0.0, 1.0, 1.0]
    assert x[1] == 2.0
    x, share = plots.cdf_steps(np.array([1.0, np.inf, np.inf, 3.0]))
    assert list(share) == [0.0, 0.25, 0.5, 0.5]  # ends at the finite share
    assert plots.cdf_steps(np.full(3, np.inf))[0].size == 0


def test_tradeoff_points_are_labelled_with_their_eps_or_k(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    texts = []
    monkeypatch.setattr(plt, "close", lambda figure: texts.extend(t.get_text() for t in figure.axes[0].texts))
    table = pd.DataFrame(UTILITY)
    charts.plot_tradeoff(table, advantage="mean_additive_advantage", path=str(tmp_path / "t.png"))
    assert sorted(texts) == ["eps=2", "eps=4", "k=8"]


def test_a_tradeoff_with_every_setting_hidden_says_so_without_a_legend_warning(tmp_path, monkeypatch):
    import warnings

    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    table = pd.DataFrame(UTILITY).assign(mean_additive_advantage=math.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warned "No artists with labels found to put in legend"
        charts.plot_tradeoff(table, advantage="mean_additive_advantage", path=str(tmp_path / "t.png"))
    axis = figures[0].axes[0]
    assert axis.get_legend() is None and f"{len(table)} settings with unbounded value" in axis.get_xlabel()


def _label_boxes(axis) -> tuple[list, object]:
    """Each point label's own text box (without its leader line) and the legend's, in the pixels of one drawing."""
    from matplotlib.text import Text

    axis.figure.canvas.draw()
    renderer = axis.figure.canvas.get_renderer()
    return ([Text.get_window_extent(text, renderer) for text in axis.texts if text.get_text()],
            axis.get_legend().get_window_extent(renderer))


def test_crowded_point_labels_never_overlap_and_the_left_out_are_counted(tmp_path, monkeypatch):
    """24 settings within 0.001 of each other: each label is placed clear of the others, of every marker and of the
    legend, or left out and counted on the figure."""
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    table = pd.DataFrame([{"mechanism": mechanism, "epsilon": epsilon, "bag_size": 1, "auc": 0.6 + 0.001 * rng.random(),
                           "mean_additive_advantage": 0.001 * rng.random(), "abs_I_p98": 1.0}
                          for mechanism in ("rr", "rr_debiased", "lp_2st")
                          for epsilon in (0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, math.inf)])
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    charts.plot_tradeoff(table, advantage="mean_additive_advantage", path=str(tmp_path / "t.png"))
    axis = figures[0].axes[0]
    boxes, legend = _label_boxes(axis)
    assert len(boxes) > len(table) // 2
    assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.overlaps(b)]
    assert not [box for box in boxes if box.overlaps(legend)]
    left_out = len(table) - len(boxes)
    notes = [text.get_text() for text in figures[0].texts]
    assert notes == ([f"{left_out} point labels left out to avoid overlaps"] if left_out > 1 else
                     ["1 point label left out to avoid overlaps"] if left_out else [])


def test_a_label_with_no_free_place_is_left_out():
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(1.0, 1.0))
    axis.plot([0.0, 1.0], [0.0, 1.0], "o")
    figure.tight_layout()
    long = "a label far wider than the whole figure"
    assert label_points(axis, [(0.5, 0.5), (0.5, 0.5)], ["x", long]) == 1
    assert [text.get_text() for text in axis.texts] == ["x"]
    plt.close(figure)
