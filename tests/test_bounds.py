"""Epsilon lower bounds (docs/math.md §6): closed forms against direct searches, round trips, monotonicity, extremes.

Monotonicities that hold by construction and are tested:
- pure binomial: non-decreasing in c at fixed c' (the tail P[Bin(c', q) >= c] falls as c grows);
  non-increasing in c' at fixed c (the tail grows with c'); non-increasing in confidence; tau and delta
  only lower it (they raise p(eps) pointwise). No monotonicity at fixed accuracy c/c' is claimed.
- f-DP (GDP): mu_lb non-decreasing in c at fixed c', non-increasing in tau (checked on exhaustive grids).
Reference values come from independent code: scipy brentq on the binomial survival function, the
delta p-value from full binomial cdf arrays, Algorithm 3 in plain Python with scipy's ndtr/ndtri, and the
GDP privacy profile in 50-digit mpmath.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, special, stats

from lia_spark.kernels import bounds, gdp

GAMMA = 0.05
FAST = settings(max_examples=60, deadline=None)


@st.composite
def counts(draw, max_guesses=5000):
    guesses = draw(st.integers(1, max_guesses))
    correct = draw(st.integers(0, guesses))
    canaries = draw(st.integers(guesses, 4 * max_guesses))
    return canaries, guesses, correct


def tail(eps, guesses, correct, tau=0.0):
    """P[Bin(c', q(eps)) >= c]."""
    return stats.binom.sf(correct - 1, guesses, bounds.accuracy_of_epsilon(eps, tau=tau))


def reference_p_value(eps, m, guesses, correct, delta, tau=0.0):
    """p(eps) of docs/math.md §6.2 with alpha from full binomial cdf differences (no window)."""
    q = bounds.accuracy_of_epsilon(eps, tau=tau)
    i = np.arange(1, correct + 1)
    window = stats.binom.cdf(correct - 1, guesses, q) - stats.binom.cdf(correct - i - 1, guesses, q)
    return stats.binom.sf(correct - 1, guesses, q) + 2 * m * delta * np.max(window / i)


def reference_rejects(mu, m, guesses, correct, gamma=GAMMA, tau=0.0):
    """Algorithm 3 as docs/math.md §6.3 writes it, all c steps, scipy's ndtr/ndtri."""
    r, h = gamma * correct / m, gamma * (guesses - correct) / m
    for i in range(correct - 1, -1, -1):
        h_new = max(h, max(0.0, special.ndtr(special.ndtri(r) - mu) - tau))
        r, h = r + i / (guesses - i) * (h_new - h), h_new
    return r + h > guesses / m


# --------------------------------------------------------------------------------------------- pure binomial
@FAST
@given(counts(max_guesses=100_000), st.sampled_from([0.0, 0.05, 0.3]), st.sampled_from([0.9, 0.95, 0.99]))
def test_pure_binomial_matches_direct_search_and_round_trips(mcc, tau, confidence):
    m, g, c = mcc
    gamma = 1 - confidence
    eps = bounds.epsilon_lower_bound(canaries=m, guesses=g, correct=c, confidence=confidence, tau=tau)
    assert eps >= 0.0 and math.isfinite(eps)
    if eps > 0:
        assert tail(eps, g, c, tau) == pytest.approx(gamma, abs=1e-9)
        # independent: brentq on the survival function in eps (tail is increasing in eps)
        direct = optimize.brentq(lambda e: tail(e, g, c, tau) - gamma, 0.0, 60.0, xtol=1e-13)
        assert eps == pytest.approx(direct, abs=1e-8)
    else:
        assert c == 0 or tail(0.0, g, c, tau) >= gamma - 1e-12


@FAST
@given(counts(), st.sampled_from([0.0, 0.1]))
def test_pure_binomial_monotone_in_correct_guesses_and_confidence(mcc, tau):
    m, g, c = mcc
    f = lambda **kw: bounds.epsilon_lower_bound(**{"canaries": m, "guesses": g, "correct": c, "tau": tau, **kw})
    if c < g:
        assert f(correct=c + 1) >= f()
    if g < m:
        assert f(guesses=g + 1) <= f()
    assert f(confidence=0.99) <= f(confidence=0.95) <= f(confidence=0.8)
    assert f(tau=tau + 0.2) <= f()


def test_pure_binomial_recovers_randomized_response_epsilon():
    # RR(eps=2): accuracy e^2/(1+e^2); with 1e6 guesses the bound sits just below 2 (1.64 sd of the estimate).
    g = 1_000_000
    c = round(g * math.exp(2) / (1 + math.exp(2)))
    eps = bounds.epsilon_lower_bound(canaries=g, guesses=g, correct=c)
    assert 1.98 < eps < 2.0


def test_clopper_pearson_lower_matches_beta_quantile_and_vectorizes():
    assert bounds.clopper_pearson_lower(90, 100, confidence=0.95) == pytest.approx(
        stats.beta.ppf(0.05, 90, 11), rel=1e-12)
    assert bounds.clopper_pearson_lower(0, 100, confidence=0.95) == 0.0
    # c = c': closed form gamma^(1/c')
    assert bounds.clopper_pearson_lower(50, 50, confidence=0.95) == pytest.approx(0.05 ** (1 / 50), rel=1e-12)
    arr = bounds.clopper_pearson_lower(np.array([0, 5, 10]), 10, confidence=0.9)
    assert arr.shape == (3,) and arr[0] == 0.0 and np.all(np.diff(arr) > 0)


# ------------------------------------------------------------------------------------ binomial with delta
@settings(max_examples=40, deadline=None)
@given(counts(max_guesses=20_000), st.sampled_from([1e-6, 1e-5, 1e-3]), st.sampled_from([0.0, 0.05]))
def test_delta_binomial_round_trips_and_is_below_pure(mcc, delta, tau):
    m, g, c = mcc
    eps = bounds.epsilon_lower_bound(canaries=m, guesses=g, correct=c, delta=delta, tau=tau)
    pure = bounds.epsilon_lower_bound(canaries=m, guesses=g, correct=c, tau=tau)
    assert 0.0 <= eps <= pure
    if eps > 0:
        assert reference_p_value(eps, m, g, c, delta, tau) == pytest.approx(GAMMA, abs=1e-9)
        assert reference_p_value(eps + 1e-6, m, g, c, delta, tau) >= GAMMA
        assert bounds.epsilon_lower_bound(canaries=m, guesses=g, correct=c, delta=2 * delta, tau=tau) <= eps
    elif c > 0:
        assert reference_p_value(0.0, m, g, c, delta, tau) >= GAMMA - 1e-12


@pytest.mark.parametrize("g,c", [(1_000_000, 900_000), (1_000_000, 1_000_000), (100_000, 60_000)])
def test_delta_binomial_p_value_agrees_with_full_cdf_at_scale(g, c):
    for eps in (0.0, 0.5, 2.0, 5.0):
        ours = bounds.binomial_p_value(epsilon=eps, canaries=g, guesses=g, correct=c, delta=1e-5)
        assert ours == pytest.approx(reference_p_value(eps, g, g, c, 1e-5), abs=1e-9)


# -------------------------------------------------------------------------------------------- GDP
@pytest.mark.parametrize("mu", [0.05, 0.5, 1.0, 2.5, 6.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-5, 1e-2])
def test_gdp_epsilon_matches_mpmath_profile(mu, delta):
    mpmath.mp.dps = 50
    m = mpmath.mpf(mu)

    def profile(e):
        return mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)

    if profile(mpmath.mpf(0)) <= delta:
        expected = 0.0
    else:
        lo, hi = mpmath.mpf(0), mpmath.mpf(200)
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if profile(mid) > delta else (lo, mid)
        expected = float(lo)
    assert gdp.gdp_epsilon(mu, delta=delta) == pytest.approx(expected, abs=1e-9, rel=1e-10)


def test_gdp_epsilon_edge_cases():
    assert gdp.gdp_epsilon(0.0, delta=1e-5) == 0.0
    assert gdp.gdp_epsilon(0.1, delta=0.5) == 0.0  # delta above the profile at eps = 0
    with pytest.raises(ValueError, match="delta"):
        gdp.gdp_epsilon(1.0, delta=0.0)


def test_ndtri_kernel_matches_scipy():
    p = np.concatenate([np.logspace(-300, -1, 500), np.linspace(0.01, 0.99, 500), 1 - np.logspace(-15, -1, 200)])
    ours = np.array([gdp._ndtri(x) for x in p])
    np.testing.assert_allclose(ours, special.ndtri(p), rtol=1e-13, atol=1e-16)


@settings(max_examples=40, deadline=None)
@given(counts(max_guesses=2000), st.sampled_from([0.0, 0.001, 0.01]), st.sampled_from([0.9, 0.95]))
def test_gdp_mu_is_exact_to_1e6_against_plain_algorithm_3(mcc, tau, confidence):
    m, g, c = mcc
    gamma = 1 - confidence
    mu = gdp.gdp_mu_lower_bound(canaries=m, guesses=g, correct=c, confidence=confidence, tau=tau)
    assert mu >= 0.0 and math.isfinite(mu)
    if mu > 0:  # the sup need not be attained (e.g. mu_lb at the first-step threshold): flip within 1e-6
        assert reference_rejects(max(mu - 1e-6, 0.0), m, g, c, gamma, tau)
        assert not reference_rejects(mu + 1e-6, m, g, c, gamma, tau)
    else:
        assert c == 0 or not reference_rejects(0.0, m, g, c, gamma, tau)
    # the compiled decision (early exits, certificates) agrees with the plain recursion away from mu_lb
    for x in (0.0, 0.3, 1.0, 2.0):
        if abs(x - mu) > 1e-6:
            assert gdp.gdp_rejects(mu=x, canaries=m, guesses=g, correct=c, confidence=confidence,
                                      tau=tau) == reference_rejects(x, m, g, c, gamma, tau)


@pytest.mark.parametrize("m,g", [(1000, 1000), (5000, 500), (100_000, 1000)])
def test_gdp_mu_monotone_in_correct_and_tau(m, g):
    cs = np.arange(g + 1)
    mus = gdp.gdp_mu_lower_bound_sweep(canaries=m, guesses=np.full(g + 1, g), correct=cs)
    assert np.all(np.diff(mus) >= 0)
    assert mus[g // 2] == 0.0 and mus[-1] > 0
    with_tau = gdp.gdp_mu_lower_bound_sweep(canaries=m, guesses=np.full(g + 1, g), correct=cs, tau=0.01)
    assert np.all(with_tau <= mus)


def test_gdp_tau_vacuous_flag_and_zero_bound():
    assert gdp.gdp_tau_vacuous(canaries=1000, guesses=10, tau=0.01)
    assert not gdp.gdp_tau_vacuous(canaries=1000, guesses=11, tau=0.01)
    flags = gdp.gdp_tau_vacuous(canaries=1000, guesses=np.array([5, 10, 50]), tau=0.01)
    assert flags.tolist() == [True, True, False]
    assert gdp.gdp_mu_lower_bound(canaries=1000, guesses=10, correct=10, tau=0.01) == 0.0
    # the binomial variant only loses log((1+tau)/(1-tau)) there
    assert bounds.epsilon_lower_bound(canaries=1000, guesses=10, correct=10, tau=0.01) > 0


def test_gdp_method_with_zero_delta_uses_the_documented_default():
    mu = gdp.gdp_mu_lower_bound(canaries=10_000, guesses=1000, correct=900)
    assert mu > 0
    assert bounds.epsilon_lower_bound(canaries=10_000, guesses=1000, correct=900, method="gdp") == \
        gdp.gdp_epsilon(mu, delta=gdp.GDP_DEFAULT_DELTA)
    assert gdp.effective_gdp_delta(0.0) == 1e-5 and gdp.effective_gdp_delta(1e-3) == 1e-3


# ------------------------------------------------------------------------------------ zero / extremes
@pytest.mark.parametrize("method,delta", [("binomial", 0.0), ("binomial", 1e-5), ("gdp", 1e-5)])
def test_zero_when_nothing_is_rejected_and_never_nan(method, delta):
    kw = {"method": method, "delta": delta}
    assert bounds.epsilon_lower_bound(canaries=10_000, guesses=10_000, correct=5000, **kw) == 0.0
    assert bounds.epsilon_lower_bound(canaries=100, guesses=100, correct=0, **kw) == 0.0
    assert bounds.epsilon_lower_bound(canaries=100, guesses=0, correct=0, **kw) == 0.0
    assert bounds.epsilon_lower_bound(canaries=1, guesses=1, correct=1, **kw) == 0.0
    assert bounds.epsilon_lower_bound(canaries=10, guesses=10, correct=10, tau=1.0, **kw) == 0.0
    top = bounds.epsilon_lower_bound(canaries=1_000_000, guesses=1_000_000, correct=1_000_000, **kw)
    assert math.isfinite(top) and top > 0


def test_all_correct_closed_form():
    # c = c': tail = q^c', so q* = gamma^(1/c') and eps = logit(q*) exactly
    g = 1_000_000
    q = GAMMA ** (1 / g)
    expected = math.log(q) - math.log(-math.expm1(math.log(GAMMA) / g))
    assert bounds.epsilon_lower_bound(canaries=g, guesses=g, correct=g) == pytest.approx(expected, rel=1e-9)


# ------------------------------------------------------------------------------------------- sweeps
@pytest.mark.parametrize("method,delta,tau", [("binomial", 0.0, 0.0), ("binomial", 1e-5, 0.02), ("gdp", 1e-5, 0.0),
                                              ("gdp", 0.0, 0.001)])
def test_sweep_and_best_agree_with_scalar_calls(method, delta, tau):
    rng = np.random.default_rng(7)
    m = 20_000
    g = np.concatenate([np.arange(200, m + 1, 200), [20]])
    acc = np.clip(0.8 - 0.3 * g / m + rng.normal(0, 0.01, g.size), 0, 1)
    c = np.round(acc * g).astype(int)
    kw = {"canaries": m, "confidence": 0.95, "delta": delta, "tau": tau, "method": method}
    sweep = bounds.epsilon_lower_bound_sweep(guesses=g, correct=c, **kw)
    for j in (0, 17, g.size - 1):
        assert sweep[j] == bounds.epsilon_lower_bound(guesses=int(g[j]), correct=int(c[j]), **kw)
    best = bounds.best_epsilon_lower_bound(guesses=g, correct=c, **kw)
    assert best.value == pytest.approx(sweep.max(), abs=1e-6) and best.value > 0
    assert sweep[best.index] == pytest.approx(sweep.max(), abs=1e-6)
    assert bounds.best_epsilon_lower_bound(guesses=g, correct=g // 2, **kw).to_dict() == {"value": 0.0, "index": -1}


def test_best_gdp_mu_matches_sweep_max():
    m = 50_000
    g = np.arange(500, m + 1, 500)
    c = np.round((0.75 - 0.2 * g / m) * g).astype(int)
    mus = gdp.gdp_mu_lower_bound_sweep(canaries=m, guesses=g, correct=c)
    best = gdp.best_gdp_mu_lower_bound(canaries=m, guesses=g, correct=c)
    assert best.value == pytest.approx(mus.max(), abs=2e-7) and mus[best.index] == pytest.approx(mus.max(), abs=2e-7)


# ------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize("kwargs,field", [
    ({"canaries": 0, "guesses": 0, "correct": 0}, "canaries"),
    ({"canaries": 10, "guesses": 11, "correct": 0}, "guesses"),
    ({"canaries": 10, "guesses": 5, "correct": 6}, "correct"),
    ({"canaries": 10, "guesses": 5.5, "correct": 1}, "guesses"),
    ({"canaries": 10, "guesses": 5, "correct": 1, "confidence": 1.0}, "confidence"),
    ({"canaries": 10, "guesses": 5, "correct": 1, "delta": -1e-3}, "delta"),
    ({"canaries": 10, "guesses": 5, "correct": 1, "tau": 1.5}, "tau"),
    ({"canaries": 10, "guesses": 5, "correct": 1, "method": "rdp"}, "method"),
])
def test_bad_input_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        bounds.epsilon_lower_bound(**kwargs)


@pytest.mark.parametrize("method, delta", [("binomial", 0.0), ("binomial", 1e-6), ("gdp", 1e-5)])
def test_tau_break_even_is_where_the_best_bound_reaches_zero(method, delta):
    guesses, correct = np.array([100, 500, 1000]), np.array([70, 300, 560])
    kwargs = dict(canaries=1000, guesses=guesses, correct=correct, confidence=0.99, delta=delta, method=method)
    tau = bounds.tau_break_even(**kwargs)
    assert 0.0 < tau < 1.0
    assert bounds.best_epsilon_lower_bound(tau=tau * (1 - 1e-4), **kwargs).value > 0.0
    assert bounds.best_epsilon_lower_bound(tau=min(tau + 1e-6, 1.0), **kwargs).value == 0.0
    if method == "binomial" and delta == 0.0:  # closed form: eps_lb(tau) = eps_lb(0) - log((1+tau)/(1-tau))
        assert tau == pytest.approx(np.tanh(bounds.best_epsilon_lower_bound(tau=0.0, **kwargs).value / 2), rel=1e-12)
    assert bounds.tau_break_even(canaries=1000, guesses=guesses, correct=guesses // 2, method=method,
                                 delta=delta) == 0.0
