"""End-to-end pipeline: data (generate | ingest) -> train -> posteriors -> utility -> audit -> report, in MLflow.

Each step calls one stage function registered in :mod:`lia_spark.stages`. Steps are chosen by
``run.stages`` and run in the order of :data:`lia_spark.config.PIPELINE_STAGES`; a step whose output is already
complete is reused by the stage itself unless ``run.force``. A failing stage stops the pipeline; outputs of
finished stages stay committed, the MLflow run is marked FAILED, the error is raised.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from pyspark.sql import SparkSession

from lia_spark import layout
from lia_spark.config import PIPELINE_STAGES, Config, is_remote_path
from lia_spark.engine.outputs import (check_writable, committed_output, copy_from_local, is_complete, local_copies,
                                     marker_fields, path_exists, read_marker, reported_path)
from lia_spark.engine.session import describe_jobs, job_group, master_name
from lia_spark.fingerprint import marker_fingerprint, verified_marker
from lia_spark.report import REPORT_FILE, ReportResult, render_report

logger = logging.getLogger(__name__)

TRACK_LATER = ("log them once the tracking server answers again with `lia-spark track --conf <your conf> "
               "[the same overrides]`")


@dataclasses.dataclass
class StageOutcome:
    """What one pipeline step did: ran, reused (complete output), skipped (not in run.stages) or failed."""

    step: str
    stage: str
    status: str
    seconds: float = 0.0
    result: Any = None
    error: str = ""
    exception: BaseException | None = dataclasses.field(default=None, repr=False, compare=False)
    fingerprint: str = ""

    def metrics(self) -> dict[str, float]:
        """The stage result's metrics (empty when it did not run)."""
        return dict(self.result.metrics()) if self.result is not None else {}

    def artifacts(self) -> list[str]:
        """The stage result's artifact paths (empty when it did not run)."""
        return list(self.result.artifacts()) if self.result is not None else []

    def models(self) -> list[str]:
        """The model files of a train result (MLflow logs them as models); none for other stages."""
        return list(self.result.model_files) if self.stage == "train" and self.result is not None else []

    def settings(self) -> list[dict[str, Any]]:
        """One row per mechanism setting (one nested MLflow run each): the posteriors summary, the utility table;
        none for other stages."""
        if self.result is None or self.stage not in ("posteriors", "utility"):
            return []
        return [dict(row) for row in (self.result.summary if self.stage == "posteriors" else self.result.table)]

    def to_dict(self) -> dict[str, Any]:
        """Status, timing and the stage result's own to_dict()."""
        return {"step": self.step, "stage": self.stage, "status": self.status, "seconds": round(self.seconds, 3),
                "error": self.error, "result": self.result.to_dict() if self.result is not None else None}


