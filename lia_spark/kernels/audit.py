"""Observational one-run label-inference audit game (docs/math.md §5; Kalemaj, Melis, Boucher, Mironov, Mahloujifar,
"Observational Auditing of Label Privacy", 2025, arXiv:2511.14084, Algorithm 2).

For canary i with features x_i, true label y0_i, target prediction M(x_i) = P(y=1|x_i) and proxy prediction
M'(x_i), repetition r of the game draws

    y1_i ~ Bernoulli(M'(x_i)),  b_i ~ Bernoulli(1/2),  shown label y^b_i = y0_i if b_i = 0 else y1_i,

keyed on (seed, "audit/<draw>/<r>", row_id) through :mod:`lia_spark.kernels.hashing`. The attacker scores

    difference: s = (M(x)[y^b] - M'(x)[y^b]) * (1 - M'(x)[y^b])^t,   log_ratio: s = log M(x)[y^b] - log M'(x)[y^b]

with M(x)[1] = M(x), M(x)[0] = 1 - M(x); it guesses b' = 0 if s > 0 else 1 on the c' rows of largest |s|
(ties broken by a hash of row_id) and abstains elsewhere; c counts its correct guesses.

One sort for every repetition and every c': a row's score can take only two values, one per label it may
show, and neither depends on the repetition. Each row therefore contributes two *candidates* (label 0 and
label 1) with fixed keys (|s| descending, tie hash ascending); a repetition activates exactly one candidate
per row (the one of the shown label). Sorting the 2m candidates once, the top c' rows of repetition r are the
first c' active candidates in that order, so c(r, c') is a prefix sum of the correctness bits of active
candidates read at the position where the prefix sum of active bits reaches c'. Counting costs O(m) per
repetition after one O(m log m) sort. The activity and correctness bits of all repetitions are packed into
uint64 words (bit r of a candidate's words = repetition r), which is what the Spark stage ships around.

Several scores on one game. A *score* is named by its kind and exponent t: ``difference_t<t>`` (the difference
score with that t, e.g. ``difference_t0``, ``difference_t2``, ``difference_t8``) or ``log_ratio``
(:class:`lia_spark.kernels.canary_scores.Score`; the *attack* is what the audit plays, audit.attack).
:func:`count_correct_scores` plays the game once (the draws are keyed on the seed, not on the score) and counts every
score's correct guesses with one sort per score; :func:`lia_spark.kernels.audit_sweep.evaluate_scores` takes, per
repetition, the best bound over scores x sweep points. Each (score, c') pair is one test of the hypothesis "the
mechanism is eps-DP"; with A scores and k sweep points the Bonferroni convention runs every test at
1 - (1 - confidence) / (A k), so by the union bound the probability that the best of the A k bounds exceeds the true
epsilon is at most 1 - confidence. The log ratio is the Bayes-optimal ranking when M is the Bayes posterior given
the release and M' the true prior: P(b = 0 | x, y^b, release) / P(b = 1 | x, y^b, release) = M(x)[y^b] / M'(x)[y^b].
"""
from __future__ import annotations

import dataclasses
import math
from typing import Protocol

import numpy as np

from lia_spark.kernels import _audit_game, hashing
from lia_spark.kernels.canary_scores import DEFAULT_SCORES, Score, candidate_scores, resolve_scores
from lia_spark.names import DIFFERENCE, GEOMETRIC, LABEL, PROXY_PREDICTION, TARGET_PREDICTION

TIE_BREAK_PURPOSE = "audit/tie_break"
CANARY_PURPOSE = "audit/canary_sample"


def counterfactual_purpose(repetition: int) -> str:
    """Hash purpose of the counterfactual labels y1 of one repetition."""
    return f"audit/counterfactual/{repetition}"


def hidden_bit_purpose(repetition: int) -> str:
    """Hash purpose of the hidden bits b of one repetition."""
    return f"audit/hidden_bit/{repetition}"


