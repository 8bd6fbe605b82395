"""The train stage's two execution paths, with the same outputs (docs/math.md §4, §5.8-§5.10): ``in_memory``
collects one day's features to the driver (Arrow) and fits there; ``distributed`` fits xgboost.spark on the
cluster (:mod:`lia_spark.engine.models.distributed`). Each returns :class:`TrainedModels`: the target day's rows scored
by proxy and target (with the injected design's y1 and b, the membership bit and the label-blind reference), the
models, their timings and their feature encodings.

Audit designs (audit.design): ``injected`` (default, with audit.attack=label_inference) draws per canary
(training row) a counterfactual label y1 and a fair coin b before training (:func:`lia_spark.kernels.injected.inject`)
and trains the target (its mechanism included) on y^b, every draw keyed on the audit key (the ``key`` argument,
:mod:`lia_spark.engine.models.audit_key`; shipped to executors inside Python closures only, never in a query plan);
``observational`` trains on the true labels and fits a label-blind reference (the target's library and
hyper-parameters, true labels, on the target day's rows outside the canaries) whose predictions on the canaries the
audit scores beside the target's.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Iterator, cast

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

from lia_spark import names
from lia_spark.engine.models.audit_key import kept
from lia_spark.engine.models.distributed import (SparkModel, bag_target, fitted_rows, label_target, predicted,
                                                 spark_booster)
from lia_spark.engine.models.parallel_fits import run_fits
from lia_spark.engine.models.preparation import (Preparation, PreparedDays, RunJob, ShadowJob, TargetJob, TargetRows,
                                                 boosting_params, feature_spec, fit_job, found_votes, in_memory_rows,
                                                 model_features, preparation_key, prepare_days, shared_pate_settings,
                                                 target_job)
from lia_spark.engine.runtime.progress import plan_work, work_done
from lia_spark.engine.spark.session import describe_jobs, is_connect
from lia_spark.kernels import features, injected, membership, training
from lia_spark.kernels.hashing import AuditKey
from lia_spark.kernels.model_libraries import FittedModel
from lia_spark.names import (COUNTERFACTUAL_LABEL, DISTRIBUTED, HIDDEN_BIT, IN_MEMORY, INJECTED_LABEL, LABEL, MEMBER,
                             PROXY_PREDICTION, REFERENCE_PREDICTION, RELEASED_LABEL, ROW_ID, RUN_COLUMNS,
                             RUN_HIDDEN_BITS, RUN_TARGET_PREDICTIONS, SHADOW_PREDICTION, SPLIT, TARGET_PREDICTION,
                             TRUE_LABEL, setting_key)
from lia_spark.run.capabilities import unsupported
from lia_spark.run.config import Config

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TrainedModels:
    """What an execution path returns: the target day's rows scored (:data:`SCORED_SCHEMA`), the fitted models by
    name (proxy, target, stage1), fit seconds, extra test metrics, each model's feature encoding and the training
    mechanism's report (PATE's accounting)."""

    scored: DataFrame
    models: dict[str, Any]
    seconds: dict[str, float]
    extra_metrics: dict[str, float]
    specs: dict[str, features.FeatureSpec]
    mechanism_report: dict[str, float]


SCORED_SCHEMA = (f"{ROW_ID} long, {LABEL} int, {SPLIT} int, {RELEASED_LABEL} int, {TARGET_PREDICTION} double, "
                 f"{PROXY_PREDICTION} double, {MEMBER} int, {COUNTERFACTUAL_LABEL} int, {HIDDEN_BIT} int, "
                 f"{REFERENCE_PREDICTION} double, {SHADOW_PREDICTION} double, {RUN_HIDDEN_BITS} array<int>, "
                 f"{RUN_TARGET_PREDICTIONS} array<double>")
# member: null outside the membership candidates; counterfactual_label, hidden_bit: the injected design's y1 and b
# on the canaries (null otherwise); reference_prediction: the observational design's label-blind reference;
# shadow_prediction: the injected design's shadow baseline (null without shadow fits); run_hidden_bits,
# run_target_predictions: the coins and predictions of the extra training runs 1..R-1 (audit.runs; null without)


def _keyed(key: AuditKey | None, draws: str) -> AuditKey:
    """The audit key ``draws`` are keyed on, which a keyed game always has
    (:func:`lia_spark.engine.models.audit_key.draws_from_key`).

    Raises:
        ValueError: ``key`` is None.
    """
    if key is None:
        raise ValueError(f"key: {draws} are drawn from the audit key, which every keyed game has, got None")
    return key


def membership_candidates(data: training.ModelData, config: Config,
                          key: AuditKey | None) -> tuple[training.ModelData, np.ndarray]:
    """With audit.attack=membership: the target day's rows with the candidates left out of the target's training
    rows moved to split :data:`lia_spark.kernels.training.SPLIT_LEFT_OUT`, and per row 1 (member) / 0 (left out) on the
    audit.membership_candidates candidates, -1 elsewhere (docs/math.md §5.8), drawn with the audit key. Otherwise
    ``data`` and all -1."""
    member = np.full(data.row_ids.size, -1, dtype=np.int32)
    if not config.audit.audit_design.draws_members:
        return data, member
    key = _keyed(key, "the membership baseline's members")
    train = data.split == training.SPLIT_TRAIN
    candidates = np.zeros(data.row_ids.size, dtype=bool)
    candidates[train] = membership.candidate_mask(data.row_ids[train], candidates=config.audit.membership_candidates,
                                                  key=key)
    member[candidates] = membership.membership(data.row_ids[candidates], key=key)
    split = np.where(member == 0, training.SPLIT_LEFT_OUT, data.split).astype(data.split.dtype)
    return dataclasses.replace(data, split=split), member


def injection(config: Config, data: training.ModelData, proxy_prediction: np.ndarray,
              key: AuditKey | None) -> injected.InjectedLabels | None:
    """The injected design's labels of the target day's rows (:func:`lia_spark.kernels.injected.inject` on the training
    rows, the canaries, keyed on the audit key), or None when the target trains on the true labels."""
    if not config.audit.audit_design.injects_labels:
        return None
    labels = injected.inject(data.row_ids, data.labels, proxy_prediction, data.split == training.SPLIT_TRAIN,
                             key=_keyed(key, "the injected design's labels"),
                             counterfactual=config.audit.counterfactual, flip_share=config.audit.flip_share)
    logger.info("train: injected design: %d of %d canaries informative (y1 != y0)",
                int(((labels.counterfactual_label >= 0) & (labels.counterfactual_label != data.labels)).sum()),
                int((labels.counterfactual_label >= 0).sum()))
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
    nulled = np.where(values < 0, None, values)  # type: ignore[call-overload]  # numpy's ArrayLike omits None
    return pd.array(nulled, dtype="Int32")


def _reference_in_memory(config: Config, data: training.ModelData) -> np.ndarray:
    """The observational design's label-blind reference on every row (NaN under the other designs): the target's
    library and hyper-parameters fitted on the true labels of the target day's test rows, early-stopped on its
    validation rows, so it never sees a canary's label (docs/math.md §5.10)."""
    if not config.audit.audit_design.fits_reference:
        return np.full(data.labels.size, np.nan)
    reference = training.fit_model(data, data.labels, data.split == training.SPLIT_TEST,
                                   data.split == training.SPLIT_VALID, params=boosting_params(config))
    work_done()
    logger.info("train: label-blind reference fitted on %d rows outside the canaries in %.1f s",
                int((data.split == training.SPLIT_TEST).sum()), reference.fit_seconds)
    return reference.predict(data.features)


