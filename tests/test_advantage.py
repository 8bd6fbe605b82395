"""Advantage measures: the RR closed form against 1M simulated rows (Monte Carlo bounds stated), LLP
advantage decreasing in the bag size, exact percentiles that keep infinities, exact empirical CDFs,
summaries and their mergeable partial sums."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lia_spark import advantage, hashing, mechanisms, posteriors


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
