"""What the installed pyspark offers where Spark 3.5 and 4.x differ: one helper per capability, each deciding by
what pyspark has (never by its version string; the supported range itself is checked up front, before Spark starts:
:mod:`lia_spark.run.requirements`)."""
from __future__ import annotations

import functools
import inspect
from typing import Callable, TypeVar

import pyarrow as pa
from pyspark import inheritable_thread_target
from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")


def collect_arrow(frame: DataFrame) -> pa.Table:
    """The rows of ``frame`` on the driver as one Arrow table, in Spark's column types: ``DataFrame.toArrow``
    (pyspark >= 4.0), else the Arrow record batches that pyspark 3.5's ``toPandas`` collects
    (``_collect_as_arrow``, the same bytes on the driver: no pandas conversion), as one table of the frame's
    schema (empty when it has no rows)."""
    if hasattr(frame, "toArrow"):
        return frame.toArrow()
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(frame.schema)
    batches = frame._collect_as_arrow()  # type: ignore[operator]  # noqa: SLF001 - 3.5's only Arrow collect, not in 4's
    return pa.Table.from_batches(batches).cast(schema) if batches else schema.empty_table()


def inheriting_thread_target(spark: SparkSession, function: Callable[[], T]) -> Callable[[], T]:
    """``function`` as the target of another Python thread whose Spark jobs keep this thread's job group and
    description (and over Spark Connect its tags): pyspark's ``inheritable_thread_target`` given the session where
    it takes one (pyspark >= 4.0), else given the function (3.5: the classic session's local properties)."""
    if _thread_targets_take_sessions():
        return inheritable_thread_target(spark)(function)
    return inheritable_thread_target(function)


@functools.cache
def _thread_targets_take_sessions() -> bool:
    """Whether ``inheritable_thread_target`` takes a SparkSession (its parameter's type names it), not only a
    function."""
    return "SparkSession" in str(inspect.signature(inheritable_thread_target).parameters["f"].annotation)