@dataclasses.dataclass(frozen=True)
class Refits:
    """The target's fits again with fresh coins of their own that the train stage adds: audit.shadows label-blind
    shadows (docs/math.md §5.13) and audit.runs - 1 extra training runs pooled into the game (§5.14)."""

    shadows: int = 0
    extra_runs: int = 0


def planned_refits(config: Config) -> Refits:
    """The refits of ``config``: those audit.shadows and audit.runs ask for where the game refits its target (the
    injected design) on the in-memory path for every mechanism but a student of teachers (PATE: they would be fitted
    again per fit); none elsewhere."""
    m, section = config.models, config.audit
    if section.audit_design.refits_target and m.execution == IN_MEMORY and not m.mechanism.teachers:
        return Refits(shadows=section.shadows, extra_runs=section.runs - 1)
    return Refits()


def shadow_jobs(config: Config, job: TargetJob, key: AuditKey | None) -> list[ShadowJob]:
    """The label-blind shadow fits of the target fit ``job`` (:func:`planned_refits`), their coins keyed on the audit
    key."""
    shadows = range(planned_refits(config).shadows)
    return [ShadowJob(job, shadow, _keyed(key, "the shadow fits' coins")) for shadow in shadows]


def run_jobs(config: Config, job: TargetJob, key: AuditKey | None) -> list[RunJob]:
    """The extra training runs 1..R-1 of the target fit ``job`` (:func:`planned_refits`), their coins keyed on the
    audit key."""
    runs = range(1, 1 + planned_refits(config).extra_runs)
    return [RunJob(job, run, _keyed(key, "the extra runs' coins")) for run in runs]


