"""``lia-spark audit-table``: train and audit one target per training mechanism x claimed epsilon (Kalemaj et al.,
"Observational Auditing of Label Privacy", 2025, Table 2 and Table 5) in one command, resumable per cell.

1. The day-partitioned data of ``run.output_dir``: the data step's stage (generate for data.source=synthetic,
   ingest for criteo; reused when its fingerprint matches) when ``data`` is in run.stages, else the existing
   ``data.parquet_path``.
2. For every cell of :func:`lia_spark.studies.table.table_cells`: the user's config with ``models.training_mechanism``,
   ``models.epsilon`` and ``models.bag_size`` of the cell, ``run.output_dir = <out>/table/cells/<cell>`` and
   ``data.parquet_path`` = the shared data table, through the train stage then the audit stage. Both reuse
   their committed output when its fingerprint matches, so a re-run recomputes only missing or changed cells.
   A failing cell is recorded (status ``failed`` and its error) and the next one runs.
3. ``<out>/table/``: ``eps_lb.csv`` (rows = mechanisms, columns = claimed epsilons, ``mean +- std`` of the
   valid Bonferroni best bound), ``cells.csv`` (one row per cell), ``utility.csv``, ``published.csv`` (the
   paper's values, labelled as such) and ``eps_lb_vs_claimed.png``; written locally and copied through
   Hadoop's FileSystem API, so ``run.output_dir`` may be remote. Each file is replaced whole on every run; the
   folder is not committed as one (the cells' committed outputs live below it).
4. MLflow (tracking.enabled): a parent run, one nested run per cell, the files as the parent's artifacts.

Raises :class:`TableCellsFailed` (naming the failed cells) after writing the table when any cell failed.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import tempfile
import time
from typing import Any, Mapping, cast

import pandas as pd
from pyspark.sql import SparkSession

from lia_spark.engine.audit.stage import AUDIT, AuditResult
from lia_spark.engine.models.audit_key import draws_from_key, stage_key
from lia_spark.engine.models.execution import fit_ahead
from lia_spark.engine.models.feature_frames import target_day_rows
from lia_spark.engine.models.preparation import Preparation
from lia_spark.engine.orchestration.registry import run_stage, sealed_fingerprint, step_stage, would_reuse
from lia_spark.engine.runtime.outputs import check_writable, copy_from_local, local_copies, local_folder, path_exists
from lia_spark.engine.runtime.progress import reporting_progress
from lia_spark.engine.spark.session import describe_jobs, job_group
from lia_spark.engine.train.stage import TRAIN, TrainResult
from lia_spark.present import charts
from lia_spark.records.wording import NO_EVIDENCE_SHORT, bound_text, ceiling_text, claimed_epsilon_text, number_text
from lia_spark.run import interrupts, layout
from lia_spark.run.config import Config
from lia_spark.run.limits import check_training_rows
from lia_spark.studies import table
from lia_spark.tracking.session import TableTracker, tracking_session

logger = logging.getLogger(__name__)

TABLE_FILES = ("eps_lb.csv", "cells.csv", "utility.csv", "published.csv", "eps_lb_vs_claimed.png")
PAPER_WAY_FILE = "paper_convention.csv"  # with table.paper_convention
PAPER_WAY_FOLDER = "paper_convention"  # the paper-way audit of a cell: <cell>/paper_convention/audit


def cell_config(config: Config, cell: table.Cell) -> Config:
    """The user's config for one cell: its training mechanism, epsilon and bag size, its own output folder, the
    shared data table and the cell's own canary table (audit.canary_path cleared)."""
    return dataclasses.replace(
        config.with_target(cell.mechanism, cell.epsilon, cell.bag_size),
        run=dataclasses.replace(config.run, output_dir=layout.table_cell_path(config, cell.name)),
        data=dataclasses.replace(config.data, parquet_path=config.parquet_path),
        audit=dataclasses.replace(config.audit, canary_path=""),
    )


