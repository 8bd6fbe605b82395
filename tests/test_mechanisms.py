"""Releases of lia_spark.kernels.mechanisms: distributions against closed forms (Monte Carlo bounds stated per
test), determinism and order-independence of the hash-keyed randomness, and the bagging rule."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from lia_spark.kernels import hashing, mechanisms


@given(st.floats(min_value=1e-3, max_value=30.0))
def test_epsilon_flip_probability_round_trip(eps):
    pi = mechanisms.flip_probability(eps)
    assert 0.0 < pi < 0.5
    assert pi == pytest.approx(1.0 / (1.0 + math.exp(eps)), rel=1e-14)
    assert mechanisms.epsilon_from_flip_probability(pi) == pytest.approx(eps, rel=1e-12)


def test_rr_release_flip_rate_and_determinism():
    n, eps = 400_000, 0.8
    ids = np.arange(n, dtype=np.int64) * 7 + 3
    labels = (hashing.uniform(5, "test/labels", ids) < 0.3).astype(np.int8)
    released = mechanisms.rr_release(labels, ids, epsilon=eps, seed=11)
    pi = mechanisms.flip_probability(eps)
    rate = np.mean(released != labels)
    assert abs(rate - pi) < 5 * math.sqrt(pi * (1 - pi) / n)  # 5 sigma
    # same (seed, row_id) -> same release whatever the order of the rows
    perm = np.random.default_rng(0).permutation(n)
    np.testing.assert_array_equal(mechanisms.rr_release(labels[perm], ids[perm], epsilon=eps, seed=11), released[perm])
    assert np.any(mechanisms.rr_release(labels, ids, epsilon=eps, seed=12) != released)


def test_bag_sums():
    labels = np.array([1, 0, 1, 1, 0, 0, 1])
    np.testing.assert_array_equal(mechanisms.bag_sums(labels, np.array([3, 2, 2])), [2, 1, 1])
    with pytest.raises(ValueError, match="bag_sizes"):
        mechanisms.bag_sums(labels, np.array([3, 3]))


def test_laplace_release_distribution():
    n, k, eps = 200_000, 16, 0.5
    sums = np.full(n, 5)
    sizes = np.full(n, k)
    released = mechanisms.laplace_release(sums, sizes, np.arange(n), epsilon=eps, seed=3)
    noise = released - 5 / k
    # Kolmogorov-Smirnov against Laplace(0, 1/(k eps)); deterministic seed, p-value far from rejection
    assert stats.kstest(noise, stats.laplace(scale=1 / (k * eps)).cdf).pvalue > 1e-3
    assert np.array_equal(released, mechanisms.laplace_release(sums, sizes, np.arange(n), epsilon=eps, seed=3))


def test_geometric_release_distribution_and_unbiased_post_processing():
    n, k, eps = 300_000, 200, 0.7
    a = math.exp(-eps)
    clipped, released = mechanisms.geometric_release(np.full(n, 100), np.full(n, k), np.arange(n), epsilon=eps, seed=9)
    noise = clipped - 100  # no clipping reachable in practice at |G| < 100 for eps = 0.7
    for g in range(-4, 5):
        expected = (1 - a) / (1 + a) * a ** abs(g)
        assert abs(np.mean(noise == g) - expected) < 5 * math.sqrt(expected * (1 - expected) / n)  # 5 sigma
    np.testing.assert_allclose(released, clipped / k)


@pytest.mark.parametrize("k, s, eps", [(5, 0, 0.3), (5, 2, 0.3), (5, 5, 1.5), (1, 1, 2.0)])
def test_geometric_post_processing_is_unbiased_exactly(k, s, eps):
    """sum_z P(Z = z | S = s) f(z) = s with P(Z = 0) = a^s / (1 + a), P(Z = k) = a^(k - s) / (1 + a)."""
    a = math.exp(-eps)

    def prob(z):
        if z == 0:
            return a ** s / (1 + a)
        if z == k:
            return a ** (k - s) / (1 + a)
        return (1 - a) / (1 + a) * a ** abs(z - s)

    probs = [prob(z) for z in range(k + 1)]
    f = mechanisms.geometric_post_process(np.arange(k + 1), np.full(k + 1, k), epsilon=eps)
    assert sum(probs) == pytest.approx(1.0, rel=1e-14)
    assert float(np.dot(probs, f)) == pytest.approx(s, rel=1e-12, abs=1e-12)


def test_assign_bags_sizes_determinism_and_order_independence():
    ids = np.arange(1, 10_004, dtype=np.int64) * 13
    bags = mechanisms.assign_bags(ids, bag_size=10, seed=1)
    counts = np.bincount(bags)
    assert counts.size == 1001 and np.all(counts[:-1] == 10) and counts[-1] == 3
    perm = np.random.default_rng(1).permutation(ids.size)
    np.testing.assert_array_equal(mechanisms.assign_bags(ids[perm], bag_size=10, seed=1), bags[perm])
    # the documented rule with one unit: rank of (key, row_id) // k, key = Spark's xxhash64(stream, row_id)
    keys = mechanisms.bagging_keys(ids, seed=1)
    np.testing.assert_array_equal(bags[np.lexsort((ids, keys))], np.arange(ids.size) // 10)


def test_assign_bags_with_units_keeps_one_remainder_bag_per_unit():
    ids = np.arange(100_000, dtype=np.int64) * 7 + 3
    assert mechanisms.bagging_unit_bits(ids.size, 20_000) == 2  # 2^2 <= 100k / 20k < 2^3
    assert mechanisms.bagging_unit_bits(ids.size, 0) == mechanisms.bagging_unit_bits(39_999, 20_000) == 0
    bags = mechanisms.assign_bags(ids, bag_size=64, seed=3, unit_bits=2)
    units = mechanisms.bagging_units(mechanisms.bagging_keys(ids, seed=3), unit_bits=2)
    unit_sizes = np.bincount(units)
    assert unit_sizes.size == 4 and abs(unit_sizes - ids.size / 4).max() < 5 * math.sqrt(ids.size / 4)
    np.testing.assert_array_equal(bags >> mechanisms.UNIT_SHIFT, units)
    bag_ids, sizes = np.unique(bags, return_counts=True)
    for unit, rows in enumerate(unit_sizes):
        in_unit = (bag_ids >> mechanisms.UNIT_SHIFT) == unit
        np.testing.assert_array_equal(bag_ids[in_unit] & ((1 << mechanisms.UNIT_SHIFT) - 1), np.arange(-(-rows // 64)))
        assert np.all(sizes[in_unit][:-1] == 64) and sizes[in_unit][-1] == (rows % 64 or 64)
    # units are the top key bits, so unit order is key order: within a unit bags follow the global key order
    order = np.lexsort((ids, mechanisms.bagging_keys(ids, seed=3)))
    assert np.all(np.diff(bags[order]) >= 0)


# Spark 4.3: select xxhash64(cast(0 as bigint)), xxhash64(cast(1 as bigint)), xxhash64(cast(-1 as bigint))
XXHASH64_SEED_42 = [-5252525462095825812, -7001672635703045582, 3858142552250413010]


def test_xxhash64_long_equals_sparks_xxhash64():
    """Fixed values printed by Spark; tests/test_posteriors_spark checks the bagging key expression on live data."""
    assert hashing.xxhash64_long(np.array([0, 1, -1], dtype=np.int64),
                                 hashing.SPARK_HASH_SEED).tolist() == XXHASH64_SEED_42


def test_assign_bags_is_uniform_over_seeds():
    """P(rows 0 and 1 share a bag) = (k - 1) / (n - 1) for a uniform partition into full bags."""
    n, k, seeds = 40, 4, 4000
    ids = np.arange(n, dtype=np.int64)
    same = sum(int(b[0] == b[1]) for b in (mechanisms.assign_bags(ids, bag_size=k, seed=s) for s in range(seeds)))
    p = (k - 1) / (n - 1)
    assert abs(same / seeds - p) < 5 * math.sqrt(p * (1 - p) / seeds)  # 5 sigma


@pytest.mark.parametrize("call, field", [
    (lambda: mechanisms.flip_probability(-1.0), "epsilon"),
    (lambda: mechanisms.rr_release([0, 2], [1, 2], epsilon=1.0, seed=0), "labels"),
    (lambda: mechanisms.assign_bags([1, 2], bag_size=0, seed=0), "bag_size"),
    (lambda: mechanisms.laplace_release([3], [2], [0], epsilon=1.0, seed=0), "bag_sums"),
])
def test_bad_input_names_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()