def run_columns(data: training.ModelData, counterfactual_label: np.ndarray | None, runs: list[FittedModel],
                key: AuditKey | None) -> dict[str, list]:
    """Per row of ``data`` the extra runs' coins b (:func:`lia_spark.kernels.injected.run_coins`) and predictions, run
    1..R-1 in order, on the canaries (``counterfactual_label`` >= 0); None elsewhere and without runs."""
    values = {name: [None] * data.labels.size for name in RUN_COLUMNS}
    if not runs or counterfactual_label is None:
        return values
    key = _keyed(key, "the extra runs' coins")
    canary = np.flatnonzero(counterfactual_label >= 0)
    coins = np.stack([injected.run_coins(data.row_ids[canary], key=key, run=run)
                      for run in range(1, len(runs) + 1)], axis=1).astype(np.int32)
    predictions = np.stack([model.predict(data.features[canary]) for model in runs], axis=1)
    for row, row_coins, row_predictions in zip(canary.tolist(), coins.tolist(), predictions.tolist()):
        values[RUN_HIDDEN_BITS][row], values[RUN_TARGET_PREDICTIONS][row] = row_coins, row_predictions
    return values


def shadow_baseline(data: training.ModelData, shadows: list[FittedModel]) -> np.ndarray:
    """The shadow baseline on every row of ``data``: the mean logit of the shadow models' predictions
    (:func:`lia_spark.kernels.injected.shadow_reference`; :func:`lia_spark.engine.models.preparation.fit_shadow_job`
    fits them independently of the target's coins, so comparing with it keeps every bound valid, docs/math.md
    §5.13), or NaN per row without shadows."""
    if not shadows:
        return np.full(data.labels.size, np.nan)
    return injected.shadow_reference(np.asarray([shadow.predict(data.features) for shadow in shadows]))


def fitted_in_tasks(spark: SparkSession, config: Config, rows: TargetRows,
                    jobs: list[tuple[str, TargetJob | ShadowJob | RunJob]], *, purpose: str) -> list[Any]:
    """:func:`lia_spark.engine.models.preparation.fit_job` of every job, as parallel Spark tasks with
    spark.parallel_fits (:func:`lia_spark.engine.models.parallel_fits.run_fits`), else one after another on the
    driver. A single job, or a fit that failed in its task, is fitted on the driver with every core, which raises
    its error."""
    if len(jobs) == 1:
        fitted = fit_job(rows, jobs[0][1], 0)
        work_done()
        return [fitted]
    outcomes = run_fits(spark, rows, jobs, fit_job, purpose=purpose, in_tasks=config.spark.parallel_fits)
    return [fit_job(rows, job, 0) if outcome.failed else outcome.value for (_, job), outcome in zip(jobs, outcomes)]


def _model_specs(models: dict[str, Any], proxy_spec: features.FeatureSpec,
                 target_spec: features.FeatureSpec) -> dict[str, features.FeatureSpec]:
    """The feature encoding of each model: the proxy's own, the target day's for the target (and stage 1)."""
    return {name: proxy_spec if name == "proxy" else target_spec for name in models}


@dataclasses.dataclass(frozen=True)
class InMemoryTarget:
    """The in-memory path's target day before the target's fit: the prepared days, the rows (the membership
    baseline's non-members moved out of training), the membership bit, the injected labels and what the fit reads."""

    prepared: PreparedDays
    data: training.ModelData
    member: np.ndarray
    labels: injected.InjectedLabels | None
    rows: TargetRows