def paper_way_config(cell: Config) -> Config:
    """A cell's config (``run.output_dir`` = the cell's folder) auditing the cell's canary table the paper's way
    (:data:`lia_spark.studies.table.PAPER_AUDIT`) into ``<cell folder>/paper_convention/audit``: same trained
    target, no training."""
    return dataclasses.replace(
        cell, run=dataclasses.replace(cell.run, output_dir=f"{cell.run.output_dir}/{PAPER_WAY_FOLDER}"),
        audit=dataclasses.replace(cell.audit, **table.PAPER_AUDIT, canary_path=layout.canaries_path(cell)))


@dataclasses.dataclass
class CellOutcome:
    """One cell: ``ran`` (train or audit computed), ``reused`` (both outputs reused) or ``failed`` (``error``)."""

    cell: table.Cell
    output_dir: str
    status: str
    seconds: float
    train: TrainResult | None = None
    audit: AuditResult | None = None
    error: str = ""
    paper: AuditResult | None = None  # the paper-way audit's (table.paper_convention)

    def record(self) -> dict[str, Any]:
        """The cell's row of ``cells.csv`` (:func:`lia_spark.studies.table.cell_record`)."""
        return table.cell_record(
            self.cell, status=self.status, summary=self.audit.summary if self.audit else None,
            test_metrics=self.train.test_metrics if self.train else None,
            train_seconds=float(self.train.seconds.get("total", math.nan)) if self.train else math.nan,
            audit_seconds=float(self.audit.seconds) if self.audit else math.nan, seconds=self.seconds,
            error=self.error, output_dir=self.output_dir, paper_summary=self.paper.summary if self.paper else None)

    def metrics(self) -> dict[str, float]:
        """eps_lb mean/std (valid and paper convention), target test AUC and log-loss (finite values only)."""
        row = self.record()
        keys = ("eps_lb_mean", "eps_lb_std", "eps_lb_paper_convention_mean", "eps_lb_paper_convention_std",
                "eps_lb_paper_way_mean", "eps_lb_paper_way_std", "test_auc", "test_log_loss")
        return {key: float(row[key]) for key in keys if math.isfinite(float(row[key]))}

    def to_dict(self) -> dict[str, Any]:
        """The cell's row of ``cells.csv`` (the full train and audit results are in its output folder)."""
        return self.record()


CELLS_ON_CONSOLE = 12  # a larger table is read in eps_lb.csv


def cell_line(row: Mapping[str, Any]) -> str:
    """A cell on the console: its valid bound (mean +- std over repetitions, the 0 bound flagged), confidence and
    claimed epsilon, then the target's test AUC; a failed cell's error."""
    head = f"  {row['cell']} ({row['algorithm']}, claimed eps = {claimed_epsilon_text(row['claimed_epsilon'])}): "
    if row["status"] == "failed":
        return head + f"failed: {row['error']}"
    bound = f"eps >= {bound_text(row['eps_lb_mean'])} +- {bound_text(row['eps_lb_std'])} at " \
            f"{number_text(100 * row['confidence'], '.0f')}% (valid)"
    exact = ceiling_text(row["ceiling"], row.get("ceiling_95", math.nan),  # none in a cell recorded before it was
                         row["claimed_epsilon"])
    vacuous = f" - {NO_EVIDENCE_SHORT}; {exact}" if row["eps_lb_mean"] == 0 else f"; {exact}"
    return head + bound + vacuous + f"; target test AUC {number_text(row['test_auc'], '.4f')}"


