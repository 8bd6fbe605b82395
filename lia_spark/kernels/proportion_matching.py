"""Proportion matching (PropMatch, auditing paper sec. 2; docs/math.md §4): the loss a booster minimises to learn
per-row probabilities from bag proportions alone.

With margins f_ij, p_ij = sigmoid(f_ij), bag mean m_i = (1/k_i) sum_j p_ij and released proportion alpha_i, the loss
is

    L = sum_i BCE(m_i, alpha_i) = -sum_i [alpha_i log m_i + (1 - alpha_i) log(1 - m_i)],

whose exact per-row derivatives are, with D_i = (m_i - alpha_i) / (m_i (1 - m_i)) and s = p (1 - p):

    dL/df_ij   = D_i s_ij / k_i
    d2L/df_ij2 = (alpha_i/m_i^2 + (1-alpha_i)/(1-m_i)^2) (s_ij/k_i)^2 + D_i s_ij (1 - 2 p_ij) / k_i.

The second term can be negative; boosting uses max(exact, Gauss-Newton term), the Gauss-Newton term
(the first one) being positive. For k = 1 this is plain logistic loss (g = p - y, h = p (1 - p)).
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit

PROBABILITY_CLIP = 1e-7


def _bag_means(probabilities: np.ndarray, bag_index: np.ndarray, n_bags: int) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.bincount(bag_index, minlength=n_bags).astype(np.float64)
    means = np.bincount(bag_index, weights=probabilities, minlength=n_bags) / np.maximum(sizes, 1.0)
    return np.clip(means, PROBABILITY_CLIP, 1.0 - PROBABILITY_CLIP), sizes


def _check_bags(margins: np.ndarray, bag_index: np.ndarray, alpha: np.ndarray) -> None:
    if margins.shape != bag_index.shape:
        raise ValueError(f"bag_index must be shaped like margins {margins.shape}, got {bag_index.shape}")
    if bag_index.size and (bag_index.min() < 0 or bag_index.max() >= alpha.size):
        raise ValueError(f"bag_index must lie in [0, {alpha.size}), got [{bag_index.min()}, {bag_index.max()}]")


def proportion_matching_loss(margins: np.ndarray, bag_index: np.ndarray, alpha: np.ndarray) -> float:
    """L = sum over bags of BCE(mean_j sigmoid(f_ij), alpha_i); alpha is clipped to [0, 1]."""
    margins, bag_index = np.asarray(margins, np.float64), np.asarray(bag_index, np.int64)
    alpha = np.clip(np.asarray(alpha, np.float64), 0.0, 1.0)
    _check_bags(margins, bag_index, alpha)
    means, _ = _bag_means(expit(margins), bag_index, alpha.size)
    return float(-np.sum(alpha * np.log(means) + (1.0 - alpha) * np.log1p(-means)))


def proportion_matching_grad_hess(margins: np.ndarray, bag_index: np.ndarray,
                                  alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact per-row gradient and diagonal Hessian of :func:`proportion_matching_loss` in the margins.

    Returns:
        (gradient, exact second derivative, Gauss-Newton part of it), each shaped like ``margins``.
    """
    margins, bag_index = np.asarray(margins, np.float64), np.asarray(bag_index, np.int64)
    alpha = np.clip(np.asarray(alpha, np.float64), 0.0, 1.0)
    _check_bags(margins, bag_index, alpha)
    p = expit(margins)
    means, sizes = _bag_means(p, bag_index, alpha.size)
    m, a, k = means[bag_index], alpha[bag_index], sizes[bag_index]
    slope = p * (1.0 - p) / k
    dloss_dmean = (m - a) / (m * (1.0 - m))
    curvature = a / m**2 + (1.0 - a) / (1.0 - m) ** 2
    gauss_newton = curvature * slope**2
    exact = gauss_newton + dloss_dmean * slope * (1.0 - 2.0 * p)
    return dloss_dmean * slope, exact, gauss_newton
