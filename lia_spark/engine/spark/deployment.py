"""Whether the executors can run this package: before any stage, a few tiny tasks import lia_spark and its
dependencies in the executors' Python and report what they found, so a cluster that lacks the package (or runs an
older build of it) fails in seconds with the fix, instead of in the first UDF with a worker traceback; and executors
that never run those tasks (lost as they start, or never granted) end the command instead of leaving it waiting."""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql import Row, SparkSession

from lia_spark import __version__
from lia_spark.engine.spark.session import (add_python_file, cancel_job_group, default_parallelism, get_spark,
                                            is_connect, job_group, lost_executors)
from lia_spark.run.activity import doing
from lia_spark.run.checks import ConfigError
from lia_spark.run.environment import package_zip
from lia_spark.run.failures import SHIP_PACKAGE, error_first_line
from lia_spark.run.fingerprint import code_version
from lia_spark.run.sections import SparkConfig

logger = logging.getLogger(__name__)

# Imported by the executors' Python workers (UDFs, pandas UDFs, parallel fits); catboost only when configured.
EXECUTOR_MODULES = ("numpy", "pandas", "pyarrow", "scipy", "numba", "xgboost", "lia_spark")
PROBE_COLUMNS = "python string, python_version string, missing string, code string"

# The probe is compiled from source in a namespace of its own, so cloudpickle ships it by value: pickled by
# reference (as any function of lia_spark is), the worker would have to import lia_spark to unpickle it.
_PROBE_SOURCE = '''
def probe(batches):
    import importlib
    import sys

    import pandas

    for _ in batches:
        pass
    missing = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as error:
            missing.append(f"{name} ({type(error).__name__}: {error})")
    code = ""
    if not any(item.startswith("lia_spark ") for item in missing):
        from lia_spark.run.fingerprint import code_version

        code = code_version()
    yield pandas.DataFrame({"python": [sys.executable], "python_version": [sys.version.split()[0]],
                            "missing": ["; ".join(missing)], "code": [code]})
'''


def _probe() -> Any:
    namespace: dict[str, Any] = {"__name__": "lia_spark_executor_probe", "MODULES": EXECUTOR_MODULES}
    exec(compile(_PROBE_SOURCE, "<lia_spark executor probe>", "exec"), namespace)  # noqa: S102 - our own source
    return namespace["probe"]


PROBE_GROUP = "lia-spark-executor-probe"
# Executors were lost and the probe (seconds of work) is still waiting this long after the first loss (at most
# spark.executor_start_seconds): they fail as they start (a full local disk unpacking --archives, too little
# memory, a killed container), so stop.
LOST_GRACE_SECONDS = 60.0
LOST_CAUSES = ("the executor logs (the cluster UI's Executors page) say why: often a full local disk where each "
               "executor unpacks --archives (spark.local.dir; the packed environment of `make env` needs about 2 GB "
               "per executor), too little memory (spark.executor.memory) or a container the cluster killed")


class ExecutorsUnavailable(RuntimeError):
    """No executor ran the probe: they were lost as they started, or none was granted in time."""


