"""Membership-inference baseline (docs/math.md §5.8): counts by hand, validity under the null, power."""
from __future__ import annotations

import numpy as np

from lia_spark.kernels import audit, audit_sweep, membership
from lia_spark.names import BINOMIAL, BONFERRONI, bound_key

KEY = bound_key(BINOMIAL, BONFERRONI)


def test_correct_guesses_by_hand():
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    member = np.array([True, False, True, False, False, True])
    ids = np.arange(6)
    # c'=1: top 1 member (1); c'=2: + bottom 1 non-member? row 5 is a member (1); c'=4: top 2 (1) + bottom 2 (1);
    # c'=6: top 3 (2) + bottom 3 (2)
    np.testing.assert_array_equal(membership.correct_guesses(scores, member, ids, np.array([1, 2, 4, 6]), seed=0),
                                  [1, 1, 2, 4])


def test_score_is_the_calibrated_loss_difference():
    label, target, proxy = np.array([1, 0]), np.array([0.9, 0.2]), np.array([0.6, 0.5])
    expected = -np.log([0.6, 0.5]) + np.log([0.9, 0.8])  # loss(M') - loss(M)
    np.testing.assert_allclose(membership.membership_scores(label, target, proxy), expected)


def _best_bounds(scores_of, *, repetitions: int, candidates: int) -> np.ndarray:
    guesses = audit.guess_grid(candidates, step_percent=5.0, extra_share=0.0)
    correct = []
    for repetition in range(repetitions):
        ids = np.arange(candidates, dtype=np.int64) + repetition * candidates
        member = membership.membership(ids, key=repetition)
        correct.append(membership.correct_guesses(scores_of(member, repetition), member, ids, guesses, seed=1))
    sweep = audit_sweep.evaluate_sweep(np.array(correct), guesses, canaries=candidates, families=(BINOMIAL,),
                                 table_families=(), conventions=(BONFERRONI,))
    return sweep.best[KEY]


def test_membership_blind_target_gives_no_bound():
    # scores independent of membership (a target that ignores which rows it was trained on)
    blind = _best_bounds(lambda member, r: np.random.default_rng(r).standard_normal(member.size),
                         repetitions=100, candidates=2000)
    assert np.mean(blind == 0.0) >= 0.95


def test_memorizing_target_gives_a_large_bound():
    memorizing = _best_bounds(lambda member, r: member + 0.05 * np.random.default_rng(r).standard_normal(member.size),
                              repetitions=3, candidates=2000)
    assert memorizing.min() > 3.0
