"""Releases of lia_spark.mechanisms: distributions against closed forms (Monte Carlo bounds stated per
test), determinism and order-independence of the hash-keyed randomness, and the bagging rule."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from lia_spark import hashing, mechanisms


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
    # the documented rule: rank of (hash key, row_id) // k
    keys = hashing.hash_bits(1, mechanisms.BAGGING_PURPOSE, ids)
    np.testing.assert_array_equal(bags[np.lexsort((ids, keys))], np.arange(ids.size) // 10)


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
