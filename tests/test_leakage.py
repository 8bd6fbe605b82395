"""Maximal leakage kernels vs independent references: enumeration of all 2^k label vectors with the
release pmf summed from the two-sided geometric pmf and the Laplace case integrated by scipy quadrature,
closed forms at their equality cases, the DP bounds 0 <= L <= min(eps, log 2) as hypothesis properties,
and PATE's Proposition 1 against numerical integration of the noisy-argmax probabilities."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from lia_spark.kernels import leakage

EXACT = 1e-12  # sums (llp, llp_geometric): absolute error in nats
QUADRATURE = 1e-8  # llp_laplace against scipy.integrate.quad
DP_MECHANISMS = ("rr", "llp_laplace", "llp_geometric")


def _sum_pmf_given_label(priors: np.ndarray, i: int) -> np.ndarray:
    """h[y, b] = P(sum of all k labels = b | y_i = y), by enumerating all 2^k label vectors."""
    k = priors.size
    vectors = np.array(list(itertools.product((0, 1), repeat=k)))
    probs = np.prod(np.where(vectors == 1, priors, 1.0 - priors), axis=1)
    sums = vectors.sum(axis=1)
    h = np.zeros((2, k + 1))
    for y in (0, 1):
        rows = vectors[:, i] == y
        np.add.at(h[y], sums[rows], probs[rows])
        h[y] /= probs[rows].sum()
    return h


def _clipped_geometric(k: int, epsilon: float) -> np.ndarray:
    """f[b, z] = P(clip(b + G, 0, k) = z), summing P(G = g) = (1-a)/(1+a) a^|g| over |g| <= 60/eps + 10."""
    a = math.exp(-epsilon)
    g = np.arange(-int(60 / epsilon) - 10, int(60 / epsilon) + 11)
    pg = (1 - a) / (1 + a) * a ** np.abs(g)
    f = np.zeros((k + 1, k + 1))
    for b in range(k + 1):
        np.add.at(f[b], np.clip(b + g, 0, k), pg)
    return f


def _enumerated_leakage(mechanism: str, priors: np.ndarray, epsilon: float) -> np.ndarray:
    k = priors.size
    out = []
    for i in range(k):
        h = _sum_pmf_given_label(priors, i)
        if mechanism == "llp":
            total = np.maximum(h[0], h[1]).sum()
        elif mechanism == "llp_geometric":
            g = h @ _clipped_geometric(k, epsilon)
            total = np.maximum(g[0], g[1]).sum()
        else:
            b = np.arange(k + 1)

            def density(z, y, h=h):
                return float(np.dot(h[y], 0.5 * epsilon * np.exp(-epsilon * np.abs(z - b))))

            def upper(z):
                return max(density(z, 0), density(z, 1))

            opts = {"epsabs": 1e-13, "epsrel": 1e-12, "limit": 200}
            total = integrate.quad(upper, -np.inf, 0, **opts)[0] + integrate.quad(upper, k, np.inf, **opts)[0]
            total += sum(integrate.quad(upper, j, j + 1, **opts)[0] for j in range(k))
        out.append(math.log(total))
    return np.array(out)


@pytest.mark.parametrize("mechanism,epsilon,k", [
    ("llp", math.inf, 1), ("llp", math.inf, 6), ("llp", math.inf, 10),
    ("llp_geometric", 0.3, 4), ("llp_geometric", 1.5, 10), ("llp_geometric", 8.0, 7),
    ("llp_laplace", 0.05, 3), ("llp_laplace", 1.0, 6), ("llp_laplace", 6.0, 8),
])
def test_per_row_matches_enumeration_of_all_label_vectors(mechanism, epsilon, k):
    rng = np.random.default_rng(k * 31 + int(epsilon if math.isfinite(epsilon) else 99))
    priors = np.concatenate([rng.uniform(0.001, 0.999, k - 1), [1e-6]])
    tol = QUADRATURE if mechanism == "llp_laplace" else EXACT
    np.testing.assert_allclose(leakage.per_row(mechanism, priors, epsilon=epsilon),
                               _enumerated_leakage(mechanism, priors, epsilon), rtol=0, atol=tol)


def test_batched_bags_equal_one_bag_at_a_time():
    rng = np.random.default_rng(3)
    sizes = np.array([1, 5, 17, 2])
    priors = rng.uniform(0.01, 0.99, sizes.sum())
    batched = leakage.per_row_bags("llp_laplace", priors, sizes, epsilon=0.8)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    single = np.concatenate([leakage.per_row("llp_laplace", priors[s:e], epsilon=0.8)
                             for s, e in zip(starts[:-1], starts[1:])])
    np.testing.assert_array_equal(batched, single)


@settings(max_examples=60, deadline=None)
@given(k=st.integers(1, 40), log_eps=st.floats(math.log(0.01), math.log(50.0)), seed=st.integers(0, 2**32 - 1),
       mechanism=st.sampled_from(DP_MECHANISMS))
def test_dp_mechanisms_leak_between_zero_and_min_eps_log2(k, log_eps, seed, mechanism):
    rng = np.random.default_rng(seed)
    eps = math.exp(log_eps)
    priors = 1.0 / (1.0 + np.exp(-rng.normal(0.0, 6.0, k)))
    priors = np.clip(priors, 1e-9, 1 - 1e-9)
    values = leakage.per_row(mechanism, priors, epsilon=eps)
    assert np.all(values >= 0.0)
    assert np.all(values <= min(eps, math.log(2.0)) + 1e-15)
    # data processing: the noisy releases are post-processings of the bag sum, the known-labels case is worst
    assert np.all(values <= leakage.worst_case(mechanism, epsilon=eps, bag_size=k) + 1e-15)
    if mechanism != "rr":
        assert np.all(values <= leakage.per_row("llp", priors) + 1e-15)


@pytest.mark.parametrize("epsilon", [0.01, 0.5, 3.0, 50.0])
def test_worst_cases_equal_their_closed_forms(epsilon):
    rr = math.log(2 * math.exp(epsilon) / (1 + math.exp(epsilon)))
    assert leakage.worst_case("rr", epsilon=epsilon) == pytest.approx(rr, rel=1e-14)
    assert leakage.worst_case("llp", bag_size=64) == math.log(2.0)
    assert leakage.worst_case("llp_laplace", epsilon=epsilon) == pytest.approx(
        math.log(2 - math.exp(-epsilon / 2)), rel=1e-14)
    for k in (1, 2, 9, 300):  # every other-labels sum s gives the RR value (module docstring)
        assert leakage.worst_case("llp_geometric", epsilon=epsilon, bag_size=k) == pytest.approx(rr, rel=1e-14)
    # a bag of one row: the other labels are trivially known, so per-row equals worst-case
    for mechanism in DP_MECHANISMS:
        assert leakage.per_row(mechanism, [0.3], epsilon=epsilon)[0] == pytest.approx(
            leakage.worst_case(mechanism, epsilon=epsilon), rel=1e-13)
    assert leakage.per_row("llp", [0.3])[0] == pytest.approx(math.log(2.0), rel=1e-15)


@pytest.mark.parametrize("mechanism,epsilon", [("llp", math.inf), ("llp_laplace", 0.01), ("llp_laplace", 1.0),
                                               ("llp_laplace", 50.0), ("llp_geometric", 0.01),
                                               ("llp_geometric", 1.0), ("llp_geometric", 50.0)])
def test_bag_of_1024_with_extreme_priors(mechanism, epsilon):
    k = 1024
    near_zero = np.full(k, 1e-9)
    mixed = np.where(np.arange(k) % 2 == 0, 1e-9, 1 - 1e-9)
    half = np.full(k, 0.5)
    cap = leakage.worst_case(mechanism, epsilon=epsilon, bag_size=k)
    for priors in (near_zero, mixed, 1.0 - near_zero, half):
        values = leakage.per_row(mechanism, priors, epsilon=epsilon)
        assert np.all(np.isfinite(values)) and np.all(values >= 0.0) and np.all(values <= cap + 1e-15)
    # others almost known (P(others' sum = s) = (1 - 1e-9)^1023): within 1e-5 of the worst case
    assert np.all(np.abs(leakage.per_row(mechanism, mixed, epsilon=epsilon) - cap) < 1e-5)
    if mechanism == "llp":
        # LLP: TV(Q shifted, Q) = max_s Q(s) for a unimodal Q; exact references for both extremes
        np.testing.assert_allclose(leakage.per_row("llp", near_zero),
                                   math.log1p(math.exp(1023 * math.log1p(-1e-9))), rtol=0, atol=EXACT)
        np.testing.assert_allclose(leakage.per_row("llp", half),
                                   math.log1p(stats.binom.pmf(511, 1023, 0.5)), rtol=0, atol=EXACT)


def _pate_win_probability(counts: np.ndarray, winner: int, gamma: float) -> float:
    """P(argmax_l (counts_l + N_l) = winner), N_l iid with density (gamma/2) e^{-gamma |x|}, by quadrature."""
    def integrand(x):
        others = np.delete(counts, winner)
        cdf = np.where(x + counts[winner] - others >= 0,
                       1 - 0.5 * np.exp(-gamma * np.abs(x + counts[winner] - others)),
                       0.5 * np.exp(-gamma * np.abs(x + counts[winner] - others)))
        return 0.5 * gamma * math.exp(-gamma * abs(x)) * np.prod(cdf)
    breaks = sorted({float(c - counts[winner]) for c in counts} | {0.0})  # kinks of the integrand
    edges = [-np.inf] + breaks + [np.inf]
    return sum(integrate.quad(integrand, lo, hi, epsabs=1e-14, epsrel=1e-12, limit=400)[0]
               for lo, hi in zip(edges[:-1], edges[1:]))


def _pate_leakage(known_votes, gamma: float) -> float:
    """log sum_y max_j P(y wins | known votes + the unknown teacher's vote for j) (the definition)."""
    known = np.asarray(known_votes, dtype=float)
    m = known.size
    total = 0.0
    for y in range(m):
        total += max(_pate_win_probability(known + np.eye(m)[j], y, gamma) for j in range(m))
    return math.log(total)


@pytest.mark.parametrize("classes", [2, 3, 5])
@pytest.mark.parametrize("gamma", [0.01, 0.7, 4.0, 30.0])
def test_pate_proposition_1_matches_integration_at_equal_votes(classes, gamma):
    result = leakage.pate_laplace(gamma=gamma, classes=classes)
    equal_votes = np.full(classes, 4.0)
    assert result.proposition_1 == pytest.approx(_pate_leakage(equal_votes, gamma), rel=1e-9, abs=1e-12)
    assert result.proposition_1 <= result.theorem_2_bound == gamma
    assert result.proposition_1 <= math.log(classes)


@pytest.mark.parametrize("known_votes", [(5, 2, 1), (7, 0, 1), (3, 3, 2)])
def test_pate_unequal_known_votes_leak_less_than_proposition_1(known_votes):
    gamma = 1.3
    bound = leakage.pate_laplace(gamma=gamma, classes=3).proposition_1
    assert _pate_leakage(known_votes, gamma) <= bound + 1e-12


def test_invalid_arguments_name_the_field():
    with pytest.raises(ValueError, match="mechanism"):
        leakage.worst_case("pate", epsilon=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        leakage.per_row("llp_laplace", [0.2, 0.3])
    with pytest.raises(ValueError, match="epsilon must be inf"):
        leakage.per_row("llp", [0.2, 0.3], epsilon=1.0)
    with pytest.raises(ValueError, match="bag_size"):
        leakage.worst_case("llp_geometric", epsilon=1.0, bag_size=0)
    with pytest.raises(ValueError, match="priors"):
        leakage.per_row("llp", [0.0, 0.3])
    with pytest.raises(ValueError, match="classes"):
        leakage.pate_laplace(gamma=1.0, classes=1)
