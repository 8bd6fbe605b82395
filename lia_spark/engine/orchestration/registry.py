"""The registry of stages (real imports) and :func:`run_stage`, the one skeleton every stage runs in.

``run_stage``: fingerprint (the declared fields, the values the stage resolves from the data, the code version and
the fingerprints of its input tables) -> reuse of a complete output with the same fingerprint (unless run.force)
-> the stage's cheap checks and its required inputs -> ``compute`` inside a committed output (a temporary
folder put in the old one's place on success, with the result as its sealed marker) -> the result.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable, overload

from pyspark.sql import SparkSession

from lia_spark.engine.audit.stage import AUDIT
from lia_spark.engine.generate.stage import GENERATE
from lia_spark.engine.ingest.stage import INGEST
from lia_spark.engine.inject.stage import INJECT
from lia_spark.engine.logloss.stage import LOGLOSS
from lia_spark.engine.posteriors.stage import POSTERIORS
from lia_spark.engine.report.stage import REPORT
from lia_spark.engine.runtime.outputs import (CLAIM_SUFFIX, clear_leftover, committed_folder, committed_output,
                                              damaged_files, foreign_entries, foreign_error, path_exists, read_marker,
                                              reusable_output, swept_leftover)
from lia_spark.engine.runtime.progress import reporting_progress
from lia_spark.engine.runtime.stage import R, Stage, StageResult, StageRun
from lia_spark.engine.spark.filesystem import files_for
from lia_spark.engine.spark.session import describe_jobs
from lia_spark.engine.train.stage import TRAIN
from lia_spark.engine.utility.stage import UTILITY
from lia_spark.run import interrupts
from lia_spark.run.config import Config
from lia_spark.run.failures import DAMAGED_FIX, DamagedFileError
from lia_spark.run.fingerprint import Fingerprint, expand_fields, marker_fingerprint, verified_marker

logger = logging.getLogger(__name__)

STAGES: dict[str, Stage[Any]] = {stage.name: stage for stage in  # Any: each stage has its own result type
                                 (GENERATE, INGEST, TRAIN, POSTERIORS, UTILITY, AUDIT, REPORT, LOGLOSS, INJECT)}


def step_stage(step: str, config: Config) -> Stage[Any]:
    """The stage behind a pipeline step (data -> generate or ingest, by data.source)."""
    if step == "data":
        return STAGES["generate" if config.data.source == "synthetic" else "ingest"]
    return STAGES[step]


def fields_not_behind(config: Config, steps: Iterable[str]) -> frozenset[str]:
    """The config fields some stage reads that the outputs of ``steps`` do not depend on: neither their stages read
    them nor, through the tables they read (:class:`lia_spark.engine.runtime.stage.Input`), the stages that wrote
    those. A run of ``steps`` shows these beside numbers they did not produce (e.g. models.epsilon beside the audit
    of a model trained elsewhere)."""
    values = config.to_dict()
    behind: set[str] = set()
    pending, seen = list(steps), set()
    while pending:
        step = pending.pop()
        if step in seen:
            continue
        seen.add(step)
        stage = step_stage(step, config)
        behind.update(expand_fields(stage.fields, values))
        pending.extend(producer for item in stage.inputs(config) if (producer := item.producer(config)))
    read = {name for stage in STAGES.values() for name in expand_fields(stage.fields, values)}
    return frozenset(read - behind)


def committed_result(spark: SparkSession, stage: Stage[R], config: Config) -> R | None:
    """``stage``'s result rebuilt from the marker of its complete output, or None."""
    marker = read_marker(spark, stage.outputs(config)[0])
    return None if marker is None else stage.result_from(config, marker)


def sealed_fingerprint(spark: SparkSession, stage: Stage[Any], config: Config) -> str:
    """The fingerprint sealed into ``stage``'s committed output ("" when absent, unsealed or not trusted)."""
    marker = read_marker(spark, stage.outputs(config)[0])
    verified = verified_marker(marker)[0] if marker is not None else None
    return marker_fingerprint(verified) if verified is not None else ""


def _upstream(spark: SparkSession, stage: Stage[Any], config: Config) -> Callable[[str], StageResult | None]:
    def result(role: str) -> StageResult | None:
        declared = next(item for item in stage.inputs(config) if item.role == role)
        producer = declared.producer(config)
        return committed_result(spark, step_stage(producer, config), config) if producer else None

    return result


def leftovers(spark: SparkSession, config: Config) -> list[str]:
    """What interrupted attempts left beside the folders every stage writes under ``config``: the staging and
    scratch folders a lia_spark run claimed (:func:`lia_spark.engine.runtime.outputs.claimed`) whose run no longer runs
    (:func:`lia_spark.engine.runtime.outputs.swept_leftover`). A folder nobody claimed is never a leftover, whatever its
    name."""
    folders = sorted({path.rstrip("/").rpartition("/")[0] for stage in STAGES.values()
                      for path in stage.written(config)})
    found = []
    for folder in folders:
        if not folder or not path_exists(spark, folder):
            continue
        for entry in files_for(spark, folder).list_folder(folder):
            if not entry.is_folder and entry.name.endswith(CLAIM_SUFFIX):
                found += [path for path in [swept_leftover(spark, entry.path)] if path]
    return found


def remove_leftovers(spark: SparkSession, config: Config) -> list[str]:
    """Clear :func:`leftovers` (deleted with their claims; a committed output an interrupted commit moved aside is
    moved back where its folder is absent: :func:`lia_spark.engine.runtime.outputs.clear_leftover`) and return
    them. Only for a caller holding the output folder's run lock (:func:`lia_spark.engine.runtime.lock.run_lock`)."""
    removed = leftovers(spark, config)
    for path in removed:
        clear_leftover(spark, path)
    return removed


