"""Independent fits as parallel Spark tasks: ``fit(shared, job, threads)`` for every job of a list, one task per job,
the ``shared`` data (a day sample already on the driver) broadcast once and read by every task.

Each task fits with spark.task.cpus threads (XGBoost hist and CatBoost give the same model whatever the thread
count, so a task's model equals the driver's); its outcome (the value, or the error that stopped it) travels back
pickled, so one failing job never stops the others. With a single job, or on Spark Connect (no broadcast; the
data would travel inside the plan), the jobs run one after another on the driver with every core.
"""
from __future__ import annotations

import dataclasses
import logging
import pickle
import time
from typing import Any, Callable, Iterator, Sequence, cast

import pandas as pd
from pyspark.sql import SparkSession

from lia_spark.engine.runtime.progress import plan_work, work_done, work_in_tasks
from lia_spark.engine.spark.session import describe_jobs, is_connect, shipped
from lia_spark.run import interrupts

logger = logging.getLogger(__name__)

OUTCOME_SCHEMA = "job long, outcome binary"
IN_TASKS, ON_DRIVER = "spark tasks", "driver"

Fit = Callable[[Any, Any, int], Any]  # (shared data, job, threads; 0 = every core) -> value


@dataclasses.dataclass(frozen=True)
class FitOutcome:
    """One job's outcome: its name, its value (None when it failed), the error that stopped it ("" when none: the
    exception's type and message), its seconds and where it ran (:data:`IN_TASKS` or :data:`ON_DRIVER`)."""

    name: str
    value: Any
    error: str
    seconds: float
    where: str

    @property
    def failed(self) -> bool:
        """True when the job raised."""
        return bool(self.error)


def _attempt(fit: Fit, shared: Any, job: Any, threads: int) -> tuple[Any, str, float]:
    """``fit``'s value, error text and seconds; an exception becomes its error text."""
    started = time.monotonic()
    try:
        return fit(shared, job, threads), "", time.monotonic() - started
    except Exception as error:  # noqa: BLE001 - any failure of one fit is reported and the others go on
        interrupts.check()
        return None, f"{type(error).__name__}: {error}", time.monotonic() - started


def _on_driver(fit: Fit, shared: Any, job: Any, name: str, progress: str) -> FitOutcome:
    """One job on the driver with every core, its end logged (``progress`` names its place in the list) and
    counted in the step's work (:func:`lia_spark.engine.runtime.progress.work_done`)."""
    outcome = FitOutcome(name, *_attempt(fit, shared, job, 0), ON_DRIVER)
    logger.info("%s %s %s in %.1f s", progress, name, "failed" if outcome.failed else "done", outcome.seconds)
    work_done()
    return outcome


def task_threads(spark: SparkSession) -> int:
    """Threads of one fit in a task: spark.task.cpus (at least 1)."""
    return max(1, int(cast(str, spark.conf.get("spark.task.cpus", "1"))))  # a str default: never None


def run_fits(spark: SparkSession, shared: Any, jobs: Sequence[tuple[str, Any]], fit: Fit, *, purpose: str,
             in_tasks: bool = True) -> list[FitOutcome]:
    """``fit(shared, job, threads)`` for every ``(name, job)`` of ``jobs``, in that order: with ``in_tasks`` in
    parallel Spark tasks (one per job) when there are at least two jobs on a classic session, else on the driver
    (see the module docstring). ``fit`` and the jobs must pickle (a module-level function and plain data);
    ``purpose`` names the work in Spark's UI and the log. The jobs are the running step's planned work: its progress
    lines count them (:func:`lia_spark.engine.runtime.progress.plan_work`)."""
    plan_work("model fits", len(jobs))
    if not in_tasks or len(jobs) < 2 or is_connect(spark):
        if in_tasks and len(jobs) > 1:
            logger.info("%s: %d fits one after another on the driver (Spark Connect has no broadcast)", purpose,
                        len(jobs))
        return [_on_driver(fit, shared, job, name, f"{purpose}: fit {index}/{len(jobs)}")
                for index, (name, job) in enumerate(jobs, start=1)]
    threads = task_threads(spark)
    describe_jobs(spark, f"{purpose}: {len(jobs)} fits in parallel tasks")
    started = time.monotonic()
    with shipped(spark, shared) as data, work_in_tasks(len(jobs)):
        work = [job for _, job in jobs]

        def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            for frame in frames:
                for index in frame["id"].tolist():
                    outcome = _attempt(fit, data.value, work[index], threads)
                    yield pd.DataFrame({"job": [index], "outcome": [pickle.dumps(outcome)]})

        rows = spark.range(len(jobs), numPartitions=len(jobs)).mapInPandas(run, OUTCOME_SCHEMA).collect()
        found: dict[int, tuple[Any, str, float]] = {row["job"]: pickle.loads(row["outcome"]) for row in rows}
    logger.info("%s: %d fits in parallel tasks (%d thread(s) each) in %.1f s", purpose, len(jobs), threads,
                time.monotonic() - started)
    return [FitOutcome(name, *found[index], IN_TASKS) for index, (name, _) in enumerate(jobs)]
