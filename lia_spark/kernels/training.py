"""In-memory gradient-boosted targets on privatized labels (docs/math.md §4): the day's rows on the driver, the
metrics, and the trainers of the training mechanisms (one released label per row, LP-2ST, bag proportions, PATE).

Pure (no Spark): arrays in, fitted models and metrics out. The Spark stage collects one day's features to the driver
and calls :func:`lia_spark.kernels.mechanism_registry.train_target` / :func:`fit_model`; the libraries themselves
(:mod:`lia_spark.kernels.model_libraries`) fit and predict.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Callable

import numpy as np
import pandas as pd
from sklearn.metrics import log_loss, roc_auc_score

from lia_spark.kernels import hashing
from lia_spark.kernels import label_mechanisms as lm
from lia_spark.kernels import pate
from lia_spark.kernels.model_libraries import (XGBOOST_LIBRARY, Bags, BoostingParams, FittedModel, ModelLibrary,
                                               TeacherModel)
from lia_spark.kernels.proportion_matching import PROBABILITY_CLIP

logger = logging.getLogger(__name__)

SPLIT_TRAIN, SPLIT_VALID, SPLIT_TEST = 0, 1, 2
SPLIT_LEFT_OUT = 3  # training rows left out of the target (the membership baseline's non-members)


# ---------------------------------------------------------------------------------------------------------
# Data, metrics and the target-training orchestration


@dataclasses.dataclass
class ModelData:
    """One day's rows on the driver: features (matrix or frame), true labels, row ids, split codes."""

    features: Any
    labels: np.ndarray
    row_ids: np.ndarray
    split: np.ndarray
    library: ModelLibrary = XGBOOST_LIBRARY
    cat_features: list[str] = dataclasses.field(default_factory=list)
    feature_names: list[str] | None = None

    def rows(self, mask: np.ndarray) -> Any:
        """Feature rows selected by a boolean mask."""
        if isinstance(self.features, pd.DataFrame):
            return self.features.loc[mask].reset_index(drop=True)
        return self.features[mask]


