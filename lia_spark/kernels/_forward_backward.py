"""Numba kernel: leave-one-out likelihoods of one release of a bag's label sum (docs/math.md §3).

For a bag with priors e_1..e_k and a release z whose likelihood given the true label sum b is w(b),
item i's likelihoods are

    L_y(i) = P(z | y_i = y) = sum_j F_{i-1}(j) B_{i+1}(j + y),

with forward messages F_t(j) = P(y_1 + ... + y_t = j) and backward messages
B_t(j) = sum_l P(y_t + ... + y_k = l) w(j + l), built by

    F_t(j) = (1 - e_t) F_{t-1}(j) + e_t F_{t-1}(j - 1),      F_0 = delta_0,
    B_t(j) = (1 - e_t) B_{t+1}(j) + e_t B_{t+1}(j + 1),      B_{k+1} = w.

This is O(k^2) per bag (O(k) per row), all in float64 with positive terms only (no FFT, no
deconvolution). Underflow is prevented by exponential tilting: with u = log(theta) every prior is
replaced by e'_i = sigmoid(logit(e_i) + u), which multiplies P(S = b) by theta^b up to a constant, and
w by w'(b) = w(b) theta^-b; then L_y = const * theta^y L'_y, so the log-likelihood ratio is

    I_i = log L_1(i) - log L_0(i) = log L'_1(i) - log L'_0(i) + u,

and the posterior is e'_i L'_1 / (e'_i L'_1 + (1 - e'_i) L'_0). theta is chosen so that the tilted
mean of S sits at the mode of P(S = b) w(b), where the tilted pmf carries mass >= ~1/(k+1); the
forward messages are probability vectors (no scaling needed) and the backward messages are rescaled
to maximum 1 whenever they shrink (the scale cancels in the ratio). Bags whose untilted dynamic range
provably stays inside float64 skip the tilt (u = 0).

Both message families are log-concave in j (Poisson-binomial pmfs, and their convolutions with the
log-concave w), so entries below 1e-290 sit only at the ends of the support; they are trimmed, which
keeps subnormals out of the loops and changes L_y by less than 1e-108 relative, because noisy releases
are retilted until the normalized joint at its mode is >= e^-400 (docs/math.md §3.5). Forward messages
are only computed on the sums that can still reach the support of w (for LLP: j in [s - (k - t), s]),
which makes LLP O(k min(s, k - s)) per bag. For noisy releases with k >= 32 the support of w is cut to
the sums b whose tilted joint P'(b) w'(b) is within e^-140 of its maximum (relative effect < 1e-25,
bound in _bag), so the cost follows the spread of the posterior of S rather than k.
Inner loops index slices from 0 (nonnegative indices let LLVM vectorize them without numba's
negative-index wraparound).
"""
from __future__ import annotations

import math

import numpy as np

from lia_spark.kernels._jit import njit_for

njit = njit_for(__file__)

LLP = 0
LAPLACE = 1
GEOMETRIC = 2

_NO_TILT_LOG_FLOOR = -600.0    # untilted products above e^-600 cannot underflow: skip the tilt
_JOINT_LOG_FLOOR = -400.0      # retilt unless the normalized tilted joint keeps J_n(m) >= e^-400 at its mode m
_RESCALE_BELOW = 1e-100        # rescale backward messages whose maximum falls below this
_TRIM = 1e-290                 # message entries below this are dropped (only ever at the support ends)
_MAX_RETILTS = 40
_WINDOW_LOG = 140.0            # noisy releases: keep the sums b with J(b) >= e^-140 max_b J(b)
_WINDOW_MIN_K = 32             # below this the window does not pay for its k + 1 logarithms


@njit(error_model="numpy", fastmath=True)
def _dot(x: np.ndarray, y: np.ndarray, x_start: int, y_start: int, n: int) -> float:
    """sum_{m < n} x[x_start + m] y[y_start + m] (finite nonnegative entries, any summation order)."""
    xs = x[x_start:]
    ys = y[y_start:]
    total = 0.0
    for m in range(n):
        total += xs[m] * ys[m]
    return total


