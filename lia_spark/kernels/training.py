"""In-memory gradient-boosted models on privatized labels (docs/math.md §4): XGBoost, CatBoost, proportion matching.

Pure (no Spark): arrays in, fitted models and metrics out. The Spark stage collects one day's features to
the driver and calls :func:`lia_spark.kernels.mechanism_registry.train_target` / :func:`fit_model`; the distributed path reuses the label
mechanisms and metrics from here.

Proportion matching (PropMatch, auditing paper sec. 2): with margins f_ij, p_ij = sigmoid(f_ij), bag mean
m_i = (1/k_i) sum_j p_ij and released proportion alpha_i, the loss is

    L = sum_i BCE(m_i, alpha_i) = -sum_i [alpha_i log m_i + (1 - alpha_i) log(1 - m_i)],

whose exact per-row derivatives are, with D_i = (m_i - alpha_i) / (m_i (1 - m_i)) and s = p (1 - p):

    dL/df_ij   = D_i s_ij / k_i
    d2L/df_ij2 = (alpha_i/m_i^2 + (1-alpha_i)/(1-m_i)^2) (s_ij/k_i)^2 + D_i s_ij (1 - 2 p_ij) / k_i.

The second term can be negative; boosting uses max(exact, Gauss-Newton term), the Gauss-Newton term
(the first one) being positive. For k = 1 this is plain logistic loss (g = p - y, h = p (1 - p)).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from typing import Any, Callable

import numpy as np
import pandas as pd
from scipy.special import expit, logit
from sklearn.metrics import log_loss, roc_auc_score

from lia_spark import names
from lia_spark.kernels import hashing
from lia_spark.kernels import label_mechanisms as lm
from lia_spark.kernels import model_output, pate

logger = logging.getLogger(__name__)

SPLIT_TRAIN, SPLIT_VALID, SPLIT_TEST = 0, 1, 2
SPLIT_LEFT_OUT = 3  # training rows left out of the target (the membership baseline's non-members)
PROBABILITY_CLIP = 1e-7


@dataclasses.dataclass(frozen=True)
class BoostingParams:
    """Hyper-parameters shared by both libraries; threads = 0 uses every core."""

    n_estimators: int = names.N_ESTIMATORS
    max_depth: int = names.MAX_DEPTH
    learning_rate: float = names.LEARNING_RATE
    early_stopping_rounds: int = names.EARLY_STOPPING_ROUNDS
    threads: int = 0
    seed: int = 0


# ---------------------------------------------------------------------------------------------------------
# Proportion matching objective


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


@dataclasses.dataclass(frozen=True)
class Bags:
    """Bag membership of a set of rows (indices 0..n_bags-1) and each bag's released proportion."""

    index: np.ndarray
    alpha: np.ndarray


# ---------------------------------------------------------------------------------------------------------
# Models


@dataclasses.dataclass
class FittedModel:
    """A fitted booster plus the post-processing that turns its output into P(y=1|x)."""

    library: str
    model: Any
    margin_offset: float = 0.0
    debias_epsilon: float | None = None
    best_iteration: int = 0
    fit_seconds: float = 0.0

    def output_transform(self) -> model_output.OutputTransform:
        """Its post-processing as a saveable :class:`lia_spark.kernels.model_output.OutputTransform`."""
        if self.library == "xgboost":
            return model_output.OutputTransform(margin_offset=self.margin_offset, best_iteration=self.best_iteration,
                                   rr_epsilon=self.debias_epsilon)
        return model_output.OutputTransform(link="probability", rr_epsilon=self.debias_epsilon)

    def predict(self, features: Any) -> np.ndarray:
        """P(y=1 | x) for a feature matrix (xgboost) or frame (catboost)."""
        transform = self.output_transform()
        return transform.probabilities(transform.raw_output(self.model, features))

    def predict_with_threads(self, threads: int = 0) -> None:
        """Predict with ``threads`` threads from now on (0 = every core): an xgboost booster keeps the thread count
        it was fitted with (one in a Spark task); the predictions do not change. catboost predicts on every core."""
        if self.library == "xgboost":
            self.model.set_param({"nthread": threads or os.cpu_count() or 1})

    def save(self, path_without_suffix: str) -> str:
        """Write the model (xgboost ``.ubj``, catboost ``.cbm``); returns the file path."""
        path = path_without_suffix + (".ubj" if self.library == "xgboost" else ".cbm")
        self.model.save_model(path)
        return path


def _threads(params: BoostingParams) -> int:
    return params.threads or (os.cpu_count() or 1)


