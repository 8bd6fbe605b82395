"""Where MLflow tracks (``tracking.tracking_uri``) and whether the installed MLflow and SQLAlchemy can open that store:
what the up-front checks (:mod:`lia_spark.run.requirements`) and the tracking code (:mod:`lia_spark.tracking.store`)
both read, without importing MLflow.
"""
from __future__ import annotations

import os
from pathlib import Path

from lia_spark.run.sections import TrackingConfig

DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")  # MLflow's database stores (``scheme[+driver]://``)
# MLflow before 3.9 imports SQLAlchemy's FallbackAsyncAdaptedQueuePool, which SQLAlchemy 2.1 removed: its database
# store fails at its first call, after Spark's start-up (tried: MLflow 2.21.3 and 3.8.1 fail with SQLAlchemy 2.1.9,
# MLflow 3.9.0 and 3.17 work with it).
POOL_CLASS_MLFLOW, POOL_CLASS_SQLALCHEMY = (3, 9), (2, 1)


def resolve_tracking_uri(config: TrackingConfig) -> str:
    """``tracking.tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else sqlite:///<cwd>/mlflow.db."""
    uri = config.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    return uri or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def is_database_store(uri: str) -> bool:
    """Whether ``uri`` names one of MLflow's database stores (:data:`DATABASE_SCHEMES`)."""
    return uri.split(":", 1)[0].split("+", 1)[0].lower() in DATABASE_SCHEMES and "://" in uri


def database_store_problem(uri: str, mlflow: tuple[int, int], sqlalchemy: tuple[int, int] | None
                           ) -> tuple[str, str] | None:
    """(what is wrong, the fix) when MLflow ``mlflow`` (major, minor) cannot open the database store ``uri`` with
    SQLAlchemy ``sqlalchemy`` (None: not installed, which :func:`lia_spark.tracking.store.check_tracking_store`
    reports); None when it can, or ``uri`` is no database store."""
    if not is_database_store(uri) or sqlalchemy is None or mlflow >= POOL_CLASS_MLFLOW \
            or sqlalchemy < POOL_CLASS_SQLALCHEMY:
        return None
    below = ".".join(map(str, POOL_CLASS_SQLALCHEMY))
    return (f"MLflow before {'.'.join(map(str, POOL_CLASS_MLFLOW))} cannot open the database store {uri} "
            f"(tracking.tracking_uri) with SQLAlchemy {below} or newer (it imports a pool class SQLAlchemy {below} "
            "removed)", f"`pip install 'sqlalchemy<{below}'`, or MLflow >= "
            f"{'.'.join(map(str, POOL_CLASS_MLFLOW))}, or track to an MLflow server (tracking.tracking_uri=http://...)")