@njit(error_model="numpy", fastmath=True)
def _max(x: np.ndarray, lo: int, hi: int) -> float:
    """max of the finite nonnegative entries x[lo..hi]."""
    xs = x[lo:hi + 1]
    top = 0.0
    for m in range(xs.shape[0]):
        top = max(top, xs[m])
    return top


@njit(error_model="numpy")
def _solve_tilt(logits: np.ndarray, k: int, target: float) -> float:
    """u with sum_i sigmoid(logit_i + u) ~= target (safeguarded Newton; +-0.01 is plenty)."""
    lo_logit = logits[0]
    hi_logit = logits[0]
    mean_logit = 0.0
    for i in range(k):
        lo_logit = min(lo_logit, logits[i])
        hi_logit = max(hi_logit, logits[i])
        mean_logit += logits[i]
    mean_logit /= k
    base = math.log(target / (k - target))
    lo = base - hi_logit
    hi = base - lo_logit
    u = min(max(base - mean_logit, lo), hi)
    for _ in range(100):
        g = -target
        dg = 0.0
        for i in range(k):
            p = 1.0 / (1.0 + math.exp(-(logits[i] + u)))
            g += p
            dg += p * (1.0 - p)
        if abs(g) < 0.01:
            break
        if g > 0.0:
            hi = u
        else:
            lo = u
        step = u - g / dg if dg > 0.0 else 0.5 * (lo + hi)
        u = step if lo < step < hi else 0.5 * (lo + hi)
    return u


@njit(error_model="numpy")
def _forward(ep, qp, k, wlo, whi, forward, flo, fhi):
    """Forward messages F_0..F_k (rows of ``forward``, supports [flo, fhi]) on the sums j that can
    still end in the support [wlo, whi] of w: j <= whi and j + (k - t) >= wlo."""
    forward[0, 0] = 1.0
    flo[0] = 0
    fhi[0] = 0
    lo = 0
    hi = 0
    for t in range(1, k + 1):
        e = ep[t - 1]
        q = qp[t - 1]
        # slices from lo so that loop indices are provably nonnegative (no wraparound: SIMD)
        prev = forward[t - 1, lo:]
        cur = forward[t, lo:]
        n = hi - lo
        cur[0] = q * prev[0]
        for m in range(n):
            cur[m + 1] = q * prev[m + 1] + e * prev[m]
        cur[n + 1] = e * prev[n]
        cur = forward[t]
        hi = min(hi + 1, whi)
        lo = max(lo, wlo - (k - t))
        while lo < hi and cur[lo] < _TRIM:
            lo += 1
        while hi > lo and cur[hi] < _TRIM:
            hi -= 1
        flo[t] = lo
        fhi[t] = hi


@njit(error_model="numpy")
def _tilted_priors(logits, priors, k, u, ep, qp):
    """e'_i = sigmoid(logit_i + u) and 1 - e'_i, each to full relative precision (u = 0: the priors)."""
    for i in range(k):
        if u == 0.0:
            ep[i] = priors[i]
            qp[i] = 1.0 - priors[i]
        else:
            z = logits[i] + u
            ep[i] = 1.0 / (1.0 + math.exp(-z))
            qp[i] = 1.0 / (1.0 + math.exp(z))


@njit(error_model="numpy")
def _logits(priors, k, logits):
    """logit(e_i) = log(e_i) - log1p(-e_i), exact for priors near 0 and near 1."""
    for i in range(k):
        logits[i] = math.log(priors[i]) - math.log1p(-priors[i])


@njit(error_model="numpy")
def _log_min_product(priors, k):
    """log prod_i min(e_i, 1 - e_i), a lower bound on every untilted forward/backward product."""
    total = 0.0
    product = 1.0
    for i in range(k):
        e = priors[i]
        product *= min(e, 1.0 - e)
        if product < 1e-200:
            total += math.log(product)
            product = 1.0
    return total + math.log(product)


@njit(error_model="numpy")
def _noisy_weights(value, epsilon, k, u, logw):
    """log w'(b) = -eps |value - b| - b u into logw[0..k] (Laplace: value = k alpha, the density up to a
    constant; geometric: value = z, inside the clipped ends)."""
    for b in range(k + 1):
        logw[b] = -epsilon * abs(value - b) - b * u


