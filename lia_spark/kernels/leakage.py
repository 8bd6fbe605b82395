"""Pointwise conditional maximal leakage of one label about each release (docs/math.md §7), in nats.

Issa, Wagner, Kamath, An operational approach to information leakage, IEEE Trans. Inf. Theory 2020,
arXiv:1807.07878 (Def. 6); Saeidian, Cervia, Oechtering, Skoglund, Quantifying membership privacy via
information leakage, IEEE Trans. Inf. Forensics Security 2021, arXiv:2010.05965 (entrywise leakage, PATE).

For one label Y_i, a release Z and the attacker's side information w (the other labels' priors),

    L(Y_i -> Z | w) = log sum_z max_y P(z | Y_i = y, w) = log(1 + TV(P(. | Y_i = 1, w), P(. | Y_i = 0, w))),

because sum_z max(g_1, g_0) = sum_z g_0 + sum_z (g_1 - g_0)^+. With Q = P_{-i} the Poisson-binomial pmf of
the other labels of the bag, g_y(z) = sum_b Q(b - y) f(z | b), so g_1 - g_0 = sum_b c_b f(z | b) with
c_b = Q(b - 1) - Q(b). Per mechanism (f as in docs/math.md §2-§3):

- RR: TV = (e^eps - 1)/(e^eps + 1) for every prior: L = log(2 e^eps / (1 + e^eps)).
- LLP (f(z | b) = 1{z = b}): TV = sum_b (c_b)^+.
- LLP + two-sided geometric clipped to [0, k], a = e^-eps: with E(z) = sum_b c_b a^|z - b| (two first-order
  recursions), g_1 - g_0 = E(z) (1 - a)/(1 + a) inside and E(z)/(1 + a) at the clipped ends z = 0, k.
- LLP + Laplace(1/eps) on the sum: on every unit interval z = j + x, x in (0, 1),
  g_1 - g_0 = (eps/2)(A_j e^{-eps x} + B_j e^{eps x}) with A_j = sum_{b <= j} c_b a^{j - b},
  B_j = sum_{b > j} c_b a^{b - j}; A_j + B_j e^{2 eps x} is monotone in x, so the positive part is
  integrated in closed form on each interval (and on the tails). This replaces quadrature: the only error
  is float64 rounding, far below the 1e-8 that a quadrature would state.

Worst case over the other labels (attacker knows them, Q = delta_s): RR and LLP+Geom
log(2 e^eps/(1 + e^eps)) (for every s: the events {Z >= s + 1} survive the clipping), LLP log 2, LLP+Lap
log(2 - e^{-eps/2}). Every eps-label-DP release has 0 <= L <= min(eps, log 2).

Per row, Q is the convolution of the forward message F_{i-1} (pmf of the labels before row i) with the
same forward recursion run on the reversed bag (pmf of the labels after row i), both from
lia_spark.kernels._forward_backward. Message entries below 1e-20 are dropped: they sit at the ends of the
(log-concave) messages, change sum_b |c_b| by at most 4 (k + 1) 1e-20 and so L by less than 1e-16 for
k <= 4096; no tilting is needed since L depends on probabilities of order 1 (the modes), never on tails.
Cost O(k W^2) per bag, W the width of the messages above 1e-20 (W <= k + 1; ~ 20 sqrt(k) at priors 1/2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from lia_spark.kernels import _forward_backward as fb
from lia_spark.kernels._jit import njit_for
from lia_spark.kernels.posteriors import MAX_BAG_SIZE, bag_offsets, checked_priors
from lia_spark.kernels.release_mechanisms import RELEASE_MECHANISMS, kernel_code, release_mechanism
from lia_spark.names import LLP, LLP_GEOMETRIC, LLP_LAPLACE, RR

njit = njit_for(__file__)

MECHANISMS = tuple(RELEASE_MECHANISMS)
_NEGLIGIBLE = 1e-20  # message entries below this are dropped (error bound in the module docstring)


@njit(error_model="numpy")
def _tv(q, lo, hi, k, mechanism, epsilon, c, left, right):
    """TV(g_1, g_0) for the other labels' pmf Q(s) = q[s] on [lo, hi] in a bag of k rows (module docstring).

    c_b = Q(b - 1) - Q(b) is nonzero only for b in [lo, hi + 1]; below lo, g_1 - g_0 has the sign of
    E(lo) = -(1 - a) sum_s Q(s) a^(s - lo) < 0 and contributes nothing.
    """
    n = hi - lo + 2
    for m in range(n):
        b = lo + m
        c[m] = (q[b - 1] if b > lo else 0.0) - (q[b] if b <= hi else 0.0)
    if mechanism == fb.LLP:
        total = 0.0
        for m in range(n):
            total += max(c[m], 0.0)
        return total
    a = math.exp(-epsilon)
    one_minus_a = -math.expm1(-epsilon)
    left[0] = c[0]
    for m in range(1, n):
        left[m] = a * left[m - 1] + c[m]
    right[n - 1] = 0.0
    for m in range(n - 2, -1, -1):
        right[m] = a * (right[m + 1] + c[m + 1])
    total = 0.0
    if mechanism == fb.GEOMETRIC:
        for m in range(n):
            z = lo + m
            weight = 1.0 / (1.0 + a) if z == 0 or z == k else one_minus_a / (1.0 + a)
            total += weight * max(left[m] + right[m], 0.0)
        # z > hi + 1: E(z) = a^(z - hi - 1) E(hi + 1); the interior weights and the end z = k sum to a/(1 + a)
        if hi + 1 < k:
            total += max(left[n - 1], 0.0) * a / (1.0 + a)
        return total
    for m in range(n - 1):
        # z = lo + m + x: (eps/2)(A e^{-eps x} + B e^{eps x}); at x = 0 ~ A + B, at x = 1 ~ A a + B1, B1 = B e^eps
        start_a = left[m]
        start_b = right[m]
        end_b = right[m + 1] + c[m + 1]
        at_start = start_a + start_b
        at_end = start_a * a + end_b
        if at_start >= 0.0 and at_end >= 0.0:
            total += 0.5 * (start_a + end_b) * one_minus_a
        elif at_start > 0.0:
            total += 0.5 * (math.sqrt(start_a) - math.sqrt(max(-start_b, 0.0))) ** 2
        elif at_end > 0.0:
            total += 0.5 * (math.sqrt(end_b) - math.sqrt(max(-start_a * a, 0.0))) ** 2
    # z > hi + 1: (eps/2) A_{hi+1} e^{-eps (z - hi - 1)}, integral A_{hi+1}/2
    return total + 0.5 * max(left[n - 1], 0.0)


@njit(error_model="numpy")
def _significant(message, lo, hi):
    """Sub-interval of [lo, hi] where the (log-concave) message is >= _NEGLIGIBLE (never empty: the mode
    of a pmf on at most k + 1 sums is >= 1/(k + 1))."""
    while lo < hi and message[lo] < _NEGLIGIBLE:
        lo += 1
    while hi > lo and message[hi] < _NEGLIGIBLE:
        hi -= 1
    return lo, hi


@njit(error_model="numpy")
def _bag(priors, mechanism, epsilon, ep, qp, prefix, plo, phi, suffix, slo, shi, reversed_suffix, q, c, left,
         right, out):
    """L_i = log(1 + TV_i) for every row of one bag; Q_i = prefix message i (*) suffix message k - 1 - i."""
    k = priors.shape[0]
    for i in range(k):
        ep[i] = priors[i]
        qp[i] = 1.0 - priors[i]
    fb._forward(ep, qp, k, 0, k, prefix, plo, phi)
    for i in range(k):
        ep[i] = priors[k - 1 - i]
        qp[i] = 1.0 - priors[k - 1 - i]
    fb._forward(ep, qp, k, 0, k, suffix, slo, shi)
    for i in range(k):
        before = prefix[i]
        after = suffix[k - 1 - i]
        flo, fhi = _significant(before, plo[i], phi[i])
        rlo, rhi = _significant(after, slo[k - 1 - i], shi[k - 1 - i])
        for t in range(rhi - rlo + 1):  # reversed_suffix[t] = after[rhi - t]: the convolution becomes a dot
            reversed_suffix[t] = after[rhi - t]
        lo = flo + rlo
        hi = fhi + rhi
        for s in range(lo, hi + 1):
            start = max(flo, s - rhi)
            stop = min(fhi, s - rlo)
            q[s] = fb._dot(before, reversed_suffix, start, rhi - s + start, stop - start + 1)
        out[i] = math.log1p(_tv(q, lo, hi, k, mechanism, epsilon, c, left, right))


@njit(error_model="numpy")
def bags_kernel(priors, offsets, mechanism, epsilon, out):
    """Run ``_bag`` over bags [offsets[b], offsets[b+1]) of the bag-contiguous ``priors``."""
    n_bags = offsets.shape[0] - 1
    kmax = 1
    for b in range(n_bags):
        kmax = max(kmax, offsets[b + 1] - offsets[b])
    ep = np.empty(kmax)
    qp = np.empty(kmax)
    prefix = np.zeros((kmax + 1, kmax + 2))
    suffix = np.zeros((kmax + 1, kmax + 2))
    plo = np.zeros(kmax + 1, dtype=np.int64)
    phi = np.zeros(kmax + 1, dtype=np.int64)
    slo = np.zeros(kmax + 1, dtype=np.int64)
    shi = np.zeros(kmax + 1, dtype=np.int64)
    reversed_suffix = np.empty(kmax + 1)
    q = np.empty(kmax + 1)
    c = np.empty(kmax + 2)
    left = np.empty(kmax + 2)
    right = np.empty(kmax + 2)
    for b in range(n_bags):
        start = offsets[b]
        stop = offsets[b + 1]
        _bag(priors[start:stop], mechanism, epsilon, ep, qp, prefix, plo, phi, suffix, slo, shi, reversed_suffix,
             q, c, left, right, out[start:stop])


def _rr(epsilon: float, bag_size: int) -> float:
    """log(2 e^eps / (1 + e^eps)) = log 2 - log(1 + e^-eps), for every bag size."""
    return math.log(2.0) - math.log1p(math.exp(-epsilon))


def _llp(epsilon: float, bag_size: int) -> float:
    """log 2: the exact sum reveals the label once the others are known."""
    return math.log(2.0)


def _llp_laplace(epsilon: float, bag_size: int) -> float:
    """log(2 - e^{-eps/2}) (Laplace(1/eps) on the sum)."""
    return math.log1p(-math.expm1(-epsilon / 2.0))


def _llp_geometric(epsilon: float, bag_size: int) -> float:
    """max over the other labels' sum s = 0..k-1 of log(1 + TV) from the clipped geometric pmf."""
    k = int(bag_size)
    known = np.zeros(k + 1)
    c, left, right = np.empty(2), np.empty(2), np.empty(2)
    best = 0.0
    for s in range(k):
        known[s] = 1.0
        best = max(best, _tv(known, s, s, k, fb.GEOMETRIC, epsilon, c, left, right))
        known[s] = 0.0
    return math.log1p(best)