@dataclasses.dataclass
class TableResult:
    """Every cell's outcome, the mechanisms skipped as unsupported, the table's files and the MLflow run."""

    output_dir: str
    cells: list[CellOutcome]
    unsupported: dict[str, str]
    files: tuple[str, ...]
    seconds: float
    data_stage: str = ""
    mlflow_run_id: str = ""
    mlflow_location: str = ""

    def cell(self, name: str) -> CellOutcome:
        """The outcome of the cell called ``name`` (e.g. ``rr-eps1``)."""
        return next(outcome for outcome in self.cells if outcome.cell.name == name)

    def failed(self) -> list[CellOutcome]:
        """The cells that failed."""
        return [outcome for outcome in self.cells if outcome.status == "failed"]

    def findings(self) -> list[CellOutcome]:
        """Cells whose mean valid eps_lb exceeds their claimed epsilon."""
        return [outcome for outcome in self.cells if outcome.record()["exceeds_claimed"]]

    def metrics(self) -> dict[str, float]:
        """Cell counts per status and the total seconds."""
        counts = {f"cells_{status}": float(sum(o.status == status for o in self.cells))
                  for status in ("ran", "reused", "failed")}
        return {**counts, "cells": float(len(self.cells)), "findings": float(len(self.findings())),
                "seconds": self.seconds}

    def artifacts(self) -> list[str]:
        """The table's files (URIs when the output folder is remote)."""
        return list(self.files)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary: output folder, files, unsupported mechanisms and every cell."""
        return {"output_dir": self.output_dir, "files": list(self.files), "unsupported": self.unsupported,
                "seconds": round(self.seconds, 3), "data_stage": self.data_stage,
                "mlflow_run_id": self.mlflow_run_id, "cells": [outcome.to_dict() for outcome in self.cells]}

    def console_summary(self) -> str:
        """One line per status, the findings, the files and the MLflow run."""
        by_status: dict[str, list[str]] = {}
        for outcome in self.cells:
            by_status.setdefault(outcome.status, []).append(outcome.cell.name)
        lines = [f"lia-spark audit-table: {len(self.cells)} cells in {self.seconds:.1f} s; "
                 + "; ".join(f"{status} {len(names)}" for status, names in by_status.items())]
        if self.unsupported:
            lines.append("skipped (unsupported): " + "; ".join(f"{k}: {v}" for k, v in self.unsupported.items()))
        if len(self.cells) <= CELLS_ON_CONSOLE:
            lines += [cell_line(outcome.record()) for outcome in self.cells]
        for outcome in self.findings():
            row = outcome.record()
            lines.append(f"FINDING {outcome.cell.name}: eps_lb {row['eps_lb_mean']:.3f} > claimed eps "
                         f"{outcome.cell.epsilon:g}")
        written = [os.path.basename(path) for path in self.files[1:]] or list(TABLE_FILES[1:])
        lines.append(f"table: {self.output_dir}/eps_lb.csv (and {', '.join(written)})")
        if self.mlflow_location:
            lines.append(f"MLflow: {self.mlflow_location}")
        return "\n".join(lines)


class TableCellsFailed(RuntimeError):
    """Some cells failed; the table of the others is written and ``result`` holds every outcome. Re-run the same
    command to resume: finished cells are reused."""

    def __init__(self, result: TableResult) -> None:
        self.result = result
        names = ", ".join(f"{o.cell.name} ({o.error})" for o in result.failed())
        super().__init__(f"audit-table: {len(result.failed())} of {len(result.cells)} cells failed: {names}; "
                         f"the other cells are in {result.output_dir}; re-run the same command to resume")


def _run_cell(spark: SparkSession, config: Config, cell: table.Cell, preparation: Preparation) -> CellOutcome:
    conf = cell_config(config, cell)
    out = conf.run.output_dir
    started = time.monotonic()
    train: TrainResult | None = None
    audit: AuditResult | None = None
    paper: AuditResult | None = None
    try:
        with job_group(spark, f"lia-spark-table-{cell.name}", f"{config.run.name}: audit-table cell {cell.name}"):
            check_writable(spark, out, field=f"run.output_dir (audit-table cell {cell.name})")
            train = run_stage(TRAIN, spark, conf, preparation=preparation)
            audit = run_stage(AUDIT, spark, conf)
            if config.table.paper_convention:
                paper = run_stage(AUDIT, spark, paper_way_config(conf))
    except Exception as error:  # noqa: BLE001 - a failing cell is recorded and the other cells go on
        interrupts.check()  # unless a signal stopped the command: the cell's error is then the cancellation
        seconds = time.monotonic() - started
        message = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        logger.exception("audit-table: cell %s failed after %.1f s", cell.name, seconds)
        return CellOutcome(cell, out, "failed", seconds, train, audit, error=message)
    status = "reused" if all(part.skipped for part in (train, audit, paper) if part is not None) else "ran"
    outcome = CellOutcome(cell, out, status, time.monotonic() - started, train, audit, paper=paper)
    row = outcome.record()
    logger.info("audit-table: cell %s %s in %.1f s: eps_lb %s (claimed %s), test AUC %.4f, log-loss %.4f",
                cell.name, status, outcome.seconds, table.mean_std_text(row["eps_lb_mean"], row["eps_lb_std"]),
                table.epsilon_text(cell.epsilon), row["test_auc"], row["test_log_loss"])
    if paper is not None:
        logger.info("audit-table: cell %s the paper's way (%s): %s", cell.name, table.PAPER_WAY_LABEL,
                    table.mean_std_text(row["eps_lb_paper_way_mean"], row["eps_lb_paper_way_std"]))
    if row["exceeds_claimed"]:
        logger.warning("audit-table: FINDING: cell %s: valid eps_lb %.3f exceeds the claimed eps %s", cell.name,
                       row["eps_lb_mean"], table.epsilon_text(cell.epsilon))
    return outcome


def _fit_ahead(spark: SparkSession, config: Config, cells: list[table.Cell], preparation: Preparation) -> None:
    """With spark.parallel_fits and in-memory training: the targets of the cells whose train stage will compute,
    fitted as parallel Spark tasks before the cells run (:func:`lia_spark.engine.models.execution.fit_ahead`), each on
    the coins of its own audit key (in its own folder, or audit.key_path); each cell's train stage then takes its
    own."""
    if not config.spark.parallel_fits or config.models.execution != "in_memory":
        return
    pending = [cell for cell in cells if not would_reuse(spark, "train", cell_config(config, cell))]
    if len(pending) < 2:
        return
    logger.info("audit-table: fitting the targets of %d cells ahead in parallel tasks", len(pending))
    try:
        with (job_group(spark, "lia-spark-table-fits", f"{config.run.name}: audit-table targets in parallel"),
              reporting_progress(spark, "audit-table: targets", config.run.progress_seconds)):
            configs = [cell_config(config, cell) for cell in pending]
            fit_ahead(spark, [(conf, stage_key(spark, conf) if draws_from_key(conf) else None) for conf in configs],
                      preparation)
    except Exception as error:  # noqa: BLE001 - the cells then fit their own targets and record their own errors
        interrupts.check()
        logger.warning("audit-table: fitting the targets ahead failed (%s: %s); each cell fits its own",
                       type(error).__name__, str(error).splitlines()[0] if str(error) else "")


def _prepare_data(spark: SparkSession, config: Config) -> str:
    """Run (or reuse) the data step's stage when ``data`` is in run.stages; else require the existing table."""
    if "data" not in config.run.stages:
        if not path_exists(spark, config.parquet_path):
            raise ValueError(f"run.stages: {list(config.run.stages)} has no 'data' step but {config.parquet_path} "
                             "does not exist; add 'data' to run.stages or set data.parquet_path")
        logger.info("audit-table: using the data table %s ('data' not in run.stages)", config.parquet_path)
        return "existing"
    stage = step_stage("data", config)
    result = run_stage(stage.name, spark, config)
    status = "reused" if result.skipped else "ran"
    logger.info("audit-table: data step %s %s (%s)", stage.name, status, config.parquet_path)
    return f"{stage.name} {status}"


