"""One MLflow session per command: ``with tracking_session(config) as tracker:`` checks the store before any work,
and ends the run when the block ends (FAILED when it raises), whatever the command (the pipeline, ``track``, the
audit table, the log-loss attack). With tracking off the tracker is a :class:`NoTracker`, so a command reads the
same with and without MLflow: it starts the run when its up-front checks passed, and hands every logging call to
``tracker.best_effort`` (which a failing store never lets stop the work). MLflow is imported only when tracking
is on.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterator, Mapping, Protocol, Sequence

from lia_spark.run.config import Config
from lia_spark.tracking.store import mlflow_3

if TYPE_CHECKING:  # the type only
    from lia_spark.records.headline import Headline

logger = logging.getLogger(__name__)

# MLflow prints a "View run ... at <url>" line on stdout per run it ends (twice per stage): stdout carries
# lia-spark's summary only, which names the run once. Set on the first tracked command unless the user chose.
QUIET_URLS = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"

class _LogLines(io.TextIOBase):
    """A stand-in for stdout that sends each line written to it to lia-spark's log."""

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                logger.info("mlflow: %s", line.strip())
        return len(text)


@contextlib.contextmanager
def _url_lines_to_the_log() -> Iterator[None]:
    """MLflow 2 writes its "View run ... at <url>" lines to stdout with no switch (MLflow 3 honours
    :data:`QUIET_URLS`): under MLflow 2 stdout goes to the log while the session's runs start and end."""
    if mlflow_3():
        yield
        return
    with contextlib.redirect_stdout(_LogLines()):
        yield


# What to do about calls a failing store left out (the warning at the run's end and the console summary).
TRACK_LATER = ("log them once the tracking server answers again with `lia-spark track --conf <your conf> "
               "[the same overrides]`")


class Tracker(Protocol):
    """What a command calls on its tracker (:class:`lia_spark.tracking.mlflow_runs.PipelineTracker`, or
    :class:`NoTracker` with tracking off): the run's start, where to look at it, and the logging calls, each handed
    to :meth:`best_effort` by the commands."""

    run_id: str
    tracking_uri: str
    not_logged: list[str]

    def start(self, omitted: Collection[str] = ()) -> str: ...

    def location(self) -> str: ...

    def best_effort(self, what: str, log: Callable[[], Any]) -> None: ...

    def start_stage(self, stage: str) -> None: ...

    def log_stage(self, stage: str, *, status: str, seconds: float, metrics: Mapping[str, Any],
                  artifacts: Sequence[str], models: Sequence[str] = (),
                  settings: Sequence[Mapping[str, Any]] = (), error: str = "", fingerprint: str = "") -> None: ...

    def set_headline(self, headline: Headline) -> None: ...

    def log_data_marker(self, marker: Mapping[str, Any]) -> None: ...

    def log_report(self, path: str) -> None: ...

    def end(self, *, failed: bool) -> None: ...


class TableTracker(Tracker, Protocol):
    """A tracker of ``lia-spark audit-table`` (:class:`lia_spark.tracking.mlflow_runs.AuditTableTracker`): one
    nested run per cell and the table's files."""

    def log_cell(self, cell: str, *, mechanism: str, claimed_epsilon: float, bag_size: int, status: str,
                 seconds: float, metrics: Mapping[str, Any], error: str = "", fingerprint: str = "") -> None: ...

    def log_table(self, *, metrics: Mapping[str, Any], artifacts: Sequence[str]) -> None: ...


@dataclasses.dataclass
class NoTracker:
    """Tracking off: no run, and no logging call does anything (a :class:`TableTracker` whose every call is a
    no-op, so a command reads the same with and without MLflow)."""

    run_id: str = ""
    tracking_uri: str = ""
    not_logged: list[str] = dataclasses.field(default_factory=list)

    def start(self, omitted: Collection[str] = ()) -> str:
        return ""

    def location(self) -> str:
        return ""

    def best_effort(self, what: str, log: Callable[[], Any]) -> None:
        """Nothing to log: ``log`` is not called (it would copy artifacts for nobody)."""

    def start_stage(self, stage: str) -> None:
        """No stage run."""

    def log_stage(self, stage: str, *, status: str, seconds: float, metrics: Mapping[str, Any],
                  artifacts: Sequence[str], models: Sequence[str] = (),
                  settings: Sequence[Mapping[str, Any]] = (), error: str = "", fingerprint: str = "") -> None:
        """Nothing logged."""

    def set_headline(self, headline: Headline) -> None:
        """No run to tag."""

    def log_data_marker(self, marker: Mapping[str, Any]) -> None:
        """No run to describe the data on."""

    def log_report(self, path: str) -> None:
        """No run to attach the page to."""

    def end(self, *, failed: bool) -> None:
        """No run to end."""

    def log_cell(self, cell: str, *, mechanism: str, claimed_epsilon: float, bag_size: int, status: str,
                 seconds: float, metrics: Mapping[str, Any], error: str = "", fingerprint: str = "") -> None:
        """No cell run."""

    def log_table(self, *, metrics: Mapping[str, Any], artifacts: Sequence[str]) -> None:
        """No table files logged."""


@contextlib.contextmanager
def tracking_session(config: Config, *, run_name: str | None = None, table: bool = False,
                     required: bool = False) -> Iterator[Tracker]:
    """The command's tracker: a :class:`lia_spark.tracking.mlflow_runs.PipelineTracker` (an ``AuditTableTracker``
    with ``table``) whose store answered :meth:`check` when tracking.enabled or ``required`` (``lia-spark track``),
    else a :class:`NoTracker`; MLflow's URL lines are turned off (:data:`QUIET_URLS`). When the block ends, a started
    run ends (FAILED if the block raised; best effort) and the calls a failing store left out are named in one
    WARNING.

    Raises:
        lia_spark.tracking.store.TrackingError: the store is unreachable (before the block runs).
    """
    if not (config.tracking.enabled or required):
        yield NoTracker()
        return
    os.environ.setdefault(QUIET_URLS, "true")
    from lia_spark.tracking.mlflow_runs import AuditTableTracker, PipelineTracker

    tracker = (AuditTableTracker if table else PipelineTracker)(config, run_name=run_name)
    tracker.check()
    failed = True
    try:
        with _url_lines_to_the_log():
            try:
                yield tracker
                failed = False
            finally:
                if tracker.run_id:
                    tracker.best_effort("the run's end", functools.partial(tracker.end, failed=failed))
    finally:
        if tracker.not_logged:
            logger.warning("tracking: not logged to MLflow at %s: %s; %s", tracker.tracking_uri,
                           ", ".join(tracker.not_logged), TRACK_LATER)