def output_field(config: Config, path: str) -> str:
    """The config field that places ``path``: data.parquet_path or data.quarantine_path when the user set it and
    ``path`` is (beside) it, else run.output_dir."""
    for field, chosen in (("data.parquet_path", config.data.parquet_path),
                          ("data.quarantine_path", config.data.quarantine_path)):
        if chosen and path.startswith(chosen.rstrip("/")):
            return field
    return "run.output_dir"


def refuse_foreign(spark: SparkSession, config: Config, stages: list[Stage[Any]]) -> None:
    """Before any work: check that no folder ``stages`` replace or delete holds files no lia_spark run wrote
    (:func:`lia_spark.engine.runtime.outputs.foreign_entries`); run.replace_foreign=true lets them be replaced (one
    WARNING each).

    Raises:
        ForeignFilesError: naming the field, the path and what it holds.
    """
    replace = config.run.replace_foreign
    for stage in stages:
        for path in stage.written(config):
            entries = foreign_entries(spark, path)
            if entries and not replace:
                raise foreign_error(output_field(config, path), path, entries)
            if entries:
                logger.warning("%s: replacing %s, which holds files no lia_spark run wrote (%d entries; "
                               "run.replace_foreign=true)", output_field(config, path), path, len(entries))


def check_inputs(spark: SparkSession, stage: Stage[Any], config: Config) -> None:
    """Fail in seconds, naming the field and the command that writes it, when a required input does not exist; and
    before any byte of a committed input is read, check its folder against its marker (:func:`verify_input`)."""
    for item in stage.inputs(config):
        path = item.path(config)
        if path_exists(spark, path):
            verify_input(spark, stage, path)
            continue
        if not item.required:
            continue
        producer = item.producer(config)
        writer = step_stage(producer, config) if producer else None
        pipeline = f" (or the pipeline with '{producer}' in run.stages)" if writer is not None and writer.step else ""
        fix = (f"run `lia-spark {writer.name}`{pipeline} first, or set {item.field}" if writer is not None
               else f"set {item.field} to an existing table")
        raise ValueError(f"{item.field}: the {stage.name} stage reads the {item.role} table, but {path} does not "
                         f"exist; {fix}, got {path!r}")


def verify_input(spark: SparkSession, stage: Stage[Any], path: str) -> None:
    """Check that the committed folder holding the input table ``path`` (:func:`lia_spark.engine.runtime.outputs.
    committed_folder`) still holds the files its marker lists, with their sizes and, for files that are not Parquet,
    their SHA-256 (Parquet pages carry CRCs, verified as they are read). A table no lia_spark run committed (a
    user's) has nothing to check.

    Raises:
        DamagedFileError: naming the first damaged file, how it differs, and the fix.
    """
    found = committed_folder(spark, path)
    if found is None:
        return
    damaged = damaged_files(spark, *found)
    if damaged:
        name, _, how = damaged[0].partition(": ")
        more = f"; {len(damaged) - 1} more files differ" if len(damaged) > 1 else ""
        raise DamagedFileError(f"{found[0].rstrip('/')}/{name}: damaged ({how}{more}): the {stage.name} stage's "
                                f"input no longer holds the files its marker lists; {DAMAGED_FIX}")


def _reusable_result(spark: SparkSession, stage: Stage[R], config: Config, fingerprint: Fingerprint | None, *,
                     reuse: bool) -> R | None:
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


@overload
def run_stage(stage: Stage[R], spark: SparkSession, config: Config, *, reuse: bool = True, **options: Any) -> R: ...


@overload
def run_stage(stage: str, spark: SparkSession, config: Config, *, reuse: bool = True,
              **options: Any) -> StageResult: ...


def run_stage(stage: Stage[Any] | str, spark: SparkSession, config: Config, *, reuse: bool = True,
              **options: Any) -> StageResult:
    """Run ``stage`` (its declaration, whose result type is returned, or its name in :data:`STAGES`) under
    ``config`` (the module docstring's skeleton), logging its progress every ``run.progress_seconds``
    (:func:`lia_spark.engine.runtime.progress.reporting_progress`), and return its result; ``reuse=False``
    recomputes whatever the output holds. ``options`` reach ``compute`` as the stage's
    :attr:`lia_spark.engine.runtime.stage.Stage.options` (a TypeError names any it does not take).
    The stage's last job description is cleared at its end, so later progress lines never name its work. A stage
    does not start once a signal has stopped the command (:func:`lia_spark.run.interrupts.check`)."""
    interrupts.check()
    name = stage if isinstance(stage, str) else stage.name
    try:
        with reporting_progress(spark, name, config.run.progress_seconds):
            return _run_stage(STAGES[stage] if isinstance(stage, str) else stage, spark, config, reuse=reuse,
                              options=options)
    finally:
        describe_jobs(spark, None)


def _run_stage(stage: Stage[R], spark: SparkSession, config: Config, *, reuse: bool, options: dict[str, Any]) -> R:
    chosen = stage.options_from(options)
    resolved = stage.resolved(spark, config)
    fingerprint = stage.fingerprint(spark, config, resolved=resolved) if stage.reusable else None
    found = _reusable_result(spark, stage, config, fingerprint, reuse=reuse)
    if found is not None:
        return stage.reused(spark, config, found)
    refuse_foreign(spark, config, [stage])
    check_inputs(spark, stage, config)
    stage.check(spark, config)
    metadata: dict[str, Any] = {}
    with committed_output(spark, stage.outputs(config)[0], metadata, fingerprint=fingerprint) as staging:
        result = stage.compute(StageRun(spark, config, staging, fingerprint, time.monotonic(), chosen,
                                        _upstream(spark, stage, config), resolved))
        metadata.update(result.marker())
    return result
