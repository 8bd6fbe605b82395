"""Training-label mechanisms: RRWithPrior against the docs/math.md §2.6 rule, flip rates against theory,
bag releases."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lia_spark.kernels import label_mechanisms as lm
from lia_spark.kernels import mechanisms

N = 1_000_000


@pytest.fixture(scope="module")
def population():
    rng = np.random.default_rng(11)
    prior = rng.beta(0.6, 1.2, N)
    labels = (rng.random(N) < prior).astype(np.int8)
    return labels, prior, np.arange(N, dtype=np.int64) * 3 + 5


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 2.5])
def test_rr_with_prior_matches_spec_rule_exactly(population, epsilon):
    labels, prior, ids = population
    released = lm.rr_with_prior(labels, prior, ids, epsilon=epsilon, seed=9)
    # docs/math.md §2.6, written independently: |log(p/(1-p))| >= eps -> argmax of the prior, else RR(eps) with the
    # same keyed flips as the RR release.
    with np.errstate(divide="ignore"):
        confident = np.abs(np.log(prior / (1.0 - prior))) >= epsilon
    rr = mechanisms.rr_release(labels, ids, epsilon=epsilon, seed=9)
    expected = np.where(confident, (prior > 0.5).astype(np.int8), rr)
    np.testing.assert_array_equal(released, expected)
    assert 0 < confident.sum() < N  # both branches exercised


def test_rr_with_prior_hand_cases():
    labels = np.array([0, 0, 1, 1])
    prior = np.array([0.9, 0.05, 0.1, 0.5])
    released = lm.rr_with_prior(labels, prior, np.arange(4), epsilon=1.0, seed=1)
    # logit 0.9 = 2.2 >= 1 -> 1; logit 0.05 = -2.9 -> 0; logit 0.1 = -2.2 -> 0; p = 0.5 -> RR branch.
    assert released[:3].tolist() == [1, 0, 0]
    np.testing.assert_array_equal(lm.rr_with_prior(labels, prior, np.arange(4), epsilon=math.inf, seed=1), labels)


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_flip_rates_match_theory(population, epsilon):
    labels, prior, ids = population
    pi = 1.0 / (1.0 + math.exp(epsilon))
    flips = lm.randomized_response(labels, ids, epsilon=epsilon, seed=4) != labels
    # Binomial(N, pi): 5 standard deviations.
    assert abs(flips.mean() - pi) < 5 * math.sqrt(pi * (1 - pi) / N)
    released = lm.rr_with_prior(labels, prior, ids, epsilon=epsilon, seed=4)
    with np.errstate(divide="ignore"):
        confident = np.abs(np.log(prior) - np.log1p(-prior)) >= epsilon
    # P(flip | row) = pi in the RR branch, 1{y != argmax} in the deterministic branch.
    p_flip = np.where(confident, (labels != (prior > 0.5)).astype(float), pi)
    observed = (released != labels).sum()
    assert abs(observed - p_flip.sum()) < 5 * math.sqrt((p_flip * (1 - p_flip)).sum()) + 1
    in_rr = ~confident
    assert abs((released != labels)[in_rr].mean() - pi) < 5 * math.sqrt(pi * (1 - pi) / in_rr.sum())


def test_debias_inverts_rr_expectation():
    eta = np.linspace(0.01, 0.99, 99)
    pi = lm.rr_flip_probability(epsilon=1.3)
    np.testing.assert_allclose(lm.debias_rr_predictions(pi + (1 - 2 * pi) * eta, epsilon=1.3), eta, rtol=1e-12)
    assert lm.debias_rr_predictions(np.array([0.0, 1.0]), epsilon=1.3).tolist() == [1e-6, 1 - 1e-6]


def test_bag_proportions_llp_exact_and_noisy_moments():
    rng = np.random.default_rng(3)
    n, k = 200_003, 8
    labels = rng.integers(0, 2, n)
    ids = rng.permutation(10 * n)[:n].astype(np.int64)
    bags, alpha = lm.bag_proportions(ids, labels, mechanism="llp", epsilon=math.inf, bag_size=k, seed=5)
    sizes = np.bincount(bags)
    assert (sizes == k).sum() == sizes.size - 1 and sizes[sizes != k].tolist() == [n % k]
    np.testing.assert_allclose(alpha, np.bincount(bags, weights=labels) / sizes, rtol=0, atol=1e-15)
    _, noisy = lm.bag_proportions(ids, labels, mechanism="llp_laplace", epsilon=1.0, bag_size=k, seed=5)
    noise = (noisy - alpha)[sizes == k]
    # Laplace(1/(k eps)): mean 0, variance 2/(k eps)^2; tolerances are 5 standard errors.
    var = 2.0 / k**2
    assert abs(noise.mean()) < 5 * math.sqrt(var / noise.size)
    assert abs(noise.var() - var) < 5 * math.sqrt(20 * var**2 / noise.size)
    _, geometric = lm.bag_proportions(ids, labels, mechanism="llp_geometric", epsilon=1.0, bag_size=k, seed=5)
    # Post-processed clipped geometric noise is unbiased (docs/math.md §2.5).
    diff = (geometric - alpha)[sizes == k]
    assert abs(diff.mean()) < 5 * diff.std() / math.sqrt(diff.size)


def test_lp2st_halves_and_bad_input():
    half = lm.lp2st_first_half(np.arange(100_000), seed=2)
    assert abs(half.mean() - 0.5) < 0.01
    with pytest.raises(ValueError, match="labels"):
        lm.randomized_response(np.array([0, 2]), np.arange(2), epsilon=1.0, seed=0)
    with pytest.raises(ValueError, match="prior"):
        lm.rr_with_prior(np.array([0, 1]), np.array([0.5, 1.5]), np.arange(2), epsilon=1.0, seed=0)
    with pytest.raises(ValueError, match="mechanism"):
        lm.bag_proportions(np.arange(4), np.zeros(4), mechanism="rr", epsilon=1.0, bag_size=2, seed=0)
