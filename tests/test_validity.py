"""Validity study on randomized response (Kalemaj et al. 2025, arXiv:2511.14084, App. 11), reduced: n = 2e4, 20
independent draws of data, release and game per cell."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lia_spark.kernels import bounds, canary_scores
from lia_spark.studies import validity


def test_mixture_posterior_is_bayes_rule():
    sample = validity.gaussian_mixture(2000, dimension=5, rng=np.random.default_rng(0))
    x = sample.features[:5]
    # Bayes with equal class priors and the two N(e_y, I_5) densities, evaluated independently by scipy
    like = [stats.multivariate_normal(mean=np.eye(5)[y], cov=np.eye(5)).pdf(x) for y in (0, 1)]
    np.testing.assert_allclose(sample.posterior[:5], like[1] / (like[0] + like[1]), rtol=1e-12)
    assert abs(sample.labels.mean() - 0.5) < 0.05
    assert np.mean((sample.posterior > 0.5) == (sample.labels == 1)) > 0.7  # Bayes accuracy Phi(1/sqrt 2) = 0.76


def test_randomized_response_flip_rate():
    labels = np.zeros(100_000, dtype=np.int8)
    released = validity.randomized_response(labels, epsilon=1.0, rng=np.random.default_rng(1))
    assert released.mean() == pytest.approx(1 / (1 + np.e), abs=0.005)  # sd 0.0015


@pytest.fixture(scope="module")
def small_study():
    return validity.study(n=20_000, draws=20, epsilons=(0.5, 8.0), seed=7)


def test_redrawn_study_is_valid_and_informative(small_study):
    summary = validity.summarize_study(small_study)
    cells = validity.study_cells(epsilons=(0.5, 8.0), proxies=validity.PROXIES)
    scores = (*canary_scores.DEFAULT_SCORES, validity.COMBINED)
    assert len(validity.theorem_rows(summary)) == len(cells) * len(scores) * 2 and set(summary["draws"]) == {20}
    logistic_rules = set(summary.loc[summary["proxy"] == "logistic", "tau_rule"])
    assert logistic_rules == {"0", "max_tv"} and set(summary.loc[summary["proxy"] == "true", "tau_rule"]) == {"0"}
    assert small_study.attrs["draws_run"] == 20
    # RR(eps) is eps-label-DP and the null targets are label-blind: at most 5% of draws above eps (or above 0)
    assert validity.invalid_cells(summary).empty, validity.invalid_cells(summary).to_string()
    theorem = validity.theorem_rows(summary)
    bonf = theorem[(theorem["convention"] == "bonferroni") & (theorem["setting"] == "rr")].set_index(
        ["proxy", "epsilon", "score"])
    for proxy in validity.PROXIES:
        # the log ratio finds most of the leak (the difference score with t = 2 falls far behind at eps = 8)
        assert bonf.loc[(proxy, 8.0, "log_ratio"), "ratio_eps"] > 0.6
        assert bonf.loc[(proxy, 8.0, "difference_t2"), "ratio_eps"] < 0.4
        # splitting the confidence over 4 scores costs a little against the best score alone, never gains
        combined = bonf.loc[(proxy, 8.0, validity.COMBINED), "eps_lb_mean"]
        assert 0.9 * bonf.loc[(proxy, 8.0, "log_ratio"), "eps_lb_mean"] < combined
        assert combined <= bonf.loc[(proxy, 8.0, "log_ratio"), "eps_lb_mean"] + 1e-12
        for epsilon in (0.5, 8.0):
            assert 0.5 < bonf.loc[(proxy, epsilon, "log_ratio"), "ratio_ceiling"] < 1.1
    # the paper convention is not a valid 95% bound: under the null it is positive far more often than 5%
    null_paper = summary[(summary["setting"] == "null") & (summary["convention"] == "paper")]
    assert null_paper["share_positive"].mean() > 0.1
    assert validity.pick_default(summary).score == "log_ratio"


def test_every_draw_redraws_data_release_and_game(small_study):
    rr = small_study[(small_study["setting"] == "rr") & (small_study["convention"] == "bonferroni")
                     & (small_study["tau_rule"] == "0")]
    # fresh rows per draw: the expected number of informative canaries (a function of the rows) changes every
    # draw, and so does the refitted logistic proxy's distance to the truth
    assert rr.groupby(["proxy", "epsilon"])["informative"].nunique().min() == 20
    assert rr.loc[rr["proxy"] == "logistic", "proxy_tv"].nunique() == 20
    assert rr.groupby(["proxy", "epsilon", "score"])["eps_lb"].nunique().min() >= 10  # (c', c) are discrete
    # draw d depends on (seed, d) only: a 1-draw study reproduces draw 0 exactly, another seed does not
    again = validity.study(n=20_000, draws=1, null_draws=0, epsilons=(8.0,), proxies=("true",), seed=7)
    first = small_study[(small_study["draw"] == 0) & (small_study["epsilon"] == 8.0)
                        & (small_study["proxy"] == "true")].reset_index(drop=True)
    np.testing.assert_array_equal(again["eps_lb"].to_numpy(), first["eps_lb"].to_numpy())
    other = validity.study(n=20_000, draws=1, null_draws=0, epsilons=(8.0,), proxies=("true",), seed=8)
    assert not np.array_equal(other["eps_lb"].to_numpy(), first["eps_lb"].to_numpy())


def test_oracle_on_informative_canaries_is_right_with_probability_q():
    """The ceiling's premise, by simulation: on canaries with y1 != y0, guessing b' = 0 iff the shown label equals
    the released one is right with probability e^eps / (1 + e^eps), whatever x."""
    rng = np.random.default_rng(3)
    sample = validity.gaussian_mixture(400_000, rng=rng)
    epsilon = 1.5
    released = validity.randomized_response(sample.labels, epsilon=epsilon, rng=rng)
    y1 = (rng.random(len(sample.labels)) < sample.posterior).astype(np.int8)
    b = rng.random(len(y1)) < 0.5
    shown = np.where(b, y1, sample.labels)
    informative = y1 != sample.labels
    right = (shown == released) == ~b
    q = np.exp(epsilon) / (1 + np.exp(epsilon))
    assert right[informative].mean() == pytest.approx(q, abs=0.004)  # sd 0.0011 over ~140k canaries
    assert right[~informative].mean() == pytest.approx(0.5, abs=0.004)  # no information without y1 != y0
    extreme = informative & (np.abs(sample.posterior - 0.5) > 0.4)
    assert right[extreme].mean() == pytest.approx(q, abs=0.02)  # independent of x


def test_ceiling_closed_form():
    n = 10_000
    half = np.full(n, 0.5)
    top = validity.ceiling(half, half, epsilon=2.0, tests=101)
    # E[I] = n (1/4 + 1/4) = 5000 informative canaries, c = round(5000 e^2 / (1 + e^2)) = 4404
    assert (top.guesses, top.correct) == (5000, 4404) and top.informative == pytest.approx(5000.0)
    assert top.bound == bounds.epsilon_lower_bound(canaries=n, guesses=5000, correct=4404,
                                                   confidence=1 - 0.05 / 101)
    sure = validity.ceiling(np.full(n, 0.99), np.full(n, 0.99), epsilon=2.0, tests=101)
    assert sure.guesses == round(n * 2 * 0.99 * 0.01) and sure.bound < top.bound  # fewer informative canaries


def test_pick_default_skips_an_invalid_attack():
    rows = []
    for score, ratio, above, null in (("tight_but_invalid", 0.95, 0.10, 0.0), ("valid", 0.8, 0.0, 0.02),
                                       ("loose", 0.5, 0.0, 0.0), ("null_breaker", 0.9, 0.0, 0.2)):
        common = {"proxy": "true", "tau_rule": "0", "score": score, "convention": "bonferroni"}
        rows.append({**common, "setting": "rr", "share_above": above, "share_positive": 1.0, "ratio_eps": ratio,
                     "ratio_ceiling": ratio})
        rows.append({**common, "setting": "null", "share_above": null, "share_positive": null, "ratio_eps": np.nan,
                     "ratio_ceiling": np.nan})
    choice = validity.pick_default(pd.DataFrame(rows))
    assert choice.score == "valid"
    assert list(choice.evidence["score"]) == ["tight_but_invalid", "null_breaker", "valid", "loose"]