def in_memory_target(spark: SparkSession, config: Config, proxy_rows: DataFrame, target_rows: DataFrame,
                     preparation: Preparation, key: AuditKey | None) -> InMemoryTarget:
    """Everything the in-memory target fit reads (:func:`lia_spark.engine.models.preparation.prepare_days`, the
    membership candidates, the injected labels): the same for every training mechanism of one preparation and audit
    key."""
    prepared = prepare_days(spark, config, proxy_rows, target_rows, preparation)
    if key is not None:
        kept(spark, config, key)
    data, member = membership_candidates(prepared.target_data, config, key)
    labels = injection(config, data, prepared.proxy_prediction, key)
    if labels is None:
        return InMemoryTarget(prepared, data, member, labels, TargetRows(data, prepared.proxy_prediction))
    rows = TargetRows(dataclasses.replace(data, labels=labels.training), prepared.proxy_prediction,
                      true_labels=data.labels, counterfactual_label=labels.counterfactual_label)
    return InMemoryTarget(prepared, data, member, labels, rows)


def in_memory_job(spark: SparkSession, config: Config, target_rows: DataFrame, preparation: Preparation,
                  target: InMemoryTarget, key: AuditKey | None) -> TargetJob:
    """The target fit of ``config`` on ``target`` (its mechanism seeded from the audit key where there is one); PATE's
    settings share the preparation's teachers of that key (fitted here on the executors when they are not yet)."""
    if not config.models.mechanism.teachers:
        return target_job(config, key=key)
    labels, data = target.labels, target.data
    pate_labels = None if labels is None else _changed_labels(spark, data, labels)
    return target_job(config, key=key, pate_settings=shared_pate_settings(
        config, target_rows, preparation, left_out=data.row_ids[target.member == 0], training_labels=pate_labels,
        key=key))


def fit_cell_job(rows: tuple[TargetRows, ...], job: tuple[int, TargetJob | ShadowJob | RunJob], threads: int
                 ) -> training.TargetFit | FittedModel:
    """:func:`lia_spark.engine.models.preparation.fit_job` of job ``job[1]`` on the rows of cell ``job[0]`` (each cell
    of :func:`fit_ahead` trains on the labels its own audit key drew)."""
    cell, work = job
    return fit_job(rows[cell], work, threads)


def fit_ahead(spark: SparkSession, cells: list[tuple[Config, AuditKey | None]], preparation: Preparation) -> None:
    """Fit the in-memory targets of ``cells`` (each a config that differs from the others only in the training
    mechanism, epsilon, bag size and output folder, with its audit key: every cell draws its own coins), their shadow
    models (:func:`shadow_jobs`) and extra runs (:func:`run_jobs`) as parallel Spark tasks
    (:func:`lia_spark.engine.models.parallel_fits.run_fits`) and keep them in ``preparation.fits``,
    ``preparation.shadow_fits`` and ``preparation.run_fits``, where the train stage of each setting takes its own. A
    failed fit is left out (its train stage fits it again and reports the error)."""
    m = cells[0][0].models
    proxy_rows, target_rows = (in_memory_rows(spark, cells[0][0], day) for day in (m.proxy_day, m.target_day))
    rows: list[TargetRows] = []
    jobs: list[tuple[str, tuple[int, TargetJob | ShadowJob | RunJob]]] = []
    for index, (cell, key) in enumerate(cells):
        target = in_memory_target(spark, cell, proxy_rows, target_rows, preparation, key)
        rows.append(target.rows)
        job = in_memory_job(spark, cell, target_rows, preparation, target, key)
        if job.pate is not None:
            job = dataclasses.replace(job, pate=found_votes(job.pate, target.data, seed=job.seed))
        name = setting_key(*job.key)
        jobs += [(name, (index, job)), *((f"{name} shadow {shadow.shadow}", (index, shadow))
                                        for shadow in shadow_jobs(cell, job, key)),
                 *((f"{name} run {extra.run}", (index, extra)) for extra in run_jobs(cell, job, key))]
    outcomes = run_fits(spark, tuple(rows), jobs, fit_cell_job, purpose="audit-table")
    shadows: dict[tuple[str, float, int], list[FittedModel | None]] = {}
    runs: dict[tuple[str, float, int], list[FittedModel | None]] = {}
    for (name, (_, work)), outcome in zip(jobs, outcomes):
        if outcome.failed:
            logger.warning("audit-table: the fit of %s failed in its task (%s); its cell fits it again", name,
                           outcome.error)
        if isinstance(work, (ShadowJob, RunJob)):
            (shadows if isinstance(work, ShadowJob) else runs).setdefault(work.target.key, []).append(outcome.value)
        elif not outcome.failed:
            preparation.fits[work.key] = outcome.value
    # cast: a list without None holds only fitted models
    preparation.shadow_fits.update({key: cast(list[FittedModel], models) for key, models in shadows.items()
                                    if None not in models})
    preparation.run_fits.update({key: cast(list[FittedModel], models) for key, models in runs.items()
                                 if None not in models})


