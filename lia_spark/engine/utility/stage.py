"""Utility stage: the privacy-utility tradeoff, target AUC against the attacker's advantage per setting
(docs/math.md §4).

Trains the target in memory on the target day for every setting of :func:`lia_spark.kernels.utility.utility_grid` and
joins the test AUC with the advantages of the posteriors stage's summary (the RR family's closed forms where
the summary has none; none for pate). PATE's teachers are fitted once, in parallel Spark tasks
(:func:`lia_spark.engine.models.preparation.pate_settings`), and their votes reused at every epsilon. Output
``<run.output_dir>/utility``.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import tempfile
import time
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import SparkSession

from lia_spark.engine.models.classes import check_training_labels, check_two_classes, class_counts, warn_undefined_auc
from lia_spark.engine.models.feature_frames import check_days_present
from lia_spark.engine.models.parallel_fits import run_fits
from lia_spark.engine.models.preparation import (TargetJob, TargetRows, collect_model_data, feature_spec,
                                                 fit_target_job, found_votes, in_memory_rows, model_features,
                                                 pate_settings, target_job, training_seed)
from lia_spark.engine.runtime.outputs import MARKER, copy_from_local, path_exists
from lia_spark.engine.runtime.stage import Input, Stage, StageResult, StageRun
from lia_spark.engine.spark.session import describe_jobs
from lia_spark.kernels import pate, training
from lia_spark.kernels.mechanism_registry import label_mechanism
from lia_spark.names import IN_MEMORY, RR, setting_key
from lia_spark.present import charts
from lia_spark.run import layout
from lia_spark.run.capabilities import unsupported
from lia_spark.run.config import Config

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class UtilityResult(StageResult):
    """Privacy-utility tradeoff: one row per setting (mechanism, eps, k) with test AUC and advantages."""

    output_dir: str
    settings: int
    seconds: float
    table: list[dict[str, Any]]
    skipped: bool = False
    left_out: dict[str, str] = dataclasses.field(default_factory=dict)  # extra mechanism -> why it is not trained
    teacher_fits: int = 0  # times PATE's teachers were fitted (once per run with pate in the grid)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)  # setting key -> the error of its fit
    fits_where: str = ""  # where the fits ran: spark tasks or driver
    phase_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    # wall seconds of the day sample, PATE's teachers' votes, the fits and the table with its plots

    def failures(self) -> dict[str, str]:
        """The settings whose fit failed, with the error: such an output is recomputed, never reused."""
        return dict(self.failed)

    def metrics(self) -> dict[str, float]:
        """``<setting key>.auc_test`` per setting (:func:`lia_spark.names.setting_key`)."""
        return {f"{setting_key(row['mechanism'], row['epsilon'], row['bag_size'])}.auc_test": float(row["auc"])
                for row in self.table}

    def artifacts(self) -> list[str]:
        """The CSV table and the two PNG plots."""
        return [os.path.join(self.output_dir, name) for name in UTILITY_FILES]

    def setting_rows(self) -> list[dict[str, Any]]:
        """The table's rows (one nested MLflow run each)."""
        return [dict(row) for row in self.table]


UTILITY_FILES = ("tradeoff.csv", "tradeoff_additive.png", "tradeoff_p98.png")


def _posterior_summary(spark: SparkSession, config: Config) -> pd.DataFrame | None:
    path = layout.posterior_summary_path(config)
    if not path_exists(spark, f"{path}/{MARKER}") and not path_exists(spark, f"{path}/_SUCCESS"):
        logger.warning("utility: no posterior summary at %s; only RR-family advantages (closed form)", path)
        return None
    return spark.read.parquet(path).toPandas()


def extra_mechanisms(config: Config, *, training_rows: int) -> tuple[list[str], dict[str, str]]:
    """The utility.extra_mechanisms this stage trains, and those it leaves out with the reason: the audit
    capability table (:func:`lia_spark.run.capabilities.unsupported`, in memory whatever models.execution: this stage
    always trains on the driver) and, for pate, fewer training rows than pate.queries (queries are training rows)
    or than pate.teachers (a teacher without rows)."""
    m = config.models
    left_out = {}
    for name in config.utility.extra_mechanisms:
        reason = unsupported(name, library=m.library, execution=IN_MEMORY)
        queries = config.pate.settings().queries
        if not reason and label_mechanism(name).teachers and max(queries, config.pate.teachers) > training_rows:
            reason = (f"pate.queries={queries} student queries and pate.teachers={config.pate.teachers} "
                      f"teachers need at least as many of the target day's {training_rows:,} training rows; lower them")
        if reason:
            left_out[name] = reason
            logger.warning("utility: %s left out of the grid (utility.extra_mechanisms): %s", name, reason)
    return [name for name in config.utility.extra_mechanisms if name not in left_out], left_out


