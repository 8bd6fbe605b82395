"""A sqlite MLflow store another process holds a write lock on: the up-front check waits tracking.timeout_seconds,
then the command ends exit 1 with one line naming the store's path, the lock and the fix; once the lock is released
the same command tracks. The lock is real: a transaction (BEGIN EXCLUSIVE) held by another process."""
from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import mlflow
import pytest

from lia_spark.run.config import config_from_dict
from lia_spark.run.failures import RUNTIME_EXIT, failure_line
from lia_spark.tracking.mlflow_runs import PipelineTracker
from lia_spark.tracking.session import tracking_session
from lia_spark.tracking.store import TrackingError

HOLDER = """
import sqlite3, sys
database = sqlite3.connect(sys.argv[1], isolation_level=None)
database.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()  # until the test closes our stdin
database.execute("ROLLBACK")
"""


@contextlib.contextmanager
def held(database: Path) -> Iterator[None]:
    """Another process holding an exclusive transaction on ``database`` until the block ends."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(database)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


@pytest.fixture()
def store(tmp_path) -> Path:
    """An MLflow sqlite store with its tables (created by MLflow itself)."""
    database = tmp_path / "mlflow.db"
    mlflow.MlflowClient(f"sqlite:///{database}").search_experiments(max_results=1)
    return database


def _config(tmp_path: Path, database: Path):
    return config_from_dict({"run": {"output_dir": str(tmp_path / "out")},
                             "tracking": {"tracking_uri": f"sqlite:///{database}", "experiment": "locked",
                                          "timeout_seconds": 1.0}})


def test_a_store_held_by_another_writer_ends_exit_1_naming_its_path_and_the_fix(tmp_path, store):
    ran = []
    with held(store):
        with pytest.raises(TrackingError) as raised:
            with tracking_session(_config(tmp_path, store)):
                ran.append("the command")
    assert ran == []
    line, code = failure_line(raised.value)
    assert code == RUNTIME_EXIT and "\n" not in line
    assert line.startswith(f"tracking.tracking_uri: {store}: another process holds a write lock on this sqlite "
                           "MLflow store (still held after 1 s, tracking.timeout_seconds)"), line
    assert "wait for that process to finish" in line and "their own tracking.tracking_uri" in line
    assert "mlflow server" in line
    with tracking_session(_config(tmp_path, store)) as tracker:  # the lock released: the same command tracks
        run_id = tracker.start()
    assert mlflow.MlflowClient(f"sqlite:///{store}").get_run(run_id).info.status == "FINISHED"


def test_a_lock_taken_after_the_up_front_check_names_the_store_when_the_run_starts(tmp_path, store):
    tracker = PipelineTracker(_config(tmp_path, store))
    tracker.check()
    with held(store), pytest.raises(TrackingError) as raised:
        tracker.start()
    line, code = failure_line(raised.value)
    assert code == RUNTIME_EXIT and line.startswith(f"tracking.tracking_uri: {store}: another process holds a "
                                                    "write lock on this sqlite MLflow store"), line
    while mlflow.active_run() is not None:
        mlflow.end_run()


def test_a_store_not_created_yet_passes_the_check(tmp_path):
    database = tmp_path / "new" / "mlflow.db"
    with tracking_session(_config(tmp_path, database)) as tracker:
        assert tracker.start()
    assert database.is_file()