# Each release mechanism's maximal leakage when the attacker knows the bag's other labels: (epsilon, k) -> nats.
WORST_CASES: dict[str, Callable[[float, int], float]] = {
    RR: _rr, LLP: _llp, LLP_LAPLACE: _llp_laplace, LLP_GEOMETRIC: _llp_geometric}


def worst_case(mechanism: str, *, epsilon: float = math.inf, bag_size: int = 1) -> float:
    """Maximal leakage of one label when the attacker knows the bag's other labels (docs/math.md §7), nats.

    rr: log(2 e^eps / (1 + e^eps)); llp: log 2; llp_laplace: log(2 - e^{-eps/2}) (Laplace(1/eps) on the sum);
    llp_geometric: max over the other labels' sum s = 0..k-1 of log(1 + TV) from the clipped geometric pmf
    (equal to the RR value for every s and k).

    Raises:
        ValueError: unknown mechanism, epsilon not finite positive (inf for llp), bag_size outside [1, 4096].
    """
    eps = release_mechanism(mechanism).checked_epsilon(epsilon)
    if isinstance(bag_size, bool) or not isinstance(bag_size, (int, np.integer)) or not 1 <= bag_size <= MAX_BAG_SIZE:
        raise ValueError(f"bag_size must be an integer in [1, {MAX_BAG_SIZE}], got bag_size={bag_size!r}")
    return WORST_CASES[mechanism](eps, int(bag_size))


