"""Progress lines of a running stage: while a long step computes, a daemon thread on the driver reads Spark's
status and logs, every ``run.progress_seconds``, how many tasks of each active Spark stage are done, their rate
and the ETA of that Spark stage, under the description of the running jobs
(:func:`lia_spark.engine.spark.session.describe_jobs`), e.g.

    posteriors: bag, release, posteriors; write per-row results: 37/200 tasks of Spark stage 12 done, 2 running,
    1.8 tasks/s, ETA 1 min 30 s (2 min 10 s in)

or, when no Spark stage is active (work on the driver: model fits, bounds), a heartbeat with the last
description, ``train: still running, 2 min 10 s in (no Spark stage active; last step named: fitting the proxy
(xgboost) on 800,000 rows on the driver)``. Classic sessions are polled through their
status tracker; over Spark Connect the client's progress handler (``spark.registerProgressHandler``) keeps the
latest state of each running operation.

A Spark stage's ETA is not the step's: train runs many Spark jobs and fits on the driver between them. A step that
knows its units of work declares them (:func:`plan_work`, :func:`work_done`; e.g. train's model fits, utility's grid
fits), and its lines then lead with the step's count and ETA, the same on classic sessions and over Spark Connect
(the counts live on the driver); inside a pipeline they also say which step of the pipeline runs
(:func:`pipeline_step`):

    train: pipeline step 2/6; 1/3 model fits done, ETA of the step 4 min 20 s (rate so far); still running, ...

The step's ETA is (seconds since the plan) / (units done) x (units left): the rate so far, no ETA before the first
unit is done.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from pyspark.sql import SparkSession

from lia_spark.engine.spark.session import described_jobs, status_tracker
from lia_spark.run.activity import duration_text

if TYPE_CHECKING:
    from pyspark import StatusTracker
    from pyspark.sql.connect.shell.progress import ProgressHandler
else:
    ProgressHandler = object  # the ABC is only nominal (Spark calls the handler) and needs Spark Connect's modules

logger = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # task counts are sampled this often (rates), lines are logged every interval
SHOWN_STAGES = 3  # at most this many Spark stages per line


@dataclasses.dataclass(frozen=True)
class StageProgress:
    """One active Spark stage: its id, its tasks, those done and those running (None when unknown)."""

    stage_id: int
    tasks: int
    completed: int
    running: int | None = None


def progress_line(label: str, stages: list[StageProgress], *, elapsed: float, rates: dict[int, float],
                  doing: str = "", step: str = "") -> str:
    """The line logged for ``label`` after ``elapsed`` seconds while the jobs described as ``doing`` run: the
    step's position and work (``step``: :class:`StepWork.text`, led by the pipeline's step), then each active Spark
    stage's tasks done and running, its rate (``rates``: tasks/s by stage id, absent while unknown) and the ETA of
    its remaining tasks; a heartbeat when no Spark stage is active."""
    head = f"{step}; " if step else ""
    if not stages:
        last = f"; last step named: {doing.removeprefix(f'{label}: ')}" if doing else ""
        return f"{label}: {head}still running, {duration_text(elapsed)} in (no Spark stage active{last})"
    parts = []
    for stage in stages[:SHOWN_STAGES]:
        text = f"{stage.completed}/{stage.tasks} tasks of Spark stage {stage.stage_id} done"
        if stage.running:
            text += f", {stage.running} running"
        rate, left = rates.get(stage.stage_id), max(stage.tasks - stage.completed, 0)
        if rate and stage.running and left <= stage.running:
            text += f", {rate:.2g} tasks/s, no ETA (the last {left} running: how long they take is not known)"
        elif rate:
            text += f", {rate:.2g} tasks/s, ETA {duration_text(left / rate)}"
        parts.append(text)
    if len(stages) > SHOWN_STAGES:
        parts.append(f"{len(stages) - SHOWN_STAGES} more Spark stages active")
    where = doing if doing.startswith(f"{label}:") else f"{label} ({doing})" if doing else label
    return f"{where}: {head}{'; '.join(parts)} ({duration_text(elapsed)} in)"


def classic_stages(tracker: StatusTracker) -> list[StageProgress]:
    """The active stages of a classic session's status tracker."""
    found = []
    for stage_id in sorted(tracker.getActiveStageIds()):
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            found.append(StageProgress(stage_id, info.numTasks, info.numCompletedTasks, info.numActiveTasks))
    return found


