"""The audit game kernel (docs/math.md §5): grid, scores, draws, counts from one sort, bounds over the sweep."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from lia_spark.kernels import audit, audit_sweep, bounds, canary_scores, hashing


def _canaries(m: int, *, rng: np.random.Generator, tied_rows: int = 0):
    """Rows with true labels drawn from the proxy (D = D'), a target leaning toward the true label, ties."""
    row_ids = rng.choice(10**12, size=m, replace=False).astype(np.int64)
    proxy = rng.uniform(0.05, 0.95, size=m)
    label = (rng.random(m) < proxy).astype(np.int8)
    target = np.clip(proxy + 0.25 * (2 * label - 1) * rng.random(m), 0.001, 0.999)
    target[:tied_rows] = proxy[:tied_rows]  # |s| = 0 for both labels: every tie is broken by the hash
    target[tied_rows:2 * tied_rows] = np.round(target[tied_rows:2 * tied_rows], 1)  # repeated values
    proxy[tied_rows:2 * tied_rows] = 0.5
    return row_ids, label, target, proxy


def test_guess_grid_is_percent_steps_plus_extra_share():
    grid = audit.guess_grid(1000)
    assert grid[0] == 1 and grid[-1] == 1000 and len(grid) == 101
    np.testing.assert_array_equal(grid[1:], np.arange(10, 1001, 10))
    assert len(audit.guess_grid(50)) == 50 and audit.guess_grid(50)[0] == 1  # 0.1% and 1%, 2% merge at small m
    np.testing.assert_array_equal(audit.guess_grid(200, step_percent=25.0, extra_share=0.0), [50, 100, 150, 200])


def test_geometric_grid_spreads_points_evenly_in_log_guesses():
    grid = audit.geometric_grid(10_000)
    np.testing.assert_array_equal(grid, [10, 18, 32, 56, 100, 178, 316, 562, 1000, 1778, 3162, 5623, 10000])
    np.testing.assert_array_equal(audit.geometric_grid(9577)[[0, -1]], [17, 9577])  # m itself always, >= 10
    np.testing.assert_array_equal(audit.geometric_grid(7), [7])  # fewer canaries than the smallest count: m
    np.testing.assert_array_equal(audit.geometric_grid(100, points_per_decade=1, smallest=1), [1, 10, 100])
    assert len(audit.geometric_grid(10**9)) == 33  # 8 decades x 4 + 1: the Bonferroni split grows like log m
    for kwargs in ({"canaries": 0}, {"canaries": 10, "points_per_decade": 0}, {"canaries": 10, "smallest": 0}):
        with pytest.raises(ValueError, match=list(kwargs)[-1]):
            audit.geometric_grid(**kwargs)


def test_sweep_grid_follows_the_audit_section():
    from lia_spark.run.model_sections import AuditConfig

    np.testing.assert_array_equal(audit.sweep_grid(1000, AuditConfig()), audit.geometric_grid(1000))
    np.testing.assert_array_equal(audit.sweep_grid(1000, AuditConfig(sweep="linear", sweep_step_percent=25.0,
                                                                     extra_guess_share=0.0)), [250, 500, 750, 1000])


@pytest.mark.parametrize("canaries", [50, 1000, 9577, 200_000])
@pytest.mark.parametrize("claimed", [0.01, 0.5, 2.0, 8.0, 50.0, float("inf")])
def test_the_ceiling_is_the_audits_own_bound_at_the_largest_accuracy_the_claim_allows(canaries, claimed):
    guesses = audit.geometric_grid(canaries)
    tests = 3 * len(guesses)  # as if three scores were tried
    top = audit_sweep.ceiling(canaries=canaries, guesses=guesses, claimed_epsilon=claimed, tests=tests)
    accuracy = 1.0 if claimed == float("inf") else np.exp(claimed) / (1.0 + np.exp(claimed))
    correct = np.floor(accuracy * guesses + 0.5).astype(np.int64)
    level = 1.0 - 0.05 / tests
    expected = [bounds.epsilon_lower_bound(canaries=canaries, guesses=int(g), correct=int(c), confidence=level)
                for g, c in zip(guesses, correct)]
    assert top.eps_lb == pytest.approx(max(expected), rel=1e-12, abs=1e-12) and top.accuracy == pytest.approx(accuracy)
    assert np.isfinite(top.eps_lb) and 0.0 <= top.eps_lb <= (claimed if np.isfinite(claimed) else np.inf)
    assert top.guesses == (guesses[int(np.argmax(expected))] if max(expected) > 0 else 0)


@pytest.mark.parametrize("claimed", [0.1, 1.0, 2.0, 4.0])
def test_the_ceilings_95th_percentile_is_the_binomial_quantiles_bound_and_stays_below_the_claim(claimed):
    """One sweep point: the bound grows with the count, so the 95th percentile of an exact-claim attacker's bound
    is the bound at the 95th percentile of Binomial(c', q), within the simulation's noise (its 93rd-97th
    percentiles; 1000 draws: the 95th percentile's standard error is 0.7 percentile points). Over a whole sweep
    (Bonferroni) the bound is valid, so the exact-claim attacker's 95th percentile stays below the claim."""
    m, level = 5000, 0.95
    accuracy = np.exp(claimed) / (1.0 + np.exp(claimed))
    top = audit_sweep.ceiling(canaries=m, guesses=[m], claimed_epsilon=claimed, tests=1)

    def bound_at(quantile: float) -> float:
        count = int(stats.binom.ppf(quantile, m, accuracy))
        return bounds.epsilon_lower_bound(canaries=m, guesses=m, correct=count, confidence=level)

    assert bound_at(0.93) <= top.eps_lb_95 <= bound_at(0.97) and top.eps_lb <= top.eps_lb_95
    sweep = audit.geometric_grid(m)
    whole = audit_sweep.ceiling(canaries=m, guesses=sweep, claimed_epsilon=claimed, tests=len(sweep))
    assert whole.eps_lb <= whole.eps_lb_95 < claimed
    assert whole == audit_sweep.ceiling(canaries=m, guesses=sweep, claimed_epsilon=claimed, tests=len(sweep))
    certain = audit_sweep.ceiling(canaries=m, guesses=sweep, claimed_epsilon=float("inf"), tests=len(sweep))
    assert certain.eps_lb_95 == certain.eps_lb  # every guess right: nothing random


def test_exact_claim_counts_are_nested_binomials_in_the_sweeps_order():
    guesses = np.array([400, 100, 100, 1600])  # unsorted, with a repeat
    counts = audit_sweep.exact_claim_counts(guesses, 0.8, draws=4000)
    assert counts.shape == (4000, 4) and np.array_equal(counts[:, 1], counts[:, 2])
    assert np.all((counts[:, 1] <= counts[:, 0]) & (counts[:, 0] <= counts[:, 3])) and np.all(counts <= guesses)
    assert np.all(counts[:, 0] - counts[:, 1] <= 300)  # the 300 guesses between the top 100 and the top 400
    for column, guessed in enumerate(guesses):  # means and variances of Binomial(c', 0.8): 6 standard errors
        mean, variance = 0.8 * guessed, 0.8 * 0.2 * guessed
        assert abs(counts[:, column].mean() - mean) < 6 * np.sqrt(variance / 4000)
        assert abs(counts[:, column].var() / variance - 1) < 6 * np.sqrt(2 / 4000)


def test_the_ceiling_grows_with_the_canaries_and_the_claim():
    def ceiling(m, eps):
        return audit_sweep.ceiling(canaries=m, guesses=audit.geometric_grid(m), claimed_epsilon=eps,
                                   tests=len(audit.geometric_grid(m))).eps_lb
    assert ceiling(100, 2.0) < ceiling(10_000, 2.0) < ceiling(1_000_000, 2.0) < 2.0
    assert ceiling(10_000, 1.0) < ceiling(10_000, 4.0) < ceiling(10_000, float("inf"))
    unknown = audit_sweep.ceiling(canaries=500, guesses=[500], claimed_epsilon=float("nan"), tests=1)
    assert unknown.accuracy == 1.0 and unknown.to_dict()["claimed_epsilon"] is None
    with pytest.raises(ValueError, match="claimed_epsilon"):
        audit_sweep.ceiling(canaries=500, guesses=[500], claimed_epsilon=-1.0, tests=1)


@pytest.mark.parametrize("kwargs", [{"canaries": 0}, {"canaries": 10, "step_percent": 0.0},
                                    {"canaries": 10, "extra_share": 1.5}])
def test_guess_grid_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=list(kwargs)[-1]):
        audit.guess_grid(**kwargs)


