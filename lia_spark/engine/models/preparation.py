"""Model building shared by the stages that train (train, utility) and the audit table: the models section's
hyper-parameters and seeds, the rows an in-memory fit collects (sampled, checked against the driver's limits),
feature encodings and frames, PATE's teachers on the executors, and the :class:`Preparation` that lets
consecutive trainings share the proxy and the target day's features (docs/math.md §4).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lia_spark.engine.models import feature_frames
from lia_spark.engine.models.classes import check_training_labels, class_counts, warn_undefined_auc
from lia_spark.engine.models.pate_teachers import spark_votes
from lia_spark.engine.runtime.outputs import output_fingerprint
from lia_spark.engine.spark.memory import driver_limits
from lia_spark.engine.spark.session import describe_jobs
from lia_spark.kernels import features, hashing, injected, mechanism_registry, pate, training
from lia_spark.kernels.model_libraries import BoostingParams, FittedModel, ModelLibrary
from lia_spark.names import INJECTED_LABEL, LABEL, ROW_ID
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config

logger = logging.getLogger(__name__)

TRAINING_LABELS_PURPOSE = "models/training-labels"


def training_seed(config: Config, key: hashing.AuditKey | None = None) -> int:
    """Seed of the training-label mechanisms (63 bits): derived from the audit key where the train stage plays a game
    whose draws the attacker must not know (the mechanism's RR flips, bags and noise are among them: whoever knew
    them could decode the training labels from the model, docs/math.md §5.9), else from run.seed."""
    return int(hashing.stream_key(config.run.seed if key is None else key, TRAINING_LABELS_PURPOSE)) >> 1


def pate_settings(config: Config, target_rows: DataFrame, spec: features.FeatureSpec, *,
                  left_out: np.ndarray | None = None, training_labels: DataFrame | None = None) -> pate.PateSettings:
    """The models section's PATE settings, the teachers fitted in parallel Spark tasks on the training rows of
    ``target_rows`` encoded by ``spec`` (the target's own encoding), without the row ids ``left_out`` (the
    membership baseline's non-members), with the labels of ``training_labels`` (row_id, injected_label: the
    injected design's changed labels) in place of the true ones; fitted once for every use of these settings
    (:class:`pate.ReusedVotes`: the votes do not depend on epsilon)."""
    training_rows = model_features(target_rows, spec, config).where(
        F.col(features.SPLIT_COLUMN) == training.SPLIT_TRAIN)
    if training_labels is not None:
        training_rows = (training_rows.join(F.broadcast(training_labels), ROW_ID, "left")
                         .withColumn(LABEL, F.coalesce(F.col(INJECTED_LABEL), F.col(LABEL)).cast("int"))
                         .drop(INJECTED_LABEL))
    if left_out is not None and left_out.size:
        excluded = target_rows.sparkSession.createDataFrame(pd.DataFrame({ROW_ID: left_out.astype(np.int64)}))
        training_rows = training_rows.join(F.broadcast(excluded), ROW_ID, "left_anti")
    published = pate.PROTOCOL_SETTINGS[config.pate.protocol].validation_split
    validation_rows = (model_features(target_rows, spec, config).where(
        F.col(features.SPLIT_COLUMN) == training.SPLIT_VALID) if published else None)
    model = training.teacher_model(boosting_params(config), library=config.models.model_library,
                                   cat_features=spec.cat_features, protocol=config.pate.protocol)
    return config.pate.settings(votes=pate.ReusedVotes(spark_votes(
        training_rows, spec.feature_columns, teachers=config.pate.teachers, model=model,
        validation_rows=validation_rows)))


def boosting_params(config: Config) -> BoostingParams:
    """The models section's boosting hyper-parameters."""
    m = config.models
    return BoostingParams(n_estimators=m.n_estimators, max_depth=m.max_depth, learning_rate=m.learning_rate,
                          early_stopping_rounds=m.early_stopping_rounds, seed=config.run.seed)


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
    rows, total = sampled_day(spark, config, day)
    sample = config.models.sample_rows_per_day
    collected = math.ceil(SAMPLE_MARGIN * sample) if 0 < sample < total else total
    check_driver_fits(collected, driver_limits(spark), day=day, total=total, sample_rows=sample)
    return rows


def sampled_day(spark: SparkSession, config: Config, day: int) -> tuple[DataFrame, int]:
    """(the rows of ``day`` a model of this config trains on, the day's row count): the whole day, or, when it
    holds more than models.sample_rows_per_day > 0 rows, the seeded sample of about that many (each row in with
    probability n / rows, keyed on (seed, row_id), so independent of the partitioning). Nothing is collected."""
    sample = config.models.sample_rows_per_day
    rows = feature_frames.read_day(spark, config.parquet_path, day)
    describe_jobs(spark, f"count the rows of day {day}")
    total = rows.count()
    if 0 < sample < total:
        logger.info("day %d has %d rows; the seeded sample of about %d (models.sample_rows_per_day)", day, total,
                    sample)
        rows = feature_frames.sample_rows(rows, seed=config.run.seed, share=sample / total)
    return rows, total


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


def feature_spec(spark_rows: DataFrame, config: Config) -> features.FeatureSpec:
    """How the models section encodes the categoricals of ``spark_rows``: catboost natively, else hashed or by a
    frequency vocabulary learned on the training split."""
    m = config.models
    if m.model_library.native_categoricals:
        return features.FeatureSpec(encoding="native", hash_buckets=m.hash_buckets)
    if m.categorical_encoding == "hash":
        return features.FeatureSpec(encoding="hash", hash_buckets=m.hash_buckets)
    train_rows = feature_frames.split_rows(spark_rows, seed=config.run.seed, shares=m.split_shares, code=0)
    vocabulary = feature_frames.learn_vocabulary(train_rows, min_count=m.min_category_count, max_size=m.hash_buckets)
    return features.FeatureSpec(encoding="frequency", hash_buckets=m.hash_buckets, vocabulary=vocabulary)


def model_features(rows: DataFrame, spec: features.FeatureSpec, config: Config) -> DataFrame:
    """The model feature frame of ``rows`` (:func:`lia_spark.engine.models.feature_frames.feature_frame` with the
    run's seed and split)."""
    return feature_frames.feature_frame(rows, spec, seed=config.run.seed, shares=config.models.split_shares)


def collect_model_data(frame: DataFrame, spec: features.FeatureSpec,
                       library: ModelLibrary) -> training.ModelData:
    """Collect a feature frame to the driver (Arrow) as :class:`lia_spark.kernels.training.ModelData`."""
    collected: pd.DataFrame = frame.toPandas()
    local = collected.sort_values(ROW_ID, kind="stable").reset_index(drop=True)
    columns = spec.feature_columns
    matrix = library.feature_values(local, columns)
    return training.ModelData(matrix, local[LABEL].to_numpy(np.int8), local[ROW_ID].to_numpy(np.int64),
                              local[features.SPLIT_COLUMN].to_numpy(np.int8), library=library,
                              cat_features=spec.cat_features, feature_names=columns)


@dataclasses.dataclass(frozen=True)
class PreparedDays:
    """What the in-memory path computes before the target's labels are privatized: the proxy, its metrics on its
    own day's test rows, its predictions on the target day, the target day's features and encoding, and the
    timings."""

    proxy: FittedModel
    proxy_spec: features.FeatureSpec
    target_spec: features.FeatureSpec
    proxy_day_metrics: dict[str, float]
    proxy_prediction: np.ndarray
    target_data: training.ModelData
    seconds: dict[str, float]


def preparation_key(spark: SparkSession, config: Config) -> str:
    """Data fingerprint, seed, every models field except the training mechanism of the target, and the audit fields
    that set the training labels of PATE's teachers (the injected design's draws; the audit key is the key of
    :attr:`Preparation.pate`)."""
    models = dataclasses.replace(config.models, training_mechanism="none", epsilon=math.inf, bag_size=1)
    design = (config.audit.attack, config.audit.design, config.audit.counterfactual, config.audit.flip_share)
    return repr((output_fingerprint(spark, config.parquet_path), config.run.seed, models, config.pate, design))


@dataclasses.dataclass
class Preparation:
    """What consecutive trainings that differ only in the target's training mechanism share (the cells of
    ``lia-spark audit-table``): the prepared days (:func:`prepare_days`) and PATE's settings with its teachers'
    votes (:func:`shared_pate_settings`, by the identifier of the audit key that drew their training labels; "" for
    none), kept for one :func:`preparation_key` at a time (everything in them is deterministic in it and the key). The
    caller owns it; a fresh one shares nothing."""

    key: str = ""
    days: PreparedDays | None = None
    pate: dict[str, pate.PateSettings] = dataclasses.field(default_factory=dict)
    fits: dict[tuple[str, float, int], training.TargetFit] = dataclasses.field(default_factory=dict)
    # targets fitted ahead in parallel tasks, by (training mechanism, epsilon, bag size); taken by the train stage
    shadow_fits: dict[tuple[str, float, int], list[FittedModel]] = dataclasses.field(default_factory=dict)
    # their label-blind shadow models (audit.shadows each), fitted ahead beside them
    run_fits: dict[tuple[str, float, int], list[FittedModel]] = dataclasses.field(default_factory=dict)
    # and the models of their extra training runs (audit.runs - 1 each)

    def holds_days(self, key: str) -> bool:
        """True when the prepared days kept were prepared under ``key`` (:func:`prepare_days` will reuse them)."""
        return key == self.key and self.days is not None

    def keep(self, key: str) -> bool:
        """True when what is kept was prepared under ``key``; otherwise forget it and start keeping ``key``."""
        if key == self.key:
            return True
        self.key, self.days, self.pate, self.fits, self.shadow_fits, self.run_fits = key, None, {}, {}, {}, {}
        return False


def fit_proxy(spark: SparkSession, config: Config, proxy_rows: DataFrame
              ) -> tuple[FittedModel, features.FeatureSpec, dict[str, float], dict[str, float]]:
    """The proxy M' fitted on the driver on the true labels of ``proxy_rows`` (:func:`in_memory_rows` of
    models.proxy_day; its train split, early-stopped on its validation split): (model, its feature encoding, its
    metrics on the day's test split, seconds)."""
    describe_jobs(spark, "train: proxy features")
    spec = feature_spec(proxy_rows, config)
    started = time.monotonic()
    data = collect_model_data(model_features(proxy_rows, spec, config), spec, config.models.model_library)
    seconds = {"collect_proxy": time.monotonic() - started}
    check_training_labels(data.labels[data.split == training.SPLIT_TRAIN], field="models.proxy_day",
                          day=config.models.proxy_day)
    describe_jobs(spark, f"train: fitting the proxy ({config.models.library}) on "
                         f"{int((data.split == training.SPLIT_TRAIN).sum()):,} rows on the driver")
    proxy = training.fit_model(data, data.labels, data.split == training.SPLIT_TRAIN,
                               data.split == training.SPLIT_VALID, params=boosting_params(config))
    logger.info("proxy fitted on %d rows in %.1f s", int((data.split == training.SPLIT_TRAIN).sum()),
                proxy.fit_seconds)
    test = data.split == training.SPLIT_TEST
    warn_undefined_auc("proxy", *class_counts(data.labels[test]), field="models.proxy_day",
                       day=config.models.proxy_day, scored="the proxy on its own day")
    return proxy, spec, training.binary_metrics(data.labels[test], proxy.predict(data.rows(test))), seconds


def prepare_days(spark: SparkSession, config: Config, proxy_rows: DataFrame, target_rows: DataFrame,
                 preparation: Preparation) -> PreparedDays:
    """Fit the proxy and collect the target day's features, or take them from ``preparation`` when it kept them
    under the same :func:`preparation_key`."""
    if preparation.keep(preparation_key(spark, config)) and preparation.days is not None:
        logger.info("train: proxy and target-day features reused from the previous cell of this process")
        return dataclasses.replace(preparation.days, seconds={"proxy_reused": 0.0})
    m = config.models
    proxy, proxy_spec, proxy_day_metrics, seconds = fit_proxy(spark, config, proxy_rows)
    describe_jobs(spark, "train: target-day features")
    started = time.monotonic()
    with_proxy_features = collect_model_data(model_features(target_rows, proxy_spec, config), proxy_spec,
                                             m.model_library)
    proxy_prediction = proxy.predict(with_proxy_features.features)
    del with_proxy_features
    target_spec = feature_spec(target_rows, config)
    data = collect_model_data(model_features(target_rows, target_spec, config), target_spec, m.model_library)
    check_training_labels(data.labels[data.split == training.SPLIT_TRAIN], field="models.target_day",
                          day=m.target_day)
    seconds["collect_target"] = time.monotonic() - started
    preparation.days = PreparedDays(proxy=proxy, proxy_spec=proxy_spec, target_spec=target_spec,
                                    proxy_day_metrics=proxy_day_metrics, proxy_prediction=proxy_prediction,
                                    target_data=data, seconds=seconds)
    return preparation.days


def shared_pate_settings(config: Config, target_rows: DataFrame, preparation: Preparation, *,
                         left_out: np.ndarray, training_labels: DataFrame | None,
                         key: hashing.AuditKey | None) -> pate.PateSettings:
    """:func:`pate_settings` whose teachers are fitted once per preparation and audit key (which drew their injected
    training labels): the votes do not depend on epsilon, so the PATE cells of ``lia-spark audit-table`` (one
    preparation) that share a key (audit.key_path) share them (:class:`lia_spark.kernels.pate.ReusedVotes`). The
    membership baseline's teachers leave out its non-members and are fitted for their own run."""
    if preparation.days is None:
        raise ValueError("preparation: no prepared days; prepare_days runs first (the teachers use its encoding)")
    spec = preparation.days.target_spec
    if left_out.size:
        return pate_settings(config, target_rows, spec, left_out=left_out)
    drawn_by = "" if key is None else key.identifier
    if drawn_by in preparation.pate:
        logger.info("train: PATE's teachers' votes reused from the previous PATE cell of this process")
    else:
        preparation.pate[drawn_by] = pate_settings(config, target_rows, spec, training_labels=training_labels)
    return preparation.pate[drawn_by]


def found_votes(settings: pate.PateSettings, data: training.ModelData, *, seed: int) -> pate.PateSettings:
    """``settings`` with the teachers' votes on the student rows of ``data`` found now (on the driver: a Spark job)
    and frozen, so the settings pickle into Spark tasks that cannot fit teachers."""
    votes = settings.votes
    if not isinstance(votes, pate.ReusedVotes):
        raise TypeError(f"settings: votes must be pate_settings' ReusedVotes (fitted on the executors), got {votes!r}")
    students = training.student_rows(data, settings=settings, seed=seed)
    votes(data.row_ids[students], data.rows(students), seed)
    return dataclasses.replace(settings, votes=votes.frozen())


@dataclasses.dataclass(frozen=True)
class TargetRows:
    """What the target fits of one preparation read: the target day's rows with their training labels (the injected
    design's y^b), the proxy's predictions on them (rr_with_prior's prior; None where no mechanism needs it) and,
    under the injected design, what the shadow fits read instead of the target's coins: the true labels and each
    canary's counterfactual label (-1 elsewhere)."""

    data: training.ModelData
    prior: np.ndarray | None = None
    true_labels: np.ndarray | None = None
    counterfactual_label: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class TargetJob:
    """One target fit (plain data, so it pickles into a Spark task): the training mechanism, epsilon, bag size, the
    mechanisms' seed, the hyper-parameters and PATE's settings (votes already found; pate only)."""

    mechanism: str
    epsilon: float
    bag_size: int
    seed: int
    params: BoostingParams
    pate: pate.PateSettings | None = None

    @property
    def key(self) -> tuple[str, float, int]:
        """(training mechanism, epsilon, bag size): how :attr:`Preparation.fits` finds it."""
        return self.mechanism, self.epsilon, self.bag_size


def target_job(config: Config, *, key: hashing.AuditKey | None = None,
               pate_settings: pate.PateSettings | None = None) -> TargetJob:
    """The target fit the models section asks for, its mechanism seeded by :func:`training_seed`."""
    m = config.models
    return TargetJob(m.training_mechanism, m.epsilon, m.bag_size, seed=training_seed(config, key),
                     params=boosting_params(config), pate=pate_settings)


def fit_target_job(rows: TargetRows, job: TargetJob, threads: int) -> training.TargetFit:
    """The target of ``job`` trained on ``rows`` with ``threads`` threads (0 = every core;
    :func:`lia_spark.kernels.mechanism_registry.train_target`)."""
    return mechanism_registry.train_target(rows.data, mechanism=job.mechanism, epsilon=job.epsilon, seed=job.seed,
                                           params=dataclasses.replace(job.params, threads=threads), prior=rows.prior,
                                           bag_size=job.bag_size, pate_settings=job.pate)


@dataclasses.dataclass(frozen=True)
class ShadowJob:
    """Label-blind shadow fit number ``shadow`` of a target fit (plain data, so it pickles into a Spark task's closure):
    the target's job, the shadow's index and the audit key its coins and mechanism seed derive from."""

    target: TargetJob
    shadow: int
    key: hashing.Seed


@dataclasses.dataclass(frozen=True)
class RunJob:
    """Extra training run number ``run`` (>= 1) of a target fit, pooled into the audit's game (audit.runs; plain data,
    so it pickles into a Spark task's closure): the target's job, the run's index and the audit key its coins and
    mechanism seed derive from."""

    target: TargetJob
    run: int
    key: hashing.Seed


def _refit(rows: TargetRows, target: TargetJob, coin: np.ndarray, threads: int) -> training.TargetFit:
    """The target's fit repeated on labels where each canary takes y^c with coin c
    (:func:`lia_spark.kernels.injected.canary_training_labels`) and the mechanism ``target.seed``.

    Raises:
        ValueError: when ``rows`` carry no true and counterfactual labels (no injected design).
    """
    if rows.true_labels is None or rows.counterfactual_label is None:
        raise ValueError("rows: shadow fits and extra runs need the true and counterfactual labels of the injected "
                         "design")
    labels = injected.canary_training_labels(rows.true_labels, rows.counterfactual_label, coin)
    return fit_target_job(dataclasses.replace(rows, data=dataclasses.replace(rows.data, labels=labels)), target,
                          threads)


def fit_shadow_job(rows: TargetRows, job: ShadowJob, threads: int) -> FittedModel:
    """The shadow model of ``job``: the target's fit repeated with the shadow's own coins
    (:func:`lia_spark.kernels.injected.shadow_coins`) and mechanism seed
    (:func:`lia_spark.kernels.injected.shadow_seed`); no coin or draw of the target's is read (docs/math.md §5.13)."""
    coin = injected.shadow_coins(rows.data.row_ids, key=job.key, shadow=job.shadow)
    target = dataclasses.replace(job.target, seed=injected.shadow_seed(job.key, job.shadow))
    return _refit(rows, target, coin, threads).model


def fit_run_job(rows: TargetRows, job: RunJob, threads: int) -> FittedModel:
    """The model of extra run ``job.run``: the target's fit repeated with the run's own fair coins
    (:func:`lia_spark.kernels.injected.run_coins`) and mechanism seed (:func:`lia_spark.kernels.injected.run_seed`),
    independent of the target's and of every other run's (docs/math.md §5.14)."""
    coin = injected.run_coins(rows.data.row_ids, key=job.key, run=job.run)
    target = dataclasses.replace(job.target, seed=injected.run_seed(job.key, job.run))
    return _refit(rows, target, coin, threads).model


def fit_job(rows: TargetRows, job: TargetJob | ShadowJob | RunJob, threads: int
            ) -> training.TargetFit | FittedModel:
    """:func:`fit_shadow_job` of a :class:`ShadowJob`, :func:`fit_run_job` of a :class:`RunJob`,
    :func:`fit_target_job` of a :class:`TargetJob`: one body for parallel tasks fitting them together."""
    if isinstance(job, ShadowJob):
        return fit_shadow_job(rows, job, threads)
    return fit_run_job(rows, job, threads) if isinstance(job, RunJob) else fit_target_job(rows, job, threads)
