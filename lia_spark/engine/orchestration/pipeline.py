"""End-to-end pipeline: data (generate | ingest) -> train -> posteriors -> utility -> audit -> report, in MLflow.

Each step runs the stage of :mod:`lia_spark.engine.orchestration.registry` it names, through the one skeleton
:func:`~lia_spark.engine.orchestration.registry.run_stage`. Steps are chosen by
``run.stages`` and run in the order of :data:`lia_spark.run.sections.PIPELINE_STAGES`; a step whose output is already
complete is reused by the stage itself unless ``run.force``. A failing stage stops the pipeline; outputs of
finished stages stay committed, the MLflow run is marked FAILED, the error is raised.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Any

from pyspark.sql import SparkSession

from lia_spark.engine.models.feature_frames import target_day_rows
from lia_spark.engine.orchestration.registry import (committed_result, fields_not_behind, refuse_foreign, run_stage,
                                                     sealed_fingerprint, step_stage)
from lia_spark.engine.runtime.outputs import check_writable, committed, local_copies, path_exists, read_marker
from lia_spark.engine.runtime.progress import pipeline_step
from lia_spark.engine.spark.session import job_group, master_name
from lia_spark.records.headline import Headline
from lia_spark.run import interrupts
from lia_spark.run.activity import doing
from lia_spark.run.config import Config
from lia_spark.run.layout import check_paths_apart
from lia_spark.run.limits import check_training_rows
from lia_spark.run.sections import PIPELINE_STAGES
from lia_spark.tracking.session import TRACK_LATER, Tracker, tracking_session

logger = logging.getLogger(__name__)

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
        """The stage result's model files (MLflow logs them as models)."""
        return list(self.result.models()) if self.result is not None else []

    def setting_rows(self) -> list[dict[str, Any]]:
        """One row per mechanism setting (one nested MLflow run each), from the stage result."""
        return list(self.result.setting_rows()) if self.result is not None else []

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

    @property
    def headline(self) -> Headline | None:
        """The audit step's headline (:class:`lia_spark.records.headline.Headline`), None when it did not run."""
        return next((o.result.headline for o in self.steps if o.result is not None and o.result.headline is not None),
                    None)

    def console_summary(self) -> str:
        """Closing lines for the console: status per step, the report, the MLflow run and, last, the audit's
        headline (:class:`lia_spark.records.headline.Headline`)."""
        lines = [f"lia-spark pipeline {self.run_name!r}: "
                 + ", ".join(f"{o.step}={o.status} ({o.seconds:.1f} s)" for o in self.steps)]
        if self.report_path:
            lines.append(f"report: {self.report_path}")
        if self.mlflow_location:
            lines.append(f"MLflow: {self.mlflow_location}")
        if self.not_logged:
            lines.append(f"warning: not logged to MLflow: {', '.join(self.not_logged)}; {TRACK_LATER}")
        lines += [o.result.console_summary() for o in self.steps  # the headline comes last
                  if o.result is not None and o.result.headline is not None]
        return "\n".join(lines)


def _row_counts(metrics: dict[str, float]) -> str:
    counts = {key: value for key, value in metrics.items() if "rows" in key or "count" in key}
    return ", ".join(f"{key}={value:,.0f}" for key, value in sorted(counts.items())[:6]) or "no row counts"


