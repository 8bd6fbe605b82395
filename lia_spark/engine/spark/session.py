"""SparkSession for jobs, notebooks and tests: reuse an existing one, else build a local or Spark Connect one;
and the few session services the stages use, on classic sessions and over Spark Connect alike (job descriptions,
job groups, default parallelism, shipping a large value to the tasks, the status of running stages); and the
stderr of a spark-submit launcher."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import logging
import os
import re
import stat
import subprocess
import sys
import time
import warnings
from typing import TYPE_CHECKING, Any, Iterator, TextIO, cast

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from lia_spark.run.sections import SparkConfig

if TYPE_CHECKING:
    from pyspark import StatusTracker
    from pyspark.sql.connect.session import SparkSession as ConnectSession

logger = logging.getLogger(__name__)


def _local_defaults(config: SparkConfig) -> dict[str, str]:
    """Local session settings; Spark's console progress bar (on stderr) only where stderr is a terminal, so logs
    written to files and CI stay free of its carriage-return lines; Spark's own logs at WARN (spark-submit's default
    profile logs every INFO line, which buries lia_spark's progress; ``--conf spark.log.level=INFO`` brings them
    back)."""
    cores = os.cpu_count() or 2
    return {
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(config.arrow_batch_rows),
        "spark.sql.shuffle.partitions": str(config.shuffle_partitions or 4 * cores),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": config.driver_memory,
        "spark.ui.showConsoleProgress": str(sys.stderr is not None and sys.stderr.isatty()).lower(),
        "spark.sql.parquet.compression.codec": "zstd",
        "spark.log.level": "WARN",
    }


def get_spark(config: SparkConfig | None = None) -> SparkSession:
    """The active SparkSession (Databricks, pyspark shell, spark-submit) or a new one: over Spark Connect when
    ``spark.remote`` is set, else a local one.

    An active session is returned as it is but for Parquet's page checksums, written into every page and verified
    on every read (:func:`checksummed_parquet`). Otherwise settings given by ``spark-submit`` (``--master``,
    ``--conf``) win over this config's local defaults, which win over Spark's own. A ``sc://`` server keeps its own
    settings: only ``spark.extra`` is sent to it.
    """
    config = config or SparkConfig()
    active = SparkSession.getActiveSession()
    if active is not None:
        return checksummed_parquet(active)
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
    settings = {key: value for key, value in {**defaults, **dict(config.extra)}.items() if key not in submitted}
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _started_servers_settings_quiet(remote, settings):
        session = checksummed_parquet(builder.getOrCreate())
    logger.info("Spark %s session on %s (%s shuffle partitions)", session.version, master_name(session),
                session.conf.get("spark.sql.shuffle.partitions"))
    return session


@contextlib.contextmanager
def _started_servers_settings_quiet(remote: str, settings: dict[str, str]) -> Iterator[None]:
    """Silence pyspark's "Failed to set <key>" warnings for ``settings`` when ``remote`` is a local Connect server
    (``local[N]``): pyspark starts that server with every setting (static ones such as spark.driver.memory included),
    then sets each again on the session, where a static one is refused with a warning although the server has it.
    Warnings for other keys, and every warning from a ``sc://`` server, pass."""
    with warnings.catch_warnings():
        if remote.startswith("local"):
            for key in settings:
                warnings.filterwarnings("ignore", message=f"Failed to set {re.escape(key)} to ", category=UserWarning)
        yield


PARQUET_CHECKSUMS = {"parquet.page.write-checksum.enabled": "true", "parquet.page.verify-checksum.enabled": "true"}


def checksummed_parquet(spark: SparkSession) -> SparkSession:
    """``spark`` with a CRC written into every Parquet page and checked on every read (:data:`PARQUET_CHECKSUMS`:
    session settings Spark passes to parquet-mr's writer and reader, on classic sessions and over Spark Connect; the
    writer's is parquet-mr's default, set so that a cluster's own default cannot drop it): a damaged page of a
    committed output fails the read, naming the file, instead of feeding wrong values to the next stage."""
    for key, value in PARQUET_CHECKSUMS.items():
        spark.conf.set(key, value)
    return spark


