"""The registry of stages (real imports) and :func:`run_stage`, the one skeleton every stage runs in.

``run_stage``: fingerprint (the declared fields, the values the stage resolves from the data, the code version and
the fingerprints of its input tables) -> reuse of a complete output with the same fingerprint (unless run.force)
-> the stage's cheap checks and its required inputs -> ``compute`` inside a committed output (a temporary
folder renamed into place on success, with the result as its sealed marker) -> the result.
"""
from __future__ import annotations

import logging
import re
import time
from typing import Any

from pyspark.sql import SparkSession

from lia_spark.engine.audit import AUDIT
from lia_spark.engine.filesystem import files_for
from lia_spark.engine.generate import GENERATE
from lia_spark.engine.ingest import INGEST
from lia_spark.engine.logloss import LOGLOSS
from lia_spark.engine.outputs import committed_output, delete_path, path_exists, read_marker, reusable_output
from lia_spark.engine.posteriors.stage import POSTERIORS
from lia_spark.engine.progress import reporting_progress
from lia_spark.engine.session import describe_jobs
from lia_spark.engine.report import REPORT
from lia_spark.engine.stage import Stage, StageRun
from lia_spark.engine.train import TRAIN
from lia_spark.engine.utility import UTILITY
from lia_spark.run import layout
from lia_spark.run.config import Config
from lia_spark.run.fingerprint import marker_fingerprint, verified_marker

logger = logging.getLogger(__name__)

STAGING_NAME = re.compile(r"(.+)\._tmp-[0-9a-f]{12}")  # committed_output's temporary sibling of an output

STAGES: dict[str, Stage] = {stage.name: stage for stage in
                            (GENERATE, INGEST, TRAIN, POSTERIORS, UTILITY, AUDIT, REPORT, LOGLOSS)}


def step_stage(step: str, config: Config) -> Stage:
    """The stage behind a pipeline step (data -> generate or ingest, by data.source)."""
    if step == "data":
        return STAGES["generate" if config.data.source == "synthetic" else "ingest"]
    return STAGES[step]


def committed_result(spark: SparkSession, stage: Stage, config: Config) -> Any:
    """``stage``'s result rebuilt from the marker of its complete output, or None."""
    marker = read_marker(spark, stage.outputs(config)[0])
    return None if marker is None else stage.result_from(config, marker)


def sealed_fingerprint(spark: SparkSession, stage: Stage, config: Config) -> str:
    """The fingerprint sealed into ``stage``'s committed output ("" when absent, unsealed or not trusted)."""
    marker = read_marker(spark, stage.outputs(config)[0])
    verified = verified_marker(marker)[0] if marker is not None else None
    return marker_fingerprint(verified) if verified is not None else ""


def _upstream(spark: SparkSession, stage: Stage, config: Config):
    def result(role: str) -> Any:
        declared = next(item for item in stage.inputs(config) if item.role == role)
        producer = declared.producer(config)
        return committed_result(spark, step_stage(producer, config), config) if producer else None

    return result


def leftovers(spark: SparkSession, config: Config) -> list[str]:
    """What interrupted attempts left beside the outputs of every stage under ``config``: staging folders
    (``<output>._tmp-<12 hex>``, :func:`lia_spark.engine.outputs.committed_output`, the Criteo files' included) and
    the stages' scratch folders (:attr:`lia_spark.engine.stage.Stage.scratch`)."""
    outputs = {path.rstrip("/") for stage in STAGES.values() for path in stage.outputs(config)}
    outputs.add(layout.output_path(config, layout.CRITEO_TSV))
    by_folder: dict[str, set[str]] = {}
    for path in outputs:
        folder, _, name = path.rpartition("/")
        by_folder.setdefault(folder, set()).add(name)
    found = [path for stage in STAGES.values() for path in stage.scratch(config) if path_exists(spark, path)]
    for folder, names in sorted(by_folder.items()):
        if not path_exists(spark, folder):
            continue
        found += [entry.path for entry in files_for(spark, folder).list_folder(folder)
                  if (match := STAGING_NAME.fullmatch(entry.name)) and match.group(1) in names]
    return found


