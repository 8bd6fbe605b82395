"""Training-label mechanisms for the target model (docs/math.md §2.6; observational paper sec. 6).

Pure numpy. Every random draw is keyed on (seed, purpose, row_id) through :mod:`lia_spark.kernels.hashing`, so a
row's released label does not depend on how the rows are partitioned or ordered.

- none: the true labels (epsilon = infinity).
- rr (= LP-1ST): flip each label w.p. pi = 1/(1+e^eps).
- rr_with_prior: binary RRWithPrior (Ghazi et al. 2021) with prior p = P(y=1|x): if |logit p| >= eps
  release argmax of the prior (1{p > 1/2}), else RR(eps). Releasing the argmax with probability one is
  the k=1 branch of RRWithPrior, chosen when max(p, 1-p) >= e^eps/(1+e^eps), i.e. |logit p| >= eps.
- rr_debiased: RR labels; the model's predictions q are noise-corrected, p = (q - pi)/(1 - 2 pi), clipped.
- lp_2st: RR on one half of the rows, RRWithPrior on the other half with a stage-1 model as the prior
  (the model-dependent orchestration lives in :mod:`lia_spark.kernels.training`).
- llp / llp_laplace / llp_geometric: bag proportions released per bag of k rows (docs/math.md §2).
"""
from __future__ import annotations

import math

import numpy as np

from lia_spark.kernels import hashing, mechanisms
from lia_spark.names import BAG_MECHANISMS, LLP

PURPOSE_HALF = "train-labels/lp2st-half"
DEBIAS_CLIP = 1e-6  # noise-corrected predictions are clipped to [DEBIAS_CLIP, 1 - DEBIAS_CLIP]


def rr_flip_probability(*, epsilon: float) -> float:
    """pi = 1/(1+e^eps), the flip probability of eps-RR; 0 for eps = infinity."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got epsilon={epsilon}")
    return 0.0 if math.isinf(epsilon) else mechanisms.flip_probability(epsilon)


def randomized_response(labels: np.ndarray, row_ids: np.ndarray, *, epsilon: float, seed: int) -> np.ndarray:
    """LP-1ST: RR(eps) of :func:`lia_spark.kernels.mechanisms.rr_release`; the true labels for eps = infinity."""
    labels = _check_labels(labels)
    if math.isinf(epsilon):
        return labels
    return mechanisms.rr_release(labels, row_ids, epsilon=epsilon, seed=seed)


def rr_with_prior(labels: np.ndarray, prior: np.ndarray, row_ids: np.ndarray, *, epsilon: float,
                  seed: int) -> np.ndarray:
    """Binary RRWithPrior: argmax of the prior where |logit p| >= eps, RR(eps) elsewhere (docs/math.md §2.6).

    Args:
        labels: true labels in {0, 1}.
        prior: P(y=1|x) per row, in [0, 1].
        row_ids: stable row ids keying the RR draws (the same draws as :func:`randomized_response`).
        epsilon: privacy parameter, > 0 (infinity releases the true labels).
        seed: run seed.
    Returns:
        Released labels, int8.
    """
    labels = _check_labels(labels)
    prior = np.asarray(prior, dtype=np.float64)
    if prior.shape != labels.shape or np.any(~(prior >= 0.0) | (prior > 1.0)):
        raise ValueError(f"prior must be probabilities shaped like labels {labels.shape}, got shape {prior.shape}")
    if math.isinf(epsilon):
        return labels.astype(np.int8)
    with np.errstate(divide="ignore"):
        abs_logit = np.abs(np.log(prior) - np.log1p(-prior))
    confident = abs_logit >= epsilon
    return np.where(confident, (prior > 0.5).astype(np.int8),
                    randomized_response(labels, row_ids, epsilon=epsilon, seed=seed)).astype(np.int8)


def debias_rr_predictions(predictions: np.ndarray, *, epsilon: float, clip: float = DEBIAS_CLIP) -> np.ndarray:
    """Noise correction of a model fitted to RR labels: p = (q - pi)/(1 - 2 pi), clipped to [clip, 1-clip].

    E[released | x] = pi + (1 - 2 pi) P(y=1|x), so inverting the affine map recovers P(y=1|x).
    """
    pi = rr_flip_probability(epsilon=epsilon)
    if pi >= 0.5:
        raise ValueError(f"epsilon must be > 0 for a correctable RR, got epsilon={epsilon}")
    corrected = (np.asarray(predictions, dtype=np.float64) - pi) / (1.0 - 2.0 * pi)
    return np.clip(corrected, clip, 1.0 - clip)


def debias_bag_predictions(predictions: np.ndarray, *, bag_size: int, mean_proportion: float,
                           clip: float = DEBIAS_CLIP) -> np.ndarray:
    """P(y=1|x) from a regression f(x) of each row's released bag proportion on its features (debiased per-row
    labels, docs/math.md §4.7): with random bags of k rows and zero-mean noise,
    E[alpha | x] = (P(y=1|x) + (k - 1) mu) / k (mu = E[y], the mean released proportion), so
    p = k f - (k - 1) mu, clipped to [clip, 1-clip]."""
    if isinstance(bag_size, bool) or not isinstance(bag_size, (int, np.integer)) or bag_size < 1:
        raise ValueError(f"bag_size must be a positive integer, got bag_size={bag_size!r}")
    corrected = bag_size * np.asarray(predictions, dtype=np.float64) - (bag_size - 1) * float(mean_proportion)
    return np.clip(corrected, clip, 1.0 - clip)


def lp2st_first_half(row_ids: np.ndarray, *, seed: int) -> np.ndarray:
    """Boolean mask of the LP-2ST stage-1 half: hash-uniform(seed, row_id) < 1/2."""
    return hashing.uniform(seed, PURPOSE_HALF, row_ids) < 0.5


def _check_labels(labels: np.ndarray) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.size and not np.isin(labels, (0, 1)).all():
        raise ValueError(f"labels must be 0/1, got values {np.unique(labels)[:5]}")
    return labels.astype(np.int8)


def bag_proportions(row_ids: np.ndarray, labels: np.ndarray, *, mechanism: str, epsilon: float, bag_size: int,
                    seed: int, unit_bits: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bag the rows (:func:`lia_spark.kernels.mechanisms.assign_bags`, ``unit_bits`` as there) and release each bag's
    proportion.

    llp releases S/k; llp_laplace S/k + Laplace(1/(k eps)); llp_geometric f(clip(S + G, 0, k))/k (docs/math.md §2).
    Noise is keyed on the bag's smallest row id, so disjoint row sets bagged with one seed get
    independent noise.

    Returns:
        (bag index per row in 0..n_bags-1 aligned with ``row_ids``, released proportion per bag).
    """
    if mechanism not in BAG_MECHANISMS:
        raise ValueError(f"mechanism must be one of {BAG_MECHANISMS}, got {mechanism!r}")
    ids = np.asarray(row_ids, dtype=np.int64)
    labels = _check_labels(labels)
    _, bag_index = np.unique(mechanisms.assign_bags(ids, bag_size=bag_size, seed=seed, unit_bits=unit_bits),
                             return_inverse=True)
    order = np.argsort(bag_index, kind="stable")
    sizes = np.bincount(bag_index)
    sums = mechanisms.bag_sums(labels[order], sizes)
    bag_keys = np.full(sizes.size, np.iinfo(np.int64).max)
    np.minimum.at(bag_keys, bag_index, ids)
    release = mechanisms.BAG_RELEASES[LLP if math.isinf(epsilon) else mechanism]
    return bag_index, release(sums, sizes, bag_keys, epsilon=epsilon, seed=seed).proportion
