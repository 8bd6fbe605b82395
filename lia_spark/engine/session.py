"""SparkSession for jobs, notebooks and tests: reuse an existing one, else build a local or Spark Connect one;
and the few session services the stages use, on classic sessions and over Spark Connect alike (job descriptions,
job groups, default parallelism, shipping a large value to the tasks)."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from typing import Any, Iterator

from pyspark.sql import SparkSession, functions as F

from lia_spark.run.checks import ConfigError
from lia_spark.run.sections import SparkConfig

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
    """The active SparkSession (Databricks, pyspark shell, spark-submit) or a new one: over Spark Connect when
    ``spark.remote`` is set, else a local one.

    An active session is returned untouched. Otherwise settings given by ``spark-submit`` (``--master``,
    ``--conf``) win over this config's local defaults, which win over Spark's own. A ``sc://`` server keeps its
    own settings: only ``spark.extra`` is sent to it.
    """
    config = config or SparkConfig()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    remote = config.remote.strip()
    submitted = set() if remote else _submitted_settings()
    builder = SparkSession.builder.appName(config.app_name)
    if remote:
        builder = builder.remote(remote)
    elif "spark.master" not in submitted:
        builder = builder.master(config.master)
    defaults = {} if remote.startswith("sc://") else _local_defaults(config)
    for key, value in {**defaults, **dict(config.extra)}.items():
        if key not in submitted:
            builder = builder.config(key, value)
    session = builder.getOrCreate()
    logger.info("Spark %s session on %s (%s shuffle partitions)", session.version, master_name(session),
                session.conf.get("spark.sql.shuffle.partitions"))
    return session


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session (Databricks shared and serverless compute, ``spark.remote``): it has no
    SparkContext and no JVM on the Python side."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def master_name(spark: SparkSession) -> str:
    """The session's master URL (``spark.master``; over Spark Connect as the server reports it)."""
    if is_connect(spark):
        return f"spark connect ({spark.conf.get('spark.master', 'server')})"
    return spark.sparkContext.master


def describe_jobs(spark: SparkSession, description: str | None) -> None:
    """Name the next Spark jobs in the Spark UI, None to clear (classic sessions; Spark Connect has no job
    descriptions, its jobs carry the tags of :func:`job_group`)."""
    if not is_connect(spark):
        spark.sparkContext.setJobDescription(description)


@contextlib.contextmanager
def job_group(spark: SparkSession, group: str, description: str) -> Iterator[None]:
    """Group the jobs of the ``with`` block: a job group on classic sessions (cleared at exit with the job
    description), an operation tag over Spark Connect (``spark.interruptTag(group)`` cancels them)."""
    if is_connect(spark):
        spark.addTag(group)
        try:
            yield
        finally:
            spark.removeTag(group)
        return
    context = spark.sparkContext
    context.setJobGroup(group, description, interruptOnCancel=False)
    try:
        yield
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
        context.setLocalProperty("spark.job.description", None)


_CONNECT_PARALLELISM: dict[str, int] = {}


def default_parallelism(spark: SparkSession) -> int:
    """Spark's default parallelism (total executor cores): ``SparkContext.defaultParallelism``; over Spark Connect
    ``spark.default.parallelism`` when set, else the partitions of ``spark.range`` (which uses it), measured once
    per session."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    if spark.session_id not in _CONNECT_PARALLELISM:
        configured = spark.conf.get("spark.default.parallelism", None)
        _CONNECT_PARALLELISM[spark.session_id] = int(configured) if configured else (
            spark.range(1 << 16).select(F.spark_partition_id().alias("partition")).distinct().count())
    return _CONNECT_PARALLELISM[spark.session_id]


@dataclasses.dataclass(frozen=True)
class _InClosure:
    """A value shipped inside the task closure (Spark Connect has no broadcast variables)."""

    value: Any


@contextlib.contextmanager
def shipped(spark: SparkSession, value: Any) -> Iterator[Any]:
    """``value`` for Spark tasks, read there as ``.value``: a broadcast variable on classic sessions (destroyed at
    exit), over Spark Connect the value itself inside the function's closure (serialized into the plan)."""
    if is_connect(spark):
        yield _InClosure(value)
        return
    broadcast = spark.sparkContext.broadcast(value)
    try:
        yield broadcast
    finally:
        broadcast.destroy()


def start_spark(config: SparkConfig) -> SparkSession:
    """:func:`get_spark` for commands: a session that cannot start is reported naming spark.master (spark.remote
    when set).

    Raises:
        ConfigError: naming spark.master or spark.remote and the first line of Spark's own reason.
    """
    try:
        return get_spark(config)
    except Exception as error:  # noqa: BLE001 - the JVM's failures arrive as many exception types
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        field, value = ("spark.remote", config.remote) if config.remote else ("spark.master", config.master)
        raise ConfigError(f"{field}: cannot start a Spark session ({reason}), got {value!r}; check "
                          f"{field}, spark.driver_memory, spark.extra and JAVA_HOME") from error


def _submitted_settings() -> set[str]:
    """Keys already set by spark-submit (visible as the SparkConf of a JVM launched for this process)."""
    from pyspark import SparkConf, SparkContext

    if os.environ.get("PYSPARK_GATEWAY_PORT") is None:
        return set()
    SparkContext._ensure_initialized()
    return {key for key, _ in SparkConf().getAll()}
