"""Whether the executors can run this package: before any stage, a few tiny tasks import lia_spark and its
dependencies in the executors' Python and report what they found, so a cluster that lacks the package (or runs an
older build of it) fails in seconds with the fix, instead of in the first UDF with a worker traceback."""
from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession

from lia_spark.run.checks import ConfigError
from lia_spark.run.failures import SHIP_PACKAGE
from lia_spark.run.fingerprint import code_version

logger = logging.getLogger(__name__)

# Imported by the executors' Python workers (UDFs, pandas UDFs, parallel fits); catboost only when configured.
EXECUTOR_MODULES = ("numpy", "pandas", "pyarrow", "scipy", "numba", "xgboost", "lia_spark")
PROBE_COLUMNS = "python string, python_version string, missing string, package_version string, code string"

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
    version = code = ""
    if not any(item.startswith("lia_spark ") for item in missing):
        import lia_spark
        from lia_spark.run.fingerprint import code_version

        version, code = lia_spark.__version__, code_version()
    yield pandas.DataFrame({"python": [sys.executable], "python_version": [sys.version.split()[0]],
                            "missing": ["; ".join(missing)], "package_version": [version], "code": [code]})
'''


def _probe() -> Any:
    namespace: dict[str, Any] = {"__name__": "lia_spark_executor_probe", "MODULES": EXECUTOR_MODULES}
    exec(compile(_PROBE_SOURCE, "<lia_spark executor probe>", "exec"), namespace)  # noqa: S102 - our own source
    return namespace["probe"]


def check_executors(spark: SparkSession, tasks: int) -> None:
    """Run ``tasks`` one-row tasks that import :data:`EXECUTOR_MODULES` in the executors' Python.

    Raises:
        ConfigError: an executor misses a module (naming the Python, the module and how to ship lia_spark), or runs
            other lia_spark code than the driver (:func:`lia_spark.run.fingerprint.code_version`).
    """
    found = spark.range(tasks, numPartitions=tasks).mapInPandas(_probe(), PROBE_COLUMNS).distinct().collect()
    driver = code_version()
    for row in found:
        where = f"the executors' Python ({row.python}, Python {row.python_version})"
        if row.missing:
            fix = SHIP_PACKAGE.format(version=driver.split("+")[0]) if "lia_spark " in row.missing else (
                "install it in that Python, or ship a packed environment (`make env`, see the README)")
            raise ConfigError(f"spark executors: {where} cannot import {row.missing}; {fix}")
        if row.code != driver:
            raise ConfigError(f"spark executors: {where} runs lia_spark {row.code}, the driver {driver}; "
                              f"ship the driver's build: {SHIP_PACKAGE.format(version=driver.split('+')[0])}")
    logger.info("executors: %s import lia_spark %s and its dependencies", ", ".join(sorted(
        {f"{row.python} (Python {row.python_version})" for row in found})), driver)
