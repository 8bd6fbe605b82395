"""Label-free recalibration of one model's predictions onto another's scale before scoring (docs/math.md §5.11).

The log-ratio score log M(x)[y] - log M'(x)[y] is the Bayes log-likelihood ratio only when M and M' are on the same
probability scale; a target trained on randomized labels without debiasing is shifted by construction. The map of
predictions a onto predictions r is the increasing function closest (least squares) to r over the canaries,

    g = argmin_{g increasing} sum_i (g(a_i) - r_i)^2,       so g(a) estimates E[r | a],

(a, r) = (M, M') to map the target onto the proxy, (M', M) the other way. It is fitted on the canaries'
predictions only: no label, no coin, no counterfactual: post-processing of the model and of public features, so
every bound computed from the mapped scores stays valid.

Scale-free and exact at any size: each a falls in one of :data:`BINS` equal bins of logit a on
[-LOGIT_LIMIT, LOGIT_LIMIT]; per bin the count and the sum of r in fixed point (integers, so sums over any
partitioning are identical); the pool-adjacent-violators algorithm on the bins' means, weighted by their counts,
gives g at the centres of the non-empty bins; g(a) interpolates linearly in logit a between them (constant beyond).
"""
from __future__ import annotations

import dataclasses

import numpy as np

BINS = 8192
LOGIT_LIMIT = 20.0
FIXED_POINT = float(2**32)  # reference predictions in units of 2^-32: a billion canaries sum below 2^63
_EDGE = 1e-15  # g stays inside (0, 1), so log g and log(1 - g) are finite


def logit_bins(predictions: np.ndarray) -> np.ndarray:
    """Bin of each prediction a: floor((clip(logit a, -L, L) + L) / (2L / BINS)), in [0, BINS)."""
    p = np.clip(np.asarray(predictions, dtype=np.float64), _EDGE, 1.0 - _EDGE)
    logit = np.clip(np.log(p) - np.log1p(-p), -LOGIT_LIMIT, LOGIT_LIMIT)
    return np.minimum(((logit + LOGIT_LIMIT) * (BINS / (2.0 * LOGIT_LIMIT))).astype(np.int64), BINS - 1)


def bin_sums(mapped: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bins of the ``mapped`` predictions present, count per bin, sum of round(reference 2^32) per bin) of one batch
    of canaries (int64)."""
    bins = logit_bins(mapped)
    fixed = np.rint(np.clip(np.asarray(reference, dtype=np.float64), 0.0, 1.0) * FIXED_POINT).astype(np.int64)
    counts = np.bincount(bins, minlength=BINS)
    # exact integer sums through float bincounts: 16-bit halves stay below 2^53 for any batch under 2^37 rows
    high = np.bincount(bins, weights=fixed >> 16, minlength=BINS).astype(np.int64)
    low = np.bincount(bins, weights=fixed & 0xFFFF, minlength=BINS).astype(np.int64)
    present = np.flatnonzero(counts)
    return present, counts[present].astype(np.int64), (high[present] << 16) + low[present]


def increasing_fit(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted least-squares increasing fit of ``values`` (pool adjacent violators): the block means."""
    means, masses, sizes = [], [], []
    for value, weight in zip(np.asarray(values, dtype=np.float64), np.asarray(weights, dtype=np.float64)):
        means.append(value)
        masses.append(weight)
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            mass = masses[-2] + masses[-1]
            means[-2] = (means[-2] * masses[-2] + means[-1] * masses[-1]) / mass
            masses[-2], sizes[-2] = mass, sizes[-2] + sizes[-1]
            del means[-1], masses[-1], sizes[-1]
    return np.repeat(means, sizes)


@dataclasses.dataclass(frozen=True)
class RecalibrationMap:
    """g at the centres (logit a) of the non-empty bins; ``canaries`` fitted on."""

    centres: np.ndarray
    values: np.ndarray
    canaries: int

    @classmethod
    def fit(cls, bins: np.ndarray, counts: np.ndarray, reference_sums: np.ndarray) -> "RecalibrationMap":
        """The map from the totals per bin (any order; each bin once).

        Raises:
            ValueError: when no canary was counted.
        """
        bins, counts, sums = (np.asarray(a, dtype=np.int64) for a in (bins, counts, reference_sums))
        order = np.argsort(bins)
        bins, counts, sums = bins[order], counts[order], sums[order]
        if counts.sum() <= 0:
            raise ValueError("recalibration: no canary to fit the map on, got 0 rows")
        means = sums / FIXED_POINT / counts
        centres = -LOGIT_LIMIT + (bins + 0.5) * (2.0 * LOGIT_LIMIT / BINS)
        return cls(centres=centres, values=np.clip(increasing_fit(means, counts), _EDGE, 1.0 - _EDGE),
                   canaries=int(counts.sum()))

    def __call__(self, predictions: np.ndarray) -> np.ndarray:
        """g(a): linear in logit a between the centres, constant beyond the first and last."""
        p = np.clip(np.asarray(predictions, dtype=np.float64), _EDGE, 1.0 - _EDGE)
        return np.interp(np.log(p) - np.log1p(-p), self.centres, self.values)

    def summary(self) -> dict[str, float]:
        """Bins used, canaries, and the range of g."""
        return {"bins": float(self.centres.size), "canaries": float(self.canaries),
                "min": float(self.values[0]), "max": float(self.values[-1])}
