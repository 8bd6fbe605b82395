"""Validity study on randomized response (observational paper, App. 11), reduced: n = 1e5, 20 repetitions."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from lia_spark import validity


def test_mixture_posterior_is_bayes_rule():
    sample = validity.gaussian_mixture(2000, dimension=5, rng=np.random.default_rng(0))
    x = sample.features[:5]
    # Bayes with equal class priors and the two N(e_y, I_5) densities, evaluated independently by scipy
    like = [stats.multivariate_normal(mean=np.eye(5)[y], cov=np.eye(5)).pdf(x) for y in (0, 1)]
    np.testing.assert_allclose(sample.posterior[:5], like[1] / (like[0] + like[1]), rtol=1e-12)
    assert abs(sample.labels.mean() - 0.5) < 0.05
    assert np.mean((sample.posterior > 0.5) == (sample.labels == 1)) > 0.7  # Bayes accuracy Phi(1/sqrt 2) = 0.76


def test_randomized_response_flip_rate():
    labels = np.zeros(100_000, dtype=np.int8)
    released = validity.randomized_response(labels, epsilon=1.0, rng=np.random.default_rng(1))
    assert released.mean() == pytest.approx(1 / (1 + np.e), abs=0.005)  # sd 0.0015


def test_audit_of_randomized_response_is_valid_and_informative():
    table = validity.study(n=100_000, repetitions=20, epsilons=(0.5, 2.0, 8.0), seed=7)
    assert len(table) == 2 * 3 * 4
    valid = table[table["measure"] != "sweep, paper"]
    # RR(eps) is eps-label-DP: a valid 95% bound exceeds eps in at most 5% of repetitions (1 of 20)
    assert valid["share_above"].max() <= 0.05, valid.to_string()
    best = table[table["measure"] == "sweep, bonferroni"].set_index(["proxy", "epsilon"])["eps_lb_mean"]
    for proxy in validity.PROXIES:
        assert best[proxy, 0.5] < best[proxy, 2.0] < best[proxy, 8.0]
        assert best[proxy, 2.0] > 0.8  # the attack finds a good part of the leak (n = 1e5 caps the bound)
