"""Fitting on the executors with xgboost.spark (models.execution=distributed): the estimator of the models
section, scoring through the saved output transform, the label-level release of the target's labels, and the
target on released labels or on bag proportions (docs/math.md §4.2, §4.3, §4.7).
"""
from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, IntegerType, StructField, StructType

from lia_spark.engine.models.bags import row_bag_proportions
from lia_spark.engine.models.preparation import training_seed
from lia_spark.engine.spark.session import default_parallelism, describe_jobs
from lia_spark.kernels import features, label_mechanisms, model_output, training
from lia_spark.kernels.hashing import AuditKey
from lia_spark.kernels.mechanism_registry import LabelRelease, release_rr, release_rr_with_prior
from lia_spark.names import BAG_PROPORTION, LABEL, PROXY_PRIOR, RELEASED_LABEL, ROW_ID, SPLIT, TARGET_PREDICTION
from lia_spark.run.config import Config


@dataclasses.dataclass(frozen=True)
class SparkModel:
    """A fitted xgboost.spark model and how its booster's raw output becomes P(y=1|x) (saved beside it)."""

    model: Any
    output: model_output.OutputTransform

    @classmethod
    def fitted(cls, model: Any, **output: Any) -> "SparkModel":
        """``model`` with the output transform of its kind (``output``: link, rr_epsilon, bag_size, ...) and its
        booster's best iteration (early stopping), which its own ``transform`` uses."""
        best = model.get_booster().attr("best_iteration")
        return cls(model, model_output.OutputTransform(best_iteration=None if best is None else int(best), **output))


def spark_booster(spark: SparkSession, config: Config, columns: list[str], label: str, *,
                   regression_start: float | None = None):
    """xgboost.spark estimator of the models section: a classifier (logistic loss), or with ``regression_start`` a
    squared-error regressor boosted from that value (bag proportions, docs/math.md §4.7)."""
    from xgboost.spark import SparkXGBClassifier, SparkXGBRegressor

    m = config.models
    shared: dict[str, Any] = dict(features_col=columns, label_col=label, validation_indicator_col="is_valid",
                                  num_workers=m.num_workers or default_parallelism(spark),
                                  n_estimators=m.n_estimators, max_depth=m.max_depth, learning_rate=m.learning_rate,
                                  tree_method="hist", early_stopping_rounds=m.early_stopping_rounds or None,
                                  random_state=config.run.seed % 2**31)
    if regression_start is None:
        return SparkXGBClassifier(eval_metric="logloss", **shared)
    return SparkXGBRegressor(objective="reg:squarederror", eval_metric="rmse", base_score=regression_start, **shared)


def predicted(fitted: SparkModel, frame: DataFrame, name: str) -> DataFrame:
    """``frame`` with ``name`` = P(y=1|x) of the fitted xgboost.spark model: its booster's raw output (a classifier's
    margin, a regressor's value, from its own ``transform``) through the saved output transform
    (:meth:`lia_spark.kernels.model_output.OutputTransform.probabilities`, in float64), so the run scores exactly what
    the saved model predicts."""
    from pyspark.ml.functions import vector_to_array

    model, transform = fitted.model, fitted.output
    scored = model.transform(frame)
    raw = (vector_to_array(F.col(model.getOrDefault("rawPredictionCol")))[1] if model.hasParam("rawPredictionCol")
           else F.col(model.getOrDefault("predictionCol")))

    @F.pandas_udf("double")  # type: ignore[call-overload]  # pyspark's stub omits the type-hint form (returnType only)
    def probabilities(values: pd.Series) -> pd.Series:
        return pd.Series(transform.probabilities(values.to_numpy()))

    return scored.withColumn(name, probabilities(raw)).drop(
        *[column for column in scored.columns if column not in frame.columns and column != name])


def fitted_rows():
    """The rows xgboost.spark fits: training and validation splits (split < 2; validation is its eval set)."""
    return F.col(features.SPLIT_COLUMN) < 2


def release_column(frame: DataFrame, release: LabelRelease, *, epsilon: float, seed: int,
                   prior: str | None) -> DataFrame:
    """Add ``released_label`` by mapInPandas over a per-row release of the mechanism registry
    (:attr:`lia_spark.kernels.mechanism_registry.LabelMechanism.release_labels`), reading the ``prior`` column when
    one is named."""
    schema = StructType(frame.schema.fields + [StructField(RELEASED_LABEL, IntegerType())])

    def batches(frames):
        for part in frames:
            labels, ids = part[LABEL].to_numpy(np.int8), part[ROW_ID].to_numpy(np.int64)
            priors = None if prior is None else part[prior].to_numpy(np.float64)
            released = release(labels, ids, priors, epsilon=epsilon, seed=seed)
            yield part.assign(released_label=released.astype(np.int32))

    return frame.mapInPandas(batches, schema)


def lp2st_halves(seed: int):
    def batches(frames):
        for part in frames:
            yield part.assign(lp2st_first=label_mechanisms.lp2st_first_half(part[ROW_ID].to_numpy(np.int64), seed=seed))

    return batches


@dataclasses.dataclass(frozen=True)
class DistributedTarget:
    """A target fitted by xgboost.spark: the rows scored with ``released_label`` and ``target_prediction``, the
    fitted models by name (target, and lp_2st's stage1) and their fit seconds (fit_target, fit_stage1)."""

    scored: DataFrame
    models: dict[str, SparkModel]
    seconds: dict[str, float]


