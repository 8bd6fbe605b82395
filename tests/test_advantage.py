"""Advantage measures: the RR closed form against 1M simulated rows (Monte Carlo bounds stated), LLP
advantage decreasing in the bag size, exact percentiles that keep infinities, exact empirical CDFs,
summaries and their mergeable partial sums."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lia_spark.kernels import advantage, hashing, mechanisms, posteriors


def test_rr_closed_form_matches_one_million_simulated_rows():
    n, eps = 1_000_000, 1.0
    ids = np.arange(n, dtype=np.int64)
    eta = np.random.default_rng(0).beta(2, 5, n)
    labels = hashing.bernoulli(1, "test/labels", ids, eta)
    released = mechanisms.rr_release(labels, ids, epsilon=eps, seed=2)
    res = posteriors.rr(eta, released, epsilon=eps)
    pi = mechanisms.flip_probability(eps)
    per_row = np.where((eta >= pi) & (eta <= 1 - pi), np.minimum(eta, 1 - eta) - pi, 0.0)
    closed = advantage.rr_closed_form_advantage(eta, epsilon=eps)
    assert closed == pytest.approx(per_row.mean(), rel=1e-12)
    # the rows are independent given eta: |mean - closed form| <= 5 standard errors of the mean
    add = advantage.additive_advantage(res.posterior, eta)
    assert abs(add.mean() - closed) <= 5 * np.std(add - per_row) / math.sqrt(n)
    real = advantage.realized_advantage(res.posterior, eta, labels)
    assert abs(real.mean() - closed) <= 5 * np.std(real - per_row) / math.sqrt(n)
    assert closed > 0.05  # the comparison is not vacuous


@pytest.mark.parametrize("eta", [0.05, 0.3, 0.5, 0.8])
def test_rr_closed_form_equals_bayes_success_difference(eta):
    """sum_z max_y P(z, y) - max(eta, 1 - eta), the definition, for one prior."""
    eps = 0.7
    pi = mechanisms.flip_probability(eps)
    informed = max((1 - pi) * eta, pi * (1 - eta)) + max(pi * eta, (1 - pi) * (1 - eta))
    assert advantage.rr_closed_form_advantage([eta], epsilon=eps) == pytest.approx(
        informed - max(eta, 1 - eta), abs=1e-15)


def test_llp_advantage_decreases_in_bag_size():
    n = 1 << 16
    rng = np.random.default_rng(5)
    eta = rng.beta(2, 5, n)
    labels = (rng.random(n) < eta).astype(np.int8)
    means = []
    for k in (1, 2, 4, 8, 32, 128):
        sizes = np.full(n // k, k)
        res = posteriors.llp_bags(eta, sizes, mechanisms.bag_sums(labels, sizes))
        means.append(advantage.additive_advantage(res.posterior, eta).mean())
    # standard errors are below 1e-3 here; consecutive gaps are at least several times larger
    assert all(a > b + 2e-3 for a, b in zip(means, means[1:])), means
    assert means[0] == pytest.approx(np.mean(np.minimum(eta, 1 - eta)), rel=1e-12)  # k = 1 reveals the label


def test_exact_percentile_keeps_infinities():
    values = np.array([0.5, np.inf, 2.0, np.inf, 1.0, 3.0, np.inf, 0.1, 0.2, 0.3])
    assert advantage.exact_percentile(values, 50) == 1.0  # sorted: 0.1 0.2 0.3 0.5 1 2 3 inf inf inf
    assert advantage.exact_percentile(values, 70) == 3.0
    assert advantage.exact_percentile(values, 71) == np.inf
    assert advantage.exact_percentile(values, 99) == np.inf
    assert advantage.exact_percentile(np.full(5, np.inf), 50) == np.inf
    finite = np.random.default_rng(1).exponential(size=1001)
    for q in advantage.PERCENTILES:
        assert advantage.exact_percentile(finite, q) == np.percentile(finite, q, method="inverted_cdf")


def test_empirical_cdf_is_exact():
    values = np.array([3.0, 1.0, np.inf, 1.0, 2.0])
    x, f = advantage.empirical_cdf(values)
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0, np.inf])
    np.testing.assert_array_equal(f, [0.4, 0.6, 0.8, 1.0])
    many = np.random.default_rng(2).normal(size=20_000)
    x, f = advantage.empirical_cdf(many, points=101)
    assert x.size == 101 and x[0] == many.min() and x[-1] == many.max()
    np.testing.assert_array_equal(f, [np.mean(many <= v) for v in x])


def test_summarize_llp_and_partial_sums_merge():
    n, k = 4096, 4
    rng = np.random.default_rng(3)
    eta = rng.beta(1, 3, n)
    labels = (rng.random(n) < eta).astype(np.int8)
    sizes = np.full(n // k, k)
    sums = mechanisms.bag_sums(labels, sizes)
    res = posteriors.llp_bags(eta, sizes, sums)
    summary = advantage.summarize(res, eta, labels, mechanism="llp", epsilon=math.nan, bag_size=k)
    homogeneous_rows = k * np.count_nonzero((sums == 0) | (sums == k))
    assert summary.share_infinite == homogeneous_rows / n > 0.1
    assert summary.abs_I_p99 == np.inf and not math.isnan(summary.abs_I_p50)
    assert summary.mean_additive_advantage == pytest.approx(advantage.additive_advantage(res.posterior, eta).mean())
    assert set(summary.row()) == {"mechanism", "epsilon", "bag_size", "rows", "mean_additive_advantage",
                                  "realized_additive_advantage", "abs_I_p50", "abs_I_p90", "abs_I_p98",
                                  "abs_I_p99", "share_infinite"}
    json.dumps(summary.to_dict())  # plain Python types only
    half = n // 2
    parts = [advantage.PartialSums.of(posteriors.Posteriors(res.posterior[s], res.multiplicative_advantage[s]),
                                      eta[s], labels[s]) for s in (slice(0, half), slice(half, n))]
    merged = parts[0].merge(parts[1]).means()
    assert merged["share_infinite"] == summary.share_infinite
    assert merged["mean_additive_advantage"] == pytest.approx(summary.mean_additive_advantage, rel=1e-12)
    assert merged["realized_additive_advantage"] == pytest.approx(summary.realized_additive_advantage, rel=1e-12)


def _mixed_abs_i(seed: int, n: int) -> np.ndarray:
    """|I| with ties, zeros, +inf, tiny and huge values, a single-valued stretch (RR-like) and continuous values."""
    rng = np.random.default_rng(seed)
    values = np.abs(rng.standard_t(2, n))
    kinds = rng.integers(0, 6, n)
    values[kinds == 0] = np.inf
    values[kinds == 1] = 0.0
    values[kinds == 2] = 2.0  # one exact value filling a bin
    values[kinds == 3] = rng.choice([1e-300, 5e-324, 1e300], (kinds == 3).sum())
    return values


@pytest.mark.parametrize("seed", range(4))
def test_bin_digest_equals_brute_force_and_merges(seed):
    """Per bin: counts, min, max and sums equal a plain group-by (sums to 1e-12), in any split of the rows."""
    abs_i = _mixed_abs_i(seed, 5000)
    rng = np.random.default_rng(seed + 10)
    additive, realized = rng.uniform(-0.5, 0.5, abs_i.size), rng.integers(-1, 2, abs_i.size).astype(float)
    digest = advantage.bin_digest(abs_i, additive, realized)
    bins = abs_i.view(np.int64) >> 48
    assert digest["bin"].tolist() == sorted(set(bins.tolist()))
    for at, b in enumerate(digest["bin"]):
        inside = bins == b
        assert digest["rows"][at] == inside.sum()
        assert digest["low"][at] == abs_i[inside].min() and digest["high"][at] == abs_i[inside].max()
        assert digest["additive"][at] == pytest.approx(additive[inside].sum(), rel=1e-12, abs=1e-12)
        assert digest["realized"][at] == realized[inside].sum()
    # bins are monotone in |I|: every value of a bin lies strictly between its neighbours' values
    assert (digest["high"][:-1] < digest["low"][1:]).all()
    assert digest["bin"][-1] == advantage.INFINITE_BIN and digest["low"][-1] == np.inf
    cuts = np.sort(rng.choice(abs_i.size, 5, replace=False))
    parts = [advantage.bin_digest(*(a[start:end] for a in (abs_i, additive, realized)))
             for start, end in zip(np.r_[0, cuts], np.r_[cuts, abs_i.size])]
    merged = advantage.merge_bin_digests(parts)
    for name in ("bin", "rows", "low", "high", "realized"):
        np.testing.assert_array_equal(merged[name], digest[name])
    np.testing.assert_allclose(merged["additive"], digest["additive"], rtol=1e-12, atol=1e-12)
    for empty in (advantage.merge_bin_digests([]), advantage.bin_digest(np.zeros(0), np.zeros(0), np.zeros(0))):
        assert all(empty[name].size == 0 for name in advantage.DIGEST_FIELDS)


@pytest.mark.parametrize("seed, n", [(0, 1), (1, 7), (2, 100), (3, 5000), (4, 20011)])
def test_digest_percentiles_with_in_bin_selection_are_exact(seed, n):
    """Read off single-valued bins, else ranked inside the bin: equals exact_percentile (bitwise)."""
    abs_i = _mixed_abs_i(seed, n)
    digest = advantage.bin_digest(abs_i, np.zeros(n), np.zeros(n))
    located = advantage.digest_percentiles(digest)
    for q, where in located.items():
        if isinstance(where, tuple):
            at, rank = where
            inside = np.sort(abs_i[(abs_i >= digest["low"][at]) & (abs_i <= digest["high"][at])])
            assert inside.size == digest["rows"][at]
            value = inside[rank]
        else:
            value = where
        assert value == advantage.exact_percentile(abs_i, q), q


def test_digest_percentiles_reject_nan_and_empty():
    with pytest.raises(ValueError, match="NaN"):
        advantage.digest_percentiles(advantage.bin_digest(np.array([1.0, np.nan]), np.zeros(2), np.zeros(2)))
    with pytest.raises(ValueError, match="no rows"):
        advantage.digest_percentiles(advantage.merge_bin_digests([]))
