"""Label-privacy releases of docs/math.md §2 as pure functions of (seed, purpose, id).

[BDG+24] sec. 2, 4 and
[BDG+23] sec. 2, 6. Every random draw comes from
lia_spark.kernels.hashing keyed on (seed, purpose, row or bag id), so a release never depends on
partitioning, executor count or retries. Bags are bag-contiguous: the rows of bag b are
sum(bag_sizes[:b]) .. sum(bag_sizes[:b+1]) - 1.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
from scipy.special import expit, logit

from lia_spark.kernels import hashing
from lia_spark.names import LLP, LLP_GEOMETRIC, LLP_LAPLACE

RR_PURPOSE = "mechanism/rr"
BAGGING_PURPOSE = "mechanism/bagging"
LAPLACE_PURPOSE = "mechanism/llp_laplace"
GEOMETRIC_PURPOSE = "mechanism/llp_geometric"
ROWS_PER_BAGGING_UNIT = 1 << 18  # default rows per independent bagging unit (see bagging_unit_bits)
MAX_UNIT_BITS = 20
UNIT_SHIFT = 40  # bag id = unit * 2^40 + index of the bag inside its unit


def checked_epsilon(epsilon: float) -> float:
    """``epsilon`` as a float, which must be finite and > 0 (ValueError naming the value otherwise)."""
    eps = float(epsilon)
    if not np.isfinite(eps) or eps <= 0.0:
        raise ValueError(f"epsilon must be a finite positive number, got epsilon={epsilon!r}")
    return eps


def _check_labels(labels) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1 or not np.all((arr == 0) | (arr == 1)):
        raise ValueError(f"labels must be a 1-D array of 0/1, got labels={labels!r}")
    return arr.astype(np.int64)


def _sizes(bag_sizes) -> np.ndarray:
    sizes = np.asarray(bag_sizes)
    if sizes.ndim != 1 or not np.issubdtype(sizes.dtype, np.integer) or (sizes.size and sizes.min() < 1):
        raise ValueError(f"bag_sizes must be a 1-D array of positive integers, got bag_sizes={bag_sizes!r}")
    return sizes.astype(np.int64)


def flip_probability(epsilon: float) -> float:
    """RR flip probability pi = 1 / (1 + e^eps)."""
    return float(expit(-checked_epsilon(epsilon)))


def epsilon_from_flip_probability(flip: float) -> float:
    """Inverse of flip_probability: eps = log((1 - pi) / pi) for pi in (0, 1/2)."""
    pi = float(flip)
    if not 0.0 < pi < 0.5:
        raise ValueError(f"flip must lie in (0, 0.5), got flip={flip!r}")
    return float(-logit(pi))


def flip_labels(labels, uniforms, *, epsilon: float) -> np.ndarray:
    """RR(eps) given one Uniform(0, 1) draw u per label: y XOR 1{u < pi}, pi = 1/(1+e^eps) (int8)."""
    flips = np.asarray(uniforms) < np.asarray(flip_probability(epsilon))
    return (np.asarray(labels) ^ flips).astype(np.int8)


def rr_release(labels, row_ids, *, epsilon: float, seed: int) -> np.ndarray:
    """RR(eps): :func:`flip_labels` with u keyed on (seed, "mechanism/rr", row_id)."""
    y = _check_labels(labels)
    ids = np.asarray(row_ids)
    if ids.shape != y.shape:
        raise ValueError(f"row_ids must be shaped like labels {y.shape}, got row_ids with shape {ids.shape}")
    return flip_labels(y, hashing.uniform(seed, RR_PURPOSE, ids), epsilon=epsilon)


def bag_sums(labels, bag_sizes) -> np.ndarray:
    """Per-bag label sums S_b of bag-contiguous labels."""
    y = _check_labels(labels)
    sizes = _sizes(bag_sizes)
    if sizes.sum() != y.size:
        raise ValueError(f"bag_sizes must sum to len(labels)={y.size}, got sum(bag_sizes)={sizes.sum()}")
    if sizes.size == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return np.add.reduceat(y, starts).astype(np.int64)


def _per_bag(bag_sums_, bag_sizes, bag_ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sums = np.asarray(bag_sums_, dtype=np.int64)
    sizes = _sizes(bag_sizes)
    ids = np.asarray(bag_ids)
    if not (sums.shape == sizes.shape == ids.shape):
        raise ValueError(f"bag_sums, bag_sizes and bag_ids must have equal shapes, got {sums.shape}, "
                         f"{sizes.shape}, {ids.shape}")
    if np.any((sums < 0) | (sums > sizes)):
        raise ValueError("bag_sums must lie in [0, bag size], got bag_sums outside that range")
    return sums, sizes, ids


def laplace_release(bag_sums, bag_sizes, bag_ids, *, epsilon: float, seed: int) -> np.ndarray:
    """LLP+Lap(eps, k): alpha + Z, Z ~ Laplace(scale 1/(k eps)) by inversion of u ~ U(0, 1) keyed on the bag id:
    Z = -scale sign(u - 1/2) log(1 - 2 |u - 1/2|) (finite since u lies strictly inside (0, 1))."""
    eps = checked_epsilon(epsilon)
    sums, sizes, ids = _per_bag(bag_sums, bag_sizes, bag_ids)
    centred = hashing.uniform(seed, LAPLACE_PURPOSE, ids) - 0.5
    noise = -np.sign(centred) * np.log1p(-2.0 * np.abs(centred)) / (sizes * eps)
    return sums / sizes + noise


def geometric_release(bag_sums, bag_sizes, bag_ids, *, epsilon: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """LLP+Geom(eps, k): Z = clip(S + G, 0, k), G = G1 - G2 with G1, G2 iid Geometric(1 - a) on {0, 1, ...}
    (a = e^-eps), which gives P(G = g) = (1-a)/(1+a) a^|g|; G_j = floor(log(u_j) / log a) by inversion.

    Returns:
        (Z, f(Z)/k) with the unbiased post-processing f(0) = -a/(1-a), f(k) = k + a/(1-a), f(z) = z otherwise.
    """
    eps = checked_epsilon(epsilon)
    sums, sizes, ids = _per_bag(bag_sums, bag_sizes, bag_ids)
    g1 = np.floor(np.log(hashing.uniform(seed, GEOMETRIC_PURPOSE, ids, 0)) / -eps)
    g2 = np.floor(np.log(hashing.uniform(seed, GEOMETRIC_PURPOSE, ids, 1)) / -eps)
    clipped = np.clip(sums + (g1 - g2), 0, sizes).astype(np.int64)
    return clipped, geometric_post_process(clipped, sizes, epsilon=eps) / sizes


class BagRelease(NamedTuple):
    """What a bag mechanism releases, per bag: the value posteriors condition on (``observed``: the sum S for
    LLP, the noisy proportion for LLP+Lap, the clipped noisy sum Z for LLP+Geom) and the released proportion."""

    observed: np.ndarray
    proportion: np.ndarray


def llp_release(bag_sums, bag_sizes, bag_ids, *, epsilon: float, seed: int) -> BagRelease:
    """LLP(k): the exact proportion S/k (no noise: epsilon, seed and bag ids are not used)."""
    sums, sizes, _ = _per_bag(bag_sums, bag_sizes, bag_ids)
    return BagRelease(sums, sums / sizes)


def _laplace_bag_release(bag_sums, bag_sizes, bag_ids, *, epsilon: float, seed: int) -> BagRelease:
    released = laplace_release(bag_sums, bag_sizes, bag_ids, epsilon=epsilon, seed=seed)
    return BagRelease(released, released)


def _geometric_bag_release(bag_sums, bag_sizes, bag_ids, *, epsilon: float, seed: int) -> BagRelease:
    return BagRelease(*geometric_release(bag_sums, bag_sizes, bag_ids, epsilon=epsilon, seed=seed))


# The release of each bag mechanism: (bag_sums, bag_sizes, bag_ids, *, epsilon, seed) -> BagRelease.
BAG_RELEASES: dict[str, Callable[..., BagRelease]] = {
    LLP: llp_release, LLP_LAPLACE: _laplace_bag_release, LLP_GEOMETRIC: _geometric_bag_release}


def geometric_post_process(clipped_sums, bag_sizes, *, epsilon: float) -> np.ndarray:
    """Unbiased f(Z): -a/(1-a) at Z = 0, k + a/(1-a) at Z = k, Z elsewhere (a = e^-eps)."""
    eps = checked_epsilon(epsilon)
    z = np.asarray(clipped_sums, dtype=np.float64)
    k = np.asarray(bag_sizes, dtype=np.float64)
    shift = 1.0 / np.expm1(eps)  # a / (1 - a)
    return np.where(z <= 0, -shift, np.where(z >= k, k + shift, z))


def bagging_unit_bits(rows: int, rows_per_unit: int = ROWS_PER_BAGGING_UNIT) -> int:
    """b such that 2^b bagging units hold about ``rows_per_unit`` rows each: the largest b <= MAX_UNIT_BITS with
    2^b <= rows / rows_per_unit (b = 0, a single unit, for small inputs or rows_per_unit = 0)."""
    if rows_per_unit < 0:
        raise ValueError(f"rows_per_unit must be >= 0 (0 = one unit), got rows_per_unit={rows_per_unit!r}")
    if rows_per_unit == 0 or rows < 2 * rows_per_unit:
        return 0
    return min(MAX_UNIT_BITS, (rows // rows_per_unit).bit_length() - 1)


def bagging_keys(row_ids, *, seed: int) -> np.ndarray:
    """Random sort key of every row: Spark's ``xxhash64(stream_key(seed, "mechanism/bagging"), row_id)``
    (see :func:`lia_spark.kernels.hashing.xxhash64_long`), as signed int64."""
    return hashing.spark_row_hash(seed, BAGGING_PURPOSE, row_ids)


def bagging_units(keys, *, unit_bits: int) -> np.ndarray:
    """Unit of every key: its top ``unit_bits`` bits, counted from the most negative key (monotone in the
    signed key, so sorting by (unit, key) is sorting by key)."""
    keys = np.asarray(keys, dtype=np.int64)
    if unit_bits == 0:
        return np.zeros(keys.shape, dtype=np.int32)
    return ((keys >> np.int64(64 - unit_bits)) + np.int64(1 << (unit_bits - 1))).astype(np.int32)


def unit_bag_ids(units, positions, *, bag_size: int) -> np.ndarray:
    """Bag id of the row at 0-based ``positions`` inside its unit: unit * 2^UNIT_SHIFT + position // k."""
    return ((np.asarray(units, dtype=np.int64) << np.int64(UNIT_SHIFT))
            + np.asarray(positions, dtype=np.int64) // bag_size)


def assign_bags(row_ids, *, bag_size: int, seed: int, unit_bits: int | None = None) -> np.ndarray:
    """Uniformly random partition into bags of exactly ``bag_size`` rows, at most one smaller remainder bag per
    bagging unit (docs/math.md §2.2: per independent bagging unit).

    Rule (the Spark stage implements the same rule distributedly): key each row by :func:`bagging_keys`, the
    unit is the key's top ``unit_bits`` bits (:func:`bagging_units`; default :func:`bagging_unit_bits` of the
    row count), rows sorted by (key, row_id) inside their unit, bag = :func:`unit_bag_ids` of (unit, position). The
    keys are a pseudo-random permutation, so every partition of a unit into such bags is equally likely.

    Returns:
        int64 bag id per row, aligned with ``row_ids``. With one unit (small inputs) the ids are
        0..ceil(n/k)-1 and only the last bag may be smaller.
    """
    if isinstance(bag_size, bool) or not isinstance(bag_size, (int, np.integer)) or bag_size < 1:
        raise ValueError(f"bag_size must be a positive integer, got bag_size={bag_size!r}")
    ids = np.asarray(row_ids)
    if ids.ndim != 1:
        raise ValueError(f"row_ids must be 1-D, got row_ids with shape {ids.shape}")
    bits = bagging_unit_bits(ids.size) if unit_bits is None else unit_bits
    if not 0 <= bits <= MAX_UNIT_BITS:
        raise ValueError(f"unit_bits must be in [0, {MAX_UNIT_BITS}], got unit_bits={unit_bits!r}")
    keys = bagging_keys(ids, seed=seed)
    units = bagging_units(keys, unit_bits=bits)
    order = np.lexsort((ids, keys))
    sorted_units = units[order]
    unit_starts = np.searchsorted(sorted_units, sorted_units, side="left")
    positions = np.arange(ids.size, dtype=np.int64) - unit_starts
    bags = np.empty(ids.size, dtype=np.int64)
    bags[order] = unit_bag_ids(sorted_units, positions, bag_size=int(bag_size))
    return bags