def per_row_bags(mechanism: str, priors, bag_sizes, *, epsilon: float = math.inf) -> np.ndarray:
    """Per-row leakage log(1 + TV(P(z | y_i = 1), P(z | y_i = 0))) for many bag-contiguous bags (nats).

    Args:
        mechanism: rr | llp | llp_laplace | llp_geometric (rr ignores the bags: the same value for every row).
        priors: attacker priors in (0, 1), rows of bag b at offsets sum(bag_sizes[:b]) ..
        bag_sizes: 1-D integer array, entries in [1, 4096], summing to len(priors).
        epsilon: the mechanism's epsilon (inf for llp).
    """
    release = release_mechanism(mechanism)
    eps = release.checked_epsilon(epsilon)
    eta = checked_priors(priors)
    offsets = bag_offsets(eta, bag_sizes)
    if not release.bagged:  # RR: the same leakage for every prior and bag
        return np.full(eta.shape, WORST_CASES[mechanism](eps, 1))
    out = np.empty_like(eta)
    bags_kernel(eta, offsets, kernel_code(mechanism), eps if math.isfinite(eps) else 0.0, out)
    return out


def per_row(mechanism: str, priors, *, epsilon: float = math.inf) -> np.ndarray:
    """Leakage of each row of ONE bag given the priors of the other rows (rr: elementwise)."""
    release = release_mechanism(mechanism)
    if not release.bagged:
        eps = release.checked_epsilon(epsilon)
        return np.full(checked_priors(priors, "priors").shape, WORST_CASES[mechanism](eps, 1))
    eta = np.asarray(priors, dtype=np.float64)
    if eta.ndim != 1 or eta.size == 0:
        raise ValueError(f"priors must be a non-empty 1-D array for one bag, got shape {eta.shape}")
    return per_row_bags(mechanism, eta, np.array([eta.size]), epsilon=epsilon)