@njit(error_model="numpy")
def _max_log(logw, lo, hi):
    """max of logw[lo..hi]."""
    top = -np.inf
    for b in range(lo, hi + 1):
        top = max(top, logw[b])
    return top


@njit(error_model="numpy")
def _joint_window(k, forward, flo, fhi, logw, window):
    """Locate the mode m of the tilted joint J(b) = P'(b) w'(b) (log-concave in b; logw holds log w').

    Writes into ``window`` the interval of b with J(b) >= e^-140 J(m) and returns log J_n(m), the joint at
    its mode with w' normalized to maximum 1 on the window: every entry the messages drop (< 1e-290) is that
    small against it. A window that reaches a trimmed end of the forward support (a sum b whose P'(b) fell
    below 1e-290 although w'(b) may be huge) returns -inf: the tilt is misplaced and is redone with target m.
    """
    best = -np.inf
    best_b = flo[k]
    for b in range(flo[k], fhi[k] + 1):
        joint = math.log(forward[k, b]) + logw[b]
        if joint > best:
            best = joint
            best_b = b
    lo = best_b
    hi = best_b
    while lo > flo[k] and math.log(forward[k, lo - 1]) + logw[lo - 1] >= best - _WINDOW_LOG:
        lo -= 1
    while hi < fhi[k] and math.log(forward[k, hi + 1]) + logw[hi + 1] >= best - _WINDOW_LOG:
        hi += 1
    window[0] = lo
    window[1] = hi
    window[2] = best_b
    if (lo == flo[k] and lo > 0) or (hi == fhi[k] and hi < k):
        return -np.inf
    return best - _max_log(logw, lo, hi)


@njit(error_model="numpy")
def _clipped_end(priors, sign, epsilon, post, llr):
    """Releases at or beyond a clipped end: w(b) ~ a^b (or a^-b), so every I_i is exactly -eps (+eps)."""
    a = math.exp(-epsilon)
    for i in range(priors.shape[0]):
        e = priors[i]
        llr[i] = sign * epsilon
        post[i] = e / (e + (1.0 - e) * a) if sign > 0 else e * a / (e * a + (1.0 - e))