@dataclasses.dataclass
class PipelineResult:
    """Every step's outcome plus where the report and the MLflow run are."""

    run_name: str
    output_dir: str
    spark_master: str
    steps: list[StageOutcome] = dataclasses.field(default_factory=list)
    report_path: str = ""
    mlflow_run_id: str = ""
    tracking_uri: str = ""
    mlflow_location: str = ""
    not_logged: list[str] = dataclasses.field(default_factory=list)

    def step(self, name: str) -> StageOutcome | None:
        """The outcome of step ``name``, or None when it was not reached."""
        return next((outcome for outcome in self.steps if outcome.step == name), None)

    def metrics(self) -> dict[str, float]:
        """All stage metrics as ``<step>.<metric>`` plus ``<step>.seconds``."""
        merged: dict[str, float] = {}
        for outcome in self.steps:
            merged.update({f"{outcome.step}.{key}": value for key, value in outcome.metrics().items()})
            merged[f"{outcome.step}.seconds"] = outcome.seconds
        return merged

    def artifacts(self) -> list[str]:
        """All stage artifacts, in step order."""
        return [path for outcome in self.steps for path in outcome.artifacts()]

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary of the run."""
        return {"run_name": self.run_name, "output_dir": self.output_dir, "spark_master": self.spark_master,
                "report_path": self.report_path, "mlflow_run_id": self.mlflow_run_id,
                "tracking_uri": self.tracking_uri, "not_logged": list(self.not_logged),
                "steps": [outcome.to_dict() for outcome in self.steps]}

    def console_summary(self) -> str:
        """Closing lines for the console: status per step, the report, the MLflow run and, last, the audit's
        headline (:class:`lia_spark.headline.Headline`)."""
        lines = [f"lia-spark pipeline {self.run_name!r}: "
                 + ", ".join(f"{o.step}={o.status} ({o.seconds:.1f} s)" for o in self.steps)]
        if self.report_path:
            lines.append(f"report: {self.report_path}")
        if self.mlflow_location:
            lines.append(f"MLflow: {self.mlflow_location}")
        if self.not_logged:
            lines.append(f"warning: not logged to MLflow: {', '.join(self.not_logged)}; {TRACK_LATER}")
        audit = self.step("audit")
        if audit is not None and audit.result is not None:
            lines.append(audit.result.console_summary())  # the headline comes last
        return "\n".join(lines)


def stage_for(step: str, config: Config) -> str:
    """Registered stage name behind a pipeline step (data -> generate or ingest)."""
    if step == "data":
        return "generate" if config.data.source == "synthetic" else "ingest"
    return step


def completion_paths(step: str, config: Config) -> tuple[str, ...]:
    """Committed folders, any of which with a ``_LIA_COMPLETE`` marker means the step's output exists.

    The stage folder itself (stages that commit it whole) or the table inside it (:mod:`lia_spark.layout`).
    """
    return {"data": (config.parquet_path,),
            "train": (layout.output_path(config, layout.MODELS), layout.canaries_path(config)),
            "posteriors": (layout.output_path(config, layout.POSTERIORS), layout.posterior_summary_path(config)),
            "utility": (layout.output_path(config, layout.UTILITY),),
            "audit": (layout.output_path(config, layout.AUDIT),),
            "report": (layout.output_path(config, layout.REPORT),)}[step]


def step_complete(spark: SparkSession, step: str, config: Config) -> bool:
    """True when the step's committed output exists (reused only if its fingerprint matches the config)."""
    return any(is_complete(spark, path) for path in completion_paths(step, config))


def step_fingerprint(spark: SparkSession, step: str, config: Config) -> str:
    """The fingerprint sealed into the step's committed output ("" for the report or an unsealed output)."""
    if step == "report":
        return ""
    marker = read_marker(spark, completion_paths(step, config)[0])
    verified = verified_marker(marker)[0] if marker is not None else None
    return marker_fingerprint(verified) if verified is not None else ""


def write_report(spark: SparkSession, config: Config, steps: Sequence[StageOutcome], *,
                 mlflow_location: str = "") -> ReportResult:
    """Render the report and commit it to ``OUT/report`` (any Hadoop file system); always rewritten."""
    with contextlib.ExitStack() as copies:  # a remote output folder's CSVs and plots, fetched to embed them
        local = {o.step: copies.enter_context(local_copies(spark, o.artifacts())) for o in steps}
        text, figures, tables = render_report(config, steps, mlflow_location=mlflow_location, local_artifacts=local)
    local = Path(tempfile.mkdtemp(prefix="lia-report-")) / REPORT_FILE
    local.write_text(text, encoding="utf-8")
    final = layout.output_path(config, layout.REPORT)
    describe_jobs(spark, "report: write report.html")
    with committed_output(spark, final, {"figures": figures, "tables": tables}) as staging:
        copy_from_local(spark, str(local), f"{staging}/{REPORT_FILE}")
    path = f"{final}/{REPORT_FILE}"
    is_local = not is_remote_path(final)
    if is_local:
        path = str(Path(path).resolve())
        shutil.rmtree(local.parent, ignore_errors=True)
    logger.info("report: %s (%d plots, %d tables)", path, figures, tables)
    return ReportResult(path=path, html_path=path if is_local else str(local), figures=figures, tables=tables)


def _row_counts(metrics: dict[str, float]) -> str:
    counts = {key: value for key, value in metrics.items() if "rows" in key or "count" in key}
    return ", ".join(f"{key}={value:,.0f}" for key, value in sorted(counts.items())[:6]) or "no row counts"