def in_memory(spark: SparkSession, config: Config, proxy_rows: DataFrame, target_rows: DataFrame,
              preparation: Preparation, key: AuditKey | None) -> TrainedModels:
    """Proxy and target fitted on the driver from the collected (sampled) days, the game's draws keyed on ``key``
    (the audit key; None under the observational design); the proxy and the target day's features come from
    ``preparation`` when it kept them (:func:`lia_spark.engine.models.preparation.prepare_days`), the target too when
    :func:`fit_ahead` fitted it."""
    m, planned = config.models, planned_refits(config)
    proxy_fitted = not preparation.holds_days(preparation_key(spark, config))
    setting = (m.training_mechanism, m.epsilon, m.bag_size)
    fitted_ahead = not proxy_fitted and setting in preparation.fits
    shadows_ahead = not proxy_fitted and setting in preparation.shadow_fits
    runs_ahead = not proxy_fitted and setting in preparation.run_fits
    plan_work("model fits", proxy_fitted + (not fitted_ahead) + config.audit.audit_design.fits_reference
              + (0 if shadows_ahead else planned.shadows) + (0 if runs_ahead else planned.extra_runs))
    target = in_memory_target(spark, config, proxy_rows, target_rows, preparation, key)
    work_done(proxy_fitted)
    prepared, data, member, labels = target.prepared, target.data, target.member, target.labels
    started = time.monotonic()
    fit, shadows = preparation.fits.pop(setting, None), preparation.shadow_fits.pop(setting, None)
    runs = preparation.run_fits.pop(setting, None)
    if config.audit.runs - 1 > planned.extra_runs:
        logger.warning("train: audit.runs=%d does not apply to %s (its teachers would be fitted again per run): one "
                       "training run, the headline says so", config.audit.runs, m.training_mechanism)
    if fit is not None:
        logger.info("train: target fitted ahead in a parallel Spark task")
    needs_shadows, needs_runs = shadows is None and planned.shadows > 0, runs is None and planned.extra_runs > 0
    shadow_list: list[ShadowJob] = []
    run_list: list[RunJob] = []
    jobs: list[tuple[str, TargetJob | ShadowJob | RunJob]] = []
    if fit is None or needs_shadows or needs_runs:
        job = in_memory_job(spark, config, target_rows, preparation, target, key)
        shadow_list = shadow_jobs(config, job, key) if needs_shadows else []
        run_list = run_jobs(config, job, key) if needs_runs else []
        jobs = [*([("target", job)] if fit is None else []),
                *((f"shadow {shadow.shadow}", shadow) for shadow in shadow_list),
                *((f"run {extra.run}", extra) for extra in run_list)]
    fitted = fitted_in_tasks(spark, config, target.rows, jobs, purpose="train") if jobs else []
    fit = fitted.pop(0) if fit is None else fit  # no jobs: every fit was fitted ahead
    shadows = fitted[:len(shadow_list)] if needs_shadows else shadows
    runs = fitted[len(shadow_list):] if needs_runs else runs
    for model in (fit.model, *(shadows or []), *(runs or [])):
        model.predict_with_threads()  # a booster fitted in a task keeps its task's one thread
    run_seconds = sum(model.fit_seconds for model in runs or [])
    if runs:
        logger.info("train: %d extra training runs for the pooled game (audit.runs), %.1f s of fitting", len(runs),
                    run_seconds)
    shadow = shadow_baseline(data, shadows or [])
    shadow_seconds = sum(model.fit_seconds for model in shadows or [])  # summed: they may run in parallel tasks
    if shadows:
        logger.info("train: %d label-blind shadow fits, %.1f s of fitting", len(shadows), shadow_seconds)
    logger.info("target (%s, eps=%s, k=%d) fitted in %.1f s", m.training_mechanism, m.epsilon, m.bag_size,
                fit.model.fit_seconds)
    released = (pd.array(fit.released_labels, dtype="Int32") if fit.released_labels is not None
                else pd.array([None] * data.labels.size, dtype="Int32"))
    scored = pd.DataFrame({ROW_ID: data.row_ids, LABEL: data.labels.astype(np.int32),
                           SPLIT: data.split.astype(np.int32), RELEASED_LABEL: released,
                           TARGET_PREDICTION: fit.model.predict(data.features),
                           PROXY_PREDICTION: prepared.proxy_prediction,
                           MEMBER: _nullable(member),
                           **{name: _nullable(None if labels is None else getattr(labels, name), data.labels.size)
                              for name in names.INJECTED_COLUMNS},
                           REFERENCE_PREDICTION: _reference_in_memory(config, data), SHADOW_PREDICTION: shadow,
                           **run_columns(data, None if labels is None else labels.counterfactual_label, runs or [],
                                         key)})
    models = {"proxy": prepared.proxy, "target": fit.model, **({"stage1": fit.stage1} if fit.stage1 else {})}
    seconds = {**prepared.seconds, **{f"fit_{name}": model.fit_seconds for name, model in models.items()
                                      if name != "proxy" or "proxy_reused" not in prepared.seconds},
               "train_target": time.monotonic() - started,
               **({"fit_shadows": shadow_seconds} if shadow_seconds else {}),
               **({"fit_runs": run_seconds} if runs else {})}
    extra = {f"{name}@proxy_own_day": value for name, value in prepared.proxy_day_metrics.items()}
    return TrainedModels(spark.createDataFrame(scored, SCORED_SCHEMA), models, seconds, extra,
                         _model_specs(models, prepared.proxy_spec, prepared.target_spec), fit.report)