@dataclass(frozen=True)
class PateLeakage:
    """Entrywise leakage of one PATE answer with Laplace noise (rate gamma) on the vote counts, nats."""

    gamma: float
    classes: int
    proposition_1: float  # the leakage at the most uncertain known votes (equality case of Proposition 1)
    theorem_2_bound: float  # gamma, for every known votes

    def to_dict(self) -> dict:
        return {"gamma": self.gamma, "classes": self.classes, "proposition_1": self.proposition_1,
                "theorem_2_bound": self.theorem_2_bound}


def pate_laplace(*, gamma: float, classes: int) -> PateLeakage:
    """Leakage of PATE's noisy argmax over m classes, noise density (gamma/2) e^{-gamma |x|} per count.

    Saeidian et al. (module docstring), Proposition 1: at equal known votes the unknown teacher's vote
    leaks L = log(m Phi), Phi = P(the class holding the extra vote wins)
        = (1-m)/m 2^-m e^-g + (1/m)(1 - c^m) e^g + c^(m-1)/2 - (m-1)/4 e^-g H(m-2),
    c = 1 - e^-g/2, H(n) = g + sum_{j=1}^{n} (2^-j - c^j)/j, H(0) = g (the slides print Phi itself as the
    bound; sum_y max_j P(y | j) = m Phi because the extra vote helps only its own class). Theorem 2: L <= gamma.
    """
    g = float(gamma)
    if not math.isfinite(g) or g <= 0.0:
        raise ValueError(f"gamma must be a finite positive number, got gamma={gamma!r}")
    if isinstance(classes, bool) or not isinstance(classes, (int, np.integer)) or classes < 2:
        raise ValueError(f"classes must be an integer >= 2, got classes={classes!r}")
    m = int(classes)
    half_tail = 0.5 * math.exp(-g)
    log_c = math.log1p(-half_tail)
    harmonic = g + sum((0.5 ** j - math.exp(j * log_c)) / j for j in range(1, m - 1))
    phi = ((1 - m) / m * 0.5 ** m * math.exp(-g)
           - math.expm1(m * log_c) * math.exp(g) / m
           + 0.5 * math.exp((m - 1) * log_c)
           - (m - 1) / 4.0 * math.exp(-g) * harmonic)
    return PateLeakage(gamma=g, classes=m, proposition_1=math.log(m * phi), theorem_2_bound=g)