@dataclasses.dataclass
class StepWork:
    """The declared work of a running step: ``total`` units named ``unit`` (e.g. "model fits"), ``done`` of them
    finished, counted from ``started`` (time.monotonic()); ``in_tasks`` of the units run as the tasks of one Spark
    stage of that many tasks, whose finished tasks count as done while it runs (:func:`work_in_tasks`)."""

    unit: str
    total: int
    started: float
    done: int = 0
    in_tasks: int = 0

    def done_now(self, stages: list[StageProgress]) -> int:
        """Units done, counting the finished tasks of the Spark stage running ``in_tasks`` of them."""
        running = max((stage.completed for stage in stages if stage.tasks == self.in_tasks), default=0)
        return min(self.done + (running if self.in_tasks else 0), self.total)

    def text(self, stages: list[StageProgress], now: float) -> str:
        """``1/3 model fits done, ETA of the step 4 min 20 s (rate so far)``; no ETA before the first is done."""
        done = self.done_now(stages)
        counted = f"{done}/{self.total} {self.unit} done"
        if done == 0:
            return f"{counted}, ETA of the step after the first"
        if done >= self.total:
            return counted
        return f"{counted}, ETA of the step {duration_text((now - self.started) / done * (self.total - done))} " \
               "(rate so far)"


class _Slot:
    """The planned work of one running :func:`reporting_progress` block (None until :func:`plan_work`)."""

    def __init__(self) -> None:
        self.work: StepWork | None = None


class _Steps:
    """The slots of the running :func:`reporting_progress` blocks, innermost last, which :func:`plan_work` and
    :func:`work_done` change, and the pipeline's position (:func:`pipeline_step`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.slots: list[_Slot] = []
        self.position = ""

    def innermost(self) -> StepWork | None:
        """The innermost block's planned work (call under :attr:`lock`)."""
        return self.slots[-1].work if self.slots else None


_STEPS = _Steps()


def plan_work(unit: str, total: int) -> None:
    """The innermost running step (a :func:`reporting_progress` block) does ``total`` units of ``unit`` from now
    (replacing an earlier plan); nothing when no step is reporting or ``total`` < 1."""
    with _STEPS.lock:
        if _STEPS.slots and total >= 1:
            _STEPS.slots[-1].work = StepWork(unit, total, time.monotonic())


def work_done(units: int = 1) -> None:
    """``units`` more units of the innermost running step's plan are done."""
    with _STEPS.lock:
        work = _STEPS.innermost()
        if work is not None:
            work.done = min(work.done + units, work.total)


@contextlib.contextmanager
def work_in_tasks(units: int) -> Iterator[None]:
    """``units`` units of the innermost step's plan run as the ``units`` tasks of one Spark stage inside the block:
    its finished tasks count as done while it runs; they are done when the block ends without an error."""
    with _STEPS.lock:
        work = _STEPS.innermost()
        if work is not None:
            work.in_tasks = units
    try:
        yield
    finally:
        with _STEPS.lock:
            if work is not None:
                work.in_tasks = 0
    work_done(units)


@contextlib.contextmanager
def pipeline_step(index: int, total: int) -> Iterator[None]:
    """Progress lines inside the block say ``pipeline step <index>/<total>``."""
    _STEPS.position = f"pipeline step {index}/{total}"
    try:
        yield
    finally:
        _STEPS.position = ""