def check_before_stages(spark: SparkSession, config: Config) -> None:
    """Fail in seconds, before any stage runs, on what would fail later: an output folder that cannot be
    written, missing Criteo inputs, a data or canary table that the selected steps read but nothing produces,
    and an attacker prior that cannot be resolved (the tracking store is checked by the tracker itself).

    Raises:
        PermissionError: run.output_dir cannot be written.
        ValueError: naming the field (data.criteo_paths, run.stages, audit.canary_path, mechanisms.prior_*).
    """
    selected = set(config.run.stages)
    if "data" in selected and config.data.source == "criteo":
        from lia_spark.engine.ingest import list_sources

        list_sources(spark, config.data.criteo_paths)
    if "data" not in selected and {"train", "posteriors", "utility"} & selected and not is_complete(
            spark, config.parquet_path):
        raise ValueError(f"run.stages: {list(config.run.stages)} reads the data table but {config.parquet_path} is "
                         "missing or incomplete; add 'data' to run.stages or set data.parquet_path")
    if "audit" in selected and config.audit.canary_path and not path_exists(spark, config.audit.canary_path):
        raise ValueError(f"audit.canary_path: no such table, got {config.audit.canary_path!r}; set it to a canary "
                         "table or leave it empty for the train stage's")
    if "posteriors" in selected:
        from lia_spark.engine.posteriors.prior import check_prior_source

        check_prior_source(spark, config)
    check_writable(spark, config.run.output_dir)  # last: it creates the folder


def _run_step(spark: SparkSession, config: Config, step: str, outcomes: dict[str, StageOutcome],
              report: Callable[[SparkSession, Config, list[StageOutcome]], Any]) -> StageOutcome:
    from lia_spark.stages import load_stage

    stage = stage_for(step, config)
    if step not in config.run.stages:
        logger.info("pipeline: %s skipped (not in run.stages)", step)
        return StageOutcome(step, stage, "skipped")
    function = (lambda s, c: report(s, c, list(outcomes.values()))) if step == "report" else load_stage(stage)
    logger.info("pipeline: %s (%s) started", step, stage)
    started = time.monotonic()
    try:
        with job_group(spark, f"lia-spark-{step}", f"{config.run.name}: {step} ({stage})"):
            result = function(spark, config)
    except Exception as error:
        seconds = time.monotonic() - started
        logger.error("pipeline: %s failed after %.1f s: %s", step, seconds, error)
        return StageOutcome(step, stage, "failed", seconds, error=f"{type(error).__name__}: {error}", exception=error)
    reused = bool(getattr(result, "skipped", False))
    outcome = StageOutcome(step, stage, "reused" if reused else "ran", time.monotonic() - started, result,
                           fingerprint=step_fingerprint(spark, step, config))
    logger.info("pipeline: %s %s in %.1f s (%s)", step, outcome.status, outcome.seconds, _row_counts(outcome.metrics()))
    return outcome


def log_outcome(spark: SparkSession, config: Config, tracker: Any, outcome: StageOutcome) -> None:
    """Log one step's outcome to MLflow (artifacts and models only when it ran; tables of per-row labels only with
    tracking.log_row_data), with the parent run's data fingerprint (data), headline tags (audit) and report page
    (report)."""
    ran = outcome.status == "ran"
    row_data = outcome.result.row_data() if config.tracking.log_row_data and hasattr(outcome.result, "row_data") else []
    with (local_copies(spark, [*outcome.artifacts(), *row_data] if ran else []) as artifacts,
          local_copies(spark, outcome.models() if ran else []) as models):
        tracker.log_stage(outcome.step, status=outcome.status, seconds=outcome.seconds, metrics=outcome.metrics(),
                          artifacts=artifacts, models=models, settings=outcome.settings(), error=outcome.error,
                          fingerprint=outcome.fingerprint)
    if outcome.step == "audit" and outcome.result is not None:
        tracker.set_headline(outcome.result.headline)
    if outcome.step == "data" and outcome.status != "failed":
        tracker.log_data_marker(read_marker(spark, config.parquet_path) or {})
    if outcome.step == "report" and outcome.status != "failed":
        tracker.log_report(outcome.result.html_path)


