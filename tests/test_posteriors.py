"""Posterior kernels vs independent references: enumeration of all 2^k label vectors in 60-digit
decimal arithmetic, leave-one-out Poisson-binomial DPs in 40-digit decimals at k = 1024, martingale
identities (E[post_i] = eta_i) by exact sums and numerical integration, and hypothesis properties."""
from __future__ import annotations

import itertools
import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate

from lia_spark.kernels import posteriors

REL = 1e-12  # enumeration checks, k <= 12: posterior relative error and |I| error relative to max(1, |I|)


def _weights(mechanism: str, k: int, value: float, epsilon: float) -> list[Decimal]:
    """f(z | b) for b = 0..k up to a constant, in Decimal (the docs/math.md §3.3 formulas written out again)."""
    if mechanism == "llp":
        return [Decimal(1 if b == value else 0) for b in range(k + 1)]
    eps = Decimal(epsilon)
    if mechanism == "laplace":
        alpha = Decimal(value)
        return [(-eps * k * abs(alpha - Decimal(b) / k)).exp() for b in range(k + 1)]
    z = int(value)
    if z == 0:
        return [(-eps * b).exp() for b in range(k + 1)]
    if z == k:
        return [(-eps * (k - b)).exp() for b in range(k + 1)]
    return [(-eps * abs(z - b)).exp() for b in range(k + 1)]


def _enumerate(priors, weights):
    """(posterior_i, I_i) by summing P(y) f(z | sum y) over all 2^k label vectors y."""
    k = len(priors)
    eta = [Decimal(float(p)) for p in priors]
    like = [[Decimal(0), Decimal(0)] for _ in range(k)]
    for ys in itertools.product((0, 1), repeat=k):
        factors = [e if y else 1 - e for e, y in zip(eta, ys)]
        total = weights[sum(ys)]
        if total == 0:
            continue
        for f in factors:
            total *= f
        for i, y in enumerate(ys):
            like[i][y] += total / factors[i]
    post, llr = [], []
    for i in range(k):
        l0, l1 = like[i]
        post.append(float(eta[i] * l1 / (eta[i] * l1 + (1 - eta[i]) * l0)))
        llr.append(math.inf if l0 == 0 else -math.inf if l1 == 0 else float((l1 / l0).ln()))
    return np.array(post), np.array(llr)


def _run(mechanism, priors, value, epsilon):
    if mechanism == "llp":
        return posteriors.llp(priors, value)
    if mechanism == "laplace":
        return posteriors.llp_laplace(priors, value, epsilon=epsilon)
    return posteriors.llp_geometric(priors, value, epsilon=epsilon)


def _assert_llr_close(actual, expected, rel):
    inf = np.isinf(expected)
    assert np.array_equal(actual[inf], expected[inf])
    np.testing.assert_array_less(np.abs(actual[~inf] - expected[~inf]), rel * np.maximum(1.0, np.abs(expected[~inf])))


def _random_priors(rng, k):
    priors = rng.uniform(0.001, 0.999, k)
    priors[rng.random(k) < 0.2] = 1e-6
    priors[rng.random(k) < 0.2] = 1 - 1e-6
    return priors


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 12])
def test_matches_enumeration_all_mechanisms(k):
    rng = np.random.default_rng(k)
    priors = _random_priors(rng, k)
    cases = [("llp", s, 0.0) for s in range(k + 1)]
    cases += [("laplace", a, eps) for a in (-0.3, 0.0, 0.37, 0.9, 1.0, 1.4) for eps in (0.05, 1.0, 20.0)]
    cases += [("geometric", z, eps) for z in range(k + 1) for eps in (0.05, 1.0, 20.0)]
    if k == 12:
        cases = cases[::3]  # 2^12 vectors per case: keep the runtime small
    with localcontext() as ctx:
        ctx.prec = 60
        for mechanism, value, eps in cases:
            expected_post, expected_llr = _enumerate(priors, _weights(mechanism, k, value, eps))
            got = _run(mechanism, priors, value, eps)
            np.testing.assert_allclose(got.posterior, expected_post, rtol=REL, atol=0,
                                       err_msg=f"{mechanism} value={value} eps={eps}")
            _assert_llr_close(got.multiplicative_advantage, expected_llr, REL)


