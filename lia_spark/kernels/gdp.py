"""f-DP bounds of the Gaussian family (docs/math.md §6.3-6.4; Mahloujifar, Melis, Chaudhuri 2025; observational
paper Algorithm 3 and Theorem 10): with fbar^{-1}(y) = max(0, Phi(Phi^{-1}(y) - mu) - tau), mu_lb = sup of the mu
the recursion rejects, by bisection to 1e-7 in mu, each rejection certified against the rounding of the normal
quantile; eps(delta) of mu-GDP ([DRS22]). GDP has eps(0) = infinity for every mu > 0, so with delta = 0 the "gdp"
method converts at ``GDP_DEFAULT_DELTA`` = 1e-5 (the delta of the paper's experiments);
:func:`effective_gdp_delta` tells callers which delta was used.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from lia_spark.kernels._jit import njit_for
from lia_spark.kernels.bound_checks import SweepBest, checked_counts, checked_delta, checked_tau, gamma_of

njit = njit_for(__file__)
_SQRT_2PI = math.sqrt(2.0 * math.pi)

GDP_DEFAULT_DELTA = 1e-5

MU_TOLERANCE = 1e-7

MU_MAX = 64.0  # Phi(z - 64) underflows to 0 for every z = Phi^{-1}(r), r < 1: no larger mu is ever rejected.


_CERTIFY_EVERY = 4096

_CERTIFY_MARGIN = 1e-12

def effective_gdp_delta(delta: float) -> float:
    """The delta at which the "gdp" method converts mu to epsilon: delta, or GDP_DEFAULT_DELTA if delta == 0."""
    delta = checked_delta(delta)
    return delta if delta > 0.0 else GDP_DEFAULT_DELTA


def gdp_tau_vacuous(*, canaries: int, guesses, tau: float):
    """True where the f-DP tau variant can reject nothing: tau >= c'/m (docs/math.md §6.3).

    Then Phi(Phi^{-1}(r) - mu) - tau <= r - tau <= 0 for every reachable r <= c'/m, so h never moves.
    """
    m, g, _ = checked_counts(canaries, guesses, np.zeros_like(np.asarray(guesses)))
    out = checked_tau(tau) >= g / m
    return bool(out) if out.ndim == 0 else out

# ------------------------------------------------------------------------------------- f-DP, Gaussian
_SQRT_HALF = math.sqrt(0.5)

# Acklam's rational approximation of Phi^{-1} (relative error < 1.2e-9), refined by one Halley step.
_A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
      -3.066479806614716e+01, 2.506628277459239e+00)


_B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
      -1.328068155288572e+01)


_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
      4.374664141464968e+00, 2.938163982698783e+00)


_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)

@njit()
def _phi(z: float) -> float:
    """Standard normal cdf, accurate in the lower tail."""
    return 0.5 * math.erfc(-z * _SQRT_HALF)


@njit()
def _ndtri_lower(p: float) -> float:
    """Phi^{-1}(p) for 0 < p <= 1/2."""
    if p < 0.02425:
        t = math.sqrt(-2.0 * math.log(p))
        x = ((((((_C[0] * t + _C[1]) * t + _C[2]) * t + _C[3]) * t + _C[4]) * t + _C[5])
             / ((((_D[0] * t + _D[1]) * t + _D[2]) * t + _D[3]) * t + 1.0))
    else:
        u = p - 0.5
        t = u * u
        x = (((((((_A[0] * t + _A[1]) * t + _A[2]) * t + _A[3]) * t + _A[4]) * t + _A[5]) * u)
             / (((((_B[0] * t + _B[1]) * t + _B[2]) * t + _B[3]) * t + _B[4]) * t + 1.0))
    e = _phi(x) - p
    u = e * _SQRT_2PI * math.exp(0.5 * x * x)
    return x - u / (1.0 + 0.5 * x * u)


@njit()
def _ndtri(p: float) -> float:
    """Phi^{-1}(p) on [0, 1]; uses 1 - p (exact for p >= 1/2) in the upper half."""
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    if p <= 0.5:
        return _ndtri_lower(p)
    return -_ndtri_lower(1.0 - p)


@njit()
def _fbar_inv(r: float, mu: float, tau: float) -> float:
    """max(0, Phi(Phi^{-1}(r) - mu) - tau): the inverse of 1 - f for mu-GDP, shifted by tau."""
    v = _phi(_ndtri(r) - mu) - tau
    return v if v > 0.0 else 0.0


@njit()
def _certified_accept(r: float, h: float, w: float, mu: float, tau: float, limit: float) -> bool:
    """Whether the remaining steps provably end with r + h <= limit.

    With weights <= w ahead, every later r obeys r' <= phi(r''), phi(x) = r + w max(0, g(x) - h), g the
    (convex, increasing) shifted fbar^{-1}, and h' <= max(h, g(r')). So any x >= r with phi(x) <= x and
    x + max(h, g(x)) <= limit bounds the final r + h by limit. phi(x) - x is convex: golden-section search for
    its minimum on [r, x_max], x_max the largest x with x + max(h, g(x)) <= limit.
    """
    lo, hi = r, limit
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if mid + max(h, _fbar_inv(mid, mu, tau)) <= limit - _CERTIFY_MARGIN:
            lo = mid
        else:
            hi = mid
    x_max = lo
    if x_max + max(h, _fbar_inv(x_max, mu, tau)) > limit - _CERTIFY_MARGIN:
        return False
    ratio = 0.5 * (math.sqrt(5.0) - 1.0)
    a, b = r, x_max
    for _ in range(60):
        x1 = b - ratio * (b - a)
        x2 = a + ratio * (b - a)
        f1 = r + w * max(0.0, _fbar_inv(x1, mu, tau) - h) - x1
        f2 = r + w * max(0.0, _fbar_inv(x2, mu, tau) - h) - x2
        if min(f1, f2) <= -_CERTIFY_MARGIN:
            return True
        if f1 < f2:
            b = x2
        else:
            a = x1
    fb = r + w * max(0.0, _fbar_inv(x_max, mu, tau) - h) - x_max
    return fb <= -_CERTIFY_MARGIN


@njit()
def _gdp_rejected(mu: float, tau: float, m: int, g: int, c: int, gamma: float) -> bool:
    """Algorithm 3 as docs/math.md §6.3 writes it; True iff mu is rejected (r + h > c'/m at the end).

    r and h never decrease, so the loop stops as soon as r + h > c'/m; it also stops early once the
    remaining steps are certified not to get there (see _certified_accept; a speed-up only).
    """
    limit = g / m
    r = gamma * c / m
    h = gamma * (g - c) / m  # r + h = gamma c'/m <= c'/m to start: rejection needs the loop
    for step in range(c):
        i = c - 1 - step
        if step % _CERTIFY_EVERY == 0 and i > 0 and _certified_accept(r, h, i / (g - i), mu, tau, limit):
            return False
        v = _fbar_inv(r, mu, tau)
        if v > h:
            r += i / (g - i) * (v - h)
            h = v
            if r + h > limit:
                return True
    return False


@njit()
def _gdp_mu_search(lo: float, cap: float, tau: float, m: int, g: int, c: int, gamma: float) -> float:
    """sup of the rejected mu to MU_TOLERANCE, by bisection (rejection is monotone in mu).

    lo > 0 must be rejected (lo = 0 is tested here); cap is an upper bound on mu_lb (_mu_cap). mu_lb is
    often a hair below the cap, and tests just below mu_lb are slow (r + h crosses c'/m late) while tests
    above the cap stop at once, so the bracket starts a little above the cap (doubled while rejected).
    """
    if lo == 0.0 and (c == 0 or not _gdp_rejected(0.0, tau, m, g, c, gamma)):
        return 0.0
    hi = max(min(1.25 * cap + 1e-3, MU_MAX), lo)
    while hi < MU_MAX and _gdp_rejected(hi, tau, m, g, c, gamma):
        lo = hi
        hi = min(2.0 * hi + MU_TOLERANCE, MU_MAX)
    if _gdp_rejected(hi, tau, m, g, c, gamma):
        return hi
    while hi - lo > MU_TOLERANCE:
        mid = 0.5 * (lo + hi)
        if _gdp_rejected(mid, tau, m, g, c, gamma):
            lo = mid
        else:
            hi = mid
    return lo


@njit()
def _gdp_mu_sweep(tau: float, m: int, g: np.ndarray, c: np.ndarray, cap: np.ndarray, gamma: float) -> np.ndarray:
    out = np.zeros(g.size)
    for j in range(g.size):
        out[j] = _gdp_mu_search(0.0, cap[j], tau, m, g[j], c[j], gamma)
    return out


def _mu_cap(m: int, g: np.ndarray, c: np.ndarray, gamma: float, tau: float) -> np.ndarray:
    """Upper bound on mu_lb: the first step moves only if Phi(Phi^{-1}(gamma c/m) - mu) - tau > gamma(c'-c)/m."""
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = special.ndtri(gamma * c / m) - special.ndtri(np.minimum(gamma * (g - c) / m + tau, 1.0))
    return np.where(c > 0, np.nan_to_num(cap, nan=-np.inf), -np.inf)


def gdp_rejects(*, mu: float, canaries: int, guesses: int, correct: int, confidence: float = 0.95,
                tau: float = 0.0) -> bool:
    """Whether Algorithm 3 (docs/math.md §6.3) rejects mu-GDP for these counts."""
    if not mu >= 0.0:
        raise ValueError(f"mu must be >= 0, got mu={mu}")
    m, g, c = checked_counts(canaries, guesses, correct)
    return bool(_gdp_rejected(float(mu), checked_tau(tau), m, int(g), int(c), gamma_of(confidence)))


def gdp_mu_lower_bound(*, canaries: int, guesses: int, correct: int, confidence: float = 0.95,
                       tau: float = 0.0) -> float:
    """mu_lb = sup{mu : Algorithm 3 rejects mu-GDP}, to 1e-7 by bisection; 0 if mu = 0 is not rejected."""
    m, g, c = checked_counts(canaries, guesses, correct)
    gamma, tau = gamma_of(confidence), checked_tau(tau)
    cap = float(_mu_cap(m, g, c, gamma, tau))
    return float(_gdp_mu_search(0.0, cap, tau, m, int(g), int(c), gamma))


def gdp_mu_lower_bound_sweep(*, canaries: int, guesses, correct, confidence: float = 0.95,
                             tau: float = 0.0) -> np.ndarray:
    """gdp_mu_lower_bound elementwise over arrays of (c', c) (one compiled loop)."""
    m, g, c = checked_counts(canaries, guesses, correct)
    gamma, tau = gamma_of(confidence), checked_tau(tau)
    flat_g, flat_c = g.ravel(), c.ravel()
    out = _gdp_mu_sweep(tau, m, flat_g, flat_c, _mu_cap(m, flat_g, flat_c, gamma, tau), gamma)
    return out.reshape(g.shape)


def gdp_epsilon(mu: float, *, delta: float) -> float:
    """eps(delta) of mu-GDP: the root of Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) = delta, eps >= 0.

    Solved in log form, log Phi(a) + log(-expm1(eps + log Phi(b) - log Phi(a))) = log delta, which keeps its
    digits in the tails; 0 when delta >= 2 Phi(mu/2) - 1 (the profile at eps = 0) or mu = 0.
    """
    if not (mu >= 0.0 and math.isfinite(mu)):
        raise ValueError(f"mu must be finite and >= 0, got mu={mu}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1) for GDP (eps(0) is infinite), got delta={delta}")
    if mu == 0.0 or delta >= 2.0 * special.ndtr(mu / 2.0) - 1.0:
        return 0.0
    log_delta = math.log(delta)

    def excess(eps: float) -> float:
        la = special.log_ndtr(-eps / mu + mu / 2.0)
        lb = special.log_ndtr(-eps / mu - mu / 2.0)
        return la + math.log(-math.expm1(eps + lb - la)) - log_delta

    eps_hi = mu * (mu / 2.0 - special.ndtri(delta))
    if excess(0.0) <= 0.0:
        return 0.0
    return float(optimize.brentq(excess, 0.0, eps_hi, xtol=1e-14, rtol=4 * np.finfo(float).eps))


def best_gdp_mu_lower_bound(*, canaries: int, guesses, correct, confidence: float = 0.95,
                            tau: float = 0.0) -> SweepBest:
    """max over the sweep of mu_lb, and its index (-1 when nothing is rejected).

    Equal to the max of gdp_mu_lower_bound_sweep (rejection is monotone in mu) but much cheaper: points are
    visited by decreasing upper bound (_mu_cap) until that bound falls to the best so far, and a point is
    searched only if it rejects the best mu so far.
    """
    gamma, tau = gamma_of(confidence), checked_tau(tau)
    m, g, c = checked_counts(canaries, guesses, correct)
    g, c = g.ravel(), c.ravel()
    cap = _mu_cap(m, g, c, gamma, tau)
    best, index = 0.0, -1
    for j in np.argsort(-cap, kind="stable"):
        if cap[j] <= best:
            break
        gj, cj = int(g[j]), int(c[j])
        if _gdp_rejected(best, tau, m, gj, cj, gamma):
            mu = float(_gdp_mu_search(best, float(cap[j]), tau, m, gj, cj, gamma))
            if mu > best or index < 0:
                best, index = mu, int(j)
    return SweepBest(best, index)