def check_before_stages(spark: SparkSession, config: Config) -> None:
    """Fail in seconds, before any stage runs, on what would fail later: two paths of the config that overlap
    (:func:`lia_spark.run.layout.check_paths_apart`), a target the target day's rows cannot hold
    (:func:`lia_spark.run.limits.check_training_rows`, from synthetic.rows_per_day or the data's count), a folder a
    selected step would replace that holds somebody else's files
    (:func:`lia_spark.engine.orchestration.registry.refuse_foreign`), an output folder that cannot be written, an
    input table a selected step declares (:class:`lia_spark.engine.runtime.stage.Input`) that no selected step
    writes and that is not complete, a table the user names that does not exist, and each selected stage's own
    ``upfront`` check (the Criteo files exist, the attacker prior resolves; the tracking store is checked by the
    tracker itself).

    Raises:
        PermissionError: run.output_dir cannot be written.
        ValueError: naming the field (data.criteo_paths, run.stages, audit.canary_path, mechanisms.prior_*; a
            :class:`lia_spark.engine.runtime.outputs.ForeignFilesError` names run.output_dir or data.*_path).
    """
    check_paths_apart(config)
    selected = set(config.run.stages)
    refuse_foreign(spark, config, [step_stage(step, config) for step in PIPELINE_STAGES if step in selected])
    for step in PIPELINE_STAGES:
        if step not in selected:
            continue
        stage = step_stage(step, config)
        for item in stage.inputs(config):
            producer, path = item.producer(config), item.path(config)
            if not item.required or producer in selected:
                continue
            if producer and not committed(spark, path):
                fix = (f"add '{producer}' to run.stages" if producer in PIPELINE_STAGES
                       else f"run `lia-spark {producer}` first")
                raise ValueError(f"run.stages: {list(config.run.stages)} reads the {item.role} table but {path} is "
                                 f"missing or incomplete; {fix} or set {item.field}")
            if not producer and not path_exists(spark, path):
                raise ValueError(f"{item.field}: no such table, got {path!r}; set it to an existing table")
        stage.upfront(spark, config)
    generating = "data" in selected and config.data.source == "synthetic"
    if "train" in selected and (generating or path_exists(spark, config.parquet_path)):
        check_training_rows(config, lambda: target_day_rows(spark, config, generating=generating),
                            source="synthetic.rows_per_day" if generating else "counted in the data")
    check_writable(spark, config.run.output_dir)  # last: it creates the folder


def _run_step(spark: SparkSession, config: Config, step: str, outcomes: dict[str, StageOutcome],
              mlflow_location: str) -> StageOutcome:
    stage = step_stage(step, config)
    if step not in config.run.stages:
        logger.info("pipeline: %s skipped (not in run.stages)", step)
        return StageOutcome(step, stage.name, "skipped")
    selected = [name for name in PIPELINE_STAGES if name in config.run.stages]
    position, count = selected.index(step) + 1, len(selected)
    logger.info("pipeline: %s (%s) started, step %d/%d", step, stage.name, position, count)
    started = time.monotonic()
    try:
        with (job_group(spark, f"lia-spark-{step}", f"{config.run.name}: {step} ({stage.name})"),
              pipeline_step(position, count)):
            result = run_stage(stage.name, spark, config, **stage.accepted(
                {"steps": tuple(outcomes.values()), "mlflow_location": mlflow_location}))
    except Exception as error:
        interrupts.check()  # unless a signal stopped the command: the step's error is then the cancellation
        seconds = time.monotonic() - started
        logger.error("pipeline: %s failed after %.1f s: %s", step, seconds, error)
        return StageOutcome(step, stage.name, "failed", seconds, error=f"{type(error).__name__}: {error}",
                            exception=error)
    outcome = StageOutcome(step, stage.name, "reused" if result.skipped else "ran", time.monotonic() - started,
                           result, fingerprint=sealed_fingerprint(spark, stage, config) if stage.reusable else "")
    logger.info("pipeline: %s %s in %.1f s (%s)", step, outcome.status, outcome.seconds, _row_counts(outcome.metrics()))
    return outcome


def log_outcome(spark: SparkSession, config: Config, tracker: Tracker, outcome: StageOutcome) -> None:
    """Log one step's outcome to MLflow (artifacts and models only when it ran; tables of per-row labels only with
    tracking.log_row_data), and on the parent run what its result offers: a headline's tags, the identity of the
    input data (a stage that describes it) and a page."""
    ran = outcome.status == "ran"
    row_data = outcome.result.row_data() if config.tracking.log_row_data and outcome.result is not None else []
    with (local_copies(spark, [*outcome.artifacts(), *row_data] if ran else []) as artifacts,
          local_copies(spark, outcome.models() if ran else []) as models):
        tracker.log_stage(outcome.step, status=outcome.status, seconds=outcome.seconds, metrics=outcome.metrics(),
                          artifacts=artifacts, models=models, settings=outcome.setting_rows(), error=outcome.error,
                          fingerprint=outcome.fingerprint)
    if outcome.result is None:
        return
    if outcome.result.headline is not None:
        tracker.set_headline(outcome.result.headline)
    stage = step_stage(outcome.step, config)
    if stage.describes_input:
        tracker.log_data_marker(read_marker(spark, stage.outputs(config)[0]) or {})
    if outcome.result.page():
        with local_copies(spark, [outcome.result.page()]) as pages:
            for page in pages:
                tracker.log_report(page)