def guess_grid(canaries: int, *, step_percent: float = 1.0, extra_share: float = 0.001) -> np.ndarray:
    """Sorted distinct guess counts c' of the sweep: k * step_percent % of m (k = 1, 2, ...) plus extra_share * m.

    Each share is rounded to the nearest count and clipped to [1, m]; duplicates (small m) are merged.

    Raises:
        ValueError: if canaries < 1, step_percent not in (0, 100] or extra_share not in [0, 1].
    """
    if canaries < 1:
        raise ValueError(f"canaries must be >= 1, got canaries={canaries}")
    if not 0.0 < step_percent <= 100.0:
        raise ValueError(f"step_percent must be in (0, 100], got step_percent={step_percent}")
    if not 0.0 <= extra_share <= 1.0:
        raise ValueError(f"extra_share must be in [0, 1], got extra_share={extra_share}")
    steps = int(math.floor(100.0 / step_percent + 1e-9))
    shares = np.arange(1, steps + 1, dtype=np.float64) * (step_percent / 100.0)
    if extra_share > 0.0:
        shares = np.append(shares, extra_share)
    counts = np.clip(np.floor(shares * canaries + 0.5).astype(np.int64), 1, canaries)
    return np.unique(counts)


def geometric_grid(canaries: int, *, points_per_decade: int = 4, smallest: int = 10) -> np.ndarray:
    """Sorted distinct guess counts c' = round(m 10^(-j / points_per_decade)), j = 0, 1, ..., down to ``smallest``
    (just m when m < smallest): a few points spread evenly in log c', fine where the strongest evidence sits (the
    few hundred top-ranked canaries) and so fewer tests for the Bonferroni split than the linear grid.

    Raises:
        ValueError: if canaries < 1, points_per_decade < 1 or smallest < 1.
    """
    if canaries < 1:
        raise ValueError(f"canaries must be >= 1, got canaries={canaries}")
    if points_per_decade < 1:
        raise ValueError(f"points_per_decade must be >= 1, got points_per_decade={points_per_decade}")
    if smallest < 1:
        raise ValueError(f"smallest must be >= 1, got smallest={smallest}")
    steps = int(math.floor(points_per_decade * math.log10(canaries / smallest) + 1e-9)) if canaries > smallest else 0
    counts = np.floor(canaries * 10.0 ** (-np.arange(steps + 1) / points_per_decade) + 0.5).astype(np.int64)
    return np.unique(np.clip(counts, 1, canaries))


def sweep_grid(canaries: int, sweep: "SweepSettings") -> np.ndarray:
    """The guess counts of the sweep ``sweep.sweep`` names (:func:`guess_grid` or :func:`geometric_grid`)."""
    if sweep.sweep == GEOMETRIC:
        return geometric_grid(canaries, points_per_decade=sweep.sweep_points_per_decade,
                              smallest=sweep.sweep_smallest_guesses)
    return guess_grid(canaries, step_percent=sweep.sweep_step_percent, extra_share=sweep.extra_guess_share)


class SweepSettings(Protocol):
    """The sweep's settings (audit.sweep and its parameters; the audit config section satisfies it), read-only."""

    @property
    def sweep(self) -> str: ...

    @property
    def sweep_points_per_decade(self) -> int: ...

    @property
    def sweep_smallest_guesses(self) -> int: ...

    @property
    def sweep_step_percent(self) -> float: ...

    @property
    def extra_guess_share(self) -> float: ...


def validate_canaries(row_ids: np.ndarray, label: np.ndarray, target: np.ndarray, proxy: np.ndarray) -> None:
    """Check the canary columns: equal lengths, labels in {0, 1}, predictions finite and in [0, 1].

    Raises:
        ValueError: naming the offending column and a bad value.
    """
    n = len(row_ids)
    for name, column in ((LABEL, label), (TARGET_PREDICTION, target), (PROXY_PREDICTION, proxy)):
        if len(column) != n:
            raise ValueError(f"{name} must have one value per row_id ({n}), got {len(column)} values")
    bad_label = ~np.isin(label, (0, 1))
    if bad_label.any():
        raise ValueError(f"label must be 0 or 1, got label={label[bad_label][0]!r}")
    for name, column in ((TARGET_PREDICTION, target), (PROXY_PREDICTION, proxy)):
        bad = ~((column >= 0.0) & (column <= 1.0))
        if bad.any():
            raise ValueError(f"{name} must be finite and in [0, 1], got {name}={column[bad][0]!r}")


