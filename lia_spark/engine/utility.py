"""Utility stage: the privacy-utility tradeoff, target AUC against the attacker's advantage per setting (docs/math.md §4).

Trains the target in memory on the target day for every setting of :func:`lia_spark.kernels.utility.utility_grid` and
joins the test AUC with the advantages of the posteriors stage's summary (the RR family's closed forms where
the summary has none; none for pate). PATE's teachers are fitted once, in parallel Spark tasks
(:func:`lia_spark.engine.modeling.pate_settings`), and their votes reused at every epsilon. Output
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

from lia_spark.engine.modeling import (boosting_params, collect_model_data, feature_spec, in_memory_rows,
                                       model_features, pate_settings, training_seed)
from lia_spark.engine.outputs import MARKER, copy_from_local, path_exists
from lia_spark.engine.session import describe_jobs
from lia_spark.engine.stage import Input, Stage, StageResult, StageRun
from lia_spark.kernels import training
from lia_spark.names import PATE, RR, setting_key
from lia_spark.present import charts
from lia_spark.run import layout
from lia_spark.run.capabilities import IN_MEMORY, unsupported
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
    always trains on the driver) and, for pate, fewer than pate.queries + 1 training rows."""
    m = config.models
    left_out = {}
    for name in config.utility.extra_mechanisms:
        reason = unsupported(name, library=m.library, execution=IN_MEMORY)
        if not reason and name == PATE and config.pate.queries >= training_rows:
            reason = (f"pate.queries={config.pate.queries} student rows need more than the target day's "
                      f"{training_rows:,} training rows; lower pate.queries")
        if reason:
            left_out[name] = reason
            logger.warning("utility: %s left out of the grid (utility.extra_mechanisms): %s", name, reason)
    return [name for name in config.utility.extra_mechanisms if name not in left_out], left_out


def _utility(run: StageRun) -> UtilityResult:
    """Train the target (in memory) for every setting of the utility grid; write table and two plots.

    Output ``<run.output_dir>/utility`` (beside, not inside, ``models/``, so re-training keeps it):
    tradeoff.csv, tradeoff_additive.png, tradeoff_p98.png. Run it after the posteriors stage so the table
    carries the LLP advantages; without their summary only the RR family's closed forms are used.
    """
    from lia_spark.kernels import utility

    spark, config, started = run.spark, run.config, run.started
    m, params, seed = config.models, boosting_params(config), training_seed(config)
    target_rows = in_memory_rows(spark, config, m.target_day)
    describe_jobs(spark, "utility: target-day features")
    spec = feature_spec(target_rows, config)
    data = collect_model_data(model_features(target_rows, spec, config), spec, m.library)
    test = data.split == training.SPLIT_TEST
    extras, left_out = extra_mechanisms(config, training_rows=int(np.sum(data.split == training.SPLIT_TRAIN)))
    grid = utility.utility_grid(epsilons=config.utility.epsilons, bag_sizes=config.utility.bag_sizes,
                                extra_mechanisms=extras)
    # the votes do not depend on epsilon: the teachers are fitted at the first pate setting only
    reused_pate = pate_settings(config, target_rows, spec) if PATE in extras else None
    rows, priors = [], None
    for mechanism, epsilon, bag_size in grid:
        fit = training.train_target(data, mechanism=mechanism, epsilon=math.inf if math.isnan(epsilon) else epsilon,
                                    seed=seed, params=params, bag_size=bag_size, pate_settings=reused_pate)
        scores = training.binary_metrics(data.labels[test], fit.model.predict(data.rows(test)))
        if priors is None and mechanism == RR and math.isinf(epsilon):
            priors = fit.model.predict(data.rows(data.split == training.SPLIT_TRAIN))
        rows.append({"mechanism": mechanism, "epsilon": epsilon, "bag_size": bag_size, **scores,
                     "fit_seconds": fit.model.fit_seconds})
        logger.info("utility: %s eps=%s k=%d -> AUC %.4f (%.1f s)%s", mechanism, epsilon, bag_size, scores["auc"],
                    fit.model.fit_seconds, "".join(f", {key} {value:.4g}" for key, value in fit.report.items()))
    if reused_pate is not None:
        logger.info("utility: PATE's teachers fitted %d time(s) for %d pate settings", reused_pate.votes.fits,
                    sum(mechanism == PATE for mechanism, _, _ in grid))
    if priors is None:
        priors = training.fit_model(data, data.labels, data.split == 0, data.split == 1, params=params).predict(
            data.rows(data.split == training.SPLIT_TRAIN))
    table = utility.tradeoff_table(pd.DataFrame(rows), _posterior_summary(spark, config), priors=priors)
    with tempfile.TemporaryDirectory() as local:
        table.to_csv(os.path.join(local, UTILITY_FILES[0]), index=False)
        charts.plot_tradeoff(table, advantage="mean_additive_advantage", path=os.path.join(local, UTILITY_FILES[1]))
        charts.plot_tradeoff(table, advantage="abs_I_p98", path=os.path.join(local, UTILITY_FILES[2]))
        for name in UTILITY_FILES:
            copy_from_local(spark, os.path.join(local, name), run.under(name))
    return UtilityResult(output_dir=layout.output_path(config, layout.UTILITY), settings=len(table),
                         seconds=time.monotonic() - started, table=table.to_dict(orient="records"),
                         left_out=left_out, teacher_fits=reused_pate.votes.fits if reused_pate else 0)


UTILITY = Stage(
    name="utility", step="utility", result=UtilityResult, compute=_utility,
    fields=("run.seed", "models.library", "models.sample_rows_per_day", "models.target_day", "models.n_estimators",
            "models.max_depth", "models.learning_rate", "models.early_stopping_rounds", "models.split",
            "models.hash_buckets", "models.categorical_encoding", "models.min_category_count", "utility.*",
            "pate.*"),
    outputs=lambda config: (layout.output_path(config, layout.UTILITY),),
    inputs=lambda config: (Input("data", lambda c: c.parquet_path, "data.parquet_path", lambda c: "data"),
                           Input("posteriors", layout.posterior_summary_path, "run.stages", lambda c: "posteriors",
                                 required=False)))
