"""The commands of ``lia-spark`` and ``jobs/``: every pipeline stage of :mod:`lia_spark.engine.orchestration.registry`
by its name, ``inject`` (a stage outside the pipeline), and the commands built on them (``pipeline``, ``track``,
``audit-table``, ``logloss-attack``). Each is ``function(spark, config) -> result``.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any, Callable

from pyspark.sql import SparkSession

from lia_spark.engine.logloss.stage import LOGLOSS, LoglossResult
from lia_spark.engine.orchestration.audit_table import run_audit_table
from lia_spark.engine.orchestration.pipeline import run_pipeline, run_track
from lia_spark.engine.orchestration.registry import STAGES, run_stage, sealed_fingerprint
from lia_spark.engine.runtime.outputs import local_copies
from lia_spark.run.config import Config
from lia_spark.tracking.session import Tracker, tracking_session

logger = logging.getLogger(__name__)


def run_logloss_attack(spark: SparkSession, config: Config) -> LoglossResult:
    """``lia-spark logloss-attack``: the logloss stage (docs/math.md §8; reused when its fingerprint matches), tracked
    as one MLflow run with a ``logloss`` stage run when tracking.enabled.

    Raises:
        lia_spark.tracking.store.TrackingError: the tracking store is unreachable (before any query).
        ValueError: naming logloss.day when its rows are missing or not positioned 0..N-1.
    """
    with tracking_session(config, run_name=f"{config.run.name} logloss-attack") as tracker:
        result = run_stage(LOGLOSS, spark, config)
        result = dataclasses.replace(result, mlflow_run_id=tracker.start())
        tracker.best_effort("stage logloss", lambda: _log_attack(spark, config, tracker, result))
    logger.info("%s", result.console_summary())
    return result


def _log_attack(spark: SparkSession, config: Config, tracker: Tracker, result: LoglossResult) -> None:
    """The attack's stage run: its metrics and files."""
    with local_copies(spark, result.files) as artifacts:
        tracker.log_stage("logloss", status="reused" if result.skipped else "ran", seconds=result.seconds,
                          metrics=result.metrics(), artifacts=artifacts,
                          fingerprint=sealed_fingerprint(spark, LOGLOSS, config))


COMMANDS: dict[str, Callable[[SparkSession, Config], Any]] = {
    **{name: functools.partial(run_stage, name) for name, stage in STAGES.items() if stage.step not in ("", "report")},
    "inject": functools.partial(run_stage, "inject"),
    "pipeline": run_pipeline,
    "track": run_track,
    "audit-table": run_audit_table,
    "logloss-attack": run_logloss_attack,
}
