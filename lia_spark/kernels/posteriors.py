"""Per-row attacker posteriors and multiplicative advantages for RR, LLP, LLP+Laplace and LLP+Geom.

docs/math.md §3 ([BDG+24] sec. 4,
[BDG+23] sec. 6). For a bag with priors eta_1..eta_k and a
release z with likelihood f(z | b) given the true label sum b,

    post_i = eta_i L_1 / (eta_i L_1 + (1 - eta_i) L_0),   L_y = sum_b P_{-i}(b - y) f(z | b),
    I_i    = log L_1 - log L_0          (= logit(post_i) - logit(eta_i)),

P_{-i} the Poisson-binomial pmf of the other k - 1 labels. LLP: f(z | b) = 1{b = s}; Laplace:
f(alpha | b) proportional to exp(-k eps |alpha - b/k|); geometric (clipped sum Z): f(z | b) proportional
to a^|z - b| inside, a^b at z = 0 and a^(k - b) at z = k, a = e^-eps. I is computed directly as a
log-likelihood ratio (never from rounded posteriors): +-inf exactly when the release determines the
label, and |I| = eps exactly for RR. The O(k^2)-per-bag forward-backward kernel with exponential
tilting lives in lia_spark.kernels._forward_backward (numba); it is exact float64 for bags up to
MAX_BAG_SIZE rows and priors in (0, 1), including 1e-9 and 1 - 1e-9 at k = 1024.

Batched functions take bag-contiguous rows: ``priors`` of length sum(bag_sizes), rows of bag b at
offsets sum(bag_sizes[:b]) .. sum(bag_sizes[:b+1]) - 1, one release per bag.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.special import expit

from lia_spark.kernels import _forward_backward as fb
from lia_spark.kernels.mechanisms import checked_epsilon
from lia_spark.names import LLP, LLP_GEOMETRIC, LLP_LAPLACE, MAX_BAG_SIZE


@dataclass(frozen=True)
class Posteriors:
    """Per-row attacker posterior P(y_i = 1 | release) and multiplicative advantage I_i (may be +-inf)."""

    posterior: np.ndarray
    multiplicative_advantage: np.ndarray


def checked_priors(priors, name: str = "priors") -> np.ndarray:
    """``priors`` as contiguous float64, each strictly inside (0, 1) (ValueError naming ``name`` otherwise)."""
    arr = np.ascontiguousarray(priors, dtype=np.float64)
    if arr.size and not (np.all(arr > 0.0) and np.all(arr < 1.0)):
        bad = arr[~((arr > 0.0) & (arr < 1.0))][0]
        raise ValueError(f"{name} must lie strictly inside (0, 1), got {name} containing {bad!r}")
    return arr


def bag_offsets(priors: np.ndarray, bag_sizes) -> np.ndarray:
    """Start of every bag in the row order of ``priors`` plus the end: (len(bag_sizes) + 1,) int64, validated."""
    if priors.ndim != 1:
        raise ValueError(f"priors must be 1-D, got priors with shape {priors.shape}")
    sizes = np.asarray(bag_sizes)
    if sizes.ndim != 1 or not np.issubdtype(sizes.dtype, np.integer):
        raise ValueError(f"bag_sizes must be a 1-D integer array, got bag_sizes={bag_sizes!r}")
    if sizes.size and (sizes.min() < 1 or sizes.max() > MAX_BAG_SIZE):
        raise ValueError(f"bag_sizes must lie in [1, {MAX_BAG_SIZE}], got bag_sizes with range "
                         f"[{sizes.min()}, {sizes.max()}]")
    offsets = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] != priors.size:
        raise ValueError(f"bag_sizes must sum to len(priors)={priors.size}, got sum(bag_sizes)={offsets[-1]}")
    return offsets


def _per_bag(values, n_bags: int, name: str) -> np.ndarray:
    arr = np.ascontiguousarray(values, dtype=np.float64)
    if arr.shape != (n_bags,):
        raise ValueError(f"{name} must have one entry per bag ({n_bags}), got {name} with shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {name} containing {arr[~np.isfinite(arr)][0]!r}")
    return arr


def _integer_sums(values, sizes: np.ndarray, name: str) -> np.ndarray:
    arr = _per_bag(values, sizes.size, name)
    bad = (arr != np.round(arr)) | (arr < 0) | (arr > sizes)
    if np.any(bad):
        raise ValueError(f"{name} must be integers in [0, bag size], got {name}={arr[bad][0]!r} "
                         f"for a bag of size {sizes[bad][0]}")
    return arr


def _run(priors: np.ndarray, offsets: np.ndarray, mechanism: int, values: np.ndarray, epsilon: float) -> Posteriors:
    post = np.empty_like(priors)
    llr = np.empty_like(priors)
    fb.bags_kernel(priors, offsets, mechanism, values, epsilon, post, llr)
    return Posteriors(posterior=post, multiplicative_advantage=llr)


def rr(prior, released, *, epsilon: float) -> Posteriors:
    """Randomized response: post = (1-pi) eta / ((1-pi) eta + pi (1-eta)) if released 1, else
    pi eta / (pi eta + (1-pi)(1-eta)), pi = 1/(1+e^eps); I = +eps / -eps exactly. Elementwise."""
    eps = checked_epsilon(epsilon)
    eta = checked_priors(prior, "prior")
    rel = np.asarray(released)
    if rel.shape != eta.shape or not np.all((rel == 0) | (rel == 1)):
        raise ValueError(f"released must be 0/1 labels shaped like prior {eta.shape}, got released={released!r}")
    keep = expit(eps)  # 1 - pi
    flip = expit(-eps)  # pi
    like1 = np.where(rel == 1, keep, flip)
    like0 = np.where(rel == 1, flip, keep)
    post = like1 * eta / (like1 * eta + like0 * (1.0 - eta))
    return Posteriors(posterior=post, multiplicative_advantage=np.where(rel == 1, eps, -eps))


def llp_bags(priors, bag_sizes, bag_sums) -> Posteriors:
    """LLP over many bags: post_i = eta_i P_{-i}(s-1) / (eta_i P_{-i}(s-1) + (1-eta_i) P_{-i}(s))."""
    eta = checked_priors(priors)
    offsets = bag_offsets(eta, bag_sizes)
    sums = _integer_sums(bag_sums, np.diff(offsets), "bag_sums")
    return _run(eta, offsets, fb.LLP, sums, 1.0)


def llp_laplace_bags(priors, bag_sizes, released_proportions, *, epsilon: float) -> Posteriors:
    """LLP + Laplace(1/(k eps)) on the proportion over many bags: f(alpha | b) ~ exp(-k eps |alpha - b/k|)."""
    eps = checked_epsilon(epsilon)
    eta = checked_priors(priors)
    offsets = bag_offsets(eta, bag_sizes)
    alpha = _per_bag(released_proportions, offsets.size - 1, "released_proportions")
    return _run(eta, offsets, fb.LAPLACE, alpha * np.diff(offsets), eps)


def llp_geometric_bags(priors, bag_sizes, clipped_sums, *, epsilon: float) -> Posteriors:
    """LLP + two-sided geometric noise on the sum, clipped to [0, k], over many bags (conditions on Z)."""
    eps = checked_epsilon(epsilon)
    eta = checked_priors(priors)
    offsets = bag_offsets(eta, bag_sizes)
    z = _integer_sums(clipped_sums, np.diff(offsets), "clipped_sums")
    return _run(eta, offsets, fb.GEOMETRIC, z, eps)


def _llp_bags_any_epsilon(priors, bag_sizes, bag_sums, *, epsilon: float) -> Posteriors:
    """:func:`llp_bags` (plain LLP has no epsilon)."""
    return llp_bags(priors, bag_sizes, bag_sums)


# The posteriors of each bag mechanism given what it released per bag (the ``observed`` value of
# lia_spark.kernels.mechanisms.BAG_RELEASES): (priors, bag_sizes, observed, *, epsilon) -> Posteriors.
BAG_POSTERIORS: dict[str, Callable[..., Posteriors]] = {
    LLP: _llp_bags_any_epsilon, LLP_LAPLACE: llp_laplace_bags, LLP_GEOMETRIC: llp_geometric_bags}


def warm_up() -> None:
    """Compile (or load from numba's __pycache__ cache) the kernel for all three bag mechanisms.

    A fresh compile takes tens of seconds on a loaded machine, a cache load about one second; call this
    once on the driver before launching Spark tasks so that workers sharing the file system hit the cache.
    """
    priors = np.array([0.3, 0.6])
    offsets = np.array([0, 2])
    for mechanism in (fb.LLP, fb.LAPLACE, fb.GEOMETRIC):
        _run(priors, offsets, mechanism, np.array([1.0]), 1.0)


def _one_bag(priors) -> tuple[np.ndarray, np.ndarray]:
    eta = np.asarray(priors, dtype=np.float64)
    if eta.ndim != 1 or eta.size == 0:
        raise ValueError(f"priors must be a non-empty 1-D array for one bag, got shape {eta.shape}")
    return eta, np.array([eta.size])


def llp(priors, bag_sum) -> Posteriors:
    """LLP posteriors of one bag with priors eta_1..eta_k and label sum s (docs/math.md §3)."""
    eta, sizes = _one_bag(priors)
    return llp_bags(eta, sizes, [bag_sum])


def llp_laplace(priors, released_proportion, *, epsilon: float) -> Posteriors:
    """LLP + Laplace posteriors of one bag given the released noisy proportion alpha + Laplace(1/(k eps))."""
    eta, sizes = _one_bag(priors)
    return llp_laplace_bags(eta, sizes, [released_proportion], epsilon=epsilon)


def llp_geometric(priors, clipped_sum, *, epsilon: float) -> Posteriors:
    """LLP + geometric posteriors of one bag given the clipped noisy sum Z = clip(S + G, 0, k)."""
    eta, sizes = _one_bag(priors)
    return llp_geometric_bags(eta, sizes, [clipped_sum], epsilon=epsilon)