def label_target(spark: SparkSession, config: Config, target: DataFrame, columns: list[str],
                 key: AuditKey | None) -> DistributedTarget:
    """The target on labels released by a label-level mechanism (and lp_2st's stage 1), fitted by xgboost.spark, the
    mechanism seeded by :func:`lia_spark.engine.models.preparation.training_seed` (from the audit ``key`` when there is
    one; the seed reaches the executors in Python closures only); ``target`` scored with ``released_label`` and
    ``target_prediction`` (noise-corrected for the debiased ones)."""
    m, seed = config.models, training_seed(config, key)
    eps, mechanism = m.epsilon, m.mechanism
    models, seconds = {}, {}
    if mechanism.releases_true_labels(eps):
        released = target.withColumn(RELEASED_LABEL, F.col(LABEL))
    elif not mechanism.two_stage:
        if mechanism.release_labels is None:
            raise ValueError("models.training_mechanism: releases no per-row labels for xgboost.spark to train on "
                             f"(the execution check refuses it first), got {m.training_mechanism}")
        released = release_column(target, mechanism.release_labels, epsilon=eps, seed=seed,
                                  prior=PROXY_PRIOR if mechanism.needs_prior else None)
    else:
        half = F.col("lp2st_first")
        halves = target.mapInPandas(lp2st_halves(seed), StructType(target.schema.fields
                                                                    + [StructField("lp2st_first", BooleanType())]))
        rr = release_column(halves, release_rr, epsilon=eps, seed=seed, prior=None).cache()
        describe_jobs(spark, "train: lp_2st stage 1 (xgboost.spark)")
        started = time.monotonic()
        stage1 = spark_booster(spark, config, columns, RELEASED_LABEL).fit(rr.where(half & fitted_rows()))
        seconds["fit_stage1"] = time.monotonic() - started
        models["stage1"] = SparkModel.fitted(stage1, rr_epsilon=eps)
        prior = predicted(models["stage1"], rr.drop(RELEASED_LABEL), "stage1_prior")
        second = release_column(prior, release_rr_with_prior, epsilon=eps, seed=seed, prior="stage1_prior")
        released = (rr.select(ROW_ID, F.col(RELEASED_LABEL).alias("rr_label"))
                    .join(second, ROW_ID)
                    .withColumn(RELEASED_LABEL, F.when(half, F.col("rr_label")).otherwise(F.col(RELEASED_LABEL)))
                    .drop("rr_label", "stage1_prior", "lp2st_first"))
    released = released.cache()
    describe_jobs(spark, "train: target (xgboost.spark)")
    started = time.monotonic()
    target_model = spark_booster(spark, config, columns, RELEASED_LABEL).fit(released.where(fitted_rows()))
    seconds["fit_target"] = time.monotonic() - started
    debias = mechanism.debiased and not mechanism.releases_true_labels(eps)
    models["target"] = SparkModel.fitted(target_model, rr_epsilon=eps if debias else None)
    return DistributedTarget(predicted(models["target"], released, TARGET_PREDICTION), models, seconds)


def bag_target(spark: SparkSession, config: Config, target: DataFrame, columns: list[str],
               key: AuditKey | None) -> DistributedTarget:
    """The target on bag proportions (docs/math.md §4.7): the training and the validation rows each bagged and
    released on the executors (:func:`lia_spark.engine.models.bags.row_bag_proportions`, the in-memory path's bags), a
    squared-error regression of each row's released proportion, its predictions debiased to P(y=1|x)
    (:func:`lia_spark.kernels.label_mechanisms.debias_bag_predictions`); ``released_label`` is null (no per-row
    label)."""
    m = config.models
    describe_jobs(spark, f"train: bag proportions ({m.training_mechanism}, k={m.bag_size})")
    proportions = functools.reduce(DataFrame.unionByName, [
        row_bag_proportions(target.where(F.col(SPLIT) == split), mechanism=m.training_mechanism, epsilon=m.epsilon,
                            bag_size=m.bag_size, seed=training_seed(config, key))
        for split in (training.SPLIT_TRAIN, training.SPLIT_VALID)])
    released = target.join(proportions, ROW_ID, "left").cache()
    training_rows = released.where(F.col(SPLIT) == training.SPLIT_TRAIN)
    aggregated = training_rows.agg(F.mean(BAG_PROPORTION)).first()  # one row: a global aggregation
    if aggregated is None or aggregated[0] is None:
        raise ValueError(f"models.split: the target day has no training rows to bag, got split={list(m.split)}")
    mean_proportion = float(aggregated[0])
    describe_jobs(spark, "train: target on bag proportions (xgboost.spark)")
    started = time.monotonic()
    model = spark_booster(spark, config, columns, BAG_PROPORTION, regression_start=mean_proportion).fit(
        released.where(fitted_rows()))
    target_model = SparkModel.fitted(model, link="identity", bag_size=m.bag_size, mean_proportion=mean_proportion)
    scored = predicted(target_model, released, TARGET_PREDICTION).withColumn(
        RELEASED_LABEL, F.lit(None).cast("int"))
    return DistributedTarget(scored, {"target": target_model}, {"fit_target": time.monotonic() - started})
