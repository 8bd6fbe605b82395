"""Where MLflow tracks: ``tracking.tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the
working directory; and the up-front check that the store answers before any stage runs.
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sqlite3
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

from lia_spark.run.failures import causes
from lia_spark.run.sections import TrackingConfig

logger = logging.getLogger(__name__)


def mlflow_3() -> bool:
    """True when the installed MLflow is 3 or later (a run's models are logged models, ``log_model(name=...)``;
    MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT is honoured); False under MLflow 2."""
    import mlflow

    return int(mlflow.__version__.split(".")[0]) >= 3


# What a database store (sqlite, the default) needs beyond mlflow-skinny, the client every MLflow install has.
DATABASE_STORE_MODULES = ("sqlalchemy", "alembic")
class TrackingError(RuntimeError):
    """The MLflow tracking store cannot be reached or written."""


REQUEST_SETTINGS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "request_timeout_seconds",
                    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "request_retries"}
# Retry i > 1 waits factor * 2^(i-1) s (an integer; MLflow's default 2 made a refused connection cost 4.8 s at 2
# retries, 1 makes it about 2 s)
BACKOFF_SETTING, BACKOFF_FACTOR = "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"


def budget_requests(config: TrackingConfig) -> dict[str, str]:
    """Give MLflow's HTTP calls of this process the time budget of tracking.request_timeout_seconds and
    tracking.request_retries (MLflow's own defaults retry for minutes, so a server lost mid-run held the stages for
    12 min) and a backoff factor of 1 between retries; an MLFLOW_HTTP_REQUEST_* variable the user set wins.
    Returns the settings in force."""
    for variable, field in REQUEST_SETTINGS.items():
        os.environ.setdefault(variable, str(getattr(config, field)))
    os.environ.setdefault(BACKOFF_SETTING, BACKOFF_FACTOR)
    return {variable: os.environ[variable] for variable in (*REQUEST_SETTINGS, BACKOFF_SETTING)}


@contextlib.contextmanager
def no_retries() -> Iterator[None]:
    """MLflow HTTP calls of the ``with`` block fail at once (no retry, 1 s timeout): for closing runs locally once the
    store is known to be gone."""
    saved = {variable: os.environ.get(variable) for variable in REQUEST_SETTINGS}
    os.environ.update({"MLFLOW_HTTP_REQUEST_TIMEOUT": "1", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"})
    try:
        yield
    finally:
        for variable, value in saved.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value


def sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def check_tracking_store(uri: str, *, timeout_seconds: float) -> None:
    """Fail fast, before any stage runs, when the store behind ``uri`` is unusable.

    HTTP(S) servers must answer ``GET /health`` within ``timeout_seconds``; a sqlite database needs the full mlflow
    (:data:`DATABASE_STORE_MODULES`), its folder is created and must be writable, and no other process may hold
    its write lock for longer than ``timeout_seconds`` (:func:`check_sqlite_lock`); other schemes (``databricks``)
    are checked by MLflow itself.

    Raises:
        TrackingError: naming the URI and the cause.
    """
    if uri.startswith(("http://", "https://")):
        health = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(health, timeout=timeout_seconds) as response:  # noqa: S310 - user's URI
                status = response.status
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise TrackingError(
                f"tracking.tracking_uri: MLflow server {uri} is unreachable ({reason}); start it, fix "
                "tracking.tracking_uri / $MLFLOW_TRACKING_URI, or set tracking.enabled=false") from error
        if status != 200:
            raise TrackingError(f"tracking.tracking_uri: {health} answered HTTP {status}, expected 200")
        return
    database = sqlite_path(uri)
    if database is not None:
        missing = [name for name in DATABASE_STORE_MODULES if importlib.util.find_spec(name) is None]
        if missing:
            raise TrackingError(f"tracking.tracking_uri: the sqlite store {uri} needs the full mlflow (this Python "
                                f"has MLflow's client alone, without {', '.join(missing)}); `pip install "
                                "'lia-spark[tracking]'`, or set tracking.tracking_uri to an MLflow server or "
                                "databricks, or tracking.enabled=false")
        try:
            database.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise TrackingError(f"tracking.tracking_uri: cannot create the folder of {uri} ({error})") from error
        if not os.access(database.parent, os.W_OK):
            raise TrackingError(f"tracking.tracking_uri: folder of {uri} is not writable")
        check_sqlite_lock(database, timeout_seconds=timeout_seconds)


LOCKED = "database is locked"  # sqlite's message (through sqlalchemy too) when a write lock outlasts the busy wait


MLFLOW_WAIT = "MLflow's own busy wait"  # how long a call after the up-front check waits for a sqlite lock


def locked_store_line(database: Path, waited: str) -> str:
    """The failure line of a sqlite store another process holds a write lock on: its path, how long it ``waited``,
    the fix."""
    return (f"tracking.tracking_uri: {database}: another process holds a write lock on this sqlite MLflow store "
            f"(still held after {waited}), got 'sqlite:///{database}'; wait "
            "for that process to finish (another run or `mlflow` command writing to it) and run again, or give "
            "concurrent runs their own tracking.tracking_uri (a sqlite file each, or one MLflow server: `mlflow "
            "server`, which serializes its writers)")


def check_sqlite_lock(database: Path, *, timeout_seconds: float) -> None:
    """Wait at most ``timeout_seconds`` for a write lock on the sqlite store ``database`` (``BEGIN IMMEDIATE``,
    released at once); nothing to check when the file does not exist yet (MLflow creates it).

    Raises:
        TrackingError: another process still holds its write lock (:func:`locked_store_line`).
    """
    if not database.is_file():
        return
    connection = sqlite3.connect(database, timeout=timeout_seconds, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
    except sqlite3.OperationalError as error:
        if LOCKED not in str(error):
            raise
        raise TrackingError(locked_store_line(database, f"{timeout_seconds:g} s, tracking.timeout_seconds")) from error
    finally:
        connection.close()


def is_locked_store(error: BaseException) -> bool:
    """Whether ``error`` or a cause of it is sqlite's "database is locked"."""
    return any(LOCKED in str(cause) for cause in causes(error))


