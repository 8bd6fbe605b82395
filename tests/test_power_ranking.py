"""The power study's ranking of audit choices and its out-of-sample check (lia_spark.studies.power)."""
from __future__ import annotations

import pandas as pd
import pytest

from lia_spark.studies import power


def _frame() -> pd.DataFrame:
    """Choice A wins on seeds 1-2 in both cells, B on seeds 3-4 (a ranking that does not carry over)."""
    bounds = {("A", "x"): [3.0, 3.2, 1.0, 1.2], ("B", "x"): [2.0, 2.2, 2.0, 2.2],
              ("A", "y"): [1.0, 1.1, 0.1, 0.2], ("B", "y"): [0.5, 0.6, 0.9, 0.8]}
    return pd.DataFrame([{"choice": choice, "cell": cell, "seed": seed, "eps_lb": value}
                         for (choice, cell), values in bounds.items() for seed, value in zip(range(1, 5), values)])


def test_a_choice_ranks_first_when_no_cell_loses_beyond_the_best_choices_noise():
    ranked = power.ranked_choices(_frame()[lambda f: f["seed"] <= 2])
    assert list(ranked.index) == ["A", "B"]
    assert ranked.loc["A", "cells_worse"] == 0 and ranked.loc["B", "cells_worse"] == 2  # 2.1 < 3.1 - 0.141 ...
    assert ranked.loc["A", "mean_over_cells"] == pytest.approx((3.1 + 1.05) / 2)


def test_the_ranking_on_some_seeds_is_re_measured_on_seeds_it_never_saw():
    compared = power.out_of_sample(_frame(), [1, 2], [3, 4]).set_index(["choice", "cell"])
    assert compared.loc[("A", "x"), "rank_in_sample"] == 1 and compared.loc[("A", "x"), "rank_out_of_sample"] == 2
    assert compared.loc[("A", "x"), "in_sample_mean"] == pytest.approx(3.1)
    assert compared.loc[("A", "x"), "out_of_sample_mean"] == pytest.approx(1.1)  # chosen on 1-2, fails on 3-4
    assert compared.loc[("B", "y"), "out_of_sample_std"] == pytest.approx(pd.Series([0.9, 0.8]).std())
    outside = power.out_of_sample(_frame(), [1, 2], [3, 4], top=1, also=("B",)).set_index(["choice", "cell"])
    assert outside.loc[("B", "x"), "rank_in_sample"] == 2  # its place in the whole ranking, not 1 of its own
    assert outside.loc[("B", "x"), "rank_out_of_sample"] == 1 and len(outside) == 4
    with pytest.raises(ValueError, match=r"fresh=\[7\]"):
        power.out_of_sample(_frame(), [1, 2], [7])