def cancel_running_jobs() -> None:
    """Cancel every running Spark job of this process: the classic SparkContext's, or over Spark Connect the active
    session's operations (a command stopped by a signal, :func:`lia_spark.cli.main.job_main`)."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.cancelAllJobs()
        return
    active = SparkSession.getActiveSession()
    if active is not None and is_connect(active):
        active.interruptAll()


def wait_for_killed_tasks(timeout_seconds: float = 10.0) -> None:
    """Wait at most ``timeout_seconds`` until the task scheduler of this process's SparkContext holds no task set:
    after :func:`cancel_running_jobs` a cancelled stage's task set leaves the scheduler's pools only once each of
    its killed tasks has ended and Spark has logged its end ("Lost task ... TaskKilled"), so those lines come before
    the command's last line. The pools' queues are read themselves: ``getSortedTaskSetQueue`` leaves out a
    cancelled (zombie) task set at once, and executors' running-task counts drop before the task's end is logged.
    Nothing to wait for over Spark Connect (the server's tasks log on the server)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return
    root = context._jsc.sc().taskScheduler().rootPool()
    deadline = time.monotonic() + timeout_seconds
    while _task_sets_in(root) and time.monotonic() < deadline:
        time.sleep(0.2)


def end_spark_output(timeout_seconds: float = 30.0) -> None:
    """Stop this process's classic SparkContext, which ends its Python worker daemon, and end the JVM too when
    pyspark launched it for this process, waiting at most ``timeout_seconds`` for it to exit: what Spark's
    processes print is then printed before the command's last line. (A worker the daemon forked for a task
    connection that a cancellation closed prints a BrokenPipeError traceback, which the JVM copies to this
    process's stderr.) A spark-submit launcher's JVM outlives its driver, so only its context stops; over Spark
    Connect nothing does (the server's processes print on the server)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return
    launched = getattr(SparkContext._gateway, "proc", None)
    context.stop()
    if launched is None:
        return
    launched.stdin.close()  # pyspark's gateway exits when its stdin closes
    try:
        launched.wait(timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        logger.warning("the Spark JVM (pid %d) had not exited %.0f s after its stdin closed", launched.pid,
                       timeout_seconds)


def _task_sets_in(pool: Any) -> int:
    """The task sets held in the JVM scheduler ``pool`` and the pools under it (FAIR scheduling nests pools),
    running, pending and cancelled alike."""
    held = 0
    for schedulable in list(pool.schedulableQueue().toArray()):
        held += _task_sets_in(schedulable) if schedulable.getClass().getSimpleName() == "Pool" else 1
    return held


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session (Databricks shared and serverless compute, ``spark.remote``): it has no
    SparkContext and no JVM on the Python side."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def add_python_file(spark: SparkSession, path: str) -> None:
    """Put the zip at ``path`` on the Python path of the session's executors: ``addArtifacts(path, pyfile=True)``
    over Spark Connect, ``SparkContext.addPyFile`` on a classic session."""
    if is_connect(spark):
        spark.addArtifacts(path, pyfile=True)
    else:
        spark.sparkContext.addPyFile(path)


def master_name(spark: SparkSession) -> str:
    """The session's master URL (``spark.master``; over Spark Connect as the server reports it)."""
    if is_connect(spark):
        return f"spark connect ({spark.conf.get('spark.master', 'server')})"
    master = spark.sparkContext.master
    if master is None:
        raise ValueError("a running SparkContext has a spark.master (it cannot start without one)")
    return master


_described = ""  # the description of the next Spark jobs (describe_jobs), which progress lines name


def aggregate_row(frame: DataFrame, *columns: Column) -> Row:
    """The one row of the global aggregate ``frame.agg(*columns)`` (``first()`` types it optional: an aggregate
    without grouping always has a row)."""
    row = frame.agg(*columns).first()
    if row is None:
        raise ValueError(f"a global aggregate of {len(columns)} columns returned no row")
    return row


def describe_jobs(spark: SparkSession, description: str | None) -> None:
    """Name the next Spark jobs in the Spark UI and in progress lines (:func:`described_jobs`), None to clear
    (classic sessions; Spark Connect has no job descriptions, its jobs carry the tags of :func:`job_group`)."""
    global _described
    _described = description or ""
    if not is_connect(spark):
        spark.sparkContext.setJobDescription(description)  # type: ignore[arg-type]  # None clears it (pyspark: str)


def described_jobs() -> str:
    """What :func:`describe_jobs` last named ("" when cleared)."""
    return _described


@contextlib.contextmanager
def job_group(spark: SparkSession, group: str, description: str) -> Iterator[None]:
    """Group the jobs of the ``with`` block: a job group on classic sessions, an operation tag over Spark Connect
    (``spark.interruptTag(group)`` cancels them); cleared at exit with the job description."""
    if is_connect(spark):
        spark.addTag(group)
        try:
            yield
        finally:
            spark.removeTag(group)
            describe_jobs(spark, None)
        return
    context = spark.sparkContext
    context.setJobGroup(group, description, interruptOnCancel=False)
    try:
        yield
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]  # None unsets it (documented)
        describe_jobs(spark, None)