def fit_xgboost(train_x: np.ndarray, train_y: np.ndarray | None, valid_x: np.ndarray, valid_y: np.ndarray | None,
                *, params: BoostingParams, train_bags: Bags | None = None, valid_bags: Bags | None = None,
                feature_names: list[str] | None = None) -> FittedModel:
    """XGBoost hist on labels (logistic loss) or on bag proportions (proportion matching, custom objective).

    Early stopping on the validation rows' loss of the same kind (log-loss on the released labels, or
    the proportion-matching loss of the validation bags).
    """
    import xgboost as xgb

    started = time.monotonic()
    booster_params = {"tree_method": "hist", "max_depth": params.max_depth, "eta": params.learning_rate,
                      "nthread": _threads(params), "seed": params.seed % 2**31, "verbosity": 0}
    if train_bags is None:
        dtrain = xgb.DMatrix(train_x, label=train_y, feature_names=feature_names)
        dvalid = xgb.DMatrix(valid_x, label=valid_y, feature_names=feature_names)
        base = float(np.clip(np.mean(train_y), 1e-4, 1 - 1e-4))
        booster_params.update(objective="binary:logistic", eval_metric="logloss", base_score=base)
        booster = xgb.train(booster_params, dtrain, params.n_estimators, evals=[(dvalid, "valid")],
                            early_stopping_rounds=params.early_stopping_rounds or None, verbose_eval=False)
        offset = 0.0
    else:
        if valid_bags is None:
            raise ValueError("valid_bags must be given with train_bags")
        offset = float(logit(np.clip(np.mean(np.clip(train_bags.alpha, 0, 1)), 1e-4, 1 - 1e-4)))
        dtrain = xgb.DMatrix(train_x, base_margin=np.full(len(train_x), offset), feature_names=feature_names)
        dvalid = xgb.DMatrix(valid_x, base_margin=np.full(len(valid_x), offset), feature_names=feature_names)
        booster_params.update(disable_default_eval_metric=1, base_score=0.0)  # margins = offset + trees, also
        # where predict gets no base_margin (the default base score would add 0.5 to every margin)

        def objective(margins: np.ndarray, _matrix: Any) -> tuple[np.ndarray, np.ndarray]:
            gradient, exact, gauss_newton = proportion_matching_grad_hess(margins, train_bags.index,
                                                                          train_bags.alpha)
            return gradient, np.maximum(exact, gauss_newton)

        def metric(margins: np.ndarray, _matrix: Any) -> tuple[str, float]:
            loss = proportion_matching_loss(margins, valid_bags.index, valid_bags.alpha)
            return "bag_bce", loss / max(valid_bags.alpha.size, 1)

        booster = xgb.train(booster_params, dtrain, params.n_estimators, evals=[(dvalid, "valid")],
                            obj=objective, custom_metric=metric,
                            early_stopping_rounds=params.early_stopping_rounds or None, verbose_eval=False)
    best = getattr(booster, "best_iteration", None)
    best = params.n_estimators - 1 if best is None else int(best)
    return FittedModel("xgboost", booster, margin_offset=offset, best_iteration=best,
                       fit_seconds=time.monotonic() - started)


def fit_catboost(train_x: pd.DataFrame, train_y: np.ndarray, valid_x: pd.DataFrame, valid_y: np.ndarray, *,
                 params: BoostingParams, cat_features: list[str]) -> FittedModel:
    """CatBoost with native categorical features (ordered target statistics), early stopping on validation. Labels in
    {0, 1} train with Logloss; soft labels in [0, 1] (PATE's vote shares) with CrossEntropy, the same loss on
    probabilities (catboost's Logloss does not take them)."""
    from catboost import CatBoostClassifier

    started = time.monotonic()
    binary = bool(np.isin(np.asarray(train_y), (0, 1)).all())
    model = CatBoostClassifier(iterations=params.n_estimators, depth=params.max_depth,
                               loss_function="Logloss" if binary else "CrossEntropy",
                               learning_rate=params.learning_rate, thread_count=_threads(params),
                               random_seed=params.seed % 2**31, verbose=False, allow_writing_files=False,
                               early_stopping_rounds=params.early_stopping_rounds or None)
    model.fit(train_x, train_y, cat_features=cat_features, eval_set=(valid_x, valid_y), use_best_model=True)
    return FittedModel("catboost", model, best_iteration=int(model.get_best_iteration() or 0),
                       fit_seconds=time.monotonic() - started)


# ---------------------------------------------------------------------------------------------------------
# Data, metrics and the target-training orchestration


@dataclasses.dataclass
class ModelData:
    """One day's rows on the driver: features (matrix or frame), true labels, row ids, split codes."""

    features: Any
    labels: np.ndarray
    row_ids: np.ndarray
    split: np.ndarray
    library: str = "xgboost"
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
    if data.library == "xgboost":
        return fit_xgboost(data.rows(train), None if train_bags else labels[train], data.rows(valid),
                           None if valid_bags else labels[valid], params=params, train_bags=train_bags,
                           valid_bags=valid_bags, feature_names=data.feature_names)
    if train_bags is not None:
        raise ValueError("models.library: catboost has no proportion-matching objective here; use xgboost for "
                         "llp mechanisms, got catboost")
    return fit_catboost(data.rows(train), labels[train], data.rows(valid), labels[valid], params=params,
                        cat_features=data.cat_features)


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
    if fixed.n_estimators is None:
        return params
    return dataclasses.replace(params, n_estimators=fixed.n_estimators, learning_rate=fixed.learning_rate,
                               max_depth=fixed.max_depth, early_stopping_rounds=fixed.n_estimators)


def teacher_model(params: BoostingParams, *, library: str = "xgboost", cat_features: list[str] | tuple[str, ...] = (),
                  protocol: str = pate.LIA_SPARK) -> pate.TeacherModel:
    """PATE's teacher settings: the protocol's boosting hyper-parameters (:func:`protocol_params`; early stopping
    on each teacher's own held-out rows under lia_spark, on the validation split under published)."""
    chosen = protocol_params(params, protocol)
    return pate.TeacherModel(n_estimators=chosen.n_estimators, max_depth=chosen.max_depth,
                             learning_rate=chosen.learning_rate, seed=chosen.seed,
                             early_stopping_rounds=chosen.early_stopping_rounds, library=library,
                             cat_features=tuple(cat_features))


def validation_rows(data: ModelData) -> tuple[Any, np.ndarray]:
    """The validation split's features and true labels (held-out rows, never training rows): what the published
    PATE protocol's teachers and student stop on."""
    valid = data.split == SPLIT_VALID
    return data.rows(valid), data.labels[valid]


def student_rows(data: ModelData, *, settings: pate.PateSettings, seed: int) -> np.ndarray:
    """PATE's Q student rows among the training rows of ``data`` (boolean mask; :func:`lia_spark.kernels.pate.student_mask`)."""
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
