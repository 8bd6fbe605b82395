"""Membership-inference baseline audit (docs/math.md §5.8; [KMB+25] sec. 6.5, [WGC+22], [SNJ23]).

Pure (numpy): 2m candidate rows (the training rows with the smallest hash of (K, row_id)), each a member of the
target's training set with probability 1/2 by a hash of (K, row_id), K the audit's secret key
(:class:`lia_spark.kernels.hashing.AuditKey`; a study may pass an integer seed); the calibrated score
s = loss(M', x, y) - loss(M, x, y) with log-loss, which is the audit's log-ratio score log M(x)[y] - log M'(x)[y] at
the true label (:func:`lia_spark.kernels.canary_scores.label_scores`). The attacker orders the candidates by s (ties
by a row-id hash), guesses "member" on the ceil(c'/2) highest and "non-member" on the floor(c'/2) lowest and
abstains elsewhere; the counts go through the same bounds, sweep and conventions as the label-inference audit
(:func:`lia_spark.kernels.audit_sweep.evaluate_sweep`, m = 2m candidates).
"""
from __future__ import annotations

import numpy as np

from lia_spark.kernels import audit, canary_scores, hashing
from lia_spark.names import LOG_RATIO

MEMBER_PURPOSE, CANDIDATE_PURPOSE = "audit/membership", "audit/membership-candidate"


def candidate_mask(row_ids: np.ndarray, *, candidates: int, key: hashing.Seed) -> np.ndarray:
    """True on the 2m = ``candidates`` rows of ``row_ids`` with the smallest hash (key, row_id).

    Raises:
        ValueError: unless 2 <= candidates < len(row_ids) (the target needs rows beyond the candidates).
    """
    row_ids = np.asarray(row_ids, dtype=np.int64)
    if not 2 <= candidates < row_ids.size:
        raise ValueError(f"audit.membership_candidates must be in [2, {row_ids.size}) (the target's training rows), "
                         f"got {candidates}")
    return hashing.smallest_hashes(key, CANDIDATE_PURPOSE, row_ids, candidates)


def membership(row_ids: np.ndarray, *, key: hashing.Seed) -> np.ndarray:
    """True where the candidate is included in the target's training set: Bernoulli(1/2) by (key, row_id)."""
    return hashing.bernoulli(key, MEMBER_PURPOSE, np.asarray(row_ids, dtype=np.int64), 0.5).astype(bool)


def membership_scores(label: np.ndarray, target: np.ndarray, proxy: np.ndarray) -> np.ndarray:
    """s = loss(M', x, y) - loss(M, x, y) = log M(x)[y] - log M'(x)[y] (log-loss, difficulty calibration)."""
    return canary_scores.label_scores(np.asarray(target, np.float64), np.asarray(proxy, np.float64),
                              np.asarray(label), kind=LOG_RATIO)


def correct_guesses(scores: np.ndarray, member: np.ndarray, row_ids: np.ndarray, guesses: np.ndarray, *,
                    seed: int) -> np.ndarray:
    """Correct guesses c for each guess count c' of ``guesses``: members among the ceil(c'/2) highest scores plus
    non-members among the floor(c'/2) lowest (one sort; ties ordered by :func:`lia_spark.kernels.audit.tie_hashes`).

    Raises:
        ValueError: on mismatched shapes or a guess count outside [1, number of candidates].
    """
    scores, member = np.asarray(scores, np.float64), np.asarray(member, bool)
    guesses = np.asarray(guesses, np.int64)
    if scores.shape != member.shape or scores.shape != np.shape(row_ids):
        raise ValueError(f"scores, member and row_ids must have one shape, got {scores.shape}, {member.shape}, "
                         f"{np.shape(row_ids)}")
    if guesses.size and (guesses.min() < 1 or guesses.max() > scores.size):
        raise ValueError(f"guesses must lie in [1, {scores.size}], got [{guesses.min()}, {guesses.max()}]")
    order = np.lexsort((audit.tie_hashes(row_ids, seed=seed), -scores))  # s desc, tie hash asc
    ranked = member[order]
    members_top = np.concatenate([[0], np.cumsum(ranked)])
    non_members_bottom = np.concatenate([[0], np.cumsum(~ranked[::-1])])
    top, bottom = (guesses + 1) // 2, guesses // 2
    return members_top[top] + non_members_bottom[bottom]


def sweep_counts(row_ids: np.ndarray, label: np.ndarray, member: np.ndarray, target: np.ndarray, proxy: np.ndarray,
                 *, seed: int, sweep: audit.SweepSettings) -> tuple[np.ndarray, np.ndarray]:
    """The sweep's guess counts c' over the 2m candidates (:func:`lia_spark.kernels.audit.sweep_grid`) and the correct
    counts c as a (1, k) array: one repetition, the inclusion bits being the training run's own draw."""
    guesses = audit.sweep_grid(np.size(row_ids), sweep)
    scores = membership_scores(label, target, proxy)
    return guesses, correct_guesses(scores, member, row_ids, guesses, seed=seed)[None, :]