def distributed(spark: SparkSession, config: Config, proxy_rows: DataFrame, target_rows: DataFrame,
                preparation: Preparation, key: AuditKey | None) -> TrainedModels:
    """Proxy and target fitted by xgboost.spark on the executors, the game's draws keyed on ``key`` (nothing to share:
    ``preparation`` is unused)."""
    m, seconds = config.models, {}
    if is_connect(spark):
        raise ValueError("models.execution: distributed (xgboost.spark) needs a classic Spark session, and this one "
                         "is Spark Connect (Databricks shared or serverless compute, spark.remote), got 'distributed'; "
                         "use models.execution=in_memory or a classic cluster")
    design = config.audit.audit_design
    reason = unsupported(m.training_mechanism, library=m.library, execution=DISTRIBUTED, game=design)
    if reason:
        raise ValueError(f"models.execution: {reason}, got library={m.library}, training_mechanism="
                         f"{m.training_mechanism}, audit.attack={config.audit.attack}")
    mechanism = m.mechanism
    target_fits = 1 + (mechanism.two_stage and not mechanism.releases_true_labels(m.epsilon))
    plan_work("model fits", 1 + target_fits + design.fits_reference)
    proxy, proxy_spec, seconds["fit_proxy"] = distributed_proxy(spark, config, proxy_rows)
    work_done()
    columns = proxy_spec.feature_columns
    proxy_on_target = predicted(proxy, model_features(target_rows, proxy_spec, config), PROXY_PREDICTION)
    target_spec = feature_spec(target_rows, config)
    target = (model_features(target_rows, target_spec, config).select(ROW_ID, *columns)
              .join(proxy_on_target.select(ROW_ID, LABEL, SPLIT, PROXY_PREDICTION), ROW_ID)
              .withColumn("is_valid", F.col(SPLIT) == 1))
    no_injection = (F.lit(None).cast("int").alias(column) for column in names.INJECTED_COLUMNS)
    target = (injected_frame(target, config, _keyed(key, "the injected design's labels")) if design.injects_labels
              else target.select("*", F.col(LABEL).alias(TRUE_LABEL), *no_injection)).cache()
    fit_target = bag_target if mechanism.bag_release else label_target
    fitted = fit_target(spark, config, target, columns, key)
    work_done(target_fits)
    models: dict[str, Any] = {"proxy": proxy, **fitted.models}
    scored, reference_seconds = _reference_distributed(spark, config, target, columns, fitted.scored)
    seconds.update({**fitted.seconds, **reference_seconds})
    scored = scored.select(ROW_ID, F.col(TRUE_LABEL).alias(LABEL), SPLIT, RELEASED_LABEL, TARGET_PREDICTION,
                           PROXY_PREDICTION, F.lit(None).cast("int").alias(MEMBER), *names.INJECTED_COLUMNS,
                           REFERENCE_PREDICTION, F.lit(None).cast("double").alias(SHADOW_PREDICTION),
                           F.lit(None).cast("array<int>").alias(RUN_HIDDEN_BITS),
                           F.lit(None).cast("array<double>").alias(RUN_TARGET_PREDICTIONS))
    return TrainedModels(scored, models, seconds, {}, _model_specs(models, proxy_spec, target_spec), {})