@dataclasses.dataclass(frozen=True)
class GridJob:
    """One fit of the utility grid: the target's fit (epsilon NaN, the LLP rows: no noise) and whether to return its
    predictions on the training rows (the closed forms' prior)."""

    target: TargetJob
    keep_priors: bool = False


def fit_grid_job(data: training.ModelData, job: GridJob, threads: int) -> dict[str, Any]:
    """One utility setting: the target trained on ``data`` with ``threads`` threads
    (:func:`lia_spark.engine.models.preparation.fit_target_job`); its test metrics, fit seconds, the mechanism's
    report and, with ``keep_priors``, its predictions on the training rows."""
    target = job.target
    if math.isnan(target.epsilon):
        target = dataclasses.replace(target, epsilon=math.inf)
    fit = fit_target_job(TargetRows(data), target, threads)
    test = data.split == training.SPLIT_TEST
    return {"scores": training.binary_metrics(data.labels[test], fit.model.predict(data.rows(test))),
            "fit_seconds": fit.model.fit_seconds, "report": fit.report,
            "priors": (fit.model.predict(data.rows(data.split == training.SPLIT_TRAIN)) if job.keep_priors
                       else None)}


PRIORS_JOB = "priors"  # the non-private fit whose predictions are the prior, when the grid has no RR eps = inf row


def grid_jobs(config: Config, data: training.ModelData, grid: list[tuple[str, float, int]],
              pate_settings: pate.PateSettings | None) -> list[tuple[str, GridJob]]:
    """The fits of ``grid`` (named by :func:`lia_spark.names.setting_key`), the first RR eps = inf setting keeping its
    predictions on the training rows, or one more non-private fit (:data:`PRIORS_JOB`) when the grid has none.
    PATE's votes are found here, once (a Spark job on the driver), and travel frozen with the pate fits."""
    if pate_settings is not None:
        pate_settings = found_votes(pate_settings, data, seed=training_seed(config))
    priors_at = next((index for index, (mechanism, epsilon, _) in enumerate(grid)
                      if mechanism == RR and math.isinf(epsilon)), None)
    jobs = [(setting_key(mechanism, epsilon, bag_size),
             GridJob(target_job(config.with_target(mechanism, epsilon, bag_size),
                                pate_settings=pate_settings if label_mechanism(mechanism).teachers else None),
                     keep_priors=index == priors_at))
            for index, (mechanism, epsilon, bag_size) in enumerate(grid)]
    if priors_at is None:
        jobs.append((PRIORS_JOB, GridJob(target_job(config.with_target(RR, math.inf, 1)), keep_priors=True)))
    return jobs


def _teacher_fits(settings: pate.PateSettings | None) -> int:
    """The times PATE's teachers were fitted for ``settings`` (0 without them)."""
    if settings is None:
        return 0
    if not isinstance(settings.votes, pate.ReusedVotes):
        raise ValueError(f"utility: pate_settings' votes are ReusedVotes, got {settings.votes!r}")
    return settings.votes.fits