# Priors far outside 1e-9 .. 1 - 1e-9 (the validator accepts any prior in (0, 1)): five labels are 1 almost surely,
# three are 0 almost surely, so the sum sits at 5 and a tiny row's L_1 lives on sum 6, which the joint makes negligible.
_FAR_OUTSIDE_RANGE_BAG = np.array([
    3.8932027533290555e-165, 0.9999999999999939, 1.7596447009490188e-248, 0.9999997461760017,
    0.9999999999322636, 0.9999736302178168, 0.9999999999999984, 1.8001828897471843e-88])


@pytest.mark.parametrize("mechanism", ["laplace", "geometric"])
@pytest.mark.parametrize("eps", [0.05, 0.5, 3.0, 20.0])
def test_priors_far_outside_the_range_match_enumeration(mechanism, eps):
    """Same tolerances as the enumeration test. A tilt that Newton dragged to u = 130 although the untilted mean
    already fit, and a window without the sum next to it, once gave I = -10.5 for the tiny rows (exact: -0.49997)."""
    priors = _FAR_OUTSIDE_RANGE_BAG
    k = priors.size
    values = range(1, k) if mechanism == "geometric" else [0.1, 0.4, 0.6, 0.65, 0.8, 0.95]
    with localcontext() as ctx:
        ctx.prec = 60
        for value in values:
            expected_post, expected_llr = _enumerate(priors, _weights(mechanism, k, value, eps))
            got = _run(mechanism, priors, value, eps)
            np.testing.assert_allclose(got.posterior, expected_post, rtol=REL, atol=0, err_msg=f"value={value}")
            _assert_llr_close(got.multiplicative_advantage, expected_llr, REL)


prior_far_outside_the_range = st.one_of(
    st.floats(9, 300).map(lambda exponent: 10.0 ** -exponent),
    st.floats(9, 16).map(lambda exponent: 1 - 10.0 ** -exponent),
    st.floats(0.01, 0.99))


@settings(max_examples=80, deadline=None)
@given(st.lists(prior_far_outside_the_range, min_size=2, max_size=8),
       st.sampled_from(["llp", "laplace", "geometric"]), st.floats(0, 1), st.floats(-2, np.log10(50)))
def test_property_priors_down_to_1e300_match_enumeration(priors, mechanism, position, log10_eps):
    """Random bags mixing priors 1e-9 .. 1e-300, 1 - 1e-9 .. 1 - 1e-16 and uniform ones, any release, eps
    0.01-50: enumeration tolerances, plus float64's smallest normal absolute for posteriors that underflow
    (a scan of 4,000 such noisy bags, k <= 10, found 963 wrong before the nearest-0 tilt and the widened window)."""
    priors = np.array(priors)
    k = priors.size
    eps = 10.0 ** log10_eps
    value = position * 1.2 - 0.1 if mechanism == "laplace" else int(round(position * k))
    with localcontext() as ctx:
        ctx.prec = 80
        expected_post, expected_llr = _enumerate(priors, _weights(mechanism, k, value, eps))
    got = _run(mechanism, priors, value, eps)
    np.testing.assert_allclose(got.posterior, expected_post, rtol=REL, atol=np.finfo(float).tiny)
    _assert_llr_close(got.multiplicative_advantage, expected_llr, REL)