def distributed_proxy(spark: SparkSession, config: Config, proxy_rows: DataFrame
                      ) -> tuple[SparkModel, features.FeatureSpec, float]:
    """The proxy M' fitted by xgboost.spark on the true labels of ``proxy_rows`` (its train split, early-stopped on
    its validation split): (model, its feature encoding, fit seconds)."""
    spec = feature_spec(proxy_rows, config)
    frame = model_features(proxy_rows, spec, config).withColumn("is_valid", F.col(SPLIT) == training.SPLIT_VALID)
    describe_jobs(spark, "train: proxy (xgboost.spark)")
    started = time.monotonic()
    booster = spark_booster(spark, config, spec.feature_columns, LABEL)
    return SparkModel.fitted(booster.fit(frame.where(fitted_rows()))), spec, time.monotonic() - started


def training_split(part: pd.DataFrame) -> np.ndarray:
    """The canaries of a batch of the train stage's target day: its training rows."""
    return part[SPLIT].to_numpy() == training.SPLIT_TRAIN


def injected_frame(frame: DataFrame, config: Config, key: AuditKey, *,
                   canaries: Callable[[pd.DataFrame], np.ndarray] = training_split) -> DataFrame:
    """``frame`` (row_id, label, proxy_prediction, ...) with the true label moved to ``true_label``, the label column
    holding y^b on the rows ``canaries`` selects in each batch (:func:`lia_spark.kernels.injected.inject` keyed on the
    audit key, on the executors: the key travels in the Python function's closure, never in the plan; the mechanisms
    then read the label as they read any label), and the canaries' y1 and b (null elsewhere). The key file is
    written first (:func:`lia_spark.engine.models.audit_key.kept`)."""
    a = config.audit
    kept(frame.sparkSession, config, key)
    schema = StructType(frame.schema.fields + [StructField(TRUE_LABEL, IntegerType())]
                        + [StructField(name, IntegerType()) for name in names.INJECTED_COLUMNS])

    def batches(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for part in frames:
            labels = injected.inject(part[ROW_ID].to_numpy(np.int64), part[LABEL].to_numpy(np.int8),
                                     part[PROXY_PREDICTION].to_numpy(np.float64),
                                     canaries(part), key=key,
                                     counterfactual=a.counterfactual, flip_share=a.flip_share)
            yield part.assign(**{TRUE_LABEL: part[LABEL].astype(np.int32), LABEL: labels.training.astype(np.int32),
                                 COUNTERFACTUAL_LABEL: _nullable(labels.counterfactual_label),
                                 HIDDEN_BIT: _nullable(labels.hidden_bit)})

    return frame.mapInPandas(batches, schema)


def _reference_distributed(spark: SparkSession, config: Config, target: DataFrame, columns: list[str],
                           scored: DataFrame) -> tuple[DataFrame, dict[str, float]]:
    """``scored`` with ``reference_prediction`` and the fit's seconds: under the observational design the label-blind
    reference
    (xgboost.spark with the target's settings, on the true labels of the target day's test rows, early-stopped on
    its validation rows; :func:`_reference_in_memory`), else null."""
    if not config.audit.audit_design.fits_reference:
        return scored.withColumn(REFERENCE_PREDICTION, F.lit(None).cast("double")), {}
    describe_jobs(spark, "train: label-blind reference (xgboost.spark)")
    started = time.monotonic()
    reference = spark_booster(spark, config, columns, TRUE_LABEL).fit(
        target.where(F.col(features.SPLIT_COLUMN) >= training.SPLIT_VALID))
    work_done()
    return (predicted(SparkModel.fitted(reference), scored, REFERENCE_PREDICTION),
            {"fit_reference": time.monotonic() - started})
