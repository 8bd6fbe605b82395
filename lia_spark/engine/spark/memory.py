"""What the JVMs' memory and file settings allow, in bytes: the size strings Spark's configuration holds (1g, 512m,
4096k) and the bytes the driver can receive. Read by the in-memory training paths (how many rows fit on the driver)
and the ingest of local files (its split sizes)."""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # the type only
    from pyspark.sql import SparkSession


def byte_size(text: str) -> int:
    """Bytes of a JVM size string such as 1g, 512m, 4096k or 1024 (bytes); 0 stays 0 (unlimited)."""
    text = text.strip().lower().removesuffix("b")
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def conf_bytes(spark: SparkSession, key: str, default: str) -> int:
    """:func:`byte_size` of the Spark setting ``key`` (``default`` when it is not set)."""
    return byte_size(cast(str, spark.conf.get(key, default)))  # a str default: never None


def driver_limits(spark: SparkSession) -> dict[str, int]:
    """Bytes the driver can receive: spark.driver.maxResultSize and half of spark.driver.memory (0 = unlimited
    is left out)."""
    limits = {"spark.driver.maxResultSize": conf_bytes(spark, "spark.driver.maxResultSize", "1g"),
              "half of spark.driver.memory": conf_bytes(spark, "spark.driver.memory", "1g") // 2}
    return {name: size for name, size in limits.items() if size > 0}