def remove_leftovers(spark: SparkSession, config: Config) -> list[str]:
    """Delete :func:`leftovers` and return them. Only for a caller holding the output folder's run lock
    (:func:`lia_spark.engine.lock.run_lock`): then no other run writes there, and a staging folder is an interrupted
    attempt's."""
    removed = leftovers(spark, config)
    for path in removed:
        logger.warning("removing %s, left by an interrupted run", path)
        delete_path(spark, path)
    return removed


def check_inputs(spark: SparkSession, stage: Stage, config: Config) -> None:
    """Fail in seconds, naming the field and the command that writes it, when a required input does not exist."""
    for item in stage.inputs(config):
        path = item.path(config)
        if not item.required or path_exists(spark, path):
            continue
        producer = item.producer(config)
        fix = (f"run `lia-spark {step_stage(producer, config).name}` (or the pipeline with '{producer}' in "
               f"run.stages) first, or set {item.field}" if producer else f"set {item.field} to an existing table")
        raise ValueError(f"{item.field}: the {stage.name} stage reads the {item.role} table, but {path} does not "
                         f"exist; {fix}, got {path!r}")


def _reusable_result(spark: SparkSession, stage: Stage, config: Config, fingerprint: Any, *, reuse: bool) -> Any:
    """The result of ``stage``'s committed output when it may be reused: same fingerprint, no failed part, reuse
    allowed (not run.force); else None (logging why)."""
    if fingerprint is None:
        return None
    marker = reusable_output(spark, stage.outputs(config), fingerprint, force=config.run.force or not reuse)
    found = None if marker is None else stage.result_from(config, marker, skipped=True)
    if found is not None and found.failures():
        logger.warning("%s: recomputing: the committed output records failed parts: %s", stage.name,
                       "; ".join(f"{part}: {error}" for part, error in found.failures().items()))
        return None
    return found


def would_reuse(spark: SparkSession, name: str, config: Config) -> bool:
    """True when :func:`run_stage` would reuse stage ``name``'s committed output under ``config``."""
    stage = STAGES[name]
    fingerprint = stage.fingerprint(spark, config, resolved=stage.resolved(spark, config)) if stage.reusable else None
    return _reusable_result(spark, stage, config, fingerprint, reuse=True) is not None


def run_stage(name: str, spark: SparkSession, config: Config, *, reuse: bool = True, **options: Any) -> Any:
    """Run stage ``name`` under ``config`` (the module docstring's skeleton), logging its progress every
    ``run.progress_seconds`` (:func:`lia_spark.engine.progress.reporting_progress`), and return its result;
    ``reuse=False`` recomputes whatever the output holds. ``options`` reach ``compute`` (:attr:`StageRun.options`).
    The stage's last job description is cleared at its end, so later progress lines never name its work."""
    try:
        with reporting_progress(spark, name, config.run.progress_seconds):
            return _run_stage(STAGES[name], spark, config, reuse=reuse, options=options)
    finally:
        describe_jobs(spark, None)


def _run_stage(stage: Stage, spark: SparkSession, config: Config, *, reuse: bool, options: dict[str, Any]) -> Any:
    reuse = reuse and not set(stage.recomputed_with) & set(options)
    resolved = stage.resolved(spark, config)
    fingerprint = stage.fingerprint(spark, config, resolved=resolved) if stage.reusable else None
    found = _reusable_result(spark, stage, config, fingerprint, reuse=reuse)
    if found is not None:
        return stage.reused(spark, config, found)
    check_inputs(spark, stage, config)
    stage.check(spark, config)
    metadata: dict[str, Any] = {}
    with committed_output(spark, stage.outputs(config)[0], metadata, fingerprint=fingerprint) as staging:
        result = stage.compute(StageRun(spark, config, staging, fingerprint, time.monotonic(), options,
                                        _upstream(spark, stage, config), resolved))
        metadata.update(result.marker())
    return result