def test_scores_closed_form():
    # by hand: shown 1, M = 0.9, M' = 0.6: (0.9 - 0.6) * 0.4^2 = 0.048; shown 0: (0.1 - 0.4) * 0.6^2 = -0.108
    np.testing.assert_allclose(canary_scores.label_scores(np.array([0.9, 0.9]), np.array([0.6, 0.6]), np.array([1, 0])),
                               [0.048, -0.108], rtol=1e-12)
    np.testing.assert_allclose(canary_scores.label_scores(np.array([0.9]), np.array([0.6]), 1, t=0.0), [0.3],
                               rtol=1e-12)
    np.testing.assert_allclose(canary_scores.label_scores(np.array([0.9]), np.array([0.6]), 0, kind="log_ratio"),
                               [np.log(0.1 / 0.4)], rtol=1e-12)
    with pytest.raises(ValueError, match="score"):
        canary_scores.label_scores(np.array([0.5]), np.array([0.5]), 1, kind="other")


def test_draws_have_the_game_distribution():
    m, repetitions = 20_000, 5
    proxy = np.linspace(0.0, 1.0, m)
    label = np.zeros(m, dtype=np.int8)
    hidden, shown = audit.game_draws(np.arange(m), label, proxy, seed=1, repetitions=repetitions)
    assert abs(hidden.mean() - 0.5) < 0.01  # sd 0.0016
    np.testing.assert_array_equal(shown[~hidden], False)  # b = 0 shows the true label (0 here)
    # b = 1 shows y1 ~ Bernoulli(M'): mean over rows of proxy is 0.5, and P(y1 = 1) rises with M'
    y1 = shown[hidden]
    assert abs(y1.mean() - 0.5) < 0.015
    assert shown[:, proxy > 0.9][hidden[:, proxy > 0.9]].mean() > 0.9
    again, _ = audit.game_draws(np.arange(m)[::-1], label, proxy[::-1], seed=1, repetitions=repetitions)
    np.testing.assert_array_equal(again[:, ::-1], hidden)  # keyed on row id, not position


