"""The report's findings (pure): one row per setting from the posteriors summary and the utility table, every bound
with its confidence and delta, mechanisms compared at matched utility, and the plots' labels."""
from __future__ import annotations

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest

from lia_spark.present import charts, findings, plots

matplotlib.use("Agg")

SUMMARY = [
    {"mechanism": "rr", "epsilon": 2.0, "bag_size": 1, "mean_additive_advantage": 0.004, "abs_I_p98": 2.0,
     "share_infinite": 0.0, "rows": 10},
    {"mechanism": "llp", "epsilon": math.nan, "bag_size": 8, "mean_additive_advantage": 0.005, "abs_I_p98": math.inf,
     "share_infinite": 0.76, "rows": 10},
]
UTILITY = [
    {"mechanism": "rr", "epsilon": 2.0, "bag_size": 1, "auc": 0.60, "mean_additive_advantage": 0.9, "abs_I_p98": 9.0},
    {"mechanism": "rr", "epsilon": 4.0, "bag_size": 1, "auc": 0.66, "mean_additive_advantage": 0.015, "abs_I_p98": 4.0},
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


def test_bounds_table_states_confidence_delta_and_validity_of_every_bound():
    summary = {"confidence": 0.95, "delta": 0.0, "gdp_delta": 1e-5, "best": {
        "eps_binomial_bonferroni": {"mean": 1.2, "std": 0.1}, "eps_gdp_paper": {"mean": 1.8, "std": 0.2},
        "mu_gdp_paper": {"mean": 0.4, "std": 0.0}}}
    table = findings.bounds_table(summary).set_index("bound")
    assert list(table.index) == ["eps_binomial_bonferroni", "eps_gdp_paper"]
    assert table.loc["eps_binomial_bonferroni", "delta"] == 0.0 and table.loc["eps_gdp_paper", "delta"] == 1e-5
    assert table.loc["eps_binomial_bonferroni", "valid"] == "valid"
    assert table.loc["eps_gdp_paper", "valid"] == "not a valid bound"
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