def run_pipeline(spark: SparkSession, config: Config) -> PipelineResult:
    """Run the selected steps in order, tracking each in MLflow when ``tracking.enabled``.

    Raises:
        lia_spark.tracking.TrackingError: the tracking store is unreachable (checked before any stage).
        ValueError: bad ``run.stages`` selection for the existing outputs.
        RuntimeError: a stage failed (its message names the stage; earlier outputs stay committed).
    """
    tracker = None
    if config.tracking.enabled:
        from lia_spark.tracking import PipelineTracker

        tracker = PipelineTracker(config)
        tracker.check()
    check_before_stages(spark, config)
    result = PipelineResult(config.run.name, config.run.output_dir, master_name(spark))
    if tracker is not None:
        result.mlflow_run_id = tracker.start()
        result.tracking_uri = tracker.tracking_uri
        result.mlflow_location = tracker.location()

    def report(session: SparkSession, conf: Config, steps: list[StageOutcome]) -> Any:
        return write_report(session, conf, steps, mlflow_location=result.mlflow_location)

    outcomes: dict[str, StageOutcome] = {}
    failed: StageOutcome | None = None
    try:
        for step in PIPELINE_STAGES:
            if tracker is not None and step in config.run.stages:  # its MLflow run starts with it: real durations
                tracker.best_effort(f"stage {step}", functools.partial(tracker.start_stage, step))
            outcome = _run_step(spark, config, step, outcomes, report)
            outcomes[step] = outcome
            result.steps.append(outcome)
            if tracker is not None and outcome.status in ("ran", "reused", "failed"):
                tracker.best_effort(f"stage {step}", functools.partial(log_outcome, spark, config, tracker, outcome))
            if outcome.step == "report" and outcome.result is not None:
                result.report_path = outcome.result.path
            if outcome.status == "failed":
                failed = outcome
                break
    finally:
        if tracker is not None:
            tracker.best_effort("the run's end", functools.partial(
                tracker.end, failed=failed is not None or len(outcomes) < len(PIPELINE_STAGES)))
            result.not_logged = list(tracker.not_logged)
            if result.not_logged:
                logger.warning("tracking: not logged to MLflow: %s; %s", ", ".join(result.not_logged), TRACK_LATER)
    if failed is not None:
        raise RuntimeError(f"stage {failed.step} ({failed.stage}) failed: {failed.error}; outputs of finished "
                           f"stages are kept under {config.run.output_dir}") from failed.exception
    logger.info("%s", result.console_summary())
    return result


def committed_outcome(spark: SparkSession, config: Config, step: str) -> StageOutcome:
    """A step's committed output as an outcome that ran (its result rebuilt from the marker), or "skipped" when
    the step has no complete output."""
    from lia_spark.engine.audit import AuditResult
    from lia_spark.engine.generate import GenerateResult
    from lia_spark.engine.ingest import IngestResult
    from lia_spark.engine.posteriors.stage import PosteriorsResult
    from lia_spark.engine.train import TrainResult
    from lia_spark.engine.utility import UtilityResult

    stage = stage_for(step, config)
    marker = read_marker(spark, completion_paths(step, config)[0])
    if marker is None:
        return StageOutcome(step, stage, "skipped")
    report = layout.output_path(config, layout.REPORT) + f"/{REPORT_FILE}"
    result = {"generate": GenerateResult.from_dict, "ingest": IngestResult.from_dict, "train": TrainResult.from_dict,
              "posteriors": PosteriorsResult.from_dict, "audit": AuditResult.from_dict,
              "utility": lambda values: UtilityResult(**marker_fields(UtilityResult, values)),
              "report": lambda values: ReportResult(report, reported_path(report), int(values["figures"]),
                                                    int(values["tables"]))}[stage](marker)
    return StageOutcome(step, stage, "ran", result=result, fingerprint=step_fingerprint(spark, step, config))


def run_track(spark: SparkSession, config: Config) -> PipelineResult:
    """``lia-spark track``: log a finished output folder to MLflow as a new pipeline run, every step with a
    complete output as it ran (metrics, artifacts, models, settings and the report, read from the committed
    outputs; nothing is recomputed). For a run whose tracking server failed mid-run.

    Raises:
        lia_spark.tracking.TrackingError: the tracking store is unreachable.
        ValueError: naming run.output_dir when no step of it has a complete output.
    """
    from lia_spark.tracking import PipelineTracker

    outcomes = [committed_outcome(spark, config, step) for step in PIPELINE_STAGES]
    if all(outcome.status == "skipped" for outcome in outcomes):
        raise ValueError(f"run.output_dir: no step has a complete output there, got {config.run.output_dir!r}; "
                         "point --conf / run.output_dir at the folder of a finished run")
    tracker = PipelineTracker(config)
    tracker.check()
    result = PipelineResult(config.run.name, config.run.output_dir, master_name(spark), steps=outcomes,
                            mlflow_run_id=tracker.start(), tracking_uri=tracker.tracking_uri,
                            mlflow_location=tracker.location())
    try:
        for outcome in outcomes:
            if outcome.status == "ran":
                log_outcome(spark, config, tracker, outcome)
    finally:
        tracker.end(failed=False)
    logger.info("track: logged %s to %s", ", ".join(o.step for o in outcomes if o.status == "ran"),
                result.mlflow_location)
    return result