def test_llp_posteriors_sum_to_bag_sum():
    rng = np.random.default_rng(7)
    for k in (3, 40, 300):
        priors = rng.beta(2, 5, k)
        for s in (1, k // 3, k - 1):
            # E[S | S = s] = s: the posteriors of one bag sum to its label sum (relative 1e-12)
            assert posteriors.llp(priors, s).posterior.sum() == pytest.approx(s, rel=1e-12)


def _decimal_pmf(priors):
    pmf = [Decimal(1)]
    for p in priors:
        e = Decimal(float(p))
        q = 1 - e
        pmf = [q * pmf[0]] + [q * pmf[j] + e * pmf[j - 1] for j in range(1, len(pmf))] + [e * pmf[-1]]
    return pmf


def _reference_llr(loo_pmf, weights):
    l1 = sum(loo_pmf[b - 1] * weights[b] for b in range(1, len(weights)))
    l0 = sum(loo_pmf[b] * weights[b] for b in range(len(weights) - 1))
    return math.inf if l0 == 0 else -math.inf if l1 == 0 else float((l1 / l0).ln())


def test_noisy_posteriors_sum_to_conditional_mean_of_sum():
    """sum_i post_i = E[S | release] = sum_b b P(b) f(z|b) / sum_b P(b) f(z|b) (40-digit decimal DP),
    and I_i against a decimal leave-one-out DP, both to 1e-12 relative."""
    rng = np.random.default_rng(11)
    k = 60
    priors = rng.beta(2, 5, k)
    with localcontext() as ctx:
        ctx.prec = 40
        pmf = _decimal_pmf(priors)
        for mechanism, value, eps in [("laplace", 0.31, 0.3), ("laplace", 0.02, 4.0), ("geometric", 17, 0.5),
                                      ("geometric", 3, 2.0)]:
            w = _weights(mechanism, k, value, eps)
            joint = [p * wb for p, wb in zip(pmf, w)]
            expected = float(sum(b * j for b, j in enumerate(joint)) / sum(joint))
            got = _run(mechanism, priors, value, eps)
            assert got.posterior.sum() == pytest.approx(expected, rel=1e-12)
            for i in (0, 1):  # k >= 32 also exercises the kernel's window on the sums b
                reference = _reference_llr(_decimal_pmf(np.delete(priors, i)), w)
                assert got.multiplicative_advantage[i] == pytest.approx(reference, rel=1e-12, abs=1e-12)


def test_geometric_martingale_exact_sum():
    """sum_z P(Z = z) post_i(z) = eta_i, with P(Z = z) = sum_b P(b) P(clip(b + G) = z) summed exactly."""
    rng = np.random.default_rng(3)
    k, eps = 9, 0.8
    priors = rng.uniform(0.05, 0.95, k)
    a = math.exp(-eps)
    pmf = np.array([float(p) for p in _decimal_pmf(priors)])

    def p_z_given_b(z, b):
        if z == 0:
            return a ** b / (1 + a)
        if z == k:
            return a ** (k - b) / (1 + a)
        return (1 - a) / (1 + a) * a ** abs(z - b)

    mean_post = np.zeros(k)
    for z in range(k + 1):
        pz = sum(pmf[b] * p_z_given_b(z, b) for b in range(k + 1))
        mean_post += pz * posteriors.llp_geometric(priors, z, epsilon=eps).posterior
    np.testing.assert_allclose(mean_post, priors, rtol=1e-12)


def test_laplace_martingale_numerical_integration():
    """integral over alpha of p(alpha) post_i(alpha) = eta_i (scipy quad, tolerance 1e-8)."""
    rng = np.random.default_rng(4)
    k, eps = 5, 1.5
    priors = rng.uniform(0.05, 0.95, k)
    pmf = np.array([float(p) for p in _decimal_pmf(priors)])
    rate = k * eps

    def density(alpha):
        return float(np.sum(pmf * 0.5 * rate * np.exp(-rate * np.abs(alpha - np.arange(k + 1) / k))))

    breaks = list(np.arange(k + 1) / k)
    for i in (0, k - 1):
        value, _ = integrate.quad(
            lambda x: density(x) * posteriors.llp_laplace(priors, x, epsilon=eps).posterior[i],
            -3.0, 4.0, points=breaks, limit=200, epsabs=1e-12)
        assert value == pytest.approx(priors[i], abs=1e-8)


def test_homogeneous_llp_bags_are_infinite():
    priors = np.array([0.2, 1e-9, 0.7, 1 - 1e-9])
    zero = posteriors.llp(priors, 0)
    full = posteriors.llp(priors, 4)
    assert np.all(zero.multiplicative_advantage == -np.inf) and np.all(zero.posterior == 0.0)
    assert np.all(full.multiplicative_advantage == np.inf) and np.all(full.posterior == 1.0)


def test_abs_i_equals_epsilon_for_rr_and_clipped_geometric_and_far_laplace():
    eta = np.array([1e-9, 0.3, 0.5, 0.999])
    for eps in (0.01, 1.0, 50.0):
        # exact equality: the kernels return +-eps itself for these releases
        assert np.all(posteriors.rr(eta, np.array([1, 0, 1, 0]), epsilon=eps).multiplicative_advantage
                      == np.array([eps, -eps, eps, -eps]))
        assert np.all(posteriors.llp_geometric(eta, 0, epsilon=eps).multiplicative_advantage == -eps)
        assert np.all(posteriors.llp_geometric(eta, 4, epsilon=eps).multiplicative_advantage == eps)
        assert np.all(posteriors.llp_laplace(eta, -0.2, epsilon=eps).multiplicative_advantage == -eps)
        assert np.all(posteriors.llp_laplace(eta, 1.0, epsilon=eps).multiplicative_advantage == eps)


def test_rr_posterior_formula():
    eta = np.array([0.1, 0.5, 0.8])
    eps = 1.2
    pi = 1 / (1 + math.exp(eps))
    got = posteriors.rr(eta, np.array([1, 1, 0]), epsilon=eps).posterior
    expected = [(1 - pi) * 0.1 / ((1 - pi) * 0.1 + pi * 0.9), 1 - pi, pi * 0.8 / (pi * 0.8 + (1 - pi) * 0.2)]
    np.testing.assert_allclose(got, expected, rtol=1e-14)


@pytest.fixture(scope="module")
def extreme_bags():
    """k = 1024 priors and 40-digit decimal leave-one-out pmfs P_{-i} for two items of each bag."""
    rng = np.random.default_rng(2024)
    k = 1024
    bags = {
        "beta": rng.beta(2, 30, k),
        "tiny": np.full(k, 1e-9),
        "mixed": np.where(rng.random(k) < 0.5, 1e-9, 1 - 1e-9),
    }
    refs = {}
    with localcontext() as ctx:
        ctx.prec = 40
        for name, priors in bags.items():
            for i in sorted({0, int(np.argmax(priors))}):
                refs[name, i] = _decimal_pmf(np.delete(priors, i))
    return bags, refs


@pytest.mark.parametrize("mechanism, values", [
    ("llp", [(1, 0.0), (3, 0.0), (512, 0.0), (1021, 0.0), (1023, 0.0)]),
    ("laplace", [(0.001, 0.01), (0.5, 0.01), (0.03, 1.0), (0.999, 1.0), (0.2, 50.0), (0.0004, 50.0)]),
    ("geometric", [(1, 0.01), (700, 0.01), (30, 1.0), (1023, 1.0), (5, 50.0), (1000, 50.0)]),
])
def test_extreme_bags_match_high_precision(extreme_bags, mechanism, values):
    """k = 1024, priors Beta(2, 30), 1e-9, or a 50/50 mix of 1e-9 and 1 - 1e-9: finite, no NaN, and I
    within 1e-10 (relative to max(1, |I|)) of a 40-digit leave-one-out reference, tails included."""
    bags, refs = extreme_bags
    with localcontext() as ctx:
        ctx.prec = 40
        for name, priors in bags.items():
            for value, eps in values:
                got = _run(mechanism, priors, value, eps)
                assert np.all(np.isfinite(got.multiplicative_advantage)), (name, value, eps)
                assert np.all((got.posterior >= 0) & (got.posterior <= 1)), (name, value, eps)
                weights = _weights(mechanism, priors.size, value, eps)
                for (ref_name, i), loo in refs.items():
                    if ref_name == name:
                        expected = _reference_llr(loo, weights)
                        assert abs(got.multiplicative_advantage[i] - expected) <= 1e-10 * max(1.0, abs(expected)), \
                            (name, value, eps, i, got.multiplicative_advantage[i], expected)


priors_strategy = st.floats(min_value=1e-9, max_value=1 - 1e-9)


@st.composite
def bag_batches(draw):
    sizes = draw(st.lists(st.integers(1, 30), min_size=1, max_size=6))
    priors = np.array(draw(st.lists(priors_strategy, min_size=sum(sizes), max_size=sum(sizes))))
    fractions = draw(st.lists(st.floats(0, 1), min_size=len(sizes), max_size=len(sizes)))
    sums = np.array([round(f * k) for f, k in zip(fractions, sizes)])
    eps = draw(st.floats(0.01, 50))
    return np.array(sizes), priors, sums, eps


def _all_mechanisms(sizes, priors, sums, eps):
    yield "llp", posteriors.llp_bags(priors, sizes, sums)
    yield "laplace", posteriors.llp_laplace_bags(priors, sizes, sums / sizes + 0.1, epsilon=eps)
    yield "geometric", posteriors.llp_geometric_bags(priors, sizes, sums, epsilon=eps)


@settings(max_examples=60, deadline=None)
@given(bag_batches())
def test_property_posteriors_in_unit_interval_and_batched_equals_per_bag(batch):
    sizes, priors, sums, eps = batch
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    for name, res in _all_mechanisms(sizes, priors, sums, eps):
        assert np.all((res.posterior >= 0) & (res.posterior <= 1)), name
        assert not np.any(np.isnan(res.multiplicative_advantage)), name
        for b, k in enumerate(sizes):
            rows = slice(offsets[b], offsets[b + 1])
            one = {"llp": lambda: posteriors.llp(priors[rows], sums[b]),
                   "laplace": lambda: posteriors.llp_laplace(priors[rows], sums[b] / k + 0.1, epsilon=eps),
                   "geometric": lambda: posteriors.llp_geometric(priors[rows], sums[b], epsilon=eps)}[name]()
            np.testing.assert_array_equal(res.posterior[rows], one.posterior)
            np.testing.assert_array_equal(res.multiplicative_advantage[rows], one.multiplicative_advantage)


@settings(max_examples=60, deadline=None)
@given(bag_batches(), st.randoms(use_true_random=False))
def test_property_permutation_equivariance_within_bag(batch, random):
    sizes, priors, sums, eps = batch
    k, s = int(sizes[0]), sums[0]
    bag = priors[:k]
    perm = np.array(random.sample(range(k), k))
    for value, run in [(s, lambda p, v: posteriors.llp(p, v)),
                       (s / k + 0.1, lambda p, v: posteriors.llp_laplace(p, v, epsilon=eps)),
                       (s, lambda p, v: posteriors.llp_geometric(p, v, epsilon=eps))]:
        base = run(bag, value)
        permuted = run(bag[perm], value)
        # summation order changes with the permutation: relative 1e-11 (posterior), 1e-11 max(1,|I|) (I)
        np.testing.assert_allclose(permuted.posterior, base.posterior[perm], rtol=1e-11, atol=1e-300)
        _assert_llr_close(permuted.multiplicative_advantage, base.multiplicative_advantage[perm], 1e-11)


def _mixed_extreme_bag(k: int, seed: int, share_tiny: float = 0.3125) -> np.ndarray:
    """Priors 1e-9 (share ``share_tiny``) and 1 - 1e-9, then about 10% of rows set to one value drawn uniform in
    (0.01, 0.99)."""
    rng = np.random.default_rng(seed)
    priors = np.where(rng.random(k) < share_tiny, 1e-9, 1 - 1e-9)
    priors[rng.random(k) < 0.1] = rng.uniform(0.01, 0.99)
    return priors


@settings(max_examples=40, deadline=None)
@given(st.integers(32, 400), st.floats(0, 1), st.floats(0, 1), st.sampled_from([0.01, 0.3, 3.0, 50.0]),
       st.integers(0, 2**32 - 1))
def test_property_noisy_releases_respect_epsilon_with_extreme_priors(k, share_tiny, position, eps, seed):
    """LLP+Lap and LLP+Geom are eps-label-DP, so |I_i| <= eps for every release (tolerance 1e-9 eps);
    bags mix priors 1e-9, 1 - 1e-9 and uniform ones, where a badly scaled kernel returns inf or NaN."""
    priors = _mixed_extreme_bag(k, seed, share_tiny)
    z = int(round(position * k))
    for res in (posteriors.llp_laplace(priors, position + 0.3 / k, epsilon=eps),
                posteriors.llp_geometric(priors, z, epsilon=eps)):
        assert np.all(np.abs(res.multiplicative_advantage) <= eps * (1 + 1e-9))
        assert np.all((res.posterior >= 0) & (res.posterior <= 1))


@pytest.mark.parametrize("k, seed, sum_scale_release, eps, sign", [
    (1024, 13, 512, 0.1, -1.0),     # 637 labels are 1 for sure, the sum's mass near 643: ~131 sums above
    (1024, 13, 102, 0.1, -1.0),
    (334, 71, 308, 0.01, 1.0),      # 199 labels are 1 for sure, the sum's mass near 227: ~81 sums below
])
def test_releases_far_from_the_sums_mass_give_exactly_plus_minus_epsilon(k, seed, sum_scale_release, eps, sign):
    """When every likely sum of the other labels lies on one side of the release, w(b + 1) / w(b) = e^(sign eps)
    wherever P_{-i}(b) is not astronomically small, so I_i = sign eps and post_i = sigmoid(logit eta_i + sign eps)
    exactly (closed form). Tolerance 1e-13 absolute on I, 1e-13 relative on the posterior. A tilt aimed at the
    release rather than at the joint's mode once lost the sums beyond a trimmed end: I off by 2e-9 at eps 0.1."""
    priors = _mixed_extreme_bag(k, seed)
    logit = np.log(priors) - np.log1p(-priors)
    closed_form = 1.0 / (1.0 + np.exp(-(logit + sign * eps)))
    for res in (posteriors.llp_geometric(priors, sum_scale_release, epsilon=eps),
                posteriors.llp_laplace(priors, (sum_scale_release + 0.3) / k, epsilon=eps)):
        np.testing.assert_allclose(res.multiplicative_advantage, sign * eps, rtol=0, atol=1e-13)
        np.testing.assert_allclose(res.posterior, closed_form, rtol=1e-13)


@pytest.mark.parametrize("call, message", [
    (lambda: posteriors.llp([0.2, 1.0], 1), "priors"),
    (lambda: posteriors.llp([0.2, 0.3], 3), "bag_sums"),
    (lambda: posteriors.llp_bags([0.2, 0.3], np.array([1, 2]), [0, 1]), "bag_sizes"),
    (lambda: posteriors.llp_laplace([0.2], np.nan, epsilon=1.0), "released_proportions"),
    (lambda: posteriors.llp_geometric([0.2], 0, epsilon=0.0), "epsilon"),
    (lambda: posteriors.rr([0.2], [2], epsilon=1.0), "released"),
])
def test_bad_input_names_the_field(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_one_compiled_specialization_serves_every_entry_point():
    """warm_up compiles the single kernel signature that all public functions use (no recompiles in workers)."""
    posteriors.warm_up()
    posteriors.llp([0.2, 0.4, 0.9], 2)
    posteriors.llp_bags(np.array([0.2, 0.4, 0.9]), np.array([1, 2], dtype=np.int32), np.array([0, 1]))
    posteriors.llp_laplace([0.2, 0.4], 0.3, epsilon=2)
    posteriors.llp_geometric_bags(np.array([0.2, 0.4]), [2], [1], epsilon=0.5)
    assert len(posteriors.fb.bags_kernel.signatures) == 1
