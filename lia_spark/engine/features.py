"""Spark stage for model features: vocabulary counts by aggregation, features by mapInPandas (scales to billions)."""
from __future__ import annotations

from typing import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import Window
from pyspark.sql import functions as F

from lia_spark import features
from lia_spark.config import Config, ConfigError
from lia_spark.names import ALL_DAYS, TARGET_DAY
from lia_spark.criteo import CAT_COLUMNS, DAY, LABEL, ROW_ID


def read_day(spark: SparkSession, parquet_path: str, day: int) -> DataFrame:
    """One day of the day-partitioned storage table."""
    return read_days(spark, parquet_path, [day])


def read_days(spark: SparkSession, parquet_path: str, days: Sequence[int]) -> DataFrame:
    """The rows of ``days`` in the day-partitioned storage table."""
    return spark.read.parquet(parquet_path).where(F.col(DAY).isin(list(days)))


def days_present(spark: SparkSession, parquet_path: str) -> tuple[int, ...]:
    """The days the storage table holds rows of, ascending (one query of the day column)."""
    return tuple(sorted(int(row[DAY]) for row in spark.read.parquet(parquet_path).select(DAY).distinct().collect()))


def released_days(spark: SparkSession, config: Config) -> tuple[int, ...]:
    """The days mechanisms.days selects, ascending: ``target`` = (models.target_day,), ``all`` = every day of
    the data table, else the listed days; checked against the table before any heavy work.

    Raises:
        ConfigError: naming mechanisms.days and the selected days the data table does not hold.
    """
    selection, present = config.mechanisms.days, days_present(spark, config.parquet_path)
    if selection == ALL_DAYS:
        days = present
    elif selection == TARGET_DAY:
        days = (config.models.target_day,)
    else:
        days = tuple(sorted(selection))
    missing = [day for day in days if day not in present]
    if missing or not days:
        got = list(selection) if isinstance(selection, tuple) else f"{selection} = {list(days)}"
        raise ConfigError(f"mechanisms.days: {config.parquet_path} holds no rows of days {missing} (days present: "
                          f"{list(present)}), got {got!r}; select days the table holds")
    return days


def check_days_present(spark: SparkSession, parquet_path: str, days: Mapping[str, int]) -> None:
    """Fail before any work when a config field names a day the table does not hold.

    Args:
        days: config field -> the day it names, e.g. ``{"models.target_day": 5}``.
    Raises:
        ConfigError: naming the first such field, the day and the days present.
    """
    present = days_present(spark, parquet_path)
    for field, day in days.items():
        if day not in present:
            raise ConfigError(f"{field}: {parquet_path} holds no rows of day {day} (days present: {list(present)}),"
                              f" got {day}; set {field} to one of the days present")


def split_rows(rows: DataFrame, *, seed: int, shares: tuple[float, float, float], code: int) -> DataFrame:
    """Rows whose split code (:func:`lia_spark.features.split_codes`, 0 train / 1 valid / 2 test) is ``code``."""

    def batches(frames):
        for frame in frames:
            codes = features.split_codes(frame[ROW_ID].to_numpy("int64"), seed=seed, shares=shares)
            yield frame.loc[codes == code]

    return rows.mapInPandas(batches, rows.schema)


def sample_rows(rows: DataFrame, *, seed: int, share: float) -> DataFrame:
    """The rows of the seeded per-day sample (:func:`lia_spark.features.in_day_sample`)."""

    def batches(frames):
        for frame in frames:
            yield frame.loc[features.in_day_sample(frame[ROW_ID].to_numpy("int64"), seed=seed, share=share)]

    return rows.mapInPandas(batches, rows.schema)


def learn_vocabulary(training_rows: DataFrame, *, min_count: int, max_size: int) -> features.CategoryVocabulary:
    """Count every categorical value of the training rows in one aggregation; keep the frequent ones.

    The cap applies on the executors (the ``max_size`` most frequent values per column, ties by value, as
    :func:`lia_spark.features.vocabulary_from_counts` ranks them), so at most 26 x ``max_size`` rows reach the
    driver however many distinct values the data has.
    """
    stacked = training_rows.select(F.explode(F.array(*[
        F.struct(F.lit(name).alias("column"), F.col(name).alias("value")) for name in CAT_COLUMNS])).alias("cv"))
    frequent = (stacked.select("cv.column", "cv.value").where(F.col("value").isNotNull())
                .groupBy("column", "value").count().where(F.col("count") >= min_count))
    rank = F.row_number().over(Window.partitionBy("column").orderBy(F.col("count").desc(), F.col("value")))
    counts = frequent.withColumn("rank", rank).where(F.col("rank") <= max_size).drop("rank").toPandas()
    grouped = {name: (part["value"].to_numpy("int64"), part["count"].to_numpy("int64"))
               for name, part in counts.groupby("column")}
    return features.vocabulary_from_counts(grouped, min_count=min_count, max_size=max_size)


def feature_frame(rows: DataFrame, spec: features.FeatureSpec, *, seed: int,
                  shares: tuple[float, float, float]) -> DataFrame:
    """row_id, label, split and the model feature columns of :func:`lia_spark.features.build_features`."""
    cat_type = "long" if spec.encoding == "native" else "float"
    schema = ", ".join([f"{ROW_ID} long", f"{LABEL} int", f"{features.SPLIT_COLUMN} int"]
                       + [f"{name} float" for name in features.LOG_COLUMNS + features.FLAG_COLUMNS]
                       + [f"{name} {cat_type}" for name in CAT_COLUMNS])

    def batches(frames):
        for frame in frames:
            yield features.build_features(frame, spec, seed=seed, shares=shares)

    return rows.mapInPandas(batches, schema)
