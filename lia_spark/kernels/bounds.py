"""Epsilon lower bounds from the counts of the one-run audit (docs/math.md §6).

Inputs are m canaries, c' guesses and c correct guesses; gamma = 1 - confidence; tau bounds the TV
distance between the true and the proxy label distribution. Three families:

- Binomial, pure (Steinke, Nasr, Jagielski 2023; observational paper Theorem 17):
  q(eps) = e^eps / (e^eps + kappa), kappa = (1-tau)/(1+tau);
  eps_lb = sup{eps >= 0 : P[Bin(c', q(eps)) >= c] < gamma}, 0 if the set is empty. Closed form: the tail
  is the Beta(c, c'-c+1) cdf at q, so the crossing is the one-sided Clopper-Pearson limit
  q* = Beta^{-1}(gamma; c, c'-c+1) and eps_lb = max(0, logit(q*) + log kappa). m does not enter.
- Binomial with delta (Steinke et al. 2023, Theorem 5.2; observational paper Theorem 16):
  p(eps) = P[Bin(c', q) >= c] + 2 m delta alpha, alpha = max_{i=1..c} P[c-i <= Bin(c', q) <= c-1] / i;
  eps_lb = sup{eps : p(eps) < gamma}. p >= the pure tail, so the sup lies in [0, pure bound]. p is not
  monotone in eps in general (the alpha term can fall as q grows), but in a scan of 366 random
  (m, c', c, delta, tau) on 300-point eps grids {p < gamma} was always an interval [0, eps_lb); a 9-point
  scan brackets the largest crossing and Brent's method refines it to ~1e-14.
- f-DP, Gaussian family: :mod:`lia_spark.kernels.gdp` (mu_lb of Algorithm 3, then eps(delta) of mu_lb-GDP);
  this module's entry points dispatch to it by ``method``.

Every bound is 0.0 when nothing is rejected, never NaN, never negative.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from lia_spark.kernels.bound_checks import (SweepBest, checked_counts, checked_delta, checked_tau, gamma_of,
                                            integer_counts)
from lia_spark.kernels.gdp import (best_gdp_mu_lower_bound, effective_gdp_delta, gdp_epsilon, gdp_mu_lower_bound,
                                   gdp_mu_lower_bound_sweep)
from lia_spark.names import BINOMIAL, BOUND_FAMILIES, GDP

METHODS = BOUND_FAMILIES
# Hoeffding: P[|Bin(n, q) - n q| > t] <= 2 exp(-2 t^2 / n) <= 1e-20 for t = HOEFFDING_WIDTH * sqrt(n).
HOEFFDING_WIDTH = math.sqrt(math.log(2e20) / 2.0)


def _check_method(method: str) -> str:
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got method={method!r}")
    return method


# ------------------------------------------------------------------------------------------ binomial, pure
def clopper_pearson_lower(correct, guesses, *, confidence: float):
    """One-sided Clopper-Pearson lower limit on the accuracy: q with P[Bin(c', q) >= c] = gamma (0 if c = 0).

    Accepts scalars or arrays (broadcast); returns a float for scalars, an ndarray otherwise.
    """
    gamma = gamma_of(confidence)
    c_arr = integer_counts("correct", correct)
    g_arr = integer_counts("guesses", guesses)
    c_arr, g_arr = np.broadcast_arrays(c_arr, g_arr)
    if np.any((c_arr < 0) | (c_arr > g_arr)):
        raise ValueError(f"correct must be in [0, guesses], got correct={correct} with guesses={guesses}")
    q, _ = _clopper_pearson(g_arr, c_arr, gamma)
    return float(q) if q.ndim == 0 else q


def _clopper_pearson(g: np.ndarray | np.int64, c: np.ndarray | np.int64, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """(q*, 1 - q*) of the one-sided limit; 1 - q* from the mirrored Beta(c'-c+1, c) so it keeps its digits."""
    pos = c > 0
    a = np.where(pos, c, 1).astype(np.float64)
    b = (g - c + 1).astype(np.float64)
    q = np.where(pos, special.betaincinv(a, b, gamma), 0.0)
    one_minus_q = np.where(pos, special.betainccinv(b, a, gamma), 1.0)
    return q, one_minus_q


def _log_kappa(tau: float) -> float:
    """log((1-tau)/(1+tau)); -inf at tau = 1."""
    return -math.inf if tau >= 1.0 else math.log1p(-tau) - math.log1p(tau)


def _pure_binomial(g: np.ndarray | np.int64, c: np.ndarray | np.int64, gamma: float, tau: float) -> np.ndarray:
    """eps_lb = max(0, log q* - log(1 - q*) + log kappa), elementwise; 0 where c = 0."""
    q, one_minus_q = _clopper_pearson(g, c, gamma)
    with np.errstate(divide="ignore"):
        eps = np.log(q) - np.log(one_minus_q) + _log_kappa(tau)
    return np.where((c > 0) & (eps > 0), eps, 0.0)


def accuracy_of_epsilon(epsilon: float, *, tau: float = 0.0) -> float:
    """q(eps) = e^eps / (e^eps + (1-tau)/(1+tau)) = 1 / (1 + kappa e^-eps)."""
    return 1.0 / (1.0 + math.exp(_log_kappa(checked_tau(tau)) - epsilon))


# ----------------------------------------------------------------------------------- binomial with delta
def binomial_p_value(*, epsilon: float, canaries: int, guesses: int, correct: int, delta: float = 0.0,
                     tau: float = 0.0) -> float:
    """p(eps) = P[Bin(c', q(eps)) >= c] + 2 m delta max_{i=1..c} P[c-i <= Bin(c', q) <= c-1] / i (docs/math.md §6.2)."""
    m, g, c = checked_counts(canaries, guesses, correct)
    return _p_value(float(epsilon), m, int(g), int(c), checked_delta(delta), checked_tau(tau))


def _p_value(eps: float, m: int, g: int, c: int, delta: float, tau: float) -> float:
    if c == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(_log_kappa(tau) - eps))
    tail = float(special.betainc(c, g - c + 1, q))  # P[Bin(c', q) >= c] = I_q(c, c'-c+1)
    if delta == 0.0 or tail >= 1.0:
        return tail
    # alpha = max_i W_i / i with W_i = sum_{k=c-i}^{c-1} pmf(k). pmf values outside n q +- HOEFFDING_WIDTH
    # sqrt(n) carry < 1e-20 of mass in total, so that window makes alpha exact to 1e-20. Inside it, a
    # first pass over ~12 sd below c-1 gives alpha_lb <= alpha; since W_i <= F = P[Bin <= c-1], no
    # i > F / alpha_lb can win, so a second pass (only if needed) stops there.
    width = HOEFFDING_WIDTH * math.sqrt(g) + 1.0
    hi = min(c - 1, math.ceil(g * q + width))
    bottom = max(0, math.floor(g * q - width))
    if hi < bottom:
        return tail
    lo = max(bottom, hi - math.ceil(12.0 * math.sqrt(g * q * (1.0 - q))) - 16)
    alpha = _window_alpha(g, c, q, hi, lo)
    need = max(bottom, c - math.ceil((1.0 - tail) / alpha)) if alpha > 0.0 else bottom
    if need < lo:
        alpha = _window_alpha(g, c, q, hi, need)
    return tail + 2.0 * m * delta * alpha


def _window_alpha(g: int, c: int, q: float, hi: int, lo: int) -> float:
    """max over k in [lo, hi] of (sum_{j=k}^{hi} pmf(j)) / (c - k), walking down from pmf(hi) in log space."""
    k = np.arange(hi, lo - 1, -1)
    # pmf(k-1) / pmf(k) = k (1-q) / ((n-k+1) q)
    log_odds = math.log1p(-q) - math.log(q) if q < 1.0 else -math.inf
    log_ratio = np.log(k[:-1] / (g - k[:-1] + 1.0)) + log_odds
    log_pmf_hi = (special.gammaln(g + 1) - special.gammaln(hi + 1) - special.gammaln(g - hi + 1)
                  + special.xlogy(hi, q) + special.xlog1py(g - hi, -q))
    window = np.cumsum(np.exp(log_pmf_hi + np.concatenate(([0.0], np.cumsum(log_ratio)))))
    return float(np.max(window / (c - k)))


def _delta_binomial(m: int, g: int, c: int, gamma: float, delta: float, tau: float, eps_pure: float,
                    lo: float = 0.0) -> float:
    """sup{eps : p(eps) < gamma} in [lo, eps_pure]: a 9-point scan brackets the largest crossing, Brent refines.

    lo > 0 is for callers that know p(lo) < gamma (best over a sweep); lo = 0 scans the whole range.
    """
    if eps_pure <= lo:
        return lo
    grid = np.linspace(lo, eps_pure, 9)
    below = [_p_value(float(e), m, g, c, delta, tau) < gamma for e in grid]
    if not any(below):
        return lo
    j = max(i for i, b in enumerate(below) if b)
    if j == len(grid) - 1:
        return eps_pure
    return float(optimize.brentq(lambda e: _p_value(e, m, g, c, delta, tau) - gamma, grid[j], grid[j + 1],
                                 xtol=1e-14, rtol=4 * np.finfo(float).eps))


# ----------------------------------------------------------------------------------------- public entry
def epsilon_lower_bound(*, canaries: int, guesses: int, correct: int, confidence: float = 0.95,
                        delta: float = 0.0, tau: float = 0.0, method: str = BINOMIAL) -> float:
    """Epsilon lower bound at the given confidence from one (m, c', c) (docs/math.md §6).

    Args:
        canaries: m >= 1.
        guesses: c' in [0, m].
        correct: c in [0, c'].
        confidence: 1 - gamma, in (0, 1).
        delta: in [0, 1). "binomial": pure bound if 0, Steinke et al.'s delta bound otherwise. "gdp": the
            delta of the mu -> eps conversion; 0 means GDP_DEFAULT_DELTA (1e-5), since eps(0) is infinite.
        tau: TV bound between the true and the proxy label distribution, in [0, 1].
        method: "binomial" or "gdp".
    Returns:
        eps_lb >= 0 (0.0 when nothing is rejected).
    Raises:
        ValueError: on an argument out of range, naming it.
    """
    method = _check_method(method)
    gamma, delta, tau = gamma_of(confidence), checked_delta(delta), checked_tau(tau)
    m, checked_g, checked_c = checked_counts(canaries, guesses, correct)
    g, c = int(checked_g), int(checked_c)
    if method == GDP:
        mu = gdp_mu_lower_bound(canaries=m, guesses=g, correct=c, confidence=confidence, tau=tau)
        return gdp_epsilon(mu, delta=effective_gdp_delta(delta))
    eps_pure = float(_pure_binomial(np.int64(g), np.int64(c), gamma, tau))
    if delta == 0.0:
        return eps_pure
    return _delta_binomial(m, g, c, gamma, delta, tau, eps_pure)


def epsilon_lower_bound_sweep(*, canaries: int, guesses, correct, confidence: float = 0.95,
                              delta: float = 0.0, tau: float = 0.0, method: str = BINOMIAL) -> np.ndarray:
    """epsilon_lower_bound elementwise over arrays of (c', c); the pure binomial bound is one vectorized call."""
    method = _check_method(method)
    gamma, delta, tau = gamma_of(confidence), checked_delta(delta), checked_tau(tau)
    m, g, c = checked_counts(canaries, guesses, correct)
    if method == GDP:
        mus = gdp_mu_lower_bound_sweep(canaries=m, guesses=g, correct=c, confidence=confidence, tau=tau)
        eff = effective_gdp_delta(delta)
        return np.vectorize(lambda mu: gdp_epsilon(float(mu), delta=eff), otypes=[float])(mus)
    pure = _pure_binomial(g, c, gamma, tau)
    if delta == 0.0:
        return pure
    out = np.array([_delta_binomial(m, int(gj), int(cj), gamma, delta, tau, float(ej))
                    for gj, cj, ej in zip(g.ravel(), c.ravel(), pure.ravel())])
    return out.reshape(g.shape)


def best_epsilon_lower_bound(*, canaries: int, guesses, correct, confidence: float = 0.95,
                             delta: float = 0.0, tau: float = 0.0, method: str = BINOMIAL) -> SweepBest:
    """max over the sweep of epsilon_lower_bound and its index (-1 when nothing is rejected).

    "gdp": eps(delta) of best_gdp_mu_lower_bound (eps(delta) is increasing in mu). "binomial" with delta > 0:
    points by decreasing pure bound (an upper bound), searched only if p(best) < gamma there.
    """
    method = _check_method(method)
    gamma, delta, tau = gamma_of(confidence), checked_delta(delta), checked_tau(tau)
    m, g, c = checked_counts(canaries, guesses, correct)
    if method == GDP:
        mu = best_gdp_mu_lower_bound(canaries=m, guesses=g, correct=c, confidence=confidence, tau=tau)
        return SweepBest(gdp_epsilon(mu.value, delta=effective_gdp_delta(delta)), mu.index)
    g, c = g.ravel(), c.ravel()
    pure = _pure_binomial(g, c, gamma, tau)
    if delta == 0.0:
        j = int(np.argmax(pure))
        return SweepBest(float(pure[j]), j if pure[j] > 0 else -1)
    best, index = 0.0, -1
    for j in np.argsort(-pure, kind="stable"):
        if pure[j] <= best:
            break
        gj, cj = int(g[j]), int(c[j])
        if _p_value(best, m, gj, cj, delta, tau) < gamma:
            eps = _delta_binomial(m, gj, cj, gamma, delta, tau, float(pure[j]), lo=best)
            if eps > best:
                best, index = eps, int(j)
    return SweepBest(best, index)


def tau_break_even(*, canaries: int, guesses, correct, confidence: float = 0.95, delta: float = 0.0,
                   method: str = BINOMIAL, tolerance: float = 1e-9) -> float:
    """tau*: the smallest tau at which the best bound over the sweep (:func:`best_epsilon_lower_bound`) is 0, i.e.
    how far (in total variation) the proxy's label distribution may be from the truth before the observational
    audit certifies nothing (docs/math.md §6.6); 0 when nothing is rejected at tau = 0.

    Pure binomial: the tau term shifts every point's bound by the same log((1+tau)/(1-tau)), so
    eps_lb(tau) = max(0, eps_lb(0) - log((1+tau)/(1-tau))) and tau* = tanh(eps_lb(0) / 2) in closed form.
    Otherwise (binomial with delta, gdp) bisection to ``tolerance``: the bound does not increase with tau.
    """
    def bound(tau: float) -> float:
        return best_epsilon_lower_bound(canaries=canaries, guesses=guesses, correct=correct, confidence=confidence,
                                        delta=delta, tau=tau, method=method).value

    at_zero = bound(0.0)
    if at_zero <= 0.0:
        return 0.0
    if _check_method(method) == BINOMIAL and checked_delta(delta) == 0.0:
        return math.tanh(at_zero / 2.0)
    lo, hi = 0.0, 1.0  # bound(lo) > 0 = bound(hi): at tau = 1 every accuracy is possible
    while hi - lo > tolerance:
        middle = 0.5 * (lo + hi)
        lo, hi = (middle, hi) if bound(middle) > 0.0 else (lo, middle)
    return hi
