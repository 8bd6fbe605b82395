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
- f-DP, Gaussian family (Mahloujifar, Melis, Chaudhuri 2025; observational paper Algorithm 3 with
  fbar^{-1}(y) = max(0, Phi(Phi^{-1}(y) - mu) - tau)): mu_lb = sup of the mu the recursion rejects, by
  bisection to 1e-7 in mu; the reported epsilon is eps(delta) of mu_lb-GDP. GDP has eps(0) = infinity for
  every mu > 0, so with delta = 0 the "gdp" method converts at ``GDP_DEFAULT_DELTA`` = 1e-5 (the delta of
  the paper's experiments); :func:`effective_gdp_delta` tells callers which delta was used.

Every bound is 0.0 when nothing is rejected, never NaN, never negative.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import optimize, special

from lia_spark.kernels._jit import njit_for
from lia_spark.names import BINOMIAL, BOUND_FAMILIES, GDP

njit = njit_for(__file__)

METHODS = BOUND_FAMILIES
GDP_DEFAULT_DELTA = 1e-5
MU_TOLERANCE = 1e-7
MU_MAX = 64.0  # Phi(z - 64) underflows to 0 for every z = Phi^{-1}(r), r < 1: no larger mu is ever rejected.
# Hoeffding: P[|Bin(n, q) - n q| > t] <= 2 exp(-2 t^2 / n) <= 1e-20 for t = HOEFFDING_WIDTH * sqrt(n).
HOEFFDING_WIDTH = math.sqrt(math.log(2e20) / 2.0)
_CERTIFY_EVERY = 4096
_CERTIFY_MARGIN = 1e-12


@dataclass(frozen=True)
class SweepBest:
    """Largest bound over a sweep and the index of the sweep point reaching it (-1: nothing rejected)."""

    value: float
    index: int

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------------------------- validation
def _gamma(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got confidence={confidence}")
    return 1.0 - float(confidence)


def _check_tau(tau: float) -> float:
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got tau={tau}")
    return float(tau)


def _check_delta(delta: float) -> float:
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got delta={delta}")
    return float(delta)


def _check_method(method: str) -> str:
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got method={method!r}")
    return method


def _int_array(name: str, value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"{name} must be integer counts, got {name}={value}")
    return arr.astype(np.int64)


def _check_counts(canaries, guesses, correct) -> tuple[int, np.ndarray, np.ndarray]:
    """Validate m >= 1 and 0 <= c <= c' <= m elementwise; returns (m, c', c) with c', c broadcast int64."""
    m = int(_int_array("canaries", canaries))
    if m < 1:
        raise ValueError(f"canaries must be >= 1, got canaries={canaries}")
    g, c = np.broadcast_arrays(_int_array("guesses", guesses), _int_array("correct", correct))
    if np.any((g < 0) | (g > m)):
        raise ValueError(f"guesses must be in [0, canaries={m}], got guesses={guesses}")
    if np.any((c < 0) | (c > g)):
        raise ValueError(f"correct must be in [0, guesses], got correct={correct} with guesses={guesses}")
    return m, g, c


def effective_gdp_delta(delta: float) -> float:
    """The delta at which the "gdp" method converts mu to epsilon: delta, or GDP_DEFAULT_DELTA if delta == 0."""
    delta = _check_delta(delta)
    return delta if delta > 0.0 else GDP_DEFAULT_DELTA


def gdp_tau_vacuous(*, canaries: int, guesses, tau: float):
    """True where the f-DP tau variant can reject nothing: tau >= c'/m (docs/math.md §6.3).

    Then Phi(Phi^{-1}(r) - mu) - tau <= r - tau <= 0 for every reachable r <= c'/m, so h never moves.
    """
    m, g, _ = _check_counts(canaries, guesses, np.zeros_like(np.asarray(guesses)))
    out = _check_tau(tau) >= g / m
    return bool(out) if out.ndim == 0 else out


# ------------------------------------------------------------------------------------------ binomial, pure
def clopper_pearson_lower(correct, guesses, *, confidence: float):
    """One-sided Clopper-Pearson lower limit on the accuracy: q with P[Bin(c', q) >= c] = gamma (0 if c = 0).

    Accepts scalars or arrays (broadcast); returns a float for scalars, an ndarray otherwise.
    """
    gamma = _gamma(confidence)
    c_arr = _int_array("correct", correct)
    g_arr = _int_array("guesses", guesses)
    c_arr, g_arr = np.broadcast_arrays(c_arr, g_arr)
    if np.any((c_arr < 0) | (c_arr > g_arr)):
        raise ValueError(f"correct must be in [0, guesses], got correct={correct} with guesses={guesses}")
    q, _ = _clopper_pearson(g_arr, c_arr, gamma)
    return float(q) if q.ndim == 0 else q


def _clopper_pearson(g: np.ndarray, c: np.ndarray, gamma: float) -> tuple[np.ndarray, np.ndarray]:
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


def _pure_binomial(g: np.ndarray, c: np.ndarray, gamma: float, tau: float) -> np.ndarray:
    """eps_lb = max(0, log q* - log(1 - q*) + log kappa), elementwise; 0 where c = 0."""
    q, one_minus_q = _clopper_pearson(g, c, gamma)
    with np.errstate(divide="ignore"):
        eps = np.log(q) - np.log(one_minus_q) + _log_kappa(tau)
    return np.where((c > 0) & (eps > 0), eps, 0.0)


def accuracy_of_epsilon(epsilon: float, *, tau: float = 0.0) -> float:
    """q(eps) = e^eps / (e^eps + (1-tau)/(1+tau)) = 1 / (1 + kappa e^-eps)."""
    return 1.0 / (1.0 + math.exp(_log_kappa(_check_tau(tau)) - epsilon))


# ----------------------------------------------------------------------------------- binomial with delta
def binomial_p_value(*, epsilon: float, canaries: int, guesses: int, correct: int, delta: float = 0.0,
                     tau: float = 0.0) -> float:
    """p(eps) = P[Bin(c', q(eps)) >= c] + 2 m delta max_{i=1..c} P[c-i <= Bin(c', q) <= c-1] / i (docs/math.md §6.2)."""
    m, g, c = _check_counts(canaries, guesses, correct)
    return _p_value(float(epsilon), m, int(g), int(c), _check_delta(delta), _check_tau(tau))


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


# ------------------------------------------------------------------------------------- f-DP, Gaussian
_SQRT_HALF = math.sqrt(0.5)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
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
    m, g, c = _check_counts(canaries, guesses, correct)
    return bool(_gdp_rejected(float(mu), _check_tau(tau), m, int(g), int(c), _gamma(confidence)))


def gdp_mu_lower_bound(*, canaries: int, guesses: int, correct: int, confidence: float = 0.95,
                       tau: float = 0.0) -> float:
    """mu_lb = sup{mu : Algorithm 3 rejects mu-GDP}, to 1e-7 by bisection; 0 if mu = 0 is not rejected."""
    m, g, c = _check_counts(canaries, guesses, correct)
    gamma, tau = _gamma(confidence), _check_tau(tau)
    cap = float(_mu_cap(m, g, c, gamma, tau))
    return float(_gdp_mu_search(0.0, cap, tau, m, int(g), int(c), gamma))


def gdp_mu_lower_bound_sweep(*, canaries: int, guesses, correct, confidence: float = 0.95,
                             tau: float = 0.0) -> np.ndarray:
    """gdp_mu_lower_bound elementwise over arrays of (c', c) (one compiled loop)."""
    m, g, c = _check_counts(canaries, guesses, correct)
    gamma, tau = _gamma(confidence), _check_tau(tau)
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
    gamma, delta, tau = _gamma(confidence), _check_delta(delta), _check_tau(tau)
    m, g, c = _check_counts(canaries, guesses, correct)
    g, c = int(g), int(c)
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
    gamma, delta, tau = _gamma(confidence), _check_delta(delta), _check_tau(tau)
    m, g, c = _check_counts(canaries, guesses, correct)
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


def best_gdp_mu_lower_bound(*, canaries: int, guesses, correct, confidence: float = 0.95,
                            tau: float = 0.0) -> SweepBest:
    """max over the sweep of mu_lb, and its index (-1 when nothing is rejected).

    Equal to the max of gdp_mu_lower_bound_sweep (rejection is monotone in mu) but much cheaper: points are
    visited by decreasing upper bound (_mu_cap) until that bound falls to the best so far, and a point is
    searched only if it rejects the best mu so far.
    """
    gamma, tau = _gamma(confidence), _check_tau(tau)
    m, g, c = _check_counts(canaries, guesses, correct)
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


def best_epsilon_lower_bound(*, canaries: int, guesses, correct, confidence: float = 0.95,
                             delta: float = 0.0, tau: float = 0.0, method: str = BINOMIAL) -> SweepBest:
    """max over the sweep of epsilon_lower_bound and its index (-1 when nothing is rejected).

    "gdp": eps(delta) of best_gdp_mu_lower_bound (eps(delta) is increasing in mu). "binomial" with delta > 0:
    points by decreasing pure bound (an upper bound), searched only if p(best) < gamma there.
    """
    method = _check_method(method)
    gamma, delta, tau = _gamma(confidence), _check_delta(delta), _check_tau(tau)
    m, g, c = _check_counts(canaries, guesses, correct)
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
    if _check_method(method) == BINOMIAL and _check_delta(delta) == 0.0:
        return math.tanh(at_zero / 2.0)
    lo, hi = 0.0, 1.0  # bound(lo) > 0 = bound(hi): at tau = 1 every accuracy is possible
    while hi - lo > tolerance:
        middle = 0.5 * (lo + hi)
        lo, hi = (middle, hi) if bound(middle) > 0.0 else (lo, middle)
    return hi