@pytest.mark.parametrize("repetitions", [1, 64, 70, 130])
def test_draws_equal_the_keyed_bernoulli_definition(repetitions):
    """The numba game equals y1 = Bernoulli(M') and b = Bernoulli(1/2) drawn with hashing.bernoulli per repetition."""
    rng = np.random.default_rng(5)
    row_ids, label, _, proxy = _canaries(3000, rng=rng)
    proxy[:50] = 0.0
    proxy[50:100] = 1.0
    hidden, shown = audit.game_draws(row_ids, label, proxy, seed=9, repetitions=repetitions)
    for r in range(repetitions):
        y1 = hashing.bernoulli(9, audit.counterfactual_purpose(r), row_ids, proxy) == 1
        b = hashing.bernoulli(9, audit.hidden_bit_purpose(r), row_ids, 0.5) == 1
        np.testing.assert_array_equal(hidden[r], b)
        np.testing.assert_array_equal(shown[r], np.where(b, y1, label == 1))


def test_candidates_survive_bytes_subset_and_concatenation():
    rng = np.random.default_rng(2)
    row_ids, label, target, proxy = _canaries(500, rng=rng)
    found = audit.candidates(row_ids, label, target, proxy, seed=1, repetitions=70)
    halves = [found.subset(np.arange(len(found)) < 300), found.subset(np.arange(300, len(found)))]
    again = audit.Candidates.concatenate([audit.Candidates.from_bytes(half.to_bytes(), repetitions=70)
                                          for half in halves])
    for name in ("abs_score", "tie", "label", "active", "correct"):
        np.testing.assert_array_equal(getattr(again, name), getattr(found, name))
    with pytest.raises(ValueError, match="whole number"):
        audit.Candidates.from_bytes(found.to_bytes()[:-1], repetitions=70)


