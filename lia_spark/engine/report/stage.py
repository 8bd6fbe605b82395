"""The report step: ``OUT/report/report.html`` from every pipeline step's outcome, rewritten on every run.

Its stage declaration is not reusable (the page shows the run that wrote it); the pipeline passes the outcomes
of the steps before it and where the MLflow run is (:class:`ReportOptions`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
from pathlib import Path
from typing import Any, Sequence

from lia_spark.engine.runtime.outputs import copy_from_local, local_copies, reported_path
from lia_spark.engine.runtime.stage import Stage, StageResult, StageRun
from lia_spark.engine.spark.session import describe_jobs
from lia_spark.present.report import REPORT_FILE, render_report
from lia_spark.run import layout
from lia_spark.run.checks import is_remote_path
from lia_spark.run.config import Config

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ReportOptions:
    """What the pipeline hands the report: the outcomes of the steps before it and where the MLflow run is ("" when
    tracking is off)."""

    steps: Sequence[Any]
    mlflow_location: str = ""


@dataclasses.dataclass
class ReportResult(StageResult):
    """Where the report went: ``path`` under OUT/report (a local path, or the URI of a remote output folder)."""

    path: str
    figures: int
    tables: int

    skipped: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for the pipeline summary."""
        return {key: value for key, value in dataclasses.asdict(self).items() if key != "skipped"}

    def marker(self) -> dict[str, Any]:
        """The report's marker holds its counts only (the page is rewritten on every run)."""
        return {"figures": self.figures, "tables": self.tables}

    def metrics(self) -> dict[str, float]:
        """Counts of embedded plots and tables."""
        return {"figures": float(self.figures), "tables": float(self.tables)}

    def artifacts(self) -> list[str]:
        """The page (fetched to a local copy for MLflow when the output folder is remote)."""
        return [self.path]

    def page(self) -> str:
        """The committed report.html (a local path, or the URI of a remote output folder)."""
        return self.path

    @classmethod
    def from_marker(cls, config: Config, marker: dict[str, Any], *, skipped: bool = False) -> ReportResult:
        """A committed report as a result (for ``lia-spark track``): its page under ``config`` and its counts."""
        return cls(reported_path(_report_page(config)), int(marker["figures"]), int(marker["tables"]))


def _write_report(run: StageRun) -> ReportResult:
    """Render the report of the outcomes in :class:`ReportOptions` and write it into the report folder (any Hadoop
    file system)."""
    spark, config, options = run.spark, run.config, run.options
    steps = options.steps
    with contextlib.ExitStack() as copies:  # a remote output folder's CSVs and plots, fetched to embed them
        local = {o.step: copies.enter_context(local_copies(spark, o.artifacts())) for o in steps}
        text, figures, tables = render_report(config, steps, mlflow_location=options.mlflow_location,
                                              local_artifacts=local)
    with tempfile.TemporaryDirectory(prefix="lia-report-") as folder:  # written locally, copied to any file system
        written = Path(folder) / REPORT_FILE
        written.write_text(text, encoding="utf-8")
        describe_jobs(spark, "report: write report.html")
        copy_from_local(spark, str(written), run.under(REPORT_FILE))
    path = _report_page(config)
    if not is_remote_path(path):
        path = str(Path(path).resolve())
    logger.info("report: %s (%d plots, %d tables)", path, figures, tables)
    return ReportResult(path=path, figures=figures, tables=tables)


def _report_page(config: Config) -> str:
    return layout.output_path(config, layout.REPORT, REPORT_FILE)


REPORT = Stage(name="report", step="report", result=ReportResult, compute=_write_report, fields=(),
               outputs=lambda config: (layout.output_path(config, layout.REPORT),), reusable=False,
               options=ReportOptions)
