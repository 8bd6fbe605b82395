"""One run per output folder: ``<run.output_dir>/_LIA_LOCK``, created only if it does not exist in one atomic
step: on a local disk (classic sessions and Spark Connect alike) with the system's exclusive create (``O_EXCL``),
elsewhere with the file system's ``create(path, overwrite=false)`` (atomic on HDFS and on object stores with
conditional writes; on a store without them a check, then a write, so the holder reads the lock back and of two
runs racing there the one whose record was overwritten stops).

The lock holds its holder's host, pid, command and start time. A second run fails fast naming the holder; a
lock whose holder is gone (no such process on this host) or that is older than ``run.stale_lock_hours`` is
reported as stale, one that started in the future (beyond :data:`CLOCK_SKEW_SECONDS`: a wrong clock or a file not
written by a run) as suspicious, each with the command that removes it, never broken silently. The holder deletes
it on exit, also when its command fails.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import socket
import time
from typing import Any, Iterator

from pyspark.sql import SparkSession

from lia_spark.engine.runtime.outputs import check_writable, delete_path, process_exists, read_text
from lia_spark.engine.spark.filesystem import file_errors, files_for
from lia_spark.run.checks import is_remote_path

LOCK_FILE = "_LIA_LOCK"
CLOCK_SKEW_SECONDS = 300.0  # how far another host's clock may run ahead of this one's before its lock is suspicious
HOLDER_WAIT_SECONDS = 5.0  # how long a run that lost the race waits for the winner's record to be readable


class RunLockError(RuntimeError):
    """Another run holds the output folder's lock, or a stale lock blocks it."""


@dataclasses.dataclass(frozen=True)
class LockHolder:
    """Who holds a lock: host, process id, command and start time (seconds since the epoch)."""

    host: str
    pid: int
    command: str
    started: float

    @classmethod
    def this_process(cls, command: str) -> LockHolder:
        """The holder record of the running process."""
        return cls(socket.gethostname(), os.getpid(), command, time.time())

    def to_json(self) -> str:
        """The lock file's content."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    def describe(self) -> str:
        """``pid 123 on host h (lia-spark run) since 2026-11-23T14:00:00Z``."""
        since = datetime.datetime.fromtimestamp(self.started, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"pid {self.pid} on host {self.host} ({self.command}) since {since}"

    def future_reason(self) -> str:
        """Why the lock cannot be a live run's because it started in the future ("" when it did not)."""
        ahead = self.started - time.time()
        if ahead <= CLOCK_SKEW_SECONDS:
            return ""
        return (f"it started {ahead / 3600:,.1f} h in the future, more than the {CLOCK_SKEW_SECONDS:g} s two clocks "
                f"may differ (the clock of host {self.host} is wrong, or no lia-spark run wrote it)")

    def stale_reason(self, *, max_age_hours: float) -> str:
        """Why the lock no longer protects a live run ("" while its holder may still be running)."""
        hours = (time.time() - self.started) / 3600
        if hours > max_age_hours:
            return f"it is {hours:.1f} h old, more than run.stale_lock_hours={max_age_hours:g}"
        if self.host == socket.gethostname() and not process_exists(self.pid):
            return f"process {self.pid} no longer runs on this host"
        return ""


def lock_path(output_dir: str) -> str:
    """Where the lock of ``output_dir`` lives."""
    return f"{output_dir.rstrip('/')}/{LOCK_FILE}"


def read_holder(spark: SparkSession, path: str) -> LockHolder | None:
    """The holder recorded in the lock file ``path``; None when it cannot be read (e.g. still being written)."""
    try:
        values: Any = json.loads(read_text(spark, path))
        return LockHolder(str(values["host"]), int(values["pid"]), str(values["command"]), float(values["started"]))
    except file_errors() + (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def _written_holder(spark: SparkSession, path: str) -> LockHolder | None:
    """:func:`read_holder`, waiting up to :data:`HOLDER_WAIT_SECONDS` while the lock is still being written (it
    exists from the moment its creator won the race, empty until the record is written)."""
    deadline = time.monotonic() + HOLDER_WAIT_SECONDS
    while (holder := read_holder(spark, path)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return holder


def _held_error(spark: SparkSession, output_dir: str, *, max_age_hours: float) -> RunLockError:
    path = lock_path(output_dir)
    holder = _written_holder(spark, path)
    if holder is None:
        return RunLockError(f"run.output_dir: another run is taking the lock {path} (its holder is not readable yet), "
                            f"got {output_dir!r}; wait for it or choose another run.output_dir")
    remove = f"hadoop fs -rm {path}" if is_remote_path(path) else f"rm {path}"
    future = holder.future_reason()
    if future:
        return RunLockError(f"run.output_dir: suspicious lock {path} of {holder.describe()}: {future}, got "
                            f"{output_dir!r}; if no run uses the folder, remove it with `{remove}` and start again")
    stale = holder.stale_reason(max_age_hours=max_age_hours)
    if stale:
        return RunLockError(f"run.output_dir: stale lock {path} of {holder.describe()}: {stale}, got {output_dir!r}; "
                            f"if no run uses the folder, remove it with `{remove}` and start again")
    return RunLockError(f"run.output_dir: another run holds {path}: {holder.describe()}, got {output_dir!r}; wait "
                        "for it to finish or choose another run.output_dir")


@contextlib.contextmanager
def run_lock(spark: SparkSession, output_dir: str, *, command: str, max_age_hours: float) -> Iterator[LockHolder]:
    """Hold the lock of ``output_dir`` for the ``with`` block (deleted at exit, also on failure; a folder the lock
    created and nothing else used is removed with it, so a run that fails its up-front checks leaves nothing).

    Raises:
        RunLockError: another run holds it, or a stale lock blocks it (the message names the holder).
        PermissionError: the folder cannot be written (:func:`lia_spark.engine.runtime.outputs.check_writable`).
    """
    path = lock_path(output_dir)
    holder = LockHolder.this_process(command)
    folder = output_dir.rstrip("/")
    try:
        files = files_for(spark, path)
        created_folder = not files.exists(folder)
    except ValueError as error:
        raise ValueError(f"run.output_dir: {error}") from None
    try:
        created = files.write_text(path, holder.to_json(), overwrite=False)
    except file_errors():
        check_writable(spark, output_dir)
        raise
    if not created or read_holder(spark, path) != holder:  # read back: a store whose create is not atomic
        raise _held_error(spark, output_dir, max_age_hours=max_age_hours)
    try:
        yield holder
    finally:
        if read_holder(spark, path) == holder:
            delete_path(spark, path)
            if created_folder and not [entry for entry in files.list_folder(folder)
                                       if not entry.name.startswith(".")]:
                files.delete(folder)
