"""Generate stage: the synthetic Criteo twin (docs/math.md §1.2) as day-partitioned Parquet, truth table and Criteo TSV.

``spark.range`` over ``rows_per_day x days`` line numbers, cut into partitions that never straddle a day, feeds
:func:`lia_spark.kernels.synthetic.generate_rows` through ``mapInPandas``. Outputs (each committed atomically):

- ``config.parquet_path``: columns of ``criteo.STORAGE_DDL``, partitioned by day (no eta);
- ``OUT/truth``: row_id, day, eta, recomputed from the written rows (eta is a function of the observable row);
- ``OUT/criteo/day_N[.gz]`` when ``synthetic.write_tsv``: Spark writes one ordered text part per partition,
  then the parts of each day are concatenated in order inside the JVM (gzip parts are concatenated members).

The data folder is committed last, so a complete data marker means the whole stage finished.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from typing import Any, Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lia_spark.engine.runtime.outputs import committed_output, delete_path, reusable_output
from lia_spark.engine.runtime.stage import Stage, StageResult, StageRun
from lia_spark.engine.spark.filesystem import files_for, text_parts
from lia_spark.engine.spark.session import default_parallelism, describe_jobs
from lia_spark.kernels.criteo import CAT_COLUMNS, INT_COLUMNS, STORAGE_DDL, format_lines, split_row_id
from lia_spark.kernels.synthetic import TwinParameters, TwinRows, calibrate_twin, generate_rows, twin_eta
from lia_spark.names import DAY, LABEL, ROW_ID
from lia_spark.run import layout
from lia_spark.run.config import Config
from lia_spark.run.fingerprint import Fingerprint

logger = logging.getLogger(__name__)

ROWS_PER_PARTITION = 1_000_000
TRUTH_DDL = f"{ROW_ID} long, {DAY} int, eta double"


@dataclasses.dataclass(frozen=True)
class GenerateResult(StageResult):
    """What the generate stage wrote: per-day row and click counts, the calibrated intercept and the paths."""

    seed: int
    rows_per_day: int
    days: int
    click_rate_target: float
    intercepts: tuple[float, ...]
    partitions: int
    rows: int
    clicks: int
    rows_by_day: dict[str, int]
    clicks_by_day: dict[str, int]
    parquet_path: str
    truth_path: str
    tsv_paths: tuple[str, ...]
    seconds: float
    skipped: bool = False

    @property
    def click_rate(self) -> float:
        """Realized share of clicks over all generated rows."""
        return self.clicks / self.rows if self.rows else math.nan

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-friendly dict (also the content of the data folder's completion marker)."""
        payload = dataclasses.asdict(self)
        payload["tsv_paths"] = list(self.tsv_paths)
        payload["intercepts"] = list(self.intercepts)
        payload["click_rate"] = self.click_rate
        return payload

    @classmethod
    def decoded(cls, values: dict[str, Any]) -> dict[str, Any]:
        return {**values, "tsv_paths": tuple(values.get("tsv_paths", ())),
                "intercepts": tuple(values.get("intercepts", ()))}

    def metrics(self) -> dict[str, float]:
        """Flat metrics: rows, clicks, click rate overall and per day, seconds."""
        metrics = {"rows": float(self.rows), "clicks": float(self.clicks), "click_rate": self.click_rate,
                   "seconds_generate": self.seconds}
        for day, rows in self.rows_by_day.items():
            metrics[f"rows_day_{day}"] = float(rows)
            metrics[f"click_rate_day_{day}"] = self.clicks_by_day[day] / rows if rows else math.nan
        return metrics


def partition_count(config: Config, default_parallelism: int) -> int:
    """Partitions of the line range: a multiple of ``days`` so that no partition straddles two days.

    ``synthetic.partitions`` (0 = about one partition per ROWS_PER_PARTITION rows, at least one per core)
    rounded up to a multiple of the day count.
    """
    synthetic = config.synthetic
    total = synthetic.rows_per_day * synthetic.days
    wanted = synthetic.partitions or max(default_parallelism, math.ceil(total / ROWS_PER_PARTITION))
    per_day = max(1, math.ceil(wanted / synthetic.days))
    return per_day * synthetic.days


def _twin_batches(batches: Iterator[pd.DataFrame], params: TwinParameters,
                  rows_per_day: int) -> Iterator[TwinRows]:
    """Twin rows for each Arrow batch of line numbers ``id`` (line = day * rows_per_day + position)."""
    for batch in batches:
        lines = batch["id"].to_numpy(np.int64)
        days = lines // rows_per_day
        for day in np.unique(days):
            yield generate_rows(params, day=int(day), positions=lines[days == day] - day * rows_per_day)


