"""Numba kernels of the audit game on packed bits (the math is in :mod:`lia_spark.kernels.audit`).

Repetition r of canary i draws (keyed on the row id, so a row's draws do not depend on its batch)

    y1 = 1{u(k_r^y1, id) < M'(x)},   b = 1{u(k_r^b, id) < 1/2},   shown = y1 if b else y0,

with u(k, id) = (top 53 bits of mix64(mix64(id ^ k)) + 1/2) / 2^53, the same words as
:func:`lia_spark.kernels.hashing.uniform` (draw number 0 of the stream whose key is k). Bit r of a row's uint64 words
(little-endian, word r // 64, bit r % 64) holds repetition r, so the R draws of a row stay in ceil(R / 64)
words instead of two (R, m) bool arrays, and counting walks each candidate's set bits once.
"""
from __future__ import annotations

import numpy as np

from lia_spark.kernels._jit import njit_for

njit = njit_for(__file__)

_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_TWO_POW_MINUS_53 = 1.0 / float(1 << 53)


@njit(inline="always")
def _mix64(z):
    z = (z ^ (z >> np.uint64(30))) * _MUL1
    z = (z ^ (z >> np.uint64(27))) * _MUL2
    return z ^ (z >> np.uint64(31))


@njit(inline="always")
def _uniform(key, row_id):
    bits = _mix64(_mix64(row_id ^ key)) >> np.uint64(11)
    return (np.float64(bits) + 0.5) * _TWO_POW_MINUS_53


@njit
def play(row_ids: np.ndarray, true_one: np.ndarray, proxy: np.ndarray, counterfactual_keys: np.ndarray,
         hidden_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shown, hidden) packed words, each (m, ceil(R / 64)) uint64: bit r = y^b (resp. b) of repetition r.

    Branchless: every repetition draws both uniforms and combines the bits, shown = (b AND y1) OR (NOT b AND y0),
    so the loop over a word's 64 repetitions has no data-dependent branch (the bits equal a branching draw's: the
    same uniforms, compared the same way).

    Args:
        row_ids: (m,) uint64 row ids (the int64 ids viewed as uint64).
        true_one: (m,) bool, y0 = 1.
        proxy: (m,) float64 M'(x).
        counterfactual_keys, hidden_keys: (R,) uint64 stream keys of y1 and b per repetition.
    """
    m, repetitions = len(row_ids), len(hidden_keys)
    words = (repetitions + 63) // 64
    shown = np.zeros((m, words), dtype=np.uint64)
    hidden = np.zeros((m, words), dtype=np.uint64)
    one = np.uint64(1)
    for i in range(m):
        row_id, p = row_ids[i], proxy[i]
        y0 = np.uint64(true_one[i])
        for w in range(words):
            hidden_word, shown_word = np.uint64(0), np.uint64(0)
            for j in range(min(64, repetitions - 64 * w)):
                r = 64 * w + j
                b = np.uint64(_uniform(hidden_keys[r], row_id) < 0.5)
                y1 = np.uint64(_uniform(counterfactual_keys[r], row_id) < p)
                hidden_word |= b << np.uint64(j)
                shown_word |= ((b & y1) | ((b ^ one) & y0)) << np.uint64(j)
            hidden[i, w] = hidden_word
            shown[i, w] = shown_word
    return shown, hidden


@njit
def bit_totals(words: np.ndarray, repetitions: int) -> np.ndarray:
    """Set bits per repetition over all rows of (n, W) packed words -> (R,) int64."""
    totals = np.zeros(repetitions, dtype=np.int64)
    for i in range(words.shape[0]):
        for w in range(words.shape[1]):
            word = words[i, w]
            r = 64 * w
            while word and r < repetitions:
                if word & np.uint64(1):
                    totals[r] += 1
                word >>= np.uint64(1)
                r += 1
    return totals


@njit
def correct_at_ranks(active: np.ndarray, correct: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Correct candidates up to the ``ranks[r, j]``-th active candidate of repetition r (-1 if never reached).

    Candidates are pre-sorted; one pass keeps per repetition the active and correct counts so far and records
    the correct count when the active count reaches the next requested rank.
    """
    repetitions, points = ranks.shape
    out = np.full((repetitions, points), -1, dtype=np.int64)
    order = np.empty((repetitions, points), dtype=np.int64)
    for r in range(repetitions):
        order[r] = np.argsort(ranks[r], kind="mergesort")
    next_point = np.zeros(repetitions, dtype=np.int64)
    for r in range(repetitions):  # ranks below 1 are never reached
        while next_point[r] < points and ranks[r, order[r, next_point[r]]] < 1:
            next_point[r] += 1
    active_seen = np.zeros(repetitions, dtype=np.int64)
    correct_seen = np.zeros(repetitions, dtype=np.int64)
    for i in range(active.shape[0]):
        for w in range(active.shape[1]):
            word, hits = active[i, w], correct[i, w]
            r = 64 * w
            while word and r < repetitions:
                if word & np.uint64(1):
                    active_seen[r] += 1
                    if hits & np.uint64(1):
                        correct_seen[r] += 1
                    while next_point[r] < points and ranks[r, order[r, next_point[r]]] == active_seen[r]:
                        out[r, order[r, next_point[r]]] = correct_seen[r]
                        next_point[r] += 1
                word >>= np.uint64(1)
                hits >>= np.uint64(1)
                r += 1
    return out