def test_range_ids_count_boundaries_at_or_before_each_key():
    """Brute force of the definition, with boundaries sharing |s| (ties broken by the tie hash)."""
    rng = np.random.default_rng(4)
    abs_score = rng.choice([0.0, 0.25, 0.5, 1.0], size=2000)
    tie = rng.integers(0, 2**64, size=2000, dtype=np.uint64)
    order = audit.candidate_order(abs_score, tie, np.zeros(2000, dtype=np.int8))
    boundary_abs, boundary_tie = abs_score[order][::97], tie[order][::97]
    expected = [sum((a > s) or (a == s and h <= t) for a, h in zip(boundary_abs, boundary_tie))
                for s, t in zip(abs_score, tie)]
    np.testing.assert_array_equal(audit.range_ids(abs_score, tie, boundary_abs, boundary_tie), expected)


def test_unpack_and_totals_read_the_packed_layout():
    bits = np.random.default_rng(0).random((130, 7)) < 0.5
    words = np.zeros((7, 3), dtype=np.uint64)  # bit r % 64 of word r // 64 holds repetition r
    for r, row in zip(*np.nonzero(bits)):
        words[row, r // 64] |= np.uint64(1) << np.uint64(r % 64)
    np.testing.assert_array_equal(audit.unpack_bits(words, 130), bits)
    np.testing.assert_array_equal(audit.bit_totals(words, repetitions=130), bits.sum(axis=1))


@pytest.mark.parametrize("score", ["difference", "log_ratio"])
def test_counts_from_one_sort_equal_brute_force_recount(score):
    rng = np.random.default_rng(11)
    m, repetitions = 300, 4
    row_ids, label, target, proxy = _canaries(m, rng=rng, tied_rows=40)
    every = np.arange(1, m + 1)
    counts = audit.count_correct(row_ids, label, target, proxy, seed=3, repetitions=repetitions, guesses=every,
                                 kind=score)
    hidden, shown = audit.game_draws(row_ids, label, proxy, seed=3, repetitions=repetitions)
    tie = audit.tie_hashes(row_ids, seed=3)
    for r in range(repetitions):
        s = canary_scores.label_scores(target, proxy, shown[r].astype(int), kind=score)
        correct = np.where(s > 0, 0, 1) == hidden[r]
        ranked = sorted(range(m), key=lambda i: (-abs(s[i]), int(tie[i])))
        for k in every:  # recount the top k rows from scratch for every k
            assert counts[r, k - 1] == sum(correct[i] for i in ranked[:k])


def test_count_correct_rejects_bad_input():
    rng = np.random.default_rng(0)
    row_ids, label, target, proxy = _canaries(20, rng=rng)
    with pytest.raises(ValueError, match="guesses"):
        audit.count_correct(row_ids, label, target, proxy, seed=0, repetitions=1, guesses=[21])
    with pytest.raises(ValueError, match="target_prediction"):
        audit.count_correct(row_ids, label, target + 1.0, proxy, seed=0, repetitions=1, guesses=[1])
    with pytest.raises(ValueError, match="label"):
        audit.count_correct(row_ids, label + 2, target, proxy, seed=0, repetitions=1, guesses=[1])


def test_label_blind_target_gives_zero_in_95_percent_of_repetitions():
    rng = np.random.default_rng(5)
    m, repetitions = 10_000, 100
    row_ids, label, _, proxy = _canaries(m, rng=rng)
    grid = audit.guess_grid(m)
    for target in (proxy, np.clip(proxy + rng.normal(0, 0.05, m), 0.001, 0.999)):  # M = M', and M blind to y
        counts = audit.count_correct(row_ids, label, target, proxy, seed=9, repetitions=repetitions, guesses=grid)
        sweep = audit_sweep.evaluate_sweep(counts, grid, canaries=m, families=("binomial", "gdp"), table_families=(),
                                     conventions=("bonferroni",))
        assert np.mean(sweep.best["eps_binomial_bonferroni"] == 0.0) >= 0.95
        assert np.mean(sweep.best["eps_gdp_bonferroni"] == 0.0) >= 0.95


def test_memorizing_target_gives_a_large_bound():
    m = 20_000
    rng = np.random.default_rng(6)
    row_ids = np.arange(m, dtype=np.int64)
    proxy = np.full(m, 0.01)
    label = (rng.random(m) < proxy).astype(np.int8)
    target = np.where(label == 1, 1.0 - 1e-6, 1e-6)
    grid = audit.guess_grid(m)
    counts = audit.count_correct(row_ids, label, target, proxy, seed=9, repetitions=10, guesses=grid)
    # the top |s| rows show y^b = 1 = y0 ((1 - 0.01)^3), and b = 0 there with probability 1 / (1 + 0.01): the game
    # caps the score's accuracy at 0.990 (eps = log 99 = 4.6); at c' = 200 (1%) nearly every guess is right
    assert counts[:, 1].mean() / grid[1] > 0.97
    sweep = audit_sweep.evaluate_sweep(counts, grid, canaries=m, families=("binomial", "gdp"), table_families=(),
                                 conventions=("bonferroni",))
    # c = 200 of 200 at confidence 1 - 0.05/101 gives q >= 0.000495^(1/200), eps >= 3.66; one miss: eps >= 3.1
    assert sweep.best["eps_binomial_bonferroni"].min() > 2.5
    assert sweep.best["eps_binomial_bonferroni"].mean() > 2.9
    assert sweep.best["eps_gdp_bonferroni"].min() > 2.5


def test_sweep_best_matches_per_point_maximum_and_conventions_order():
    rng = np.random.default_rng(7)
    m = 2000
    grid = audit.guess_grid(m)
    correct = rng.binomial(np.broadcast_to(grid, (3, len(grid))), 0.6)
    sweep = audit_sweep.evaluate_sweep(correct, grid, canaries=m, families=("binomial", "gdp"),
                                 table_families=("binomial", "gdp"))
    for key, per_point in sweep.per_guess.items():
        np.testing.assert_allclose(per_point.max(axis=1), sweep.best[key], atol=1e-5)
    assert np.all(sweep.best["eps_binomial_bonferroni"] <= sweep.best["eps_binomial_paper"])
    assert np.all(sweep.best["eps_gdp_bonferroni"] <= sweep.best["eps_gdp_paper"])
    first = bounds.epsilon_lower_bound(canaries=m, guesses=int(grid[3]), correct=int(correct[0, 3]),
                                       confidence=1 - 0.05 / len(grid))
    assert sweep.per_guess["eps_binomial_bonferroni"][0, 3] == pytest.approx(first, abs=1e-12)
    assert audit_sweep.convention_confidence(0.95, convention="bonferroni", points=101) == pytest.approx(1 - 0.05 / 101)
    summary = audit_sweep.summarize(sweep.best)["eps_binomial_paper"]
    assert summary["mean"] == pytest.approx(sweep.best["eps_binomial_paper"].mean())