def game_draws(row_ids: np.ndarray, label: np.ndarray, proxy: np.ndarray, *, seed: int,
               repetitions: int) -> tuple[np.ndarray, np.ndarray]:
    """Hidden bits b and shown labels y^b of every repetition, each an (R, m) bool array.

    y1 ~ Bernoulli(M'(x)) and b ~ Bernoulli(1/2) are keyed on (seed, purpose with the repetition, row_id), so a
    row's draws do not depend on which other rows are processed with it.
    """
    shown, hidden = _packed_draws(row_ids, label, proxy, seed=seed, repetitions=repetitions)
    return unpack_bits(hidden, repetitions), unpack_bits(shown, repetitions)


def _packed_draws(row_ids: np.ndarray, label: np.ndarray, proxy: np.ndarray, *, seed: int,
                  repetitions: int) -> tuple[np.ndarray, np.ndarray]:
    """(shown, hidden) as (m, ceil(R / 64)) packed words (:func:`lia_spark.kernels._audit_game.play`)."""
    counterfactual_keys = np.array([hashing.stream_key(seed, counterfactual_purpose(r)) for r in range(repetitions)],
                                   dtype=np.uint64)
    hidden_keys = np.array([hashing.stream_key(seed, hidden_bit_purpose(r)) for r in range(repetitions)],
                           dtype=np.uint64)
    ids = np.ascontiguousarray(row_ids, dtype=np.int64).view(np.uint64)
    return _audit_game.play(ids, np.ascontiguousarray(np.asarray(label) == 1),
                            np.ascontiguousarray(proxy, dtype=np.float64), counterfactual_keys, hidden_keys)