def cancel_job_group(spark: SparkSession, group: str) -> None:
    """Cancel the running jobs of :func:`job_group` ``group`` (over Spark Connect: interrupt its tag)."""
    if is_connect(spark):
        spark.interruptTag(group)
    else:
        spark.sparkContext.cancelJobGroup(group)


def lost_executors(spark: SparkSession) -> list[str]:
    """Why each executor this application lost was removed, as the Executors page of the Spark UI shows it (e.g.
    "Command exited with code 137"), read from Spark's status store on classic sessions; [] over Spark Connect or
    where the JVM does not expose it."""
    if is_connect(spark):
        return []
    try:
        executors = spark.sparkContext._jsc.sc().statusStore().executorList(False)  # noqa: SLF001 - no public API
        summaries = [executors.apply(index) for index in range(executors.length())]
        reasons = [summary.removeReason() for summary in summaries
                   if summary.id() != "driver" and not summary.isActive()]
        return [str(reason.get()) if reason.isDefined() else "no reason given" for reason in reasons]
    except Exception:  # noqa: BLE001 - internal API: without it only the time limit applies
        logger.debug("the executors' status is not readable", exc_info=True)
        return []


def status_tracker(spark: SparkSession) -> StatusTracker | None:
    """Spark's status tracker (active stages and their task counts) of a classic session; None over Spark Connect,
    whose client reports progress to handlers instead (``spark.registerProgressHandler``)."""
    return None if is_connect(spark) else spark.sparkContext.statusTracker()


_CONNECT_PARALLELISM: dict[str, int] = {}


def default_parallelism(spark: SparkSession) -> int:
    """Spark's default parallelism (total executor cores): ``SparkContext.defaultParallelism``; over Spark Connect
    ``spark.default.parallelism`` when set, else the partitions of ``spark.range`` (which uses it), measured once
    per session."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    session = cast("ConnectSession", spark).session_id  # is_connect: Spark Connect's session class
    if session not in _CONNECT_PARALLELISM:
        configured = spark.conf.get("spark.default.parallelism", None)
        _CONNECT_PARALLELISM[session] = int(configured) if configured else (
            spark.range(1 << 16).select(F.spark_partition_id().alias("partition")).distinct().count())
    return _CONNECT_PARALLELISM[session]


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


def _submitted_settings() -> set[str]:
    """Keys already set by spark-submit (visible as the SparkConf of a JVM launched for this process)."""
    from pyspark import SparkConf, SparkContext

    if os.environ.get("PYSPARK_GATEWAY_PORT") is None:
        return set()
    SparkContext._ensure_initialized()
    return {key for key, _ in SparkConf().getAll()}


class _JvmStream(io.TextIOBase):
    """A text stream writing UTF-8 to a ``java.io.PrintStream`` (auto-flushing, as ``System.err`` is) through the
    gateway; ``fallback`` once the gateway is gone."""

    def __init__(self, stream: Any, fallback: TextIO) -> None:
        from py4j.protocol import Py4JError

        super().__init__()
        self._stream, self._fallback, self._gone = stream, fallback, Py4JError

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        data = text.encode("utf-8")
        try:
            self._stream.write(data, 0, len(data))
        except self._gone:
            self._fallback.write(text)
        return len(text)


def _stderr_is_stdout() -> bool:
    """True when this process's stderr and stdout are one pipe."""
    try:
        out, err = os.fstat(1), os.fstat(2)
    except OSError:
        return False
    return stat.S_ISFIFO(err.st_mode) and os.path.samestat(out, err)


@functools.cache
def launcher_stderr() -> io.TextIOBase | None:
    """The stderr of the spark-submit launcher that started this Python driver, or None elsewhere.

    spark-submit runs a Python application as a child of its JVM (``PythonRunner``) with the child's stderr merged
    into its stdout, so whatever the driver writes to stderr lands on the launcher's stdout. This stream writes to
    the launcher JVM's ``System.err`` through the gateway instead.
    """
    if os.environ.get("PYSPARK_GATEWAY_PORT") is None or not _stderr_is_stdout():
        return None
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    if SparkContext._jvm is None:
        raise ValueError("SparkContext._ensure_initialized() connects the JVM gateway (PYSPARK_GATEWAY_PORT is set)")
    system = SparkContext._jvm.java.lang.System
    if not any(name in str(system.getProperty("sun.java.command")) for name in ("SparkSubmit", "PythonRunner")):
        return None
    return _JvmStream(system.err, sys.stderr)