def _utility(run: StageRun) -> UtilityResult:
    """Train the target (in memory) for every setting of the utility grid; write table and two plots.

    The fits are independent: with spark.parallel_fits they run as parallel Spark tasks on the broadcast day sample
    (:func:`lia_spark.engine.models.parallel_fits.run_fits`), else one after another on the driver; the models are the
    same either way. A failing fit is reported (its row keeps its error, AUC NaN) and the others finish; such an
    output is recomputed by the next run. Output ``<run.output_dir>/utility`` (beside, not inside, ``models/``, so
    re-training keeps it): tradeoff.csv, tradeoff_additive.png, tradeoff_p98.png. Run it after the posteriors stage
    so the table carries the LLP advantages; without their summary only the RR family's closed forms are used.
    """
    from lia_spark.kernels import utility

    spark, config, started = run.spark, run.config, run.started
    target_rows = in_memory_rows(spark, config, config.models.target_day)
    describe_jobs(spark, "utility: target-day features")
    spec = feature_spec(target_rows, config)
    data = collect_model_data(model_features(target_rows, spec, config), spec, config.models.model_library)
    check_training_labels(data.labels[data.split == training.SPLIT_TRAIN], field="models.target_day",
                          day=config.models.target_day)
    warn_undefined_auc("utility", *class_counts(data.labels[data.split == training.SPLIT_TEST]),
                       field="models.target_day", day=config.models.target_day, scored="every setting")
    extras, left_out = extra_mechanisms(config, training_rows=int(np.sum(data.split == training.SPLIT_TRAIN)))
    grid = utility.utility_grid(epsilons=config.utility.epsilons, bag_sizes=config.utility.bag_sizes,
                                extra_mechanisms=extras)
    # the votes do not depend on epsilon: the teachers are fitted once, before the fits
    phases = {"sample": time.monotonic() - started}
    with_teachers = any(label_mechanism(name).teachers for name in extras)
    reused_pate = pate_settings(config, target_rows, spec) if with_teachers else None
    jobs = grid_jobs(config, data, grid, reused_pate)
    phases["teachers"] = time.monotonic() - started - sum(phases.values())
    outcomes = run_fits(spark, data, jobs, fit_grid_job, purpose="utility", in_tasks=config.spark.parallel_fits)
    phases["fits"] = time.monotonic() - started - sum(phases.values())
    rows, failed = [], {}
    for (mechanism, epsilon, bag_size), outcome in zip(grid, outcomes):
        found = outcome.value or {"scores": {"auc": math.nan, "log_loss": math.nan}, "fit_seconds": math.nan,
                                  "report": {}}
        rows.append({"mechanism": mechanism, "epsilon": epsilon, "bag_size": bag_size, **found["scores"],
                     "fit_seconds": found["fit_seconds"], "error": outcome.error})
        if outcome.failed:
            failed[outcome.name] = outcome.error
            logger.warning("utility: the fit of %s failed (%s); its row keeps the error and the next run retries it",
                           outcome.name, outcome.error)
            continue
        logger.info("utility: %s -> AUC %.4f (%.1f s, %s)%s", outcome.name, found["scores"]["auc"],
                    found["fit_seconds"], outcome.where,
                    "".join(f", {key} {value:.4g}" for key, value in found["report"].items()))
    prior_fit = next(outcome for (_, job), outcome in zip(jobs, outcomes) if job.keep_priors)
    if prior_fit.failed:
        raise RuntimeError(f"utility: the non-private fit {prior_fit.name}, whose predictions are the closed forms' "
                           f"prior, failed: {prior_fit.error}")
    if reused_pate is not None:
        logger.info("utility: PATE's teachers fitted %d time(s) for %d pate settings", _teacher_fits(reused_pate),
                    sum(label_mechanism(mechanism).teachers for mechanism, _, _ in grid))
    table = utility.tradeoff_table(pd.DataFrame(rows), _posterior_summary(spark, config),
                                   priors=prior_fit.value["priors"])
    with tempfile.TemporaryDirectory() as local:
        table.to_csv(os.path.join(local, UTILITY_FILES[0]), index=False)
        charts.plot_tradeoff(table, advantage="mean_additive_advantage", path=os.path.join(local, UTILITY_FILES[1]))
        charts.plot_tradeoff(table, advantage="abs_I_p98", path=os.path.join(local, UTILITY_FILES[2]))
        for name in UTILITY_FILES:
            copy_from_local(spark, os.path.join(local, name), run.under(name))
    phases["table"] = time.monotonic() - started - sum(phases.values())
    return UtilityResult(output_dir=layout.output_path(config, layout.UTILITY), settings=len(table),
                         seconds=time.monotonic() - started, table=table.to_dict(orient="records"),
                         phase_seconds={name: round(value, 3) for name, value in phases.items()},
                         left_out=left_out, teacher_fits=_teacher_fits(reused_pate),
                         failed=failed, fits_where=outcomes[0].where if outcomes else "")


def _target_day_learnable(spark: SparkSession, config: Config) -> None:
    """Before any fit: the target day is in the data and holds both labels."""
    check_days_present(spark, config, ("models.target_day",))
    check_two_classes(spark, config, ("models.target_day",))


UTILITY = Stage(
    name="utility", step="utility", result=UtilityResult, compute=_utility, check=_target_day_learnable,
    fields=("run.seed", "models.library", "models.sample_rows_per_day", "models.target_day", "models.n_estimators",
            "models.max_depth", "models.learning_rate", "models.early_stopping_rounds", "models.split",
            "models.hash_buckets", "models.categorical_encoding", "models.min_category_count", "utility.*",
            "pate.*"),
    outputs=lambda config: (layout.output_path(config, layout.UTILITY),),
    inputs=lambda config: (Input("data", lambda c: c.parquet_path, "data.parquet_path", lambda c: "data"),
                           Input("posteriors", layout.posterior_summary_path, "run.stages", lambda c: "posteriors",
                                 required=False)))
