"""Reconstruction advantages and their summaries (docs/math.md §3).

[BDG+24] sec. 3-4. The multiplicative advantage
I_i = log P(z | y_i = 1) - log P(z | y_i = 0) comes straight from the posterior kernels
(lia_spark.kernels.posteriors, never from rounded posteriors). The additive advantage of a row is the
informed Bayes attacker's expected success max(post, 1 - post) minus the uninformed one's
max(eta, 1 - eta); the realized advantage scores both attackers' guesses 1{p > 1/2} against the true
labels. Percentiles are exact order statistics (inverted empirical CDF, no interpolation), so
infinite |I| stay infinite and never turn into NaN.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from lia_spark.kernels.mechanisms import flip_probability
from lia_spark.kernels.posteriors import Posteriors

PERCENTILES = (50, 90, 98, 99)
CDF_POINTS = 1001


def additive_advantage(posterior, prior) -> np.ndarray:
    """Per row: max(post, 1 - post) - max(eta, 1 - eta)."""
    post = np.asarray(posterior, dtype=np.float64)
    eta = np.asarray(prior, dtype=np.float64)
    return np.maximum(post, 1.0 - post) - np.maximum(eta, 1.0 - eta)


def realized_advantage(posterior, prior, labels) -> np.ndarray:
    """Per row: 1{informed guess correct} - 1{uninformed guess correct}; a guess is 1{p > 1/2}."""
    post = np.asarray(posterior, dtype=np.float64)
    eta = np.asarray(prior, dtype=np.float64)
    y = np.asarray(labels)
    if not (post.shape == eta.shape == y.shape):
        raise ValueError(f"posterior, prior and labels must have equal shapes, got {post.shape}, {eta.shape}, "
                         f"{y.shape}")
    return ((post > 0.5) == (y == 1)).astype(np.float64) - ((eta > 0.5) == (y == 1)).astype(np.float64)


def rr_closed_form_advantage(priors, *, epsilon: float) -> float:
    """Expected additive advantage of RR(eps): mean of (min(eta, 1-eta) - pi) 1{pi <= eta <= 1 - pi}."""
    eta = np.asarray(priors, dtype=np.float64)
    pi = flip_probability(epsilon)
    gain = np.minimum(eta, 1.0 - eta) - pi
    return float(np.mean(np.where((eta >= pi) & (eta <= 1.0 - pi), gain, 0.0))) if eta.size else math.nan


def percentile_rank(n: int, q: float) -> int:
    """0-based rank of the q-th percentile among n sorted values: ceil(q n / 100) - 1, at least 0 (no interpolation)."""
    return max(int(math.ceil(q * n / 100.0)), 1) - 1


def exact_percentile(values, q: float) -> float:
    """Order statistic x_(ceil(q n / 100)) of the sorted values (inverted empirical CDF); keeps +-inf."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must lie in [0, 100], got q={q!r}")
    if x.size == 0:
        return math.nan
    if np.any(np.isnan(x)):
        raise ValueError("values must not contain NaN")
    rank = percentile_rank(x.size, q)
    return float(np.partition(x, rank)[rank])


