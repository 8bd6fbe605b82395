"""Several score scores in one audit (lia_spark.kernels.audit.count_correct_scores / evaluate_scores), checked against a
game played in plain Python loops and bounds recomputed point by point at the split confidence."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lia_spark.kernels import audit, audit_sweep, bounds, canary_scores, gdp, hashing

STUDY_SCORES = canary_scores.DEFAULT_SCORES
TINY = np.finfo(np.float64).tiny


def _canaries(m: int, *, seed: int):
    """A leaking target (pulled toward the true label) on some rows, label-blind on others, plus exact ties."""
    rng = np.random.default_rng(seed)
    row_ids = rng.choice(10**12, size=m, replace=False).astype(np.int64)
    proxy = rng.uniform(0.02, 0.98, size=m)
    label = (rng.random(m) < proxy).astype(np.int8)
    pull = np.where(rng.random(m) < 0.6, rng.uniform(0.3, 0.95, size=m), 0.0)
    target = proxy + pull * (label - proxy)
    target[:6] = proxy[:6]  # s = 0 for both labels: order by the tie hash only
    target[6:12], proxy[6:12] = 0.7, 0.5  # repeated equal keys
    return row_ids, label, target, proxy


def _naive_score(score: str, target: float, proxy: float, shown: int) -> float:
    """The score of showing ``shown``, written out with Python floats (module docstring of lia_spark.kernels.audit)."""
    m_y = target if shown == 1 else 1.0 - target
    p_y = proxy if shown == 1 else 1.0 - proxy
    if score == "log_ratio":
        return math.log(max(m_y, TINY)) - math.log(max(p_y, TINY))
    t = float(score[len("difference_t"):])
    return (m_y - p_y) * (1.0 - p_y) ** t


def _naive_counts(row_ids, label, target, proxy, *, seed, repetitions, guesses, score):
    """Play Algorithm 2 row by row: draw b and y1, show y^b, score, rank by (|s| desc, tie hash), count."""
    m = len(row_ids)
    out = np.zeros((repetitions, len(guesses)), dtype=np.int64)
    for r in range(repetitions):
        rows = []
        for i in range(m):
            one_id = row_ids[i:i + 1]
            b = int(hashing.bernoulli(seed, audit.hidden_bit_purpose(r), one_id, 0.5)[0])
            y1 = int(hashing.bernoulli(seed, audit.counterfactual_purpose(r), one_id, proxy[i])[0])
            shown = int(label[i]) if b == 0 else y1
            s = _naive_score(score, float(target[i]), float(proxy[i]), shown)
            guess = 0 if s > 0 else 1
            tie = int(hashing.hash_bits(seed, audit.TIE_BREAK_PURPOSE, one_id)[0])
            rows.append((-abs(s), tie, guess == b))
        rows.sort(key=lambda row: (row[0], row[1]))
        for j, k in enumerate(guesses):
            out[r, j] = sum(row[2] for row in rows[:k])
    return out


def test_counts_of_every_score_equal_a_naive_game():
    row_ids, label, target, proxy = _canaries(90, seed=1)
    guesses = np.arange(1, 91)
    counts = audit.count_correct_scores(row_ids, label, target, proxy, seed=4, repetitions=3, guesses=guesses,
                                         scores=STUDY_SCORES)
    assert list(counts) == list(STUDY_SCORES)
    for score in STUDY_SCORES:
        naive = _naive_counts(row_ids, label, target, proxy, seed=4, repetitions=3, guesses=guesses, score=score)
        np.testing.assert_array_equal(counts[score], naive, err_msg=score)
    # the scores really differ on this game (otherwise the test could not tell them apart)
    assert len({counts[score].tobytes() for score in STUDY_SCORES}) == len(STUDY_SCORES)


def test_best_bound_over_attacks_equals_naive_maximum_at_split_confidence():
    m, repetitions = 120, 3
    row_ids, label, target, proxy = _canaries(m, seed=2)
    guesses = audit.guess_grid(m)
    k = len(guesses)
    counts = audit.count_correct_scores(row_ids, label, target, proxy, seed=5, repetitions=repetitions,
                                         guesses=guesses, scores=STUDY_SCORES)
    result = audit_sweep.evaluate_scores(counts, guesses, canaries=m, families=("binomial", "gdp"),
                                    conventions=("bonferroni", "paper"))
    level = 1.0 - 0.05 / (len(STUDY_SCORES) * k)
    assert result.tests == len(STUDY_SCORES) * k
    assert result.levels == {"bonferroni": pytest.approx(level, abs=1e-15), "paper": 0.95}
    assert audit_sweep.score_confidence(0.95, convention="bonferroni", scores=4, points=101) == pytest.approx(
        1 - 0.05 / 404, abs=1e-15)
    naive_counts = {score: _naive_counts(row_ids, label, target, proxy, seed=5, repetitions=repetitions,
                                          guesses=guesses, score=score) for score in STUDY_SCORES}
    for convention, conf in (("bonferroni", level), ("paper", 0.95)):
        for r in range(repetitions):
            naive = {}
            for score in STUDY_SCORES:
                for j in range(k):
                    c = int(naive_counts[score][r, j])
                    naive[score, j] = (
                        bounds.epsilon_lower_bound(canaries=m, guesses=int(guesses[j]), correct=c, confidence=conf),
                        gdp.gdp_mu_lower_bound(canaries=m, guesses=int(guesses[j]), correct=c, confidence=conf))
            best_eps = max(value[0] for value in naive.values())
            best_mu = max(value[1] for value in naive.values())
            assert result.best[f"eps_binomial_{convention}"][r] == pytest.approx(best_eps, abs=1e-12)
            assert result.best[f"mu_gdp_{convention}"][r] == pytest.approx(best_mu, abs=2e-7)
            winner = result.best_scores[f"eps_binomial_{convention}"][r]
            at = int(np.searchsorted(guesses, result.best_guesses[f"eps_binomial_{convention}"][r]))
            if best_eps > 0:
                assert naive[winner, at][0] == pytest.approx(best_eps, abs=1e-12)
            else:
                assert winner == "" and result.best_guesses[f"eps_binomial_{convention}"][r] == 0
            for score in STUDY_SCORES:
                own = max(naive[score, j][0] for j in range(k))
                assert result.per_score[score].best[f"eps_binomial_{convention}"][r] == pytest.approx(own, abs=1e-12)
    assert result.best["eps_binomial_bonferroni"].max() > 0.5  # the leak is found: the comparison is not all zeros


def test_split_confidence_is_strictly_more_conservative_than_one_attack():
    m = 3000
    row_ids, label, target, proxy = _canaries(m, seed=3)
    guesses = audit.guess_grid(m)
    counts = audit.count_correct_scores(row_ids, label, target, proxy, seed=6, repetitions=4, guesses=guesses,
                                         scores=("difference_t2",))
    alone = audit_sweep.evaluate_sweep(counts["difference_t2"], guesses, canaries=m, families=("binomial",),
                                 table_families=(), conventions=("bonferroni",))
    together = audit_sweep.evaluate_scores({"difference_t2": counts["difference_t2"], "copy": counts["difference_t2"]},
                                      guesses, canaries=m, families=("binomial",), conventions=("bonferroni",))
    # the same counts tested twice pay for two tests per point: 1 - 0.05 / (2 k) per test, a smaller bound
    assert np.all(together.best["eps_binomial_bonferroni"] < alone.best["eps_binomial_bonferroni"])
    halved = audit_sweep.evaluate_sweep(counts["difference_t2"], guesses, canaries=m, families=("binomial",),
                                  table_families=(), conventions=("bonferroni",), tests=2 * len(guesses))
    np.testing.assert_array_equal(together.best["eps_binomial_bonferroni"], halved.best["eps_binomial_bonferroni"])


def test_single_attack_api_is_unchanged():
    row_ids, label, target, proxy = _canaries(400, seed=7)
    guesses = audit.guess_grid(400)
    counts = audit.count_correct_scores(row_ids, label, target, proxy, seed=8, repetitions=5, guesses=guesses,
                                         scores=("difference_t0", "difference_t2", "log_ratio"))
    for score, t in (("difference", 0.0), ("difference", 2.0), ("log_ratio", 2.0)):
        alone = audit.count_correct(row_ids, label, target, proxy, seed=8, repetitions=5, guesses=guesses,
                                    kind=score, t=t)
        np.testing.assert_array_equal(alone, counts[canary_scores.score_name(score, t)])


def test_attack_names():
    assert canary_scores.score_name("difference", 2.0) == "difference_t2"
    assert canary_scores.score_name("difference", 0.5) == "difference_t0.5"
    assert canary_scores.score_name("log_ratio", 7.0) == "log_ratio"
    assert canary_scores.parse_score("difference_t8") == canary_scores.Score("difference", 8.0)
    odd = canary_scores.Score("difference", 0.1234567891)
    assert canary_scores.parse_score(odd.name) == odd  # names round-trip exactly
    for bad in ("difference", "difference_t", "difference_t-1", "difference_tinf", "ratio", "log_ratio_t2"):
        with pytest.raises(ValueError, match="score"):
            canary_scores.parse_score(bad)
    with pytest.raises(ValueError, match="distinct"):
        canary_scores.resolve_scores(["log_ratio", "difference_t2", "difference_t2.0"])
    with pytest.raises(ValueError, match="at least one"):
        canary_scores.resolve_scores([])
    with pytest.raises(ValueError, match="same"):
        audit_sweep.evaluate_scores({"a": np.zeros((2, 3)), "b": np.zeros((3, 3))}, [1, 2, 3], canaries=3)


def test_label_blind_target_rarely_gives_a_positive_combined_bound():
    """Null: M' = the true label distribution and M label-blind; P[best bound > 0] <= 5% for the split audit."""
    rng = np.random.default_rng(9)
    m, repetitions = 5000, 100
    row_ids = np.arange(m, dtype=np.int64)
    proxy = rng.uniform(0.05, 0.95, size=m)
    label = (rng.random(m) < proxy).astype(np.int8)
    target = np.clip(proxy + rng.normal(0.0, 0.1, size=m), 0.001, 0.999)  # depends on x only, never on y
    guesses = audit.guess_grid(m)
    counts = audit.count_correct_scores(row_ids, label, target, proxy, seed=10, repetitions=repetitions,
                                         guesses=guesses)
    result = audit_sweep.evaluate_scores(counts, guesses, canaries=m, families=("binomial",))
    assert np.mean(result.best["eps_binomial_bonferroni"] > 0) <= 0.05
    assert np.mean(result.best["eps_binomial_paper"] > 0) > np.mean(result.best["eps_binomial_bonferroni"] > 0)