def store_answers(uri: str, *, timeout_seconds: float) -> bool:
    """Whether the store behind ``uri`` still answers (after a failed call: was it the store, or the call?): the
    checks of :func:`check_tracking_store`, then one small query through MLflow's client."""
    import mlflow

    try:
        check_tracking_store(uri, timeout_seconds=timeout_seconds)
        mlflow.MlflowClient(uri).search_experiments(max_results=1)
    except Exception:  # noqa: BLE001 - any failure means the store does not answer
        logger.debug("tracking: store %s does not answer", uri, exc_info=True)
        return False
    return True


@contextlib.contextmanager
def logging_kept() -> Iterator[None]:
    """The process's logging configuration as it was before the block, whatever MLflow does inside it.

    MLflow 2 creates (or upgrades) a sqlite store's tables with alembic, whose ``env.py`` runs
    ``logging.config.fileConfig``: the root logger's handlers become alembic's console handler (another format, on
    stderr, so lia-spark's own lines changed format mid-run) and each of the ~30 migrations logs an INFO line. Inside
    the block no record below WARNING is logged (unless lia_spark's logger shows DEBUG, ``--verbose``); at its end
    every logger's level, handlers, propagation and state are restored."""
    manager = logging.Logger.manager
    loggers = [logging.getLogger(), *(found for found in manager.loggerDict.values()
                                      if isinstance(found, logging.Logger))]
    saved = [(found, found.level, list(found.handlers), found.propagate, found.disabled) for found in loggers]
    disabled = manager.disable
    if not logging.getLogger("lia_spark").isEnabledFor(logging.DEBUG):
        logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(disabled)
        for found, level, handlers, propagate, was_disabled in saved:
            found.setLevel(level)
            found.handlers[:] = handlers
            found.propagate, found.disabled = propagate, was_disabled