def _storage_frame(rows: TwinRows) -> pd.DataFrame:
    columns: dict[str, Any] = {ROW_ID: rows.row_id, DAY: rows.day, LABEL: rows.label}
    for name in INT_COLUMNS + CAT_COLUMNS:
        columns[name] = pd.arrays.IntegerArray(rows.values[name], rows.missing[name])
    return pd.DataFrame(columns)


def generated_rows(spark: SparkSession, params: TwinParameters, *, rows_per_day: int, days: int,
                   partitions: int) -> DataFrame:
    """The twin as a DataFrame with the STORAGE_DDL columns, in line order within each partition."""
    rows_per_day = int(rows_per_day)

    def generate(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for rows in _twin_batches(batches, params, rows_per_day):
            yield _storage_frame(rows)

    lines = spark.range(0, rows_per_day * days, 1, numPartitions=partitions)
    return lines.mapInPandas(generate, STORAGE_DDL)


def generated_lines(spark: SparkSession, params: TwinParameters, *, rows_per_day: int, days: int,
                    partitions: int) -> DataFrame:
    """The twin as Criteo TSV lines (column ``value``), in line order within each partition."""
    rows_per_day = int(rows_per_day)

    def twin_lines(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for rows in _twin_batches(batches, params, rows_per_day):
            yield pd.DataFrame({"value": format_lines(rows.label, rows.values, rows.missing).to_pandas()})

    lines = spark.range(0, rows_per_day * days, 1, numPartitions=partitions)
    return lines.mapInPandas(twin_lines, "value string")


def truth_from_rows(df: DataFrame, params: TwinParameters) -> DataFrame:
    """(row_id, day, eta) recomputed from stored rows: eta = expit(b0 + twin_logit(day, observed row))."""

    def eta_batches(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for batch in batches:
            row_ids = batch[ROW_ID].to_numpy(np.int64)
            day, _ = split_row_id(row_ids)
            missing = {name: batch[name].isna().to_numpy() for name in INT_COLUMNS + CAT_COLUMNS}
            values = {name: batch[name].fillna(0).to_numpy().astype(np.int64) for name in missing}
            eta = twin_eta(params, day=day.astype(np.int32), values=values, missing=missing)
            yield pd.DataFrame({ROW_ID: row_ids, DAY: day.astype(np.int32), "eta": eta})

    return df.select(ROW_ID, *INT_COLUMNS, *CAT_COLUMNS).mapInPandas(eta_batches, TRUTH_DDL)


def concatenate_parts_by_day(spark: SparkSession, parts_folder: str, target_folder: str, *, days: int,
                             partitions: int, suffix: str) -> list[str]:
    """Concatenate Spark text parts in partition order into ``target_folder/day_N<suffix>`` (on classic sessions
    the bytes stay in the JVM).

    Partition i holds lines of day ``i // (partitions / days)`` only (see :func:`partition_count`).
    """
    files = files_for(spark, parts_folder)
    per_day = partitions // days
    parts: dict[int, list[str]] = {day: [] for day in range(days)}
    for index, path in text_parts(files, parts_folder):
        parts[index // per_day].append(path)
    written = []
    for day in range(days):
        target = f"{target_folder.rstrip('/')}/day_{day}{suffix}"
        files.concatenate(parts[day], target)
        written.append(target)
    return written


def _write_tsv(spark: SparkSession, config: Config, params: TwinParameters, partitions: int,
               fingerprint: Fingerprint) -> list[str]:
    synthetic = config.synthetic
    final = layout.output_path(config, layout.CRITEO_TSV)
    suffix = ".gz" if synthetic.gzip else ""
    metadata: dict[str, Any] = {}
    with committed_output(spark, final, metadata, fingerprint=fingerprint) as staging:
        describe_jobs(spark, "generate: Criteo TSV parts")
        lines = generated_lines(spark, params, rows_per_day=synthetic.rows_per_day, days=synthetic.days,
                                partitions=partitions)
        parts = f"{staging}/_parts"
        lines.write.option("compression", "gzip" if synthetic.gzip else "none").text(parts)
        describe_jobs(spark, "generate: concatenate TSV parts per day")
        written = concatenate_parts_by_day(spark, parts, staging, days=synthetic.days, partitions=partitions,
                                           suffix=suffix)
        delete_path(spark, parts)
        metadata["files"] = [os.path.basename(path) for path in written]
    return [f"{final}/{name}" for name in metadata["files"]]


def _write_truth(spark: SparkSession, config: Config, params: TwinParameters, data_path: str,
                 fingerprint: Fingerprint | None) -> None:
    final = layout.output_path(config, layout.TRUTH)
    with committed_output(spark, final, {"intercepts": list(params.intercepts)}, fingerprint=fingerprint) as staging:
        describe_jobs(spark, "generate: truth table (row_id, day, eta)")
        truth_from_rows(spark.read.parquet(data_path), params).write.partitionBy(DAY).parquet(staging)


def _day_counts(spark: SparkSession, data_path: str) -> tuple[dict[str, int], dict[str, int]]:
    describe_jobs(spark, "generate: rows and clicks per day")
    counts = (spark.read.parquet(data_path).groupBy(DAY)
              .agg(F.count(F.lit(1)).alias("rows"), F.sum(LABEL).alias("clicks")).collect())
    ordered = sorted(counts, key=lambda row: row[DAY])
    return ({str(row[DAY]): int(row["rows"]) for row in ordered},
            {str(row[DAY]): int(row["clicks"] or 0) for row in ordered})


def _tsv_fingerprint(spark: SparkSession, config: Config) -> Fingerprint:
    """The Criteo files' own fingerprint: the stage's plus synthetic.gzip (the Parquet data does not depend on it)."""
    return GENERATE.fingerprint(spark, config, gzip=config.synthetic.gzip)


def _complete_tsv(spark: SparkSession, config: Config, result: GenerateResult) -> GenerateResult:
    """A reused twin whose Criteo files are missing or stale (synthetic.write_tsv, synthetic.gzip changed): write
    only those."""
    synthetic = config.synthetic
    fingerprint = _tsv_fingerprint(spark, config)
    if not synthetic.write_tsv or reusable_output(spark, [layout.output_path(config, layout.CRITEO_TSV)], fingerprint,
                                                  force=config.run.force) is not None:
        return result
    started = time.monotonic()
    params = calibrate_twin(seed=config.run.seed, click_rate=synthetic.click_rate, days=synthetic.days)
    tsv_paths = _write_tsv(spark, config, params, partition_count(config, default_parallelism(spark)), fingerprint)
    return dataclasses.replace(result, tsv_paths=tuple(tsv_paths), seconds=time.monotonic() - started, skipped=False)


def _source_is_synthetic(spark: SparkSession, config: Config) -> None:
    if config.data.source != "synthetic":
        raise ValueError(f"data.source must be 'synthetic' for the generate stage, got {config.data.source!r}")


def _generate(run: StageRun) -> GenerateResult:
    """Write the twin's Parquet data (into ``run.staging``), truth table and (optionally) Criteo TSV."""
    spark, config = run.spark, run.config
    synthetic = config.synthetic
    params = calibrate_twin(seed=config.run.seed, click_rate=synthetic.click_rate, days=synthetic.days)
    partitions = partition_count(config, default_parallelism(spark))
    logger.info("generate: %d rows x %d days in %d partitions, b0(day) = %s", synthetic.rows_per_day,
                synthetic.days, partitions, ", ".join(f"{b0:.4f}" for b0 in params.intercepts))
    describe_jobs(spark, "generate: twin rows to Parquet")
    generated_rows(spark, params, rows_per_day=synthetic.rows_per_day, days=synthetic.days,
                   partitions=partitions).write.partitionBy(DAY).parquet(run.staging)
    _write_truth(spark, config, params, run.staging, run.fingerprint)
    tsv_paths = (_write_tsv(spark, config, params, partitions, _tsv_fingerprint(spark, config))
                 if synthetic.write_tsv else [])
    rows_by_day, clicks_by_day = _day_counts(spark, run.staging)
    result = GenerateResult(
        seed=config.run.seed, rows_per_day=synthetic.rows_per_day, days=synthetic.days,
        click_rate_target=synthetic.click_rate, intercepts=params.intercepts, partitions=partitions,
        rows=sum(rows_by_day.values()), clicks=sum(clicks_by_day.values()), rows_by_day=rows_by_day,
        clicks_by_day=clicks_by_day, parquet_path=config.parquet_path,
        truth_path=layout.output_path(config, layout.TRUTH), tsv_paths=tuple(tsv_paths),
        seconds=time.monotonic() - run.started)
    logger.info("generate: %d rows, click rate %.5f (target %.5f) in %.1f s", result.rows, result.click_rate,
                synthetic.click_rate, result.seconds)
    return result


GENERATE = Stage(
    name="generate", step="data", result=GenerateResult, compute=_generate, check=_source_is_synthetic,
    fields=("run.seed", "synthetic.rows_per_day", "synthetic.days", "synthetic.click_rate", "synthetic.partitions"),
    outputs=lambda config: (config.parquet_path, layout.output_path(config, layout.TRUTH)),
    reused=_complete_tsv, describes_input=True,
    also_writes=lambda config: (layout.output_path(config, layout.CRITEO_TSV),) if config.synthetic.write_tsv else ())