def write_table(spark: SparkSession, config: Config, outcomes: list[CellOutcome]) -> tuple[str, ...]:
    """Write the table's files locally, copy them into ``<out>/table/`` (any Hadoop file system); their paths."""
    out = layout.output_path(config, layout.TABLE)
    cells = pd.DataFrame([outcome.record() for outcome in outcomes], columns=list(table.CELL_COLUMNS))
    with tempfile.TemporaryDirectory(prefix="lia-table-") as local:
        frames = {"eps_lb.csv": table.wide_table(cells, epsilons=config.table.epsilons), "cells.csv": cells,
                  "utility.csv": table.utility_table(cells), "published.csv": table.published_table()}
        if config.table.paper_convention:
            frames[PAPER_WAY_FILE] = table.paper_way_table(cells)
        for name, frame in frames.items():
            frame.to_csv(os.path.join(local, name), index=False)
        charts.plot_eps_lb(cells, path=os.path.join(local, TABLE_FILES[-1]),
                          title=f"{config.run.name}: valid eps_lb ({config.models.library}, "
                                f"{config.audit.repetitions} repetitions, delta={config.audit.delta:g})")
        names = (*TABLE_FILES, *([PAPER_WAY_FILE] if config.table.paper_convention else []))
        describe_jobs(spark, "audit-table: write the table")
        for name in names:
            copy_from_local(spark, os.path.join(local, name), f"{out}/{name}")
    local_out = local_folder(out)
    return tuple(os.path.join(local_out if local_out is not None else out, name) for name in names)