def binary_metrics(labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """Test AUC and log-loss (predictions clipped to [1e-7, 1 - 1e-7]); NaN AUC if one class is absent."""
    labels = np.asarray(labels)
    predictions = np.clip(np.asarray(predictions, np.float64), PROBABILITY_CLIP, 1 - PROBABILITY_CLIP)
    auc = float(roc_auc_score(labels, predictions)) if 0 < labels.sum() < labels.size else math.nan
    return {"auc": auc, "log_loss": float(log_loss(labels, predictions, labels=[0, 1]))}


def tied_auc_pairs(positives: np.ndarray, negatives: np.ndarray) -> float:
    """Sum over score groups g (ascending score) of pos_g (neg_below_g + neg_g / 2): the (positive, negative) pairs
    ranked right, ties counted half. AUC = this sum / (P N) (Mann-Whitney); ``positives``/``negatives`` are the
    counts of each distinct score, sorted by score."""
    negatives = np.asarray(negatives, dtype=np.float64)
    below = np.cumsum(negatives) - negatives
    return float(np.dot(np.asarray(positives, dtype=np.float64), below + 0.5 * negatives))


def fit_model(data: ModelData, labels: np.ndarray, train: np.ndarray, valid: np.ndarray, *,
              params: BoostingParams, train_bags: Bags | None = None, valid_bags: Bags | None = None) -> FittedModel:
    """Fit the configured library on rows ``train`` with early stopping on rows ``valid`` (boolean masks)."""
    return data.library.fit(data.rows(train), None if train_bags else labels[train], data.rows(valid),
                            None if valid_bags else labels[valid], params=params, train_bags=train_bags,
                            valid_bags=valid_bags, feature_names=data.feature_names, cat_features=data.cat_features)


@dataclasses.dataclass
class TargetFit:
    """The target model, the labels it was trained on (None for bag mechanisms; NaN on rows without a released
    label for pate), the stage-1 model if any and the mechanism's own report (pate: eps, delta, T, Q, sigma, ...)."""

    model: FittedModel
    released_labels: np.ndarray | None
    stage1: FittedModel | None = None
    report: dict[str, float] = dataclasses.field(default_factory=dict)


def protocol_params(params: BoostingParams, protocol: str) -> BoostingParams:
    """The teachers' and the student's boosting settings under a PATE protocol: the models section's, or the
    protocol's trees, learning rate and depth kept at the best iteration on the validation split (early stopping
    rounds = trees: every tree is evaluated, none is cut early)."""
    fixed = pate.PROTOCOL_SETTINGS[protocol]
    if fixed.n_estimators is None or fixed.learning_rate is None or fixed.max_depth is None:
        return params
    return dataclasses.replace(params, n_estimators=fixed.n_estimators, learning_rate=fixed.learning_rate,
                               max_depth=fixed.max_depth, early_stopping_rounds=fixed.n_estimators)


def teacher_model(params: BoostingParams, *, library: ModelLibrary = XGBOOST_LIBRARY,
                  cat_features: list[str] | tuple[str, ...] = (), protocol: str = pate.LIA_SPARK) -> TeacherModel:
    """PATE's teacher settings: the protocol's boosting hyper-parameters (:func:`protocol_params`; early stopping
    on each teacher's own held-out rows under lia_spark, on the validation split under published)."""
    chosen = protocol_params(params, protocol)
    return TeacherModel(n_estimators=chosen.n_estimators, max_depth=chosen.max_depth,
                        learning_rate=chosen.learning_rate, seed=chosen.seed,
                        early_stopping_rounds=chosen.early_stopping_rounds, library=library,
                        cat_features=tuple(cat_features))


def validation_rows(data: ModelData) -> tuple[Any, np.ndarray]:
    """The validation split's features and true labels (held-out rows, never training rows): what the published
    PATE protocol's teachers and student stop on."""
    valid = data.split == SPLIT_VALID
    return data.rows(valid), data.labels[valid]


def student_rows(data: ModelData, *, settings: pate.PateSettings, seed: int) -> np.ndarray:
    """PATE's Q student rows among the training rows of ``data`` (boolean mask;
    :func:`lia_spark.kernels.pate.student_mask`)."""
    train = data.split == SPLIT_TRAIN
    students = np.zeros(data.row_ids.size, dtype=bool)
    students[train] = pate.student_mask(data.row_ids[train], queries=settings.queries, seed=seed)
    return students


def train_pate(data: ModelData, *, epsilon: float, seed: int, params: BoostingParams,
               settings: pate.PateSettings) -> TargetFit:
    """PATE as Wu et al.'s Criteo setup runs it (docs/math.md §4.6): teachers on disjoint partitions of all the
    training rows with votes sampled from their predictions, the student on Q of those rows labelled by the noisy
    vote shares (soft labels) or draws from them. Under the lia_spark protocol the student early-stops on a seeded
    10% of its rows (no label beyond the Q answers is read); under published it is fitted on all Q rows with the
    protocol's trees and kept at its best iteration on the validation split (true labels of held-out rows, as the
    published code does). With pseudo-labels, the student is refitted with labels drawn from its own predictions,
    Bernoulli(p) by row id, on the remaining training rows. Released labels: the draws (NaN elsewhere) with sampled
    labels, None with shares (no per-row label is released)."""
    published = pate.PROTOCOL_SETTINGS[settings.protocol].validation_split
    train, ids, labels = data.split == SPLIT_TRAIN, data.row_ids, data.labels.astype(np.int8)
    students = student_rows(data, settings=settings, seed=seed)
    validation = validation_rows(data) if published else None
    votes_of = settings.votes or pate.sequential_votes(
        ids[train], data.rows(train), labels[train], teachers=settings.teachers, validation=validation,
        model=teacher_model(params, library=data.library, cat_features=data.cat_features, protocol=settings.protocol))
    votes = votes_of(ids[students], data.rows(students), seed)
    answer = pate.student_labels(votes, ids[students], labels[students], epsilon=epsilon, seed=seed,
                                 settings=settings)
    released = np.full(ids.size, np.nan)
    released[students] = answer.labels
    if published:
        valid_rows, fit_rows = data.split == SPLIT_VALID, students
        fit_labels = np.where(valid_rows, data.labels, released)
    else:
        holdout = hashing.uniform(seed, pate.HOLDOUT_PURPOSE, ids) < pate.STUDENT_HOLDOUT_SHARE
        fit_rows, valid_rows, fit_labels = students & ~holdout, students & holdout, released
    student_params = protocol_params(params, settings.protocol)
    model = fit_model(data, fit_labels, fit_rows, valid_rows, params=student_params)
    if settings.pseudo_labels:
        rest = train & ~students
        released[rest] = hashing.bernoulli(seed, pate.PSEUDO_PURPOSE, ids[rest], model.predict(data.rows(rest)))
        model = fit_model(data, np.where(valid_rows, fit_labels, released), fit_rows | rest, valid_rows,
                          params=student_params)
    return TargetFit(model, released if settings.student_labels == pate.SAMPLED else None,
                     report=answer.report(settings))


@dataclasses.dataclass(frozen=True)
class TargetRequest:
    """What a trainer of :data:`lia_spark.kernels.mechanism_registry.MECHANISMS` reads: the mechanism's name, its
    epsilon, the seed of its draws, the hyper-parameters, the prior P(y=1|x) per row (mechanisms that need one), the
    bag size (bag releases), PATE's settings, and from the registry the per-row release (None: the true labels)
    and whether the predictions are noise-corrected."""

    mechanism: str
    epsilon: float
    seed: int
    params: BoostingParams
    prior: np.ndarray | None = None
    bag_size: int = 1
    pate_settings: pate.PateSettings | None = None
    release_labels: Callable[..., np.ndarray] | None = None
    debiased: bool = False


def train_on_labels(data: ModelData, request: TargetRequest) -> TargetFit:
    """The target on one released label per row: ``request.release_labels`` of the true labels (the true labels
    themselves when None), predictions noise-corrected with RR's inverse when ``request.debiased``."""
    labels, ids = data.labels.astype(np.int8), data.row_ids
    released = labels if request.release_labels is None else \
        request.release_labels(labels, ids, request.prior, epsilon=request.epsilon, seed=request.seed)
    model = fit_model(data, released, data.split == SPLIT_TRAIN, data.split == SPLIT_VALID, params=request.params)
    if request.debiased:
        model.debias_epsilon = request.epsilon
    return TargetFit(model, released)


def train_lp2st(data: ModelData, request: TargetRequest) -> TargetFit:
    """LP-2ST (docs/math.md §2.6): a stage-1 model on RR labels of one half of the rows, whose noise-corrected
    predictions are the prior of RRWithPrior on the other half; the final model uses both halves' released labels."""
    train, valid = data.split == SPLIT_TRAIN, data.split == SPLIT_VALID
    labels, ids, epsilon, seed = data.labels.astype(np.int8), data.row_ids, request.epsilon, request.seed
    first = lm.lp2st_first_half(ids, seed=seed)
    rr_labels = lm.randomized_response(labels, ids, epsilon=epsilon, seed=seed)
    stage1 = fit_model(data, rr_labels, train & first, valid & first, params=request.params)
    stage1.debias_epsilon = epsilon
    second = ~first & (train | valid)
    stage1_prior = np.full(labels.shape, 0.5)
    stage1_prior[second] = stage1.predict(data.rows(second))
    released = np.where(first, rr_labels,
                        lm.rr_with_prior(labels, stage1_prior, ids, epsilon=epsilon, seed=seed)).astype(np.int8)
    return TargetFit(fit_model(data, released, train, valid, params=request.params), released, stage1)


def train_on_bags(data: ModelData, request: TargetRequest) -> TargetFit:
    """The target on bag proportions: the training and the validation rows bagged separately into bags of
    ``request.bag_size`` (:func:`lia_spark.kernels.label_mechanisms.bag_proportions`), learnt by proportion matching."""
    train, valid = data.split == SPLIT_TRAIN, data.split == SPLIT_VALID
    labels, ids = data.labels.astype(np.int8), data.row_ids
    train_bags, valid_bags = (Bags(*lm.bag_proportions(ids[rows], labels[rows], mechanism=request.mechanism,
                                                       epsilon=request.epsilon, bag_size=request.bag_size,
                                                       seed=request.seed))
                              for rows in (train, valid))
    return TargetFit(fit_model(data, labels, train, valid, params=request.params, train_bags=train_bags,
                               valid_bags=valid_bags), None)
