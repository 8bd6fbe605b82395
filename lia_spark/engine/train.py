"""Train stage: proxy M' (proxy_day, true labels) and target M (target_day, privatized labels), docs/math.md §4.

Outputs under ``<run.output_dir>/models`` (committed atomically, resumable): ``canaries`` (Parquet: row_id,
label, released_label, target_prediction, proxy_prediction, counterfactual_label, hidden_bit, reference_prediction
of the target's training rows),
``test_predictions`` (row_id, label, target_prediction, proxy_prediction of the target day's test rows),
model files (``proxy``/``target``/``stage1`` as xgboost ``.ubj`` or catboost ``.cbm``), ``metrics.json`` and,
when the posteriors stage's prior is the proxy's prediction
(:func:`lia_spark.engine.posteriors.prior.needs_proxy_priors`: data.source=criteo with mechanisms.prior_column=auto, or prior_column=proxy_prediction), ``priors`` (row_id,
proxy_prediction of every row of the days of mechanisms.days, scored on the executors by
:func:`write_proxy_priors`). With
audit.attack=membership (in_memory only) the target leaves out the non-members among the
audit.membership_candidates candidate training rows (:func:`membership_candidates`) and ``membership`` (row_id,
label, member, target_prediction, proxy_prediction of the candidates) is written for the audit stage.

Audit designs (audit.design, docs/math.md §5.9-5.10): ``injected`` (default, with audit.attack=label_inference)
draws per canary (training row) a counterfactual label y1 and a fair coin b before training
(:func:`lia_spark.injected.inject`) and trains the target (its mechanism included) on y^b; the canary table keeps
the true label y0 with y1 and b. ``observational`` trains on the true labels and fits a label-blind reference
(:func:`_reference_in_memory`, :func:`_reference_distributed`: the target's library and hyper-parameters, true
labels, on the target day's rows outside the canaries) whose predictions on the canaries the audit scores beside
the target's.

Two execution paths with the same outputs: ``in_memory`` collects one day's features to the driver (Arrow)
and fits there; ``distributed`` fits xgboost.spark on the cluster: ``SparkXGBClassifier`` on released labels, and
for the LLP mechanisms (xgboost.spark takes no custom objective, so no proportion matching) ``SparkXGBRegressor``
on each row's released bag proportion, debiased to P(y=1|x) (docs/math.md §4.7). PATE trains in memory only.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import pickle
import tempfile
import time
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, IntegerType, StructField, StructType

from lia_spark import features, hashing, injected, label_mechanisms, layout, membership, model_output, training
from lia_spark.config import Config, ConfigError
from lia_spark.criteo import LABEL, ROW_ID
from lia_spark import pate
from lia_spark.engine import features as spark_features
from lia_spark.engine import metrics as spark_metrics
from lia_spark.engine.bags import BAG_PROPORTION, row_bag_proportions
from lia_spark.engine.pate import spark_votes
from lia_spark.engine.outputs import (committed_output, copy_from_local, marker_fields, output_fingerprint,
                                     reusable_output, stage_fingerprint, write_text)
from lia_spark.engine.posteriors.prior import needs_proxy_priors
from lia_spark.engine.session import default_parallelism, describe_jobs, is_connect, shipped
from lia_spark.names import (BAG_MECHANISMS, INJECTED, LABEL_INFERENCE, LABEL_MECHANISMS, MEMBERSHIP, NONE,
                             OBSERVATIONAL, PATE, PROXY_PRIOR, RR, RR_DEBIASED, RR_WITH_PRIOR)

logger = logging.getLogger(__name__)

PRIORS_SCHEMA = f"{ROW_ID} long, {PROXY_PRIOR} double"
INJECTED_LABEL = "injected_label"  # PATE's teachers: the training label where injection changed it
TRUE_LABEL = "true_label"  # the distributed path keeps y0 here while the mechanisms read y^b in the label column
SCORED_SCHEMA = (f"{ROW_ID} long, {LABEL} int, split int, released_label int, target_prediction double, "
                 "proxy_prediction double, member int, counterfactual_label int, hidden_bit int, "
                 "reference_prediction double")
# member: null outside the membership candidates; counterfactual_label, hidden_bit: the injected design's y1 and b
# on the canaries (null otherwise); reference_prediction: the observational design's label-blind reference
SPLIT_NAMES = {training.SPLIT_TRAIN: "train_target", training.SPLIT_VALID: "valid_target",
               training.SPLIT_TEST: "test_target", training.SPLIT_LEFT_OUT: "left_out_target"}


def training_seed(config: Config) -> int:
    """Seed of the training-label mechanisms, derived from the run seed (63 bits)."""
    return int(hashing.stream_key(config.run.seed, "models/training-labels")) >> 1


def pate_settings(config: Config, target_rows: DataFrame, spec: features.FeatureSpec, *,
                  left_out: np.ndarray | None = None, training_labels: DataFrame | None = None) -> pate.PateSettings:
    """The models section's PATE settings, the teachers fitted in parallel Spark tasks on the training rows of
    ``target_rows`` encoded by ``spec`` (the target's own encoding), without the row ids ``left_out`` (the
    membership baseline's non-members), with the labels of ``training_labels`` (row_id, injected_label: the
    injected design's changed labels) in place of the true ones; fitted once for every use of these settings
    (:class:`pate.ReusedVotes`: the votes do not depend on epsilon)."""
    m = config.models
    training_rows = model_features(target_rows, spec, config).where(
        F.col(features.SPLIT_COLUMN) == training.SPLIT_TRAIN)
    if training_labels is not None:
        training_rows = (training_rows.join(F.broadcast(training_labels), ROW_ID, "left")
                         .withColumn(LABEL, F.coalesce(F.col(INJECTED_LABEL), F.col(LABEL)).cast("int"))
                         .drop(INJECTED_LABEL))
    if left_out is not None and left_out.size:
        excluded = target_rows.sparkSession.createDataFrame(pd.DataFrame({ROW_ID: left_out.astype(np.int64)}))
        training_rows = training_rows.join(F.broadcast(excluded), ROW_ID, "left_anti")
    return pate.PateSettings(teachers=m.pate_teachers, queries=m.pate_queries, noise=m.pate_noise,
                             pseudo_labels=m.pate_pseudo_labels, delta=m.pate_delta,
                             votes=pate.ReusedVotes(spark_votes(training_rows, spec.feature_columns,
                                                                teachers=m.pate_teachers,
                                                                model=training.teacher_model(boosting_params(config)))))


def _shared_pate_settings(config: Config, target_rows: DataFrame, prepared: "PreparedDays", *,
                          left_out: np.ndarray, training_labels: DataFrame | None) -> pate.PateSettings:
    """:func:`pate_settings` whose teachers are fitted once per preparation: the votes do not depend on epsilon, so
    the PATE cells of ``lia-spark audit-table`` (one preparation) share them (:class:`lia_spark.pate.ReusedVotes`).
    The membership baseline's teachers leave out its non-members and are fitted for their own run."""
    if left_out.size:
        return pate_settings(config, target_rows, prepared.target_spec, left_out=left_out)
    if "settings" not in prepared.pate:
        prepared.pate["settings"] = pate_settings(config, target_rows, prepared.target_spec,
                                                  training_labels=training_labels)
    else:
        logger.info("train: PATE's teachers' votes reused from the previous PATE cell of this process")
    return prepared.pate["settings"]


def boosting_params(config: Config) -> training.BoostingParams:
    """The models section's boosting hyper-parameters."""
    m = config.models
    return training.BoostingParams(n_estimators=m.n_estimators, max_depth=m.max_depth, learning_rate=m.learning_rate,
                                   early_stopping_rounds=m.early_stopping_rounds, seed=config.run.seed)


@dataclasses.dataclass
class TrainResult:
    """What the train stage produced: settings, test metrics, timings and output paths."""

    output_dir: str
    library: str
    execution: str
    mechanism: str
    epsilon: float
    bag_size: int
    proxy_day: int
    target_day: int
    rows: dict[str, int]
    test_metrics: dict[str, float]
    seconds: dict[str, float]
    model_files: list[str]
    skipped: bool = False
    encoding_files: list[str] = dataclasses.field(default_factory=list)  # per model: .encoding.npz, .output.json
    mechanism_report: dict[str, float] = dataclasses.field(default_factory=dict)  # pate: eps, delta, T, Q, sigma, ...
    attack: str = LABEL_INFERENCE  # membership: half of the candidates left out, models/membership written

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (also the completion marker's content)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainResult":
        """Rebuild from :meth:`to_dict` output."""
        return cls(**marker_fields(cls, values))

    def metrics(self) -> dict[str, float]:
        """Flat metrics: auc_test_target, log_loss_test_proxy, fit_seconds_target, rows_train_target, ..."""
        flat = {}
        for key, value in self.test_metrics.items():  # keys are "<metric>@<model>"
            metric, model = key.split("@")
            flat[f"{metric}_test_{model}"] = value
        flat.update({f"seconds_{key}": value for key, value in self.seconds.items()})
        flat.update({f"rows_{key}": float(value) for key, value in self.rows.items()})
        flat.update({f"{self.mechanism}_{key}": value for key, value in self.mechanism_report.items()})
        return flat

    def artifacts(self) -> list[str]:
        """Model files, their feature encodings and metrics.json; no per-row data (see :meth:`row_data`)."""
        return [*self.model_files, *self.encoding_files, os.path.join(self.output_dir, layout.MODEL_METRICS)]

    def row_data(self) -> list[str]:
        """The folders of the tables holding per-row labels (canaries, test predictions, membership candidates):
        they stay in the output
        folder and reach MLflow only with tracking.log_row_data."""
        tables = (layout.CANARIES, layout.TEST_PREDICTIONS, *((layout.MEMBERSHIP,) if self.attack == MEMBERSHIP else ()))
        return [os.path.join(self.output_dir, name) for name in tables]


IN_MEMORY_BYTES_PER_ROW = 240  # measured: Arrow result bytes of one feature row collected by toPandas (232 B)
SAMPLE_MARGIN = 1.01  # a Bernoulli sample of n expected rows stays below 1.01 n except with negligible probability


def in_memory_rows(spark: SparkSession, config: Config, day: int) -> DataFrame:
    """The rows of ``day`` the in-memory path collects: the whole day, or, when it holds more than
    models.sample_rows_per_day > 0 rows, the seeded sample of about that many (the paper's protocol; each row in
    with probability n / rows, keyed on (seed, row_id), so independent of the partitioning).

    Raises:
        ConfigError: before any collect, naming models.sample_rows_per_day, when the rows would not fit the
            driver's limits (spark.driver.maxResultSize, half the driver heap) at IN_MEMORY_BYTES_PER_ROW.
    """
    m = config.models
    rows = spark_features.read_day(spark, config.parquet_path, day)
    describe_jobs(spark, f"train: count the rows of day {day}")
    total = rows.count()
    collected = total
    if 0 < m.sample_rows_per_day < total:
        rows = spark_features.sample_rows(rows, seed=config.run.seed, share=m.sample_rows_per_day / total)
        collected = math.ceil(SAMPLE_MARGIN * m.sample_rows_per_day)
        logger.info("train: day %d has %d rows; in-memory training on the seeded sample of about %d "
                    "(models.sample_rows_per_day)", day, total, m.sample_rows_per_day)
    check_driver_fits(collected, driver_limits(spark), day=day, total=total, sample_rows=m.sample_rows_per_day)
    return rows


def driver_limits(spark: SparkSession) -> dict[str, int]:
    """Bytes the driver can receive: spark.driver.maxResultSize and half of spark.driver.memory (0 = unlimited
    is left out)."""
    limits = {"spark.driver.maxResultSize": byte_size(spark.conf.get("spark.driver.maxResultSize", "1g")),
              "half of spark.driver.memory": byte_size(spark.conf.get("spark.driver.memory", "1g")) // 2}
    return {name: size for name, size in limits.items() if size > 0}


def check_driver_fits(rows: int, limits: dict[str, int], *, day: int, total: int, sample_rows: int) -> None:
    """Fail naming models.sample_rows_per_day when ``rows`` feature rows would exceed one of the driver's
    ``limits`` (name -> bytes) at IN_MEMORY_BYTES_PER_ROW."""
    needed = rows * IN_MEMORY_BYTES_PER_ROW
    for name, size in limits.items():
        if needed > size:
            fitting = size // IN_MEMORY_BYTES_PER_ROW
            raise ConfigError(
                f"models.sample_rows_per_day: in-memory training would collect {rows:,} rows of day {day} "
                f"({needed / 2**20:,.0f} MiB at {IN_MEMORY_BYTES_PER_ROW} B per row) to the driver, more than "
                f"{name} ({size / 2**20:,.0f} MiB); the day holds {total:,} rows, got {sample_rows}; set "
                f"models.sample_rows_per_day to at most {fitting:,} (the paper trains on 1,000,000 rows per day), "
                "or models.execution=distributed to train on whole days")


def byte_size(text: str) -> int:
    """Bytes of a JVM size string such as 1g, 512m, 4096k or 1024 (bytes); 0 stays 0 (unlimited)."""
    text = text.strip().lower().removesuffix("b")
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def feature_spec(spark_rows: DataFrame, config: Config) -> features.FeatureSpec:
    """How the models section encodes the categoricals of ``spark_rows``: catboost natively, else hashed or by a
    frequency vocabulary learned on the training split."""
    m = config.models
    if m.library == "catboost":
        return features.FeatureSpec(encoding="native", hash_buckets=m.hash_buckets)
    if m.categorical_encoding == "hash":
        return features.FeatureSpec(encoding="hash", hash_buckets=m.hash_buckets)
    train_rows = spark_features.split_rows(spark_rows, seed=config.run.seed, shares=m.split, code=0)
    vocabulary = spark_features.learn_vocabulary(train_rows, min_count=m.min_category_count, max_size=m.hash_buckets)
    return features.FeatureSpec(encoding="frequency", hash_buckets=m.hash_buckets, vocabulary=vocabulary)


def model_features(rows: DataFrame, spec: features.FeatureSpec, config: Config) -> DataFrame:
    """The model feature frame of ``rows`` (:func:`lia_spark.engine.features.feature_frame` with the run's seed and
    split)."""
    return spark_features.feature_frame(rows, spec, seed=config.run.seed, shares=config.models.split)


def collect_model_data(frame: DataFrame, spec: features.FeatureSpec, library: str) -> training.ModelData:
    """Collect a feature frame to the driver (Arrow) as :class:`lia_spark.training.ModelData`."""
    local = frame.toPandas().sort_values(ROW_ID, kind="stable").reset_index(drop=True)
    columns = spec.feature_columns
    matrix = local[columns] if library == "catboost" else local[columns].to_numpy(np.float32)
    return training.ModelData(matrix, local[LABEL].to_numpy(np.int8), local[ROW_ID].to_numpy(np.int64),
                              local[features.SPLIT_COLUMN].to_numpy(np.int8), library=library,
                              cat_features=spec.cat_features, feature_names=columns)


@dataclasses.dataclass(frozen=True)
class PreparedDays:
    """What the in-memory path computes before the target's labels are privatized: the proxy, its metrics on its
    own day's test rows, its predictions on the target day, the target day's features and encoding, the timings
    and, once a PATE target was trained, PATE's settings with its teachers' votes (:func:`_shared_pate_settings`)."""

    proxy: training.FittedModel
    proxy_spec: features.FeatureSpec
    target_spec: features.FeatureSpec
    proxy_day_metrics: dict[str, float]
    proxy_prediction: np.ndarray
    target_data: training.ModelData
    seconds: dict[str, float]
    pate: dict[str, pate.PateSettings] = dataclasses.field(default_factory=dict)  # filled by the first PATE cell


_PREPARED: dict[str, PreparedDays] = {}  # the last preparation, keyed by everything it depends on


def _preparation_key(spark: SparkSession, config: Config) -> str:
    """Data fingerprint, seed, every models field except the training mechanism of the target, and the audit fields
    that set the training labels of PATE's teachers (the injected design's draws)."""
    models = dataclasses.replace(config.models, training_mechanism="none", epsilon=math.inf, bag_size=1,
                                 utility_epsilons=[], utility_bag_sizes=[])
    design = (config.audit.attack, config.audit.design, config.audit.counterfactual, config.audit.flip_share)
    return repr((output_fingerprint(spark, config.parquet_path), config.run.seed, models, design))


def prepared_days(spark: SparkSession, config: Config, proxy_rows: DataFrame, target_rows: DataFrame, *,
                  share: bool) -> PreparedDays:
    """Fit the proxy and collect the target day's features. With ``share`` the result is kept for the next call
    with the same key: the cells of ``lia-spark audit-table`` differ only in the target's training mechanism, so
    they share this step (everything in it is deterministic in its key; only the last one is kept)."""
    key = _preparation_key(spark, config)
    if share and key in _PREPARED:
        logger.info("train: proxy and target-day features reused from the previous cell of this process")
        return dataclasses.replace(_PREPARED[key], seconds={"proxy_reused": 0.0})
    m, params, seconds = config.models, boosting_params(config), {}
    describe_jobs(spark, "train: proxy features")
    proxy_spec = feature_spec(proxy_rows, config)
    started = time.monotonic()
    proxy_data = collect_model_data(model_features(proxy_rows, proxy_spec, config), proxy_spec, m.library)
    seconds["collect_proxy"] = time.monotonic() - started
    proxy = training.fit_model(proxy_data, proxy_data.labels, proxy_data.split == training.SPLIT_TRAIN,
                               proxy_data.split == training.SPLIT_VALID, params=params)
    logger.info("proxy fitted on %d rows in %.1f s", int((proxy_data.split == 0).sum()), proxy.fit_seconds)
    proxy_test = proxy_data.split == training.SPLIT_TEST
    proxy_day_metrics = training.binary_metrics(proxy_data.labels[proxy_test], proxy.predict(proxy_data.rows(proxy_test)))
    del proxy_data
    describe_jobs(spark, "train: target-day features")
    started = time.monotonic()
    with_proxy_features = collect_model_data(model_features(target_rows, proxy_spec, config), proxy_spec, m.library)
    proxy_prediction = proxy.predict(with_proxy_features.features)
    del with_proxy_features
    target_spec = feature_spec(target_rows, config)
    data = collect_model_data(model_features(target_rows, target_spec, config), target_spec, m.library)
    seconds["collect_target"] = time.monotonic() - started
    prepared = PreparedDays(proxy=proxy, proxy_spec=proxy_spec, target_spec=target_spec,
                            proxy_day_metrics=proxy_day_metrics,
                            proxy_prediction=proxy_prediction, target_data=data, seconds=seconds)
    _PREPARED.clear()
    if share:
        _PREPARED[key] = prepared
    return prepared


def membership_candidates(data: training.ModelData, config: Config) -> tuple[training.ModelData, np.ndarray]:
    """With audit.attack=membership: the target day's rows with the candidates left out of the target's training
    rows moved to split :data:`lia_spark.training.SPLIT_LEFT_OUT`, and per row 1 (member) / 0 (left out) on the
    audit.membership_candidates candidates, -1 elsewhere (docs/math.md §5.8). Otherwise ``data`` and all -1."""
    member = np.full(data.row_ids.size, -1, dtype=np.int32)
    if config.audit.attack != MEMBERSHIP:
        return data, member
    train = data.split == training.SPLIT_TRAIN
    candidates = np.zeros(data.row_ids.size, dtype=bool)
    candidates[train] = membership.candidate_mask(data.row_ids[train], candidates=config.audit.membership_candidates,
                                                  seed=config.run.seed)
    member[candidates] = membership.membership(data.row_ids[candidates], seed=config.run.seed)
    split = np.where(member == 0, training.SPLIT_LEFT_OUT, data.split).astype(data.split.dtype)
    return dataclasses.replace(data, split=split), member


def injects(config: Config) -> bool:
    """True when the target trains on injected labels: audit.design=injected with audit.attack=label_inference."""
    return config.audit.game == INJECTED


def observes(config: Config) -> bool:
    """True when the target trains on the true labels for the observational game, beside a label-blind reference."""
    return config.audit.game == OBSERVATIONAL


def injection(config: Config, data: training.ModelData,
              proxy_prediction: np.ndarray) -> injected.InjectedLabels | None:
    """The injected design's labels of the target day's rows (:func:`lia_spark.injected.inject` on the training
    rows, the canaries), or None when the target trains on the true labels."""
    if not injects(config):
        return None
    labels = injected.inject(data.row_ids, data.labels, proxy_prediction, data.split == training.SPLIT_TRAIN,
                             seed=config.run.seed, counterfactual=config.audit.counterfactual,
                             flip_share=config.audit.flip_share)
    logger.info("train: injected design: %d of %d canaries informative (y1 != y0), %d training labels changed",
                int(((labels.counterfactual_label >= 0) & (labels.counterfactual_label != data.labels)).sum()),
                int((labels.hidden_bit >= 0).sum()), int((labels.training != data.labels).sum()))
    return labels


def _changed_labels(spark: SparkSession, data: training.ModelData, labels: injected.InjectedLabels) -> DataFrame:
    """(row_id, label) of the in-memory sample's rows whose training label is not the true one (about half the
    informative canaries): PATE's teachers, fitted on the executors, join them in."""
    changed = labels.training != data.labels
    return spark.createDataFrame(pd.DataFrame({ROW_ID: data.row_ids[changed].astype(np.int64),
                                               INJECTED_LABEL: labels.training[changed].astype(np.int32)}))


def _nullable(values: np.ndarray | None, size: int = 0) -> pd.arrays.IntegerArray:
    """An Int32 column with null where ``values`` is negative (all null when ``values`` is None)."""
    if values is None:
        return pd.array([None] * size, dtype="Int32")
    return pd.array(np.where(values < 0, None, values), dtype="Int32")


def _reference_in_memory(config: Config, data: training.ModelData) -> np.ndarray:
    """The observational design's label-blind reference on every row (NaN under the other designs): the target's
    library and hyper-parameters fitted on the true labels of the target day's test rows, early-stopped on its
    validation rows, so it never sees a canary's label (docs/math.md §5.10)."""
    if not observes(config):
        return np.full(data.labels.size, np.nan)
    reference = training.fit_model(data, data.labels, data.split == training.SPLIT_TEST,
                                   data.split == training.SPLIT_VALID, params=boosting_params(config))
    logger.info("train: label-blind reference fitted on %d rows outside the canaries in %.1f s",
                int((data.split == training.SPLIT_TEST).sum()), reference.fit_seconds)
    return reference.predict(data.features)


def _model_specs(models: dict[str, Any], proxy_spec: features.FeatureSpec,
                 target_spec: features.FeatureSpec) -> dict[str, features.FeatureSpec]:
    """The feature encoding of each model: the proxy's own, the target day's for the target (and stage 1)."""
    return {name: proxy_spec if name == "proxy" else target_spec for name in models}


def _in_memory(spark: SparkSession, config: Config, proxy_rows: DataFrame, target_rows: DataFrame, *,
               share_preparation: bool = False
               ) -> tuple[DataFrame, dict[str, Any], dict[str, float], dict[str, float],
                          dict[str, features.FeatureSpec], dict[str, float]]:
    m = config.models
    prepared = prepared_days(spark, config, proxy_rows, target_rows, share=share_preparation)
    data, member = membership_candidates(prepared.target_data, config)
    proxy, proxy_prediction = prepared.proxy, prepared.proxy_prediction
    labels = injection(config, data, proxy_prediction)
    started = time.monotonic()
    pate_labels = None if labels is None or m.training_mechanism != PATE else _changed_labels(spark, data, labels)
    fit = training.train_target(data if labels is None else dataclasses.replace(data, labels=labels.training),
                                mechanism=m.training_mechanism, epsilon=m.epsilon, seed=training_seed(config),
                                params=boosting_params(config), prior=proxy_prediction, bag_size=m.bag_size,
                                pate_settings=(_shared_pate_settings(config, target_rows, prepared,
                                                                     left_out=data.row_ids[member == 0],
                                                                     training_labels=pate_labels)
                                               if m.training_mechanism == PATE else None))
    logger.info("target (%s, eps=%s, k=%d) fitted in %.1f s", m.training_mechanism, m.epsilon, m.bag_size,
                fit.model.fit_seconds)
    released = (pd.array(fit.released_labels, dtype="Int32") if fit.released_labels is not None
                else pd.array([None] * data.labels.size, dtype="Int32"))
    scored = pd.DataFrame({ROW_ID: data.row_ids, LABEL: data.labels.astype(np.int32),
                           "split": data.split.astype(np.int32), "released_label": released,
                           "target_prediction": fit.model.predict(data.features),
                           "proxy_prediction": proxy_prediction,
                           "member": _nullable(member),
                           **{name: _nullable(None if labels is None else getattr(labels, name), data.labels.size)
                              for name in injected.CANARY_COLUMNS},
                           "reference_prediction": _reference_in_memory(config, data)})
    models = {"proxy": proxy, "target": fit.model, **({"stage1": fit.stage1} if fit.stage1 else {})}
    seconds = {**prepared.seconds, **{f"fit_{name}": model.fit_seconds for name, model in models.items()
                                      if name != "proxy" or "proxy_reused" not in prepared.seconds},
               "train_target": time.monotonic() - started}
    extra = {f"{name}@proxy_own_day": value for name, value in prepared.proxy_day_metrics.items()}
    return (spark.createDataFrame(scored, SCORED_SCHEMA), models, seconds, extra,
            _model_specs(models, prepared.proxy_spec, prepared.target_spec), fit.report)


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


def _spark_booster(spark: SparkSession, config: Config, columns: list[str], label: str, *,
                   regression_start: float | None = None):
    """xgboost.spark estimator of the models section: a classifier (logistic loss), or with ``regression_start`` a
    squared-error regressor boosted from that value (bag proportions, docs/math.md §4.7)."""
    from xgboost.spark import SparkXGBClassifier, SparkXGBRegressor

    m = config.models
    shared = dict(features_col=columns, label_col=label, validation_indicator_col="is_valid",
                  num_workers=m.num_workers or default_parallelism(spark), n_estimators=m.n_estimators,
                  max_depth=m.max_depth, learning_rate=m.learning_rate, tree_method="hist",
                  early_stopping_rounds=m.early_stopping_rounds or None, random_state=config.run.seed % 2**31)
    if regression_start is None:
        return SparkXGBClassifier(eval_metric="logloss", **shared)
    return SparkXGBRegressor(objective="reg:squarederror", eval_metric="rmse", base_score=regression_start, **shared)


def _predicted(fitted: SparkModel, frame: DataFrame, name: str) -> DataFrame:
    """``frame`` with ``name`` = P(y=1|x) of the fitted xgboost.spark model: its booster's raw output (a classifier's
    margin, a regressor's value, from its own ``transform``) through the saved output transform
    (:meth:`lia_spark.model_output.OutputTransform.probabilities`, in float64), so the run scores exactly what the
    saved model predicts."""
    from pyspark.ml.functions import vector_to_array

    model, transform = fitted.model, fitted.output
    scored = model.transform(frame)
    raw = (vector_to_array(F.col(model.getOrDefault("rawPredictionCol")))[1] if model.hasParam("rawPredictionCol")
           else F.col(model.getOrDefault("predictionCol")))

    @F.pandas_udf("double")
    def probabilities(values: pd.Series) -> pd.Series:
        return pd.Series(transform.probabilities(values.to_numpy()))

    return scored.withColumn(name, probabilities(raw)).drop(
        *[column for column in scored.columns if column not in frame.columns and column != name])


def _fitted_rows():
    """The rows xgboost.spark fits: training and validation splits (split < 2; validation is its eval set)."""
    return F.col(features.SPLIT_COLUMN) < 2


def _release_column(frame: DataFrame, *, epsilon: float, seed: int, prior: str | None) -> DataFrame:
    """Add ``released_label`` by mapInPandas over the pure label mechanisms: RR, or RRWithPrior on the ``prior``
    column when one is named."""
    schema = StructType(frame.schema.fields + [StructField("released_label", IntegerType())])

    def batches(frames):
        for part in frames:
            labels, ids = part[LABEL].to_numpy(np.int8), part[ROW_ID].to_numpy(np.int64)
            if prior is None:
                released = label_mechanisms.randomized_response(labels, ids, epsilon=epsilon, seed=seed)
            else:
                released = label_mechanisms.rr_with_prior(labels, part[prior].to_numpy(np.float64), ids,
                                                          epsilon=epsilon, seed=seed)
            yield part.assign(released_label=released.astype(np.int32))

    return frame.mapInPandas(batches, schema)


def _distributed(spark: SparkSession, config: Config, proxy_rows: DataFrame, target_rows: DataFrame
                 ) -> tuple[DataFrame, dict[str, Any], dict[str, float], dict[str, float],
                            dict[str, features.FeatureSpec], dict[str, float]]:
    m, seconds = config.models, {}
    if is_connect(spark):
        raise ValueError("models.execution: distributed (xgboost.spark) needs a classic Spark session, and this one "
                         "is Spark Connect (Databricks shared or serverless compute, spark.remote), got 'distributed'; "
                         "use models.execution=in_memory or a classic cluster")
    supported = (*LABEL_MECHANISMS, *BAG_MECHANISMS)
    if m.library != "xgboost" or m.training_mechanism not in supported or config.audit.attack != LABEL_INFERENCE:
        raise ValueError(f"models.execution: distributed supports xgboost with {supported} and "
                         f"audit.attack={LABEL_INFERENCE}, got library={m.library}, training_mechanism="
                         f"{m.training_mechanism}, audit.attack={config.audit.attack}")
    proxy_spec = feature_spec(proxy_rows, config)
    columns = proxy_spec.feature_columns
    proxy_frame = model_features(proxy_rows, proxy_spec, config).withColumn("is_valid", F.col("split") == 1)
    describe_jobs(spark, "train: proxy (xgboost.spark)")
    started = time.monotonic()
    proxy = SparkModel.fitted(_spark_booster(spark, config, columns, LABEL).fit(proxy_frame.where(_fitted_rows())))
    seconds["fit_proxy"] = time.monotonic() - started
    proxy_on_target = _predicted(proxy, model_features(target_rows, proxy_spec, config), "proxy_prediction")
    target_spec = feature_spec(target_rows, config)
    target = (model_features(target_rows, target_spec, config).select(ROW_ID, *columns)
              .join(proxy_on_target.select(ROW_ID, LABEL, "split", "proxy_prediction"), ROW_ID)
              .withColumn("is_valid", F.col("split") == 1))
    no_injection = (F.lit(None).cast("int").alias(column) for column in injected.CANARY_COLUMNS)
    target = (_injected_frame(target, config) if injects(config)
              else target.select("*", F.col(LABEL).alias(TRUE_LABEL), *no_injection)).cache()
    models: dict[str, Any] = {"proxy": proxy}
    fit_target = _bag_target if m.training_mechanism in BAG_MECHANISMS else _label_target
    scored = _reference_distributed(spark, config, target, columns,
                                    fit_target(spark, config, target, columns, models, seconds), seconds)
    scored = scored.select(ROW_ID, F.col(TRUE_LABEL).alias(LABEL), "split", "released_label", "target_prediction",
                           "proxy_prediction", F.lit(None).cast("int").alias("member"), *injected.CANARY_COLUMNS,
                           "reference_prediction")
    return scored, models, seconds, {}, _model_specs(models, proxy_spec, target_spec), {}


def _injected_frame(frame: DataFrame, config: Config) -> DataFrame:
    """``frame`` (row_id, label, split, proxy_prediction, ...) with the true label moved to ``true_label``, the label
    column holding y^b on the training rows (:func:`lia_spark.injected.inject`, on the executors; the mechanisms
    then read it as they read any label), and the canaries' y1 and b."""
    a = config.audit
    schema = StructType(frame.schema.fields + [StructField(TRUE_LABEL, IntegerType())]
                        + [StructField(name, IntegerType()) for name in injected.CANARY_COLUMNS])

    def batches(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for part in frames:
            labels = injected.inject(part[ROW_ID].to_numpy(np.int64), part[LABEL].to_numpy(np.int8),
                                     part["proxy_prediction"].to_numpy(np.float64),
                                     part["split"].to_numpy() == training.SPLIT_TRAIN, seed=config.run.seed,
                                     counterfactual=a.counterfactual, flip_share=a.flip_share)
            yield part.assign(**{TRUE_LABEL: part[LABEL].astype(np.int32), LABEL: labels.training.astype(np.int32),
                                 "counterfactual_label": _nullable(labels.counterfactual_label),
                                 "hidden_bit": _nullable(labels.hidden_bit)})

    return frame.mapInPandas(batches, schema)


def _reference_distributed(spark: SparkSession, config: Config, target: DataFrame, columns: list[str],
                           scored: DataFrame, seconds: dict[str, float]) -> DataFrame:
    """``scored`` with ``reference_prediction``: under the observational design the label-blind reference
    (xgboost.spark with the target's settings, on the true labels of the target day's test rows, early-stopped on
    its validation rows; :func:`_reference_in_memory`), else null."""
    if not observes(config):
        return scored.withColumn("reference_prediction", F.lit(None).cast("double"))
    describe_jobs(spark, "train: label-blind reference (xgboost.spark)")
    started = time.monotonic()
    reference = _spark_booster(spark, config, columns, TRUE_LABEL).fit(
        target.where(F.col(features.SPLIT_COLUMN) >= training.SPLIT_VALID))
    seconds["fit_reference"] = time.monotonic() - started
    return _predicted(SparkModel.fitted(reference), scored, "reference_prediction")


def _label_target(spark: SparkSession, config: Config, target: DataFrame, columns: list[str], models: dict[str, Any],
                  seconds: dict[str, float]) -> DataFrame:
    """The target on labels released by a label-level mechanism (and lp_2st's stage 1), fitted by xgboost.spark;
    ``target`` scored with ``released_label`` and ``target_prediction`` (noise-corrected for rr_debiased)."""
    m, seed = config.models, training_seed(config)
    eps, mechanism = m.epsilon, m.training_mechanism
    if mechanism == NONE or math.isinf(eps):
        released = target.withColumn("released_label", F.col(LABEL))
    elif mechanism in (RR, RR_DEBIASED):
        released = _release_column(target, epsilon=eps, seed=seed, prior=None)
    elif mechanism == RR_WITH_PRIOR:
        released = _release_column(target, epsilon=eps, seed=seed, prior=PROXY_PRIOR)
    else:
        half = F.col("lp2st_first")
        halves = target.mapInPandas(_lp2st_halves(seed), StructType(target.schema.fields
                                                                    + [StructField("lp2st_first", BooleanType())]))
        rr = _release_column(halves, epsilon=eps, seed=seed, prior=None).cache()
        describe_jobs(spark, "train: lp_2st stage 1 (xgboost.spark)")
        started = time.monotonic()
        stage1 = _spark_booster(spark, config, columns, "released_label").fit(rr.where(half & _fitted_rows()))
        seconds["fit_stage1"] = time.monotonic() - started
        models["stage1"] = SparkModel.fitted(stage1, rr_epsilon=eps)
        prior = _predicted(models["stage1"], rr.drop("released_label"), "stage1_prior")
        second = _release_column(prior, epsilon=eps, seed=seed, prior="stage1_prior")
        released = (rr.select(ROW_ID, F.col("released_label").alias("rr_label"))
                    .join(second, ROW_ID)
                    .withColumn("released_label", F.when(half, F.col("rr_label")).otherwise(F.col("released_label")))
                    .drop("rr_label", "stage1_prior", "lp2st_first"))
    released = released.cache()
    describe_jobs(spark, "train: target (xgboost.spark)")
    started = time.monotonic()
    target_model = _spark_booster(spark, config, columns, "released_label").fit(released.where(_fitted_rows()))
    seconds["fit_target"] = time.monotonic() - started
    debias = mechanism == RR_DEBIASED and not math.isinf(eps)
    models["target"] = SparkModel.fitted(target_model, rr_epsilon=eps if debias else None)
    return _predicted(models["target"], released, "target_prediction")


def _bag_target(spark: SparkSession, config: Config, target: DataFrame, columns: list[str], models: dict[str, Any],
                seconds: dict[str, float]) -> DataFrame:
    """The target on bag proportions (docs/math.md §4.7): the training and the validation rows each bagged and
    released on the executors (:func:`lia_spark.engine.bags.row_bag_proportions`, the in-memory path's bags), a
    squared-error regression of each row's released proportion, its predictions debiased to P(y=1|x)
    (:func:`lia_spark.label_mechanisms.debias_bag_predictions`); ``released_label`` is null (no per-row label)."""
    m = config.models
    describe_jobs(spark, f"train: bag proportions ({m.training_mechanism}, k={m.bag_size})")
    proportions = functools.reduce(DataFrame.unionByName, [
        row_bag_proportions(target.where(F.col("split") == split), mechanism=m.training_mechanism, epsilon=m.epsilon,
                            bag_size=m.bag_size, seed=training_seed(config))
        for split in (training.SPLIT_TRAIN, training.SPLIT_VALID)])
    released = target.join(proportions, ROW_ID, "left").cache()
    training_rows = released.where(F.col("split") == training.SPLIT_TRAIN)
    mean_proportion = training_rows.agg(F.mean(BAG_PROPORTION)).first()[0]
    if mean_proportion is None:
        raise ValueError(f"models.split: the target day has no training rows to bag, got split={list(m.split)}")
    mean_proportion = float(mean_proportion)
    describe_jobs(spark, "train: target on bag proportions (xgboost.spark)")
    started = time.monotonic()
    model = _spark_booster(spark, config, columns, BAG_PROPORTION, regression_start=mean_proportion).fit(
        released.where(_fitted_rows()))
    seconds["fit_target"] = time.monotonic() - started
    models["target"] = SparkModel.fitted(model, link="identity", bag_size=m.bag_size, mean_proportion=mean_proportion)
    return _predicted(models["target"], released, "target_prediction").withColumn(
        "released_label", F.lit(None).cast("int"))


def _predicted_batches(frames: Iterator[pd.DataFrame], *, model: Any, columns: tuple[str, ...]
                       ) -> Iterator[pd.DataFrame]:
    """mapInPandas body: (row_id, proxy_prediction) of feature batches, predicted by the pickled
    :class:`lia_spark.training.FittedModel` shipped as ``model`` (:func:`lia_spark.engine.session.shipped`,
    unpickled once per task)."""
    fitted: training.FittedModel = pickle.loads(model.value)
    if fitted.library == "xgboost":
        fitted.model.set_param({"nthread": 1})  # one core per Spark task; the predictions do not depend on it
    for frame in frames:
        if frame.empty:
            continue
        matrix = frame[list(columns)] if fitted.library == "catboost" else frame[list(columns)].to_numpy(np.float32)
        yield pd.DataFrame({ROW_ID: frame[ROW_ID].to_numpy(np.int64), PROXY_PRIOR: fitted.predict(matrix)})


def write_proxy_priors(spark: SparkSession, config: Config, proxy: Any, spec: features.FeatureSpec, path: str,
                       days: Sequence[int]) -> int:
    """Score every row of the released ``days`` (:func:`lia_spark.engine.features.released_days`) with the proxy
    model in one distributed pass and write Parquet (row_id long, proxy_prediction double) to ``path``; returns
    the rows written.

    Distributed, nothing proportional to the rows on the driver: the features are built on the executors with
    the proxy's own encoding ``spec`` (:func:`_features`, as for its training); an in-memory proxy
    (:class:`lia_spark.training.FittedModel`, xgboost or catboost) is pickled once, shipped (broadcast on classic
    sessions) and predicts in
    ``mapInPandas`` (exactly :meth:`~lia_spark.training.FittedModel.predict`); a fitted xgboost.spark model
    (models.execution=distributed) scores by its own ``transform``.
    """
    describe_jobs(spark, f"train: proxy priors of days {list(days)}")
    if config.models.proxy_day in days:
        logger.warning("train: mechanisms.days includes models.proxy_day %d: the proxy's priors of that day's rows "
                       "predict its own training rows (an overfit prior)", config.models.proxy_day)
    frame = model_features(spark_features.read_days(spark, config.parquet_path, days), spec, config)
    if isinstance(proxy, training.FittedModel):
        columns = tuple(spec.feature_columns)
        with shipped(spark, pickle.dumps(proxy)) as model:
            frame.select(ROW_ID, *columns).mapInPandas(
                functools.partial(_predicted_batches, model=model, columns=columns), PRIORS_SCHEMA).write.parquet(path)
    else:
        _predicted(proxy, frame, PROXY_PRIOR).select(
            F.col(ROW_ID).cast("long"), F.col(PROXY_PRIOR).cast("double")).write.parquet(path)
    written = spark.read.parquet(path).count()  # from the Parquet footers
    logger.info("train: proxy priors of %d rows of days %s written to %s", written, list(days), path)
    return written


def _lp2st_halves(seed: int):
    def batches(frames):
        for part in frames:
            yield part.assign(lp2st_first=label_mechanisms.lp2st_first_half(part[ROW_ID].to_numpy(np.int64), seed=seed))

    return batches


def _injection_counts(scored: DataFrame) -> dict[str, int]:
    """Canaries with y1 != y0 (``informative_canaries``, the m of the injected audit) and those of them trained on
    y1 (``injected_labels``: b = 1, the training labels injection changed), on the executors."""
    informative = F.col("counterfactual_label") != F.col(LABEL)
    found = scored.where(F.col("split") == training.SPLIT_TRAIN).agg(
        F.sum(informative.cast("long")).alias("informative_canaries"),
        F.sum((informative & (F.col("hidden_bit") == 1)).cast("long")).alias("injected_labels")).first()
    return {name: int(found[name] or 0) for name in ("informative_canaries", "injected_labels")}


def _test_metrics(scored: DataFrame) -> dict[str, float]:
    """AUC and log-loss of target and proxy on the test split, on the executors (:mod:`lia_spark.engine.metrics`)."""
    test = scored.where(F.col("split") == training.SPLIT_TEST)
    return {f"{name}@{model}": value for model in ("target", "proxy")
            for name, value in spark_metrics.binary_metrics(test, label=LABEL, prediction=f"{model}_prediction").items()}


def _save_models(spark: SparkSession, models: dict[str, Any], specs: dict[str, features.FeatureSpec],
                 staging: str) -> tuple[list[str], list[str]]:
    """Write each model file, its feature encoding (:func:`lia_spark.features.encoding_file`) and its output transform
    (:func:`lia_spark.model_output.output_transform_file`) locally, then copy them into the staging folder; return the
    names of the model files and of the other two."""
    names, encodings = [], []
    with tempfile.TemporaryDirectory() as local:
        for name, model in models.items():
            if isinstance(model, training.FittedModel):
                path, output = model.save(os.path.join(local, name)), model.output_transform()
            else:
                path, output = os.path.join(local, f"{name}.ubj"), model.output
                model.model.get_booster().save_model(path)
            encoding = features.save_spec(specs[name], features.encoding_file(path))
            transform = model_output.save_output_transform(output, model_output.output_transform_file(path))
            for written in (path, encoding, transform):
                copy_from_local(spark, written, f"{staging}/{os.path.basename(written)}")
            names.append(os.path.basename(path))
            encodings += [os.path.basename(encoding), os.path.basename(transform)]
    return names, encodings


def _write_json(spark: SparkSession, payload: dict[str, Any], path: str) -> None:
    write_text(spark, path, json.dumps(payload, indent=2, sort_keys=True, default=str))


def run_train_models(spark: SparkSession, config: Config, *, share_preparation: bool = False) -> TrainResult:
    """Train proxy and target models; write canaries, test predictions, models and metrics (resumable).

    ``share_preparation`` (in_memory only): keep the fitted proxy and the target day's features for the next call
    in this process with the same data, seed and models fields apart from the training mechanism
    (:func:`prepared_days`); ``lia-spark audit-table`` sets it."""
    out = layout.output_path(config, layout.MODELS)
    # the released days whose proxy priors train writes: none unless the posteriors stage's prior needs them
    prior_days = spark_features.released_days(spark, config) if needs_proxy_priors(config) else ()
    priors_fields = ({"mechanisms.days": prior_days, "mechanisms.prior_column": config.mechanisms.prior_column}
                     if prior_days else {})
    fingerprint = stage_fingerprint(spark, "train", config, inputs={"data": config.parquet_path}, **priors_fields)
    marker = reusable_output(spark, [out], fingerprint, force=config.run.force)
    if marker is not None:
        return dataclasses.replace(TrainResult.from_dict(marker), skipped=True)
    m = config.models
    spark_features.check_days_present(spark, config, ("models.proxy_day", "models.target_day",
                                                      *(spark_features.released_day_field(config) if prior_days else ())))
    started = time.monotonic()
    logger.info("train: %s/%s, proxy day %d, target day %d, mechanism %s (eps=%s, k=%d)", m.library, m.execution,
                m.proxy_day, m.target_day, m.training_mechanism, m.epsilon, m.bag_size)
    if m.execution == "in_memory":
        proxy_rows, target_rows = (in_memory_rows(spark, config, day) for day in (m.proxy_day, m.target_day))
        run = functools.partial(_in_memory, share_preparation=share_preparation)
    else:
        proxy_rows, target_rows = (spark_features.read_day(spark, config.parquet_path, day)
                                   for day in (m.proxy_day, m.target_day))
        run = _distributed
    scored, models, seconds, extra_metrics, specs, mechanism_report = run(spark, config, proxy_rows, target_rows)
    scored = scored.cache()
    metadata: dict[str, Any] = {}
    with committed_output(spark, out, metadata, fingerprint=fingerprint) as staging:
        describe_jobs(spark, "train: write canaries and test predictions")
        scored.where(F.col("split") == training.SPLIT_TRAIN).select(*layout.CANARY_COLUMNS).write.parquet(
            layout.under(staging, layout.CANARIES))
        scored.where(F.col("split") == training.SPLIT_TEST).select(
            ROW_ID, LABEL, "target_prediction", "proxy_prediction").write.parquet(
            layout.under(staging, layout.TEST_PREDICTIONS))
        if config.audit.attack == MEMBERSHIP:
            scored.where(F.col("member").isNotNull()).select(*layout.MEMBERSHIP_COLUMNS).write.parquet(
                layout.under(staging, layout.MEMBERSHIP))
        rows = {name: int(count) for name, count in scored.groupBy("split").count().toPandas()
                .assign(name=lambda f: f["split"].map(SPLIT_NAMES))[["name", "count"]].itertuples(index=False)}
        if injects(config):
            rows.update(_injection_counts(scored))
        test_metrics = {**_test_metrics(scored), **extra_metrics}
        if prior_days:
            prior_started = time.monotonic()
            rows["priors"] = write_proxy_priors(spark, config, models["proxy"], specs["proxy"],
                                               layout.under(staging, layout.PROXY_PRIORS), prior_days)
            seconds["write_priors"] = time.monotonic() - prior_started
        files, encodings = _save_models(spark, models, specs, staging)
        seconds["total"] = time.monotonic() - started
        result = TrainResult(output_dir=out, library=m.library, execution=m.execution, mechanism=m.training_mechanism,
                             epsilon=m.epsilon, bag_size=m.bag_size, proxy_day=m.proxy_day, target_day=m.target_day,
                             rows=rows, test_metrics=test_metrics, seconds=seconds,
                             model_files=[os.path.join(out, name) for name in files],
                             encoding_files=[os.path.join(out, name) for name in encodings],
                             mechanism_report=mechanism_report, attack=config.audit.attack)
        _write_json(spark, result.to_dict(), layout.under(staging, layout.MODEL_METRICS))
        metadata.update(result.to_dict())
    scored.unpersist()
    logger.info("train: done in %.1f s, test AUC target %.4f proxy %.4f", seconds["total"],
                test_metrics["auc@target"], test_metrics["auc@proxy"])
    return result