def empirical_cdf(values, *, points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Exact empirical CDF (x, F(x) = share of values <= x) at up to ``points`` distinct values.

    All distinct values are kept when there are at most ``points``; otherwise the evaluation points
    are the order statistics at evenly spaced ranks (always including the minimum and maximum), and
    F is still exact there. +inf values appear as x = inf with F = 1.
    """
    x = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if x.size == 0:
        return np.zeros(0), np.zeros(0)
    distinct, first = np.unique(x, return_index=True)
    counts_le = np.append(first[1:], x.size)  # number of values <= each distinct value
    if distinct.size > points:
        pick = np.unique(np.linspace(0, distinct.size - 1, points).round().astype(np.int64))
        distinct, counts_le = distinct[pick], counts_le[pick]
    return distinct, counts_le / x.size


@dataclass(frozen=True)
class AdvantageSummary:
    """One row of OUT/posteriors/summary plus the two empirical CDFs (x, F(x))."""

    mechanism: str
    epsilon: float
    bag_size: int
    rows: int
    mean_additive_advantage: float
    realized_additive_advantage: float
    abs_I_p50: float
    abs_I_p90: float
    abs_I_p98: float
    abs_I_p99: float
    share_infinite: float
    cdf_abs_I: tuple[np.ndarray, np.ndarray] = field(repr=False)
    cdf_additive: tuple[np.ndarray, np.ndarray] = field(repr=False)

    def row(self) -> dict:
        """The flat summary columns (docs/layout.md: posteriors/summary), without the CDFs."""
        out = asdict(self)
        out.pop("cdf_abs_I")
        out.pop("cdf_additive")
        return out

    def to_dict(self) -> dict:
        """Flat columns plus the CDFs as lists (inf kept as float('inf'))."""
        out = self.row()
        out["cdf_abs_I"] = {"x": self.cdf_abs_I[0].tolist(), "F": self.cdf_abs_I[1].tolist()}
        out["cdf_additive"] = {"x": self.cdf_additive[0].tolist(), "F": self.cdf_additive[1].tolist()}
        return out


@dataclass(frozen=True)
class PartialSums:
    """Mergeable counts and sums of one partition of rows (percentiles need the values themselves)."""

    rows: int = 0
    sum_additive: float = 0.0
    sum_realized: float = 0.0
    infinite: int = 0

    @classmethod
    def of(cls, posteriors: Posteriors, priors, labels) -> "PartialSums":
        """Sums over one block of rows."""
        eta = np.asarray(priors, dtype=np.float64)
        return cls(rows=int(eta.size),
                   sum_additive=float(np.sum(additive_advantage(posteriors.posterior, eta))),
                   sum_realized=float(np.sum(realized_advantage(posteriors.posterior, eta, labels))),
                   infinite=int(np.count_nonzero(np.isinf(posteriors.multiplicative_advantage))))

    def merge(self, other: "PartialSums") -> "PartialSums":
        """Sums over the union of both blocks."""
        return PartialSums(self.rows + other.rows, self.sum_additive + other.sum_additive,
                           self.sum_realized + other.sum_realized, self.infinite + other.infinite)

    def means(self) -> dict[str, float]:
        """mean_additive_advantage, realized_additive_advantage, share_infinite (NaN when empty)."""
        if self.rows == 0:
            return {"mean_additive_advantage": math.nan, "realized_additive_advantage": math.nan,
                    "share_infinite": math.nan}
        return {"mean_additive_advantage": self.sum_additive / self.rows,
                "realized_additive_advantage": self.sum_realized / self.rows,
                "share_infinite": self.infinite / self.rows}


def summarize(posteriors: Posteriors, priors, labels, *, mechanism: str, epsilon: float,
              bag_size: int) -> AdvantageSummary:
    """Summary of one mechanism setting: means, exact |I| percentiles 50/90/98/99, share infinite, CDFs.

    Args:
        posteriors: kernel output for the rows.
        priors: the attacker's priors eta per row.
        labels: true labels per row (for the realized advantage).
        mechanism: rr | llp | llp_laplace | llp_geometric.
        epsilon: the mechanism's epsilon (NaN for llp).
        bag_size: k (1 for rr).
    """
    eta = np.asarray(priors, dtype=np.float64)
    abs_i = np.abs(np.asarray(posteriors.multiplicative_advantage, dtype=np.float64))
    if abs_i.shape != eta.shape:
        raise ValueError(f"posteriors and priors must have equal shapes, got {abs_i.shape} and {eta.shape}")
    means = PartialSums.of(posteriors, eta, labels).means()
    pct = {f"abs_I_p{q}": exact_percentile(abs_i, q) for q in PERCENTILES}
    return AdvantageSummary(
        mechanism=mechanism, epsilon=float(epsilon), bag_size=int(bag_size), rows=int(eta.size),
        mean_additive_advantage=means["mean_additive_advantage"],
        realized_additive_advantage=means["realized_additive_advantage"],
        share_infinite=means["share_infinite"], **pct,
        cdf_abs_I=empirical_cdf(abs_i),
        cdf_additive=empirical_cdf(additive_advantage(posteriors.posterior, eta)))


# Histogram digests of |I|: mergeable per-block summaries from which exact percentiles need only the rows of
# a few bins. A bin holds the doubles sharing exponent and top 4 mantissa bits (16 bins per octave), so bins are
# monotone in |I|, 0 is bin 0, +inf is bin INFINITE_BIN alone and NaN lies above it.
BIN_SHIFT = 48
INFINITE_BIN = int(np.float64(np.inf).view(np.int64)) >> BIN_SHIFT
DIGEST_FIELDS = ("bin", "rows", "low", "high", "additive", "realized", "leakage")


def abs_i_bins(abs_i) -> np.ndarray:
    """Bin of each |I| >= 0: the IEEE-754 bit pattern shifted right by 48 (monotone in |I|)."""
    return np.ascontiguousarray(abs_i, dtype=np.float64).view(np.int64) >> BIN_SHIFT


def bin_digest(abs_i, additive, realized, leakage=None) -> dict[str, np.ndarray]:
    """Per occupied bin of |I| (ascending): rows, min ``low`` and max ``high`` of |I|, and the sums of the
    additive and realized advantages and of the rows' maximal leakage (NaN when ``leakage`` is None: not
    computed) (:data:`DIGEST_FIELDS`)."""
    values = np.sort(np.asarray(abs_i, dtype=np.float64))
    if not values.size:
        return merge_bin_digests([])
    sorted_bins = abs_i_bins(values)
    starts = np.flatnonzero(np.r_[True, sorted_bins[1:] != sorted_bins[:-1]])
    ends = np.r_[starts[1:], values.size]
    bins = sorted_bins[starts]
    occupied = np.zeros(bins[-1] - bins[0] + 1, dtype=np.intp)  # bin -> its index (at most 2^15 bins)
    occupied[bins - bins[0]] = np.arange(bins.size)
    at = occupied[abs_i_bins(abs_i) - bins[0]]
    return {"bin": bins, "rows": (ends - starts).astype(np.int64), "low": values[starts], "high": values[ends - 1],
            "additive": np.bincount(at, weights=additive, minlength=bins.size),
            "realized": np.bincount(at, weights=realized, minlength=bins.size),
            "leakage": (np.full(bins.size, np.nan) if leakage is None
                        else np.bincount(at, weights=leakage, minlength=bins.size))}


def merge_bin_digests(digests) -> dict[str, np.ndarray]:
    """One digest of the union of the blocks summarized by ``digests`` (bins ascending)."""
    parts = list(digests)
    if not parts:
        return {name: np.zeros(0, np.int64 if name in ("bin", "rows") else np.float64) for name in DIGEST_FIELDS}
    joined = {name: np.concatenate([part[name] for part in parts]) for name in DIGEST_FIELDS}
    bins, at = np.unique(joined["bin"], return_inverse=True)
    low, high = np.full(bins.size, np.inf), np.full(bins.size, -np.inf)
    np.minimum.at(low, at, joined["low"])
    np.maximum.at(high, at, joined["high"])
    return {"bin": bins, "rows": np.bincount(at, weights=joined["rows"], minlength=bins.size).astype(np.int64),
            "low": low, "high": high, "additive": np.bincount(at, weights=joined["additive"], minlength=bins.size),
            "realized": np.bincount(at, weights=joined["realized"], minlength=bins.size),
            "leakage": np.bincount(at, weights=joined["leakage"], minlength=bins.size)}


def digest_percentiles(digest: dict[str, np.ndarray]) -> dict[int, float | tuple[int, int]]:
    """Per q of :data:`PERCENTILES`: the exact percentile of |I| when its bin holds a single value (min = max,
    e.g. RR or +inf), else (index of the bin in the digest, 0-based rank of the percentile among that bin's
    values in ascending order) for an exact selection inside the bin.

    Raises:
        ValueError: when the digest holds NaN or no rows.
    """
    if digest["bin"].size and digest["bin"][-1] > INFINITE_BIN:
        raise ValueError("I: NaN among the values")
    n = int(digest["rows"].sum())
    if n == 0:
        raise ValueError("digest: holds no rows")
    ends = np.cumsum(digest["rows"])
    located: dict[int, float | tuple[int, int]] = {}
    for q in PERCENTILES:
        rank = percentile_rank(n, q)
        at = int(np.searchsorted(ends, rank, side="right"))
        if digest["low"][at] == digest["high"][at]:
            located[q] = float(digest["low"][at])
        else:
            located[q] = (at, rank - int(ends[at] - digest["rows"][at]))
    return located