class ConnectProgress(ProgressHandler):
    """A Spark Connect progress handler (``spark.registerProgressHandler``) that keeps the unfinished stages of
    each running operation, for :meth:`stages` to read from another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._operations: dict[str | None, list[StageProgress]] = {}

    def __call__(self, stages: Iterable[Any] | None, inflight_tasks: int, operation_id: str | None,
                 done: bool) -> None:
        """Called by the Connect client on every progress update of an operation (``done`` at its end)."""
        active = [StageProgress(stage.stage_id, stage.num_tasks, stage.num_completed_tasks)
                  for stage in stages or () if not stage.done]
        with self._lock:
            if done:
                self._operations.pop(operation_id, None)
            else:
                self._operations[operation_id] = active

    def stages(self) -> list[StageProgress]:
        """The unfinished stages of every running operation, by stage id."""
        with self._lock:
            return sorted((stage for stages in self._operations.values() for stage in stages),
                          key=lambda stage: stage.stage_id)


class ProgressReporter:
    """The daemon thread behind :func:`reporting_progress`: samples ``poll`` every :data:`POLL_SECONDS` (or
    ``every``, when shorter) and logs :func:`progress_line` every ``every`` seconds until :meth:`stop`."""

    def __init__(self, label: str, every: float, poll: Callable[[], list[StageProgress]],
                 slot: _Slot | None = None) -> None:
        self._label, self._every, self._poll = label, every, poll
        self._slot = slot or _Slot()
        self._stopped = threading.Event()
        self._first_seen: dict[int, tuple[float, int]] = {}  # stage id -> (when first seen, tasks done then)
        self._thread = threading.Thread(target=self._run, name=f"lia-spark-progress-{label}", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for it: no line is logged after this returns."""
        self._stopped.set()
        self._thread.join()

    def _sample(self, now: float) -> tuple[list[StageProgress], dict[int, float]]:
        try:
            stages = self._poll()
        except Exception as error:  # noqa: BLE001 - a status read failing (session stopping) costs a heartbeat
            logger.debug("%s: cannot read Spark's progress: %s", self._label, error)
            stages = []
        rates = {}
        for stage in stages:
            seen, done = self._first_seen.setdefault(stage.stage_id, (now, stage.completed))
            if stage.completed > done and now > seen:
                rates[stage.stage_id] = (stage.completed - done) / (now - seen)
        return stages, rates

    def _run(self) -> None:
        started = time.monotonic()
        due = started + self._every
        while not self._stopped.wait(min(POLL_SECONDS, self._every)):
            now = time.monotonic()
            stages, rates = self._sample(now)
            if now >= due:
                logger.info("%s", progress_line(self._label, stages, elapsed=now - started, rates=rates,
                                                doing=described_jobs(), step=self._step_text(stages, now)))
                due = now + self._every

    def _step_text(self, stages: list[StageProgress], now: float) -> str:
        with _STEPS.lock:
            work = self._slot.work
            parts = [_STEPS.position, work.text(stages, now) if work is not None else ""]
        return "; ".join(part for part in parts if part)


@contextlib.contextmanager
def reporting_progress(spark: SparkSession, label: str, every: float) -> Iterator[None]:
    """Log ``label``'s progress every ``every`` seconds (``run.progress_seconds``; 0: nothing) while the ``with``
    block runs; the reporting thread has ended when the block is left."""
    slot = _Slot()
    with _STEPS.lock:
        _STEPS.slots.append(slot)
    try:
        if every <= 0:
            yield
        else:
            with _reporter(spark, label, every, slot):
                yield
    finally:
        with _STEPS.lock:
            _STEPS.slots = [held for held in _STEPS.slots if held is not slot]


@contextlib.contextmanager
def _reporter(spark: SparkSession, label: str, every: float, slot: _Slot) -> Iterator[None]:
    """The reporting thread of :func:`reporting_progress`, reading ``slot``'s planned work."""
    tracker = status_tracker(spark)
    handler = None
    poll: Callable[[], list[StageProgress]]
    if tracker is None:
        handler = ConnectProgress()
        spark.registerProgressHandler(handler)
        poll = handler.stages
    else:
        poll = functools.partial(classic_stages, tracker)
    reporter = ProgressReporter(label, every, poll, slot)
    reporter.start()
    try:
        yield
    finally:
        reporter.stop()
        if handler is not None:
            spark.removeProgressHandler(handler)
