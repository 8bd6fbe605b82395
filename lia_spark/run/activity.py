"""What a command is doing, and a heartbeat that says so whenever it has been silent for ``run.progress_seconds``.

A stage's own progress lines (:mod:`lia_spark.engine.runtime.progress`) cover the time a stage computes; the
heartbeat covers the rest of a command, from its first second: the Spark session's start, the executors' check,
MLflow's start, the checks before the first stage. Code names its work with :func:`doing`; while the command runs
inside :func:`heartbeat`, a line is logged whenever the ``lia_spark`` logger has shown nothing for the interval:

    lia-spark run: checking that the executors import lia_spark (4 one-row tasks), 35 s in

with the time counted from the start of the work named (the innermost :func:`doing` block).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from typing import Iterator

logger = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # how often the heartbeat looks at the clock


def duration_text(seconds: float) -> str:
    """``45 s``, ``1 min 30 s``, ``2 h 05 min``."""
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


@dataclasses.dataclass(frozen=True)
class Activity:
    """The work a command does now and when it started (``time.monotonic``)."""

    text: str
    since: float


_lock = threading.Lock()
_current: list[Activity] = []  # the innermost doing() block last


def current_activity() -> Activity | None:
    """The innermost :func:`doing` block's work, None outside every block."""
    with _lock:
        return _current[-1] if _current else None


@contextlib.contextmanager
def doing(text: str) -> Iterator[None]:
    """The block does ``text`` (``"checking that the executors import lia_spark"``), for :func:`heartbeat`'s lines;
    the enclosing block's work again after it."""
    activity = Activity(text, time.monotonic())
    with _lock:
        _current.append(activity)
    try:
        yield
    finally:
        with _lock:
            _current.remove(activity)


class _LastLine(logging.Handler):
    """Notes when the logger it is attached to (or a child) last showed a line (INFO or above)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.at = time.monotonic()

    def emit(self, record: logging.LogRecord) -> None:
        self.at = time.monotonic()


@contextlib.contextmanager
def heartbeat(label: str, every: float) -> Iterator[None]:
    """While the block runs, log ``<label>: <work>, <time> in`` whenever the ``lia_spark`` logger showed no line for
    ``every`` seconds (``run.progress_seconds``; 0: never) and a :func:`doing` block names the work. No line is
    logged after the block is left."""
    if every <= 0:
        yield
        return
    watched = logging.getLogger("lia_spark")
    last = _LastLine()
    watched.addHandler(last)
    stopped = threading.Event()

    def beat() -> None:
        while not stopped.wait(min(POLL_SECONDS, every)):
            now, activity = time.monotonic(), current_activity()
            if activity is not None and now - last.at >= every:
                logger.info("%s: %s, %s in", label, activity.text, duration_text(now - activity.since))
                last.at = now  # also when the line is not shown (lia_spark's level above INFO)

    thread = threading.Thread(target=beat, name=f"lia-spark-heartbeat-{label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stopped.set()
        thread.join()
        watched.removeHandler(last)