def repetition_mask(repetitions: int) -> np.ndarray:
    """(ceil(R / 64),) uint64 words with exactly the bits of repetitions 0..R-1 set."""
    words = -(-repetitions // 64)
    mask = np.full(words, np.uint64(2**64 - 1), dtype=np.uint64)
    if repetitions % 64:
        mask[-1] = np.uint64((1 << (repetitions % 64)) - 1)
    return mask


def unpack_bits(words: np.ndarray, repetitions: int) -> np.ndarray:
    """(n, W) packed uint64 words (bit r of a row's words, little-endian, is repetition r) -> (R, n) bool."""
    words = np.ascontiguousarray(words, dtype="<u8")
    as_bytes = np.ascontiguousarray(words.view(np.uint8).reshape(len(words), -1).T)
    return np.unpackbits(as_bytes, axis=0, count=repetitions, bitorder="little").view(bool)


@dataclasses.dataclass(frozen=True)
class Candidates:
    """The two score candidates of each canary row (label 0 and 1), restricted to those shown at least once.

    Attributes:
        abs_score: |s| of showing ``label``.
        tie: uint64 tie-break hash of the row id (same for both candidates of a row, fixed over repetitions).
        label: the candidate's shown label (int8).
        active: (n, W) uint64 packed bits, bit r = 1 iff repetition r shows this candidate's label.
        correct: (n, W) uint64 packed bits, bit r = 1 iff active and the guess (0 if s > 0 else 1) equals b_r.
    """

    abs_score: np.ndarray
    tie: np.ndarray
    label: np.ndarray
    active: np.ndarray
    correct: np.ndarray

    def __len__(self) -> int:
        return len(self.abs_score)

    def subset(self, rows: np.ndarray) -> "Candidates":
        """The candidates selected by a boolean mask or an index array."""
        return Candidates(abs_score=self.abs_score[rows], tie=self.tie[rows], label=self.label[rows],
                          active=self.active[rows], correct=self.correct[rows])

    def to_bytes(self) -> bytes:
        """The columns back to back (abs_score, tie, active, correct, label): :meth:`from_bytes` reads them."""
        return b"".join(np.ascontiguousarray(column).tobytes()
                        for column in (self.abs_score, self.tie, self.active, self.correct, self.label))

    @classmethod
    def from_bytes(cls, blob: bytes, *, repetitions: int) -> "Candidates":
        """Inverse of :meth:`to_bytes` for candidates of ``repetitions`` games."""
        words = -(-repetitions // 64)
        n, extra = divmod(len(blob), 8 + 8 + 16 * words + 1)
        if extra:
            raise ValueError(f"candidate blob of {len(blob)} bytes is not a whole number of candidates")
        columns, offset = [], 0
        for dtype, shape in ((np.float64, (n,)), (np.uint64, (n,)), (np.uint64, (n, words)),
                             (np.uint64, (n, words)), (np.int8, (n,))):
            count = int(np.prod(shape))
            columns.append(np.frombuffer(blob, dtype=dtype, count=count, offset=offset).reshape(shape))
            offset += count * np.dtype(dtype).itemsize
        abs_score, tie, active, correct, label = columns
        return cls(abs_score=abs_score, tie=tie, label=label, active=active, correct=correct)

    @classmethod
    def concatenate(cls, parts: "list[Candidates]") -> "Candidates":
        """All candidates of ``parts`` in one set (order kept)."""
        return cls(*(np.concatenate([getattr(part, field.name) for part in parts])
                     for field in dataclasses.fields(cls)))


def tie_hashes(row_ids: np.ndarray, *, seed: int) -> np.ndarray:
    """The uint64 tie-break hash of each row id (distinct ids give distinct hashes: the mixer is a bijection)."""
    return hashing.hash_bits(seed, TIE_BREAK_PURPOSE, row_ids)


def candidate_ties_labels(row_ids: np.ndarray, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Tie hashes and labels of all 2m candidates, in the order of :func:`candidate_scores`."""
    tie = np.tile(tie_hashes(row_ids, seed=seed), 2)
    labels = np.repeat(np.array([0, 1], dtype=np.int8), len(row_ids))
    return tie, labels


def candidates(row_ids: np.ndarray, label: np.ndarray, target: np.ndarray, proxy: np.ndarray, *, seed: int,
               repetitions: int, kind: str = DIFFERENCE, t: float = 2.0) -> Candidates:
    """Play ``repetitions`` games on a batch of canaries and return their shown candidates (module docstring).

    Raises:
        ValueError: on invalid canary columns (see :func:`validate_canaries`) or repetitions < 1.
    """
    found = score_candidates(row_ids, label, target, proxy, seed=seed, repetitions=repetitions,
                             scores=(Score(kind=kind, t=t),))
    return next(iter(found.values()))


def score_candidates(row_ids: np.ndarray, label: np.ndarray, target: np.ndarray, proxy: np.ndarray, *, seed: int,
                     repetitions: int, scores=DEFAULT_SCORES) -> dict[str, Candidates]:
    """:func:`candidates` of several scores on the same games (played once): score name -> candidates.

    Raises:
        ValueError: on a bad or repeated score, invalid canary columns or repetitions < 1.
    """
    parsed = resolve_scores(scores)
    row_ids, label, target, proxy = _checked_canaries(row_ids, label, target, proxy, repetitions=repetitions)
    game = _Game.play(row_ids, label, proxy, seed=seed, repetitions=repetitions)
    return {score.name: game.candidates(target, proxy, score) for score in parsed}


def _checked_canaries(row_ids, label, target, proxy, *, repetitions: int):
    if repetitions < 1:
        raise ValueError(f"repetitions must be >= 1, got repetitions={repetitions}")
    row_ids = np.asarray(row_ids, dtype=np.int64)
    label = np.asarray(label)
    target = np.asarray(target, dtype=np.float64)
    proxy = np.asarray(proxy, dtype=np.float64)
    validate_canaries(row_ids, label, target, proxy)
    return row_ids, label, target, proxy


@dataclasses.dataclass(frozen=True)
class _Game:
    """The draws of one set of games, shared by every score: which candidates are shown, and b per candidate.

    All bit sets are (n, ceil(R / 64)) packed words over the candidates shown at least once.
    """

    active: np.ndarray  # bit r: repetition r shows this candidate's label
    hidden: np.ndarray  # bit r: b of the candidate's row in repetition r
    mask: np.ndarray  # repetition_mask(R)
    keep: np.ndarray  # (2m,) bool: candidates shown at least once
    tie: np.ndarray
    label: np.ndarray

    @classmethod
    def play(cls, row_ids: np.ndarray, label: np.ndarray, proxy: np.ndarray, *, seed: int,
             repetitions: int) -> "_Game":
        shown, hidden = _packed_draws(row_ids, label, proxy, seed=seed, repetitions=repetitions)
        mask = repetition_mask(repetitions)
        active = np.concatenate([~shown & mask, shown])  # candidates of label 0, then of label 1
        keep = (active != 0).any(axis=1)
        tie, labels = candidate_ties_labels(row_ids, seed=seed)
        return cls(active=active[keep], hidden=np.concatenate([hidden, hidden])[keep], mask=mask, keep=keep,
                   tie=tie[keep], label=labels[keep])

    def candidates(self, target: np.ndarray, proxy: np.ndarray, score: Score) -> Candidates:
        values = candidate_scores(target, proxy, kind=score.kind, t=score.t)[self.keep]
        guess_one = (values <= 0.0)[:, None]  # the guess is b' = 1 iff s <= 0; correct iff b' = b
        correct = self.active & np.where(guess_one, self.hidden, ~self.hidden & self.mask)
        return Candidates(abs_score=np.abs(values), tie=self.tie, label=self.label, active=self.active,
                          correct=correct)


def candidate_order(abs_score: np.ndarray, tie: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Permutation sorting candidates by |s| descending, then tie hash ascending (unsigned), then label."""
    return np.lexsort((label, np.asarray(tie, dtype=np.uint64), -np.asarray(abs_score, dtype=np.float64)))


def correct_at_ranks(active: np.ndarray, correct: np.ndarray, ranks: np.ndarray, *, repetitions: int) -> np.ndarray:
    """Correct guesses among the first ``ranks[r, j]`` active candidates of repetition r (candidates pre-sorted).

    Args:
        active, correct: (n, W) packed bits of candidates already in :func:`candidate_order`.
        ranks: (R, k) int64 ranks; entries outside [1, number of active candidates of r] give -1.

    Returns:
        (R, k) int64: with p the position of the rank-th active candidate, the number of correct candidates at
        positions <= p (correct implies active).
    """
    ranks = np.ascontiguousarray(ranks, dtype=np.int64)
    if ranks.shape[0] != repetitions:
        raise ValueError(f"ranks must have one row per repetition ({repetitions}), got shape {ranks.shape}")
    return _audit_game.correct_at_ranks(np.ascontiguousarray(active, dtype=np.uint64),
                                        np.ascontiguousarray(correct, dtype=np.uint64), ranks)


def bit_totals(words: np.ndarray, *, repetitions: int) -> np.ndarray:
    """Number of set bits per repetition over all rows of (n, W) packed words -> (R,) int64."""
    return _audit_game.bit_totals(np.ascontiguousarray(words, dtype=np.uint64), repetitions)


def count_correct(row_ids: np.ndarray, label: np.ndarray, target: np.ndarray, proxy: np.ndarray, *, seed: int,
                  repetitions: int, guesses: np.ndarray, kind: str = DIFFERENCE, t: float = 2.0) -> np.ndarray:
    """In-process audit: c for every repetition and every guess count in ``guesses`` from one sort -> (R, k) int64.

    Raises:
        ValueError: if a guess count is outside [1, m] or on invalid canary columns.
    """
    counts = count_correct_scores(row_ids, label, target, proxy, seed=seed, repetitions=repetitions,
                                  guesses=guesses, scores=(Score(kind=kind, t=t),))
    return next(iter(counts.values()))


def count_correct_scores(row_ids: np.ndarray, label: np.ndarray, target: np.ndarray, proxy: np.ndarray, *,
                          seed: int, repetitions: int, guesses: np.ndarray,
                          scores=DEFAULT_SCORES) -> dict[str, np.ndarray]:
    """:func:`count_correct` for several scores on the same games: score name -> (R, k) int64 counts.

    The games (y1, b per repetition) are drawn once; each score's counts come from one sort of its candidates.
    ``count_correct(..., kind=s, t=t)`` equals ``count_correct_scores(..., scores=[score_name(s, t)])``.

    Raises:
        ValueError: on a bad or repeated score, a guess count outside [1, m] or invalid canary columns.
    """
    parsed = resolve_scores(scores)
    guesses = np.asarray(guesses, dtype=np.int64)
    if guesses.size and (guesses.min() < 1 or guesses.max() > len(row_ids)):
        raise ValueError(f"guesses must lie in [1, {len(row_ids)}], got guesses={guesses.min()}..{guesses.max()}")
    row_ids, label, target, proxy = _checked_canaries(row_ids, label, target, proxy, repetitions=repetitions)
    game = _Game.play(row_ids, label, proxy, seed=seed, repetitions=repetitions)
    ranks = np.broadcast_to(guesses, (repetitions, len(guesses)))
    return {score.name: sorted_counts(game.candidates(target, proxy, score), ranks, repetitions=repetitions)
            for score in parsed}


def sorted_counts(found: Candidates, ranks: np.ndarray, *, repetitions: int) -> np.ndarray:
    """In-process counts of one score's candidates: one sort (:func:`candidate_order`), then
    :func:`correct_at_ranks` at ``ranks`` (R, k) -> (R, k) int64."""
    order = candidate_order(found.abs_score, found.tie, found.label)
    return correct_at_ranks(found.active[order], found.correct[order], ranks, repetitions=repetitions)


def range_boundaries(abs_score: np.ndarray, tie: np.ndarray, *, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """``parts - 1`` candidate keys (|s|, tie) at evenly spaced ranks of a key sample, in candidate order.

    They cut the candidate order into ``parts`` contiguous ranges; any choice is exact, a representative
    sample only balances the range sizes.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got parts={parts}")
    if len(abs_score) == 0 or parts == 1:
        return np.empty(0, dtype=np.float64), np.empty(0, dtype=np.uint64)
    order = candidate_order(abs_score, tie, np.zeros(len(abs_score), dtype=np.int8))
    cuts = (np.arange(1, parts) * len(order)) // parts
    chosen = order[cuts]
    return np.asarray(abs_score, dtype=np.float64)[chosen], np.asarray(tie, dtype=np.uint64)[chosen]


def range_ids(abs_score: np.ndarray, tie: np.ndarray, boundary_abs: np.ndarray,
              boundary_tie: np.ndarray) -> np.ndarray:
    """Range index of each candidate: the number of boundaries at or before its key in candidate order.

    A boundary (a, h) is at or before the key (|s|, tie) iff a > |s|, or a == |s| and h <= tie. Candidates
    with equal keys (only the two of one row can have them) fall into the same range. Boundaries are in
    candidate order (|s| descending, then tie ascending), so two binary searches on |s| and one on the ties of
    boundaries sharing a candidate's |s| count them: O(n log P).
    """
    negated = -np.asarray(boundary_abs, dtype=np.float64)  # ascending
    boundary_tie = np.asarray(boundary_tie, dtype=np.uint64)
    key = -np.asarray(abs_score, dtype=np.float64)
    tie = np.asarray(tie, dtype=np.uint64)
    higher = np.searchsorted(negated, key, side="left")  # boundaries with a larger |s|
    equal_end = np.searchsorted(negated, key, side="right")
    ranges = higher.astype(np.int64)
    for start in np.unique(higher[equal_end > higher]):  # boundaries sharing |s|: compare ties
        rows = (higher == start) & (equal_end > higher)
        block = boundary_tie[start:equal_end[rows][0]]
        ranges[rows] += np.searchsorted(block, tie[rows], side="right")
    return ranges.astype(np.int32)
