"""SparkSession for jobs, notebooks and tests: reuse an existing one, else build a local one."""
from __future__ import annotations

import logging
import os
import sys

from pyspark.sql import SparkSession

from lia_spark.config import ConfigError, SparkConfig

logger = logging.getLogger(__name__)


def _local_defaults(config: SparkConfig) -> dict[str, str]:
    cores = os.cpu_count() or 2
    return {
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(config.arrow_batch_rows),
        "spark.sql.shuffle.partitions": str(config.shuffle_partitions or 4 * cores),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": config.driver_memory,
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.parquet.compression.codec": "zstd",
    }


def get_spark(config: SparkConfig | None = None) -> SparkSession:
    """The active SparkSession (Databricks, pyspark shell, spark-submit) or a new local one.

    An active session is returned untouched. Otherwise settings given by ``spark-submit`` (``--master``,
    ``--conf``) win over this config's local defaults, which win over Spark's own.
    """
    config = config or SparkConfig()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    submitted = _submitted_settings()
    builder = SparkSession.builder.appName(config.app_name)
    if "spark.master" not in submitted:
        builder = builder.master(config.master)
    for key, value in {**_local_defaults(config), **dict(config.extra)}.items():
        if key not in submitted:
            builder = builder.config(key, value)
    session = builder.getOrCreate()
    logger.info("Spark %s session on %s (%s shuffle partitions)", session.version, session.sparkContext.master,
                session.conf.get("spark.sql.shuffle.partitions"))
    return session


def start_spark(config: SparkConfig) -> SparkSession:
    """:func:`get_spark` for commands: a session that cannot start is reported naming spark.master.

    Raises:
        ConfigError: naming spark.master and the first line of Spark's own reason.
    """
    try:
        return get_spark(config)
    except Exception as error:  # noqa: BLE001 - the JVM's failures arrive as many exception types
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ConfigError(f"spark.master: cannot start a Spark session ({reason}), got {config.master!r}; check "
                          "spark.master, spark.driver_memory, spark.extra and JAVA_HOME") from error


def _submitted_settings() -> set[str]:
    """Keys already set by spark-submit (visible as the SparkConf of a JVM launched for this process)."""
    from pyspark import SparkConf, SparkContext

    if os.environ.get("PYSPARK_GATEWAY_PORT") is None:
        return set()
    SparkContext._ensure_initialized()
    return {key for key, _ in SparkConf().getAll()}