def run_audit_table(spark: SparkSession, config: Config) -> TableResult:
    """Train and audit every cell of ``config.table`` (resumable per cell) and write ``<out>/table/``.

    Raises:
        lia_spark.run.checks.ConfigError: no mechanism of table.mechanisms can be trained with models.library /
            models.execution, or audit.bounds lacks binomial (before anything runs).
        lia_spark.tracking.store.TrackingError: the tracking store is unreachable (before any cell).
        PermissionError: run.output_dir cannot be written.
        ConfigError: a cell's training mechanism needs more rows than the target day has (before any fit).
        TableCellsFailed: after the table is written, when any cell failed (naming them).
    """
    started = time.monotonic()
    cells, unsupported = table.table_cells(config)
    for name, reason in unsupported.items():
        logger.warning("audit-table: skipping %s: %s", name, reason)
    with tracking_session(config, run_name=f"{config.run.name} audit-table", table=True) as session:
        tracker = cast(TableTracker, session)  # table=True: an AuditTableTracker or the NoTracker
        check_writable(spark, config.run.output_dir)
        logger.info("audit-table: %d cells (%s) below %s/cells", len(cells), ", ".join(c.name for c in cells),
                    layout.output_path(config, layout.TABLE))
        data_stage = _prepare_data(spark, config)
        day_rows = functools.cache(lambda: target_day_rows(spark, config, generating=False))  # counted once, if needed
        for cell in cells:
            check_training_rows(cell_config(config, cell), day_rows, source="counted in the data")
        result = TableResult(layout.output_path(config, layout.TABLE), [], unsupported, (), 0.0, data_stage)
        result.mlflow_run_id = tracker.start()
        result.mlflow_location = tracker.location()
        preparation = Preparation()  # the cells differ only in the target's mechanism: they share the proxy, features
        _fit_ahead(spark, config, cells, preparation)
        for index, cell in enumerate(cells, start=1):
            logger.info("audit-table: cell %d/%d %s", index, len(cells), cell.name)
            outcome = _run_cell(spark, config, cell, preparation)
            result.cells.append(outcome)
            tracker.best_effort(f"cell {cell.name}", lambda: tracker.log_cell(
                cell.name, mechanism=cell.mechanism, claimed_epsilon=cell.epsilon, bag_size=cell.bag_size,
                status=outcome.status, seconds=outcome.seconds, metrics=outcome.metrics(), error=outcome.error,
                fingerprint=sealed_fingerprint(spark, AUDIT, cell_config(config, cell))))
        result.files = write_table(spark, config, result.cells)
        result.seconds = time.monotonic() - started
        tracker.best_effort("the table", lambda: _log_table(spark, tracker, result))
        logger.info("%s", result.console_summary())
        if result.failed():  # the MLflow run ends FAILED
            raise TableCellsFailed(result)
    return result


def _log_table(spark: SparkSession, tracker: TableTracker, result: TableResult) -> None:
    """The table's metrics and files on the parent run."""
    with local_copies(spark, result.files) as artifacts:
        tracker.log_table(metrics=result.metrics(), artifacts=artifacts)
