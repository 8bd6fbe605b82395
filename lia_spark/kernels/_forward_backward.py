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

and the posterior is e'_i L'_1 / (e'_i L'_1 + (1 - e'_i) L'_0) = sigmoid(logit e_i + I_i) (the second
form where e'_i L'_1 < 1e-300 may have lost precision). theta is chosen so that the tilted mean of S
sits at the released sum (for noisy releases the theta nearest 1 that does), and for noisy releases
re-chosen at the mode of P(S = b) w(b) while the checks of docs/math.md §3.5 fail; there the tilted pmf
carries mass >= ~1/(k+1), the forward messages are probability vectors (no scaling needed) and the
backward messages are rescaled to maximum 1 whenever they shrink (the scale cancels in the ratio).
Bags whose untilted dynamic range provably stays inside float64 skip the tilt (u = 0).

Both message families are log-concave in j (Poisson-binomial pmfs, and their convolutions with the
log-concave w), so entries below 1e-290 sit only at the ends of the support; they are trimmed, which
keeps subnormals out of the loops and changes L_y by less than 2e-112 relative once the normalized
joint at the mode m keeps J_n(m) e^(-|u| - eps) >= e^-400 (the retilting rule, docs/math.md §3.5).
Forward messages are only computed on the sums that can still reach the support of w (for LLP: j in
[s - (k - t), s]), which makes LLP O(k min(s, k - s)) per bag. For noisy releases with k >= 32 (or
tilted) the support of w is cut to the sums b whose tilted joint P'(b) w'(b) is within
e^(-140 - 2 eps) of its maximum, plus one sum on each side (relative effect on L_y below
2 (k + 1) e^-140, docs/math.md §3.5), so the cost follows the spread of the posterior of S, not k.
Inner loops index slices from 0 (nonnegative indices let LLVM vectorize them without numba's
negative-index wraparound).
"""
from __future__ import annotations

import math

import numpy as np

from lia_spark import names
from lia_spark.kernels._jit import njit_for
from lia_spark.kernels.release_mechanisms import kernel_code

njit = njit_for(__file__)

# the bag mechanisms' codes (the release registry's), compile-time constants of the kernels below
LLP = kernel_code(names.LLP)
LAPLACE = kernel_code(names.LLP_LAPLACE)
GEOMETRIC = kernel_code(names.LLP_GEOMETRIC)

_NO_TILT_LOG_FLOOR = -600.0    # untilted products above e^-600 cannot underflow: skip the tilt
_JOINT_LOG_FLOOR = -400.0      # retilt unless J_n(m) e^(-|u| - eps) >= e^-400 (J_n: normalized joint, m its mode)
_RESCALE_BELOW = 1e-100        # rescale backward messages whose maximum falls below this
_TRIM = 1e-290                 # message entries below this are dropped (only ever at the support ends)
_MAX_RETILTS = 40
_WINDOW_LOG = 140.0            # noisy releases: keep the sums b with J(b) >= e^(-140 - 2 eps) max_b J(b)
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
def _tilt_root(logits: np.ndarray, k: int, aim: float, lo: float, hi: float, side: float) -> float:
    """u with |sum_i sigmoid(logit_i + u) - aim| < 0.01, the root bracketed by [lo, hi]: safeguarded Newton
    from base - mean(logit_i), base = logit(aim / k) (exact when all priors are equal).

    side = +1 (-1) asks for the fitting u nearest 0 from above (below) 0: where every tilted prior is near 0 or 1
    a wide plateau of u fits (tilted variance V = sum_i p_i (1 - p_i) < 1 there), and only a u within 1 of its end
    nearest 0 is taken (mean short of aim, the bisection towards 0 narrowed to [lo, hi] with hi - lo < 1: lo never
    fits); elsewhere V >= 1 and the fitting u are within ~0.02 of each other. side = 0 takes any fitting u."""
    mean_logit = 0.0
    for i in range(k):
        mean_logit += logits[i]
    u = min(max(math.log(aim / (k - aim)) - mean_logit / k, lo), hi)
    for _ in range(200):
        g = -aim
        dg = 0.0
        for i in range(k):
            p = 1.0 / (1.0 + math.exp(-(logits[i] + u)))
            g += p
            dg += p * (1.0 - p)
        if abs(g) < 0.01:
            if side == 0.0 or dg >= 1.0 or (side * g <= 0.0 and hi - lo < 1.0):
                break
            if side > 0.0:  # on the plateau or beyond it: towards 0
                hi = u
            else:
                lo = u
            u = 0.5 * (lo + hi)
            continue
        if g > 0.0:
            hi = u
        else:
            lo = u
        step = u - g / dg if dg > 0.0 else 0.5 * (lo + hi)
        u = step if lo < step < hi else 0.5 * (lo + hi)
    return u


@njit(error_model="numpy")
def _root_bracket(logits: np.ndarray, k: int, aim: float) -> tuple:
    """[logit(aim / k) - max logit_i, logit(aim / k) - min logit_i]: there every tilted prior is <= (>=) aim / k."""
    base = math.log(aim / (k - aim))
    lo_logit = logits[0]
    hi_logit = logits[0]
    for i in range(k):
        lo_logit = min(lo_logit, logits[i])
        hi_logit = max(hi_logit, logits[i])
    return base - hi_logit, base - lo_logit


@njit(error_model="numpy")
def _llp_tilt(logits: np.ndarray, k: int, bag_sum: int) -> float:
    """u with the tilted mean within 0.01 of s (clipped to [1/2, k - 1/2]), from the start of _tilt_root.
    LLP's I_i is unbounded, so the tilt sits between the rows' log-odds rather than near 0."""
    aim = min(max(float(bag_sum), 0.5), k - 0.5)
    lo, hi = _root_bracket(logits, k, aim)
    return _tilt_root(logits, k, aim, lo, hi, 0.0)


@njit(error_model="numpy")
def _noisy_tilt(priors: np.ndarray, logits: np.ndarray, k: int, target: float) -> float:
    """A u near 0 with the tilted mean sum_i sigmoid(logit_i + u) within 0.01 of the target (clipped to
    [1/2, k - 1/2]): 0 when the untilted mean fits (for targets within 1/2 of an end, any mean within 1/2 of
    it, where P'(end) >= 1/2 already), else the fitting u nearest 0 on the side that moves the mean. Where
    every prior is near 0 or 1 a wide range of u fits, and one far from 0 makes w' = w e^(-u b) needlessly
    steep and the likelihoods L'_y of some rows tiny (docs/math.md §3.5)."""
    aim = min(max(target, 0.5), k - 0.5)
    mean = 0.0
    for i in range(k):
        mean += priors[i]
    if abs(mean - aim) < 0.01 or (target <= 0.5 and mean <= 0.5) or (target >= k - 0.5 and mean >= k - 0.5):
        return 0.0
    lo, hi = _root_bracket(logits, k, aim)
    if mean < aim:
        return _tilt_root(logits, k, aim, max(lo, 0.0), hi, 1.0)
    return _tilt_root(logits, k, aim, lo, min(hi, 0.0), -1.0)


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
        factor = min(priors[i], 1.0 - priors[i])
        if factor < 1e-100:  # a product of it could underflow to 0
            total += math.log(factor)
            continue
        product *= factor  # >= 1e-300: normal
        if product < 1e-200:
            total += math.log(product)
            product = 1.0
    return total + math.log(product)


@njit(error_model="numpy")
def _noisy_weights(value, epsilon, k, u, center, logw):
    """log w'(b) = -eps |value - b| - (b - center) u into logw[0..k] (Laplace: value = k alpha, the density up
    to a constant; geometric: value = z, inside the clipped ends). The constant center u keeps the sums near
    the tilt's target small: -b u alone carries an error of ulp(k |u|), 7e-12 at k = 2000, u = 30."""
    for b in range(k + 1):
        logw[b] = -epsilon * abs(value - b) - (b - center) * u


@njit(error_model="numpy")
def _max_log(logw, lo, hi):
    """max of logw[lo..hi]."""
    top = -np.inf
    for b in range(lo, hi + 1):
        top = max(top, logw[b])
    return top


@njit(error_model="numpy")
def _joint_window(k, epsilon, forward, flo, fhi, logw, window):
    """Locate the mode m of the tilted joint J(b) = P'(b) w'(b) (log-concave in b; logw holds log w').

    Writes into ``window`` the interval of b with J(b) >= e^(-140 - 2 eps) J(m) widened by one sum each side
    (the sums the backward messages keep: item i's L_y lives on the other labels' sums shifted by y) and the
    mode, and returns log J_n(m), the joint at its mode with w' normalized to maximum 1 on those sums: every entry
    the messages drop (< 1e-290) is that small against it. Where the window reaches a trimmed end of the forward
    support, the sums beyond have P'(b) <= k (k + 2) 1e-290 (all the mass trimming dropped) but w'(b) may be huge:
    unless that bounds J(b) below the window's floor at the first of them (log-concavity then bounds the rest),
    returns -inf: the tilt is misplaced and is redone at m.
    """
    best = -np.inf
    best_b = flo[k]
    for b in range(flo[k], fhi[k] + 1):
        joint = math.log(forward[k, b]) + logw[b]
        if joint > best:
            best = joint
            best_b = b
    floor = best - _WINDOW_LOG - 2.0 * epsilon
    lo = best_b
    hi = best_b
    while lo > flo[k] and math.log(forward[k, lo - 1]) + logw[lo - 1] >= floor:
        lo -= 1
    while hi < fhi[k] and math.log(forward[k, hi + 1]) + logw[hi + 1] >= floor:
        hi += 1
    window[0] = max(lo - 1, 0)
    window[1] = min(hi + 1, k)
    window[2] = best_b
    log_beyond = math.log(_TRIM * k * (k + 2.0))
    if lo == flo[k] and lo > 0 and log_beyond + logw[lo - 1] >= floor:
        return -np.inf
    if hi == fhi[k] and hi < k and log_beyond + logw[hi + 1] >= floor:
        return -np.inf
    return best - _max_log(logw, window[0], window[1])


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
    center = float(round(min(max(value, 0.0), k)))  # the tilt's target sum: log w' is kept small near it
    tilted = _log_min_product(priors, k) - log_range < _NO_TILT_LOG_FLOOR
    if tilted:
        _logits(priors, k, logits)
        u = _llp_tilt(logits, k, int(value)) if mechanism == LLP else _noisy_tilt(priors, logits, k, value)
    wlo = 0
    whi = k
    if mechanism == LLP:
        wlo = int(value)
        whi = wlo
    for retilt in range(_MAX_RETILTS):
        _tilted_priors(logits, priors, k, u, ep, qp)
        _forward(ep, qp, k, wlo, whi, forward, flo, fhi)
        if mechanism == LLP:
            break
        _noisy_weights(value, epsilon, k, u, center, logw)
        if not tilted and k < _WINDOW_MIN_K:
            break
        # L'_1 / L'_0 = e^(I - u), so both are >= J_n(m) e^(-|u| - eps): that is what the trimming needs
        log_joint_mode = _joint_window(k, epsilon, forward, flo, fhi, logw, window)
        window_fits = log_joint_mode - abs(u) - epsilon >= _JOINT_LOG_FLOOR
        if window_fits or retilt == _MAX_RETILTS - 1:
            break
        if not tilted:
            _logits(priors, k, logits)
            tilted = True
        retarget = _noisy_tilt(priors, logits, k, float(window[2]))
        if retarget == u:  # the same tilt again: nothing left to gain
            break
        u = retarget
        center = float(window[2])

    if mechanism == LLP:
        back[wlo] = 1.0
        blo = wlo
        bhi = wlo
    else:
        blo = 0
        bhi = k
        if tilted or k >= _WINDOW_MIN_K:
            # the widened window: every term outside it is below 2 e^-140 L_y (docs/math.md §3.5)
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
            if a1 >= 1e-300 or not tilted:  # untilted: a1 >= e^-600 (the no-tilt test)
                post[i] = a1 / (a1 + qp[i] * l0)
            else:  # a tiny e'_i: e'_i L'_1 may have lost precision below the normal range; the same value
                post[i] = 1.0 / (1.0 + math.exp(-(logits[i] + llr[i])))  # sigmoid(logit e_i + I_i)
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
