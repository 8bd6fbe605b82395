"""Spark stage for model features: vocabulary counts by aggregation, features by mapInPandas (scales to billions)."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lia_spark.kernels import features
from lia_spark.kernels.criteo import CAT_COLUMNS
from lia_spark.names import ALL_DAYS, DAY, LABEL, ROW_ID, TARGET_DAY
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config, day_fields


def read_day(spark: SparkSession, parquet_path: str, day: int) -> DataFrame:
    """One day of the day-partitioned storage table."""
    return read_days(spark, parquet_path, [day])


def read_days(spark: SparkSession, parquet_path: str, days: Sequence[int]) -> DataFrame:
    """The rows of ``days`` in the day-partitioned storage table."""
    return spark.read.parquet(parquet_path).where(F.col(DAY).isin(list(days)))


def target_day_rows(spark: SparkSession, config: Config, *, generating: bool) -> int:
    """The rows of models.target_day: synthetic.rows_per_day when this run generates the twin (``generating``),
    else counted in the data table (Parquet footers: no row is read)."""
    if generating:
        return config.synthetic.rows_per_day
    return read_day(spark, config.parquet_path, config.models.target_day).count()


def days_present(spark: SparkSession, parquet_path: str) -> tuple[int, ...]:
    """The days the storage table holds rows of, ascending (one query of the day column)."""
    return tuple(sorted(int(row[DAY]) for row in spark.read.parquet(parquet_path).select(DAY).distinct().collect()))


def released_days(spark: SparkSession, config: Config) -> tuple[int, ...]:
    """The days mechanisms.days selects, ascending: ``target`` = (models.target_day,), a list = its days (read off
    the config, no query), ``all`` = every day of the data table (one query of the day column). A stage checks
    that the selected days are present (:func:`check_days_present` of :func:`released_day_field`) only once it
    cannot reuse its output.

    Raises:
        ConfigError: mechanisms.days is ``all`` and the data table holds no day.
    """
    selection = config.mechanisms.days
    if selection == TARGET_DAY:
        return (config.models.target_day,)
    if not isinstance(selection, str):  # a list of days (validation refuses another keyword)
        return tuple(sorted(selection))
    present = days_present(spark, config.parquet_path)
    if not present:
        raise ConfigError(f"mechanisms.days: {config.parquet_path} holds no rows, got {selection!r}; "
                          "run the data stage first or point data.parquet_path at a day-partitioned table")
    return present


def released_day_field(config: Config) -> tuple[str, ...]:
    """The config field naming mechanisms.days's released days, for :func:`check_days_present`: models.target_day
    (``target``), mechanisms.days (a list); none for ``all`` (present by definition)."""
    selection = config.mechanisms.days
    if selection == ALL_DAYS:
        return ()
    return ("models.target_day",) if selection == TARGET_DAY else ("mechanisms.days",)


def check_days_present(spark: SparkSession, config: Config, fields: Sequence[str]) -> None:
    """Fail before any heavy work when one of ``fields`` (config fields naming days, :func:`lia_spark.run.config.
    day_fields`) names a day the data table does not hold: one query of the day column, none without fields.

    Raises:
        ConfigError: naming the first such field, the missing days and the days present.
    """
    named = {field: value for field, value in day_fields(config).items() if field in fields}
    if not named:
        return
    present = days_present(spark, config.parquet_path)
    for field, value in named.items():
        days = value if isinstance(value, list) else [value]
        missing = [day for day in days if day not in present]
        if missing:
            what = f"days {missing}" if isinstance(value, list) else f"day {value}"
            raise ConfigError(f"{field}: {config.parquet_path} holds no rows of {what} (days present: "
                              f"{list(present)}), got {value}; choose among the days present")


def rows_where(rows: DataFrame, keep: Callable[[np.ndarray], np.ndarray]) -> DataFrame:
    """The rows whose row id passes ``keep`` (a vectorized test of the int64 row ids), evaluated by a pandas UDF on
    the row-id column alone: the other columns never leave the JVM, so a nullable int64 beyond 2^53 is not rounded
    (or, at 2^63 - 1, refused) by a round trip through pandas' float64."""

    @F.pandas_udf("boolean")  # type: ignore[call-overload]  # pyspark's stub omits the type-hint form (returnType only)
    def kept(row_ids: pd.Series) -> pd.Series:
        return pd.Series(keep(row_ids.to_numpy("int64")), index=row_ids.index)

    return rows.where(kept(F.col(ROW_ID)))


def split_rows(rows: DataFrame, *, seed: int, shares: tuple[float, float, float], code: int) -> DataFrame:
    """Rows whose split code (:func:`lia_spark.kernels.features.split_codes`, 0 train / 1 valid / 2 test) is
    ``code``."""
    return rows_where(rows, lambda ids: features.split_codes(ids, seed=seed, shares=shares) == code)


def sample_rows(rows: DataFrame, *, seed: int, share: float) -> DataFrame:
    """The rows of the seeded per-day sample (:func:`lia_spark.kernels.features.in_day_sample`)."""
    return rows_where(rows, lambda ids: features.in_day_sample(ids, seed=seed, share=share))


def learn_vocabulary(training_rows: DataFrame, *, min_count: int, max_size: int) -> features.CategoryVocabulary:
    """Count every categorical value of the training rows in one aggregation; keep the frequent ones.

    The cap applies on the executors (the ``max_size`` most frequent values per column, ties by value, as
    :func:`lia_spark.kernels.features.vocabulary_from_counts` ranks them), so at most 26 x ``max_size`` rows reach the
    driver however many distinct values the data has.
    """
    stacked = training_rows.select(F.explode(F.array(*[
        F.struct(F.lit(name).alias("column"), F.col(name).alias("value")) for name in CAT_COLUMNS])).alias("cv"))
    frequent = (stacked.select("cv.column", "cv.value").where(F.col("value").isNotNull())
                .groupBy("column", "value").count().where(F.col("count") >= min_count))
    rank = F.row_number().over(Window.partitionBy("column").orderBy(F.col("count").desc(), F.col("value")))
    counts: pd.DataFrame = frequent.withColumn("rank", rank).where(F.col("rank") <= max_size).drop("rank").toPandas()
    grouped = {name: (part["value"].to_numpy("int64"), part["count"].to_numpy("int64"))
               for name, part in counts.groupby("column")}
    return features.vocabulary_from_counts(grouped, min_count=min_count, max_size=max_size)


def feature_frame(rows: DataFrame, spec: features.FeatureSpec, *, seed: int,
                  shares: tuple[float, float, float]) -> DataFrame:
    """row_id, label, split and the model feature columns of :func:`lia_spark.kernels.features.build_features`."""
    cat_type = "long" if spec.encoding == "native" else "float"
    schema = ", ".join([f"{ROW_ID} long", f"{LABEL} int", f"{features.SPLIT_COLUMN} int"]
                       + [f"{name} float" for name in features.LOG_COLUMNS + features.FLAG_COLUMNS]
                       + [f"{name} {cat_type}" for name in CAT_COLUMNS])

    def batches(frames):
        for frame in frames:
            yield features.build_features(frame, spec, seed=seed, shares=shares)

    return rows.mapInPandas(batches, schema)