def _probe_rows(spark: SparkSession, tasks: int, wait_seconds: float) -> list[Row]:
    """The probe's rows, its jobs run from a thread of their own while this one watches the executors.

    Raises:
        ExecutorsUnavailable: executors were lost and the probe was still waiting :data:`LOST_GRACE_SECONDS` later,
            or it did not finish within ``wait_seconds`` (its jobs are cancelled first).
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            with job_group(spark, PROBE_GROUP, "lia-spark: can the executors import lia_spark?"):
                outcome["rows"] = spark.range(tasks, numPartitions=tasks).mapInPandas(
                    _probe(), PROBE_COLUMNS).distinct().collect()
        except Exception as error:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = error

    grace = min(LOST_GRACE_SECONDS, wait_seconds)
    started = time.monotonic()
    first_loss = None
    thread = threading.Thread(target=run, name="lia-spark executor probe", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(1.0)
        reasons, now = lost_executors(spark), time.monotonic()
        first_loss = now if first_loss is None and reasons else first_loss
        waited_out = now - started > wait_seconds or (first_loss is not None and now - first_loss > grace)
        if not thread.is_alive() or not waited_out:
            continue
        if reasons and first_loss is not None:  # a reason now: first_loss is set
            why = "; ".join(sorted(set(reasons)))
            problem = (f"{len(reasons)} were lost before any ran the first task ({why}) and none ran it in the "
                       f"{now - first_loss:.0f} s after the first loss; {LOST_CAUSES}")
        else:
            problem = (f"none ran the first task within spark.executor_start_seconds = {wait_seconds:g} s (none "
                       f"was granted, or each takes longer to start); check the cluster's free cores and memory for "
                       f"spark.executor.cores and spark.executor.memory, or raise spark.executor_start_seconds "
                       f"where executors start slowly (autoscaling, a busy queue)")
        cancel_job_group(spark, PROBE_GROUP)
        thread.join(10.0)
        raise ExecutorsUnavailable(f"spark executors: {problem}")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["rows"]


def check_executors(spark: SparkSession, tasks: int, wait_seconds: float, ship: bool = False) -> None:
    """Run ``tasks`` one-row tasks that import :data:`EXECUTOR_MODULES` in the executors' Python, waiting at most
    ``wait_seconds`` for executors to run them. With ``ship`` (``spark.ship_package``), executors that cannot import
    lia_spark or run another build get this driver's (:func:`ship_package`) and are checked again.

    Raises:
        ConfigError: an executor misses a module (naming the Python, the module and how to ship lia_spark), or runs
            other lia_spark code than the driver (:func:`lia_spark.run.fingerprint.code_version`).
        ExecutorsUnavailable: no executor ran the tasks (:func:`_probe_rows`).
    """
    found = _probe_rows(spark, tasks, wait_seconds)
    shipped = None
    if ship and any(_lacks_this_build(row) for row in found):
        shipped = ship_package(spark)
        found = _probe_rows(spark, tasks, wait_seconds)
    driver, ship_hint = code_version(), _ship_hint(spark, shipped)
    for row in found:
        where = f"the executors' Python ({row.python}, Python {row.python_version})"
        if row.missing:
            fix = ship_hint if "lia_spark " in row.missing else (
                "install it in that Python, or ship a packed environment (`make env`, see the README)")
            raise ConfigError(f"spark executors: {where} cannot import {row.missing}; {fix}")
        if row.code != driver:
            raise ConfigError(f"spark executors: {where} runs lia_spark {row.code}, the driver {driver}; "
                              f"ship the driver's build: {ship_hint}")
    logger.info("executors: %s import lia_spark %s and its dependencies%s", ", ".join(sorted(
        {f"{row.python} (Python {row.python_version})" for row in found})), driver,
        f" (this driver's, shipped as {shipped.name})" if shipped else "")


def _lacks_this_build(row: Row) -> bool:
    """The probe's ``row`` says its executors cannot import lia_spark or run other lia_spark code than the driver."""
    return "lia_spark " in row.missing or (not row.missing and row.code != code_version())


def _ship_hint(spark: SparkSession, shipped: Path | None) -> str:
    """How to get lia_spark onto these executors (a Connect client cannot use spark-submit's options)."""
    if shipped is not None:
        return (f"they still lack it after this driver's lia_spark was sent ({shipped.name}, spark.ship_package="
                "true); install the driver's lia-spark build in that Python")
    if is_connect(spark):
        return ("set spark.ship_package=true to send this client's lia_spark to the Connect server "
                "(SparkSession.addArtifacts, pyfile=True), or install the same lia-spark build in the server's "
                "Python; spark-submit's --py-files and --archives do not reach a Connect server")
    return f"{SHIP_PACKAGE.format(version=__version__)}; or set spark.ship_package=true (SparkContext.addPyFile)"


def ship_package(spark: SparkSession) -> Path:
    """Send this driver's lia_spark (:func:`lia_spark.run.environment.package_zip`, named by the SHA-256 of its
    bytes: another build never reuses the name) to the executors: ``addArtifacts(zip, pyfile=True)`` over Spark
    Connect, ``addPyFile`` on a classic session; the executors' Python workers then import it from their path.
    Returns the zip."""
    folder = Path(tempfile.gettempdir()) / "lia_spark-shipped"
    folder.mkdir(exist_ok=True)
    partial = package_zip(folder / f"lia_spark.{os.getpid()}.part")
    digest = hashlib.sha256(partial.read_bytes()).hexdigest()[:12]
    path = folder / f"lia_spark-{__version__}-{digest}.zip"
    os.replace(partial, path)
    add_python_file(spark, str(path))
    logger.info("sent this driver's lia_spark to the executors: %s (spark.ship_package=true)", path)
    return path


def start_spark(config: SparkConfig) -> SparkSession:
    """:func:`lia_spark.engine.spark.session.get_spark` for commands: a session that cannot start is reported naming
    spark.master (spark.remote when set); then the executors are checked to import lia_spark, the driver's build,
    and its dependencies (:func:`check_executors`, one task per default-parallelism slot, at most 64).

    Raises:
        ConfigError: naming spark.master or spark.remote and the first line of Spark's own reason; or naming the
            executors' Python and what it cannot import.
        ExecutorsUnavailable: no executor ran the check within ``spark.executor_start_seconds``, or they were lost.
    """
    field, value = ("spark.remote", config.remote) if config.remote else ("spark.master", config.master)
    try:
        with doing(f"starting the Spark session ({field}={value})"):
            session = get_spark(config)
    except Exception as error:  # noqa: BLE001 - the JVM's failures arrive as many exception types
        reason = error_first_line(error)
        raise ConfigError(f"{field}: cannot start a Spark session ({reason}), got {value!r}; check "
                          f"{field}, spark.driver_memory, spark.extra and JAVA_HOME") from error
    tasks = min(default_parallelism(session), 64)
    with doing(f"checking that the executors import lia_spark ({tasks} one-row tasks)"):
        check_executors(session, tasks, config.executor_start_seconds, ship=config.ship_package)
    return session