def run_pipeline(spark: SparkSession, config: Config) -> PipelineResult:
    """Run the selected steps in order, tracking each in MLflow when ``tracking.enabled``.

    Raises:
        lia_spark.tracking.store.TrackingError: the tracking store is unreachable (checked before any stage).
        ValueError: bad ``run.stages`` selection for the existing outputs.
        RuntimeError: a stage failed (its message names the stage; earlier outputs stay committed).
    """
    with tracking_session(config) as tracker:
        with doing("checking the selected steps against the outputs and the data"):
            check_before_stages(spark, config)
        result = PipelineResult(config.run.name, config.run.output_dir, master_name(spark),
                                not_logged=tracker.not_logged)
        with doing(f"starting the MLflow run ({tracker.tracking_uri})"):
            result.mlflow_run_id = tracker.start(fields_not_behind(config, config.run.stages))
        result.tracking_uri = tracker.tracking_uri
        result.mlflow_location = tracker.location()
        outcomes: dict[str, StageOutcome] = {}
        for step in PIPELINE_STAGES:
            if step in config.run.stages:  # its MLflow run starts with it: real durations
                tracker.best_effort(f"stage {step}", lambda: tracker.start_stage(step))
            outcome = _run_step(spark, config, step, outcomes, result.mlflow_location)
            outcomes[step] = outcome
            result.steps.append(outcome)
            if outcome.status in ("ran", "reused", "failed"):
                with doing(f"logging step {step} to MLflow"):
                    tracker.best_effort(f"stage {step}",
                                        functools.partial(log_outcome, spark, config, tracker, outcome))
            if outcome.result is not None and outcome.result.page():
                result.report_path = outcome.result.page()
            if outcome.status == "failed":  # the MLflow run ends FAILED
                raise RuntimeError(f"stage {outcome.step} ({outcome.stage}) failed: {outcome.error}; outputs of "
                                   f"finished stages are kept under {config.run.output_dir}") from outcome.exception
    logger.info("%s", result.console_summary())
    return result


def committed_outcome(spark: SparkSession, config: Config, step: str) -> StageOutcome:
    """A step's committed output as an outcome that ran (its result rebuilt from the marker), or "skipped" when
    the step has no complete output."""
    stage = step_stage(step, config)
    result = committed_result(spark, stage, config)
    if result is None:
        return StageOutcome(step, stage.name, "skipped")
    return StageOutcome(step, stage.name, "ran", result=result,
                        fingerprint=sealed_fingerprint(spark, stage, config) if stage.reusable else "")


def run_track(spark: SparkSession, config: Config) -> PipelineResult:
    """``lia-spark track``: log a finished output folder to MLflow as a new pipeline run, every step with a
    complete output as it ran (metrics, artifacts, models, settings and the report, read from the committed
    outputs; nothing is recomputed). For a run whose tracking server failed mid-run.

    Raises:
        lia_spark.tracking.store.TrackingError: the tracking store is unreachable.
        ValueError: naming run.output_dir when no step of it has a complete output.
    """
    outcomes = [committed_outcome(spark, config, step) for step in PIPELINE_STAGES]
    if all(outcome.status == "skipped" for outcome in outcomes):
        raise ValueError(f"run.output_dir: no step has a complete output there, got {config.run.output_dir!r}; "
                         "point --conf / run.output_dir at the folder of a finished run")
    finished = [outcome.step for outcome in outcomes if outcome.status == "ran"]
    with tracking_session(config, required=True) as tracker:
        result = PipelineResult(config.run.name, config.run.output_dir, master_name(spark), steps=outcomes,
                                mlflow_run_id=tracker.start(fields_not_behind(config, finished)),
                                tracking_uri=tracker.tracking_uri, mlflow_location=tracker.location())
        for outcome in outcomes:
            if outcome.status == "ran":
                log_outcome(spark, config, tracker, outcome)
    logger.info("track: logged %s to %s", ", ".join(o.step for o in outcomes if o.status == "ran"),
                result.mlflow_location)
    return result