@njit(error_model="numpy")
def _bag(priors, mechanism, value, epsilon, forward, flo, fhi, logits, ep, qp, logw, back, window, post, llr):
    """Posteriors and log-likelihood ratios of one bag (see module docstring); writes post and llr."""
    k = priors.shape[0]
    if mechanism != LLP and (value <= 0.0 or value >= k):
        _clipped_end(priors, -1.0 if value <= 0.0 else 1.0, epsilon, post, llr)
        return
    if mechanism == LLP:
        log_range = 0.0
    else:  # max_b - min_b of eps |value - b| over b = 0..k
        log_range = epsilon * (max(value, k - value) - abs(value - round(value)))
    u = 0.0
    tilted = _log_min_product(priors, k) - log_range < _NO_TILT_LOG_FLOOR
    if tilted:
        _logits(priors, k, logits)
        u = _solve_tilt(logits, k, min(max(value, 0.5), k - 0.5))
    wlo = 0
    whi = k
    if mechanism == LLP:
        wlo = int(value)
        whi = wlo
    for _ in range(_MAX_RETILTS):
        _tilted_priors(logits, priors, k, u, ep, qp)
        _forward(ep, qp, k, wlo, whi, forward, flo, fhi)
        if mechanism == LLP:
            break
        _noisy_weights(value, epsilon, k, u, logw)
        if not tilted and k < _WINDOW_MIN_K:
            break
        if _joint_window(k, forward, flo, fhi, logw, window) >= _JOINT_LOG_FLOOR:
            break
        if not tilted:
            _logits(priors, k, logits)
            tilted = True
        u = _solve_tilt(logits, k, min(max(window[2], 0.5), k - 0.5))

    if mechanism == LLP:
        back[wlo] = 1.0
        blo = wlo
        bhi = wlo
    else:
        blo = 0
        bhi = k
        if tilted or k >= _WINDOW_MIN_K:
            # J_1(b) <= J(b) / e'_i and e'_i L_1 >= post_i sum_b J(b) (same for y = 0), so the dropped
            # sums change L_y by at most (k + 1) e^-140 / post_i, below 1e-25 for posteriors above 1e-33
            blo = window[0]
            bhi = window[1]
        # w' is normalized on the kept sums only: outside them it may be huge where P' is negligible
        top = _max_log(logw, blo, bhi)
        for b in range(blo, bhi + 1):
            back[b] = math.exp(logw[b] - top)
        while blo < bhi and back[blo] < _TRIM:
            blo += 1
        while bhi > blo and back[bhi] < _TRIM:
            bhi -= 1
    floor = _max(back, blo, bhi)
    for i in range(k - 1, -1, -1):
        # back holds B_{i+2} (1-based B_{i+1}) on [blo, bhi]; item i uses forward row i (= F_{i-1}).
        lo = flo[i]
        hi = fhi[i]
        fwd = forward[i]
        start = max(lo, blo)
        l0 = _dot(fwd, back, start, start, min(hi, bhi) - start + 1)
        start = max(lo, blo - 1)
        l1 = _dot(fwd, back, start, start + 1, min(hi, bhi - 1) - start + 1)
        if l0 == 0.0 and l1 == 0.0:  # impossible release (never for validated inputs): flag it
            llr[i] = np.nan
            post[i] = np.nan
        elif l0 == 0.0:
            llr[i] = np.inf
            post[i] = 1.0
        elif l1 == 0.0:
            llr[i] = -np.inf
            post[i] = 0.0
        else:
            llr[i] = math.log(l1 / l0) + u
            a1 = ep[i] * l1
            post[i] = a1 / (a1 + qp[i] * l0)
        if i == 0:
            break
        # B_{i+1}(j) = q B_{i+2}(j) + e B_{i+2}(j + 1) for j in [0, i] (sum of the first i items),
        # in place in ascending j; outside [blo, bhi] the old message is zero.
        e = ep[i]
        q = qp[i]
        new_lo = max(blo - 1, 0)
        new_hi = min(bhi, i)
        if blo - 1 >= 0:
            back[blo - 1] = e * back[blo]
        tail = back[blo:]
        for m in range(min(bhi - 1, new_hi) - blo + 1):
            tail[m] = q * tail[m] + e * tail[m + 1]
        if bhi <= new_hi:
            back[bhi] = q * back[bhi]
        # max_j B_{i+1}(j) >= min(e, q) max_j B_{i+2}(j): scan for the maximum only when the bound
        # says it may have fallen below _RESCALE_BELOW
        floor *= min(e, q)
        if floor < _RESCALE_BELOW:
            top = _max(back, new_lo, new_hi)
            if top > 0.0:
                scale = 1.0 / top
                for j in range(new_lo, new_hi + 1):
                    back[j] *= scale
            floor = 1.0
        while new_lo < new_hi and back[new_lo] < _TRIM:
            new_lo += 1
        while new_hi > new_lo and back[new_hi] < _TRIM:
            new_hi -= 1
        blo = new_lo
        bhi = new_hi


@njit(error_model="numpy")
def bags_kernel(priors, offsets, mechanism, values, epsilon, post, llr):
    """Run ``_bag`` over bags [offsets[b], offsets[b+1]) of the bag-contiguous ``priors``."""
    n_bags = offsets.shape[0] - 1
    kmax = 1
    for b in range(n_bags):
        kmax = max(kmax, offsets[b + 1] - offsets[b])
    forward = np.zeros((kmax + 1, kmax + 2))
    flo = np.zeros(kmax + 1, dtype=np.int64)
    fhi = np.zeros(kmax + 1, dtype=np.int64)
    logits = np.empty(kmax)
    ep = np.empty(kmax)
    qp = np.empty(kmax)
    logw = np.empty(kmax + 1)
    back = np.zeros(kmax + 2)
    window = np.zeros(3, dtype=np.int64)
    for b in range(n_bags):
        start = offsets[b]
        stop = offsets[b + 1]
        _bag(priors[start:stop], mechanism, values[b], epsilon, forward, flo, fhi, logits, ep, qp, logw,
             back, window, post[start:stop], llr[start:stop])
