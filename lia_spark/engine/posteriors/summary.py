"""Summaries of the posteriors stage from the digest of its pass: exact percentiles, bag counts, plot sample.

Summaries come from the digest (:mod:`lia_spark.engine.posteriors.writing`); a percentile whose bin holds
several values is picked exactly by a second, narrow pass over just that bin (:func:`summarize_digest`, ranked
on the driver or by a Spark window): exact order statistics, infinities kept, no sort of all rows.
"""
from __future__ import annotations

import functools
import os
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lia_spark.engine.posteriors.writing import PLOT_COLUMNS, UNIT_ROWS
from lia_spark.engine.runtime.parquet_reads import verified_row_groups
from lia_spark.engine.spark.capabilities import collect_arrow
from lia_spark.engine.spark.session import default_parallelism, describe_jobs
from lia_spark.kernels import advantage, hashing, leakage
from lia_spark.kernels.posterior_grid import PLOT_SAMPLE_PURPOSE, Setting, plot_sample_threshold
from lia_spark.names import SETTING_KEY
from lia_spark.records.posteriors_summary import SUMMARY_COLUMNS, BagCount

DRIVER_SELECTED_ROWS = 1 << 23  # exact percentiles: up to this many bin rows are ranked on the driver
SELECTED_SCHEMA = "target int, abs_I double"  # result rows inside a percentile's bin (target = the bin's index)


class RankRequest(NamedTuple):
    """A percentile ``q`` of summary record ``record`` that lies inside one histogram bin: the value at ``rank``
    among the ``rows`` result rows of ``setting`` with low <= |I| <= high."""

    setting: Setting
    low: float
    high: float
    rank: int
    q: int
    record: int
    rows: int

    @property
    def bin(self) -> tuple[str, float, float]:
        """The bin's identity: (setting name, low, high)."""
        return self.setting.name, self.low, self.high


def summarize_digest(spark: SparkSession, digest: pd.DataFrame, rows: str | DataFrame, *,
                     driver_rows: int = DRIVER_SELECTED_ROWS) -> pd.DataFrame:
    """One row per setting with the columns :data:`SUMMARY_COLUMNS`, from the digest of
    :func:`~lia_spark.engine.posteriors.writing.write_posteriors` (or
    :func:`~lia_spark.engine.posteriors.writing.spark_write_posteriors`) and the result rows: the folder of
    files ``write_posteriors`` wrote, or the rows as a Spark DataFrame.

    Means are digest sums over rows. Percentiles of |I| are exact order statistics
    (:func:`lia_spark.kernels.advantage.digest_percentiles`): read off a bin holding one value (RR, +inf), else
    selected among only the rows of that bin (bins are monotone in |I|, so the bin is exactly the rows with
    low <= |I| <= high): by ``np.partition`` on the driver when those bins hold at most ``driver_rows`` rows
    in all, else by a window ``row_number`` in Spark.
    """
    records: list[dict[str, Any]] = []
    wanted: list[RankRequest] = []
    cells = digest[digest["mechanism"] != UNIT_ROWS].sort_values([*SETTING_KEY, "bin"], ignore_index=True)
    for (mechanism, epsilon, bag_size), cell in cells.groupby(list(SETTING_KEY), sort=False, dropna=False):
        setting = Setting(mechanism, float(epsilon), int(bag_size))
        columns = {name: cell[name].to_numpy() for name in advantage.DIGEST_FIELDS}
        try:
            located = advantage.digest_percentiles(columns)
        except ValueError as error:
            raise ValueError(f"{error} in setting {setting.name}") from None
        n = int(columns["rows"].sum())
        record = {"mechanism": mechanism, "epsilon": setting.epsilon, "bag_size": setting.bag_size, "rows": n,
                  "mean_additive_advantage": columns["additive"].sum() / n,
                  "realized_additive_advantage": columns["realized"].sum() / n,
                  "share_infinite": int(columns["rows"][columns["bin"] == advantage.INFINITE_BIN].sum()) / n,
                  "mean_max_leakage": columns["leakage"].sum() / n,
                  "worst_case_leakage": leakage.worst_case(mechanism, epsilon=setting.noise_epsilon,
                                                           bag_size=setting.bag_size)}
        for q, where in located.items():
            if isinstance(where, tuple):
                at, rank = where
                wanted.append(RankRequest(setting, float(columns["low"][at]), float(columns["high"][at]), rank, q,
                                          len(records), int(columns["rows"][at])))
            else:
                record[f"abs_I_p{q}"] = where
        records.append(record)
    for request, value in zip(wanted, _values_at_ranks(spark, rows, wanted, driver_rows=driver_rows)):
        records[request.record][f"abs_I_p{request.q}"] = value
    stats = pd.DataFrame(records, columns=list(SUMMARY_COLUMNS))
    stats["bag_size"] = stats["bag_size"].astype("int32")
    return stats.sort_values(list(SETTING_KEY), ignore_index=True)


def _values_at_ranks(spark: SparkSession, rows: str | DataFrame, wanted: list[RankRequest], *, driver_rows: int
                     ) -> list[float]:
    """|I| at each request's rank among the rows of its bin.

    Python tasks read the result rows (:func:`_rows_in_ranges`: the setting columns and I) and return only the
    rows inside those bins; ``np.partition`` on the driver (at most ``driver_rows`` rows in all) or one
    window ``row_number`` over them picks the ranks."""
    if not wanted:
        return []
    describe_jobs(spark, "posteriors: exact order statistics of |I| inside histogram bins")
    bins = sorted({request.bin for request in wanted})
    index = {target: i for i, target in enumerate(bins)}
    by_setting: dict[tuple, list[tuple[int, float, float]]] = {}
    for setting in {request.setting.name: request.setting for request in wanted}.values():  # by name: NaN epsilons
        by_setting[_setting_key(setting.mechanism, setting.epsilon, setting.bag_size)] = [
            (index[(name, low, high)], low, high) for name, low, high in bins if name == setting.name]
    selected = _rows_in_ranges(spark, rows, by_setting)
    if sum({request.bin: request.rows for request in wanted}.values()) <= driver_rows:
        table = collect_arrow(selected)
        targets, values = table.column("target").to_numpy(), table.column("abs_I").to_numpy()
        in_range = {target: values[targets == target] for target in index.values()}
        return [float(np.partition(in_range[index[request.bin]], request.rank)[request.rank]) for request in wanted]
    ranked = selected.withColumn("rank", F.row_number().over(Window.partitionBy("target").orderBy("abs_I")) - 1)
    wanted_ranks = sorted({(index[request.bin], request.rank) for request in wanted})
    picked = (ranked.join(F.broadcast(spark.createDataFrame(wanted_ranks, "target int, rank int")), ["target", "rank"])
              .select("target", "rank", "abs_I").collect())
    values = {(row["target"], row["rank"]): float(row["abs_I"]) for row in picked}
    return [values[(index[request.bin], request.rank)] for request in wanted]


def _setting_key(mechanism: str, epsilon: float, bag_size: int) -> tuple[str, int, int]:
    """Hashable setting identity (epsilon by its bits, so NaN equals NaN)."""
    return mechanism, int(np.float64(epsilon).view(np.int64)), int(bag_size)


def _rows_in_ranges(spark: SparkSession, rows: str | DataFrame, ranges: dict[tuple, list[tuple[int, float, float]]]
                    ) -> DataFrame:
    """(target, |I|) of the result rows whose setting has ranges (target, low, high) and whose |I| lies in one:
    Python tasks read the files in the folder ``rows`` with pyarrow (:func:`_file_rows_in_ranges`), or the
    batches Spark reads of the DataFrame ``rows`` (:func:`_frame_rows_in_ranges`), which Spark first narrows to
    the rows whose |I| lies in any of the ranges."""
    if isinstance(rows, DataFrame):
        spans = sorted({(low, high) for targets in ranges.values() for _, low, high in targets})
        inside = functools.reduce(lambda a, b: a | b, [F.abs("I").between(low, high) for low, high in spans])
        return rows.where(inside).select(*SETTING_KEY, "I").mapInArrow(
            functools.partial(_frame_rows_in_ranges, ranges=ranges), SELECTED_SCHEMA)
    files = [os.path.join(rows, name) for name in sorted(os.listdir(rows)) if name.endswith(".parquet")]
    body = functools.partial(_file_rows_in_ranges, files=tuple(files), ranges=ranges)
    tasks = max(1, min(len(files), default_parallelism(spark) * 4))
    return spark.range(len(files), numPartitions=tasks).mapInArrow(body, SELECTED_SCHEMA)


def _file_rows_in_ranges(batches: Iterator[pa.RecordBatch], *, files: Sequence[str],
                         ranges: dict[tuple, list[tuple[int, float, float]]]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over file indices: :func:`_in_ranges` of each row group of each file."""
    for batch in batches:
        for file_index in batch.column("id").to_numpy():
            for table in verified_row_groups(files[file_index], columns=[*SETTING_KEY, "I"],
                                             read_dictionary=["mechanism"]):
                yield from _in_ranges(table.column("mechanism").combine_chunks(), table.column("epsilon").to_numpy(),
                                      table.column("bag_size").to_numpy(), table.column("I").to_numpy(), ranges)


def _frame_rows_in_ranges(batches: Iterator[pa.RecordBatch], *, ranges: dict[tuple, list[tuple[int, float, float]]]
                          ) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over result rows (setting columns and I) read by Spark: :func:`_in_ranges` of each batch."""
    for batch in batches:
        yield from _in_ranges(batch.column("mechanism").dictionary_encode(),
                              batch.column("epsilon").to_numpy(zero_copy_only=False),
                              batch.column("bag_size").to_numpy(zero_copy_only=False),
                              batch.column("I").to_numpy(zero_copy_only=False), ranges)


def _in_ranges(mechanism: pa.DictionaryArray, epsilon: np.ndarray, bag_size: np.ndarray, i: np.ndarray,
               ranges: dict[tuple, list[tuple[int, float, float]]]) -> Iterator[pa.RecordBatch]:
    """(target, |I|) of the rows of one batch of result columns whose setting has ranges (target, low, high) and
    whose |I| lies in one. Each setting's rows are runs (written batch by batch)."""
    codes = mechanism.indices.to_numpy()
    epsilon_bits = epsilon.view(np.int64)
    abs_i = np.abs(i)
    starts = np.flatnonzero(np.r_[True, (codes[1:] != codes[:-1]) | (bag_size[1:] != bag_size[:-1])
                                  | (epsilon_bits[1:] != epsilon_bits[:-1])])
    for start, end in zip(starts, np.r_[starts[1:], codes.size]):
        key = (mechanism.dictionary[codes[start]].as_py(), int(epsilon_bits[start]), int(bag_size[start]))
        for target, low, high in ranges.get(key, ()):
            values = abs_i[start:end]
            inside = values[(values >= low) & (values <= high)]
            yield pa.RecordBatch.from_arrays([pa.array(np.full(inside.size, target, np.int32)),
                                              pa.array(inside)], names=["target", "abs_I"])


def bag_counts(digest: pd.DataFrame, settings: Sequence[Setting]) -> dict[str, BagCount]:
    """Per bagged size k: bags, bags of exactly k rows and the sizes of the remainder bags (at most one per
    unit), from the rows per bagging unit in the digest of the stage's pass."""
    units = digest.loc[digest["mechanism"] == UNIT_ROWS, "rows"].to_numpy(np.int64)
    counts = {}
    for k in sorted({s.bag_size for s in settings if s.release.bagged}):
        remainders = units % k
        counts[str(k)] = BagCount(bags=int((-(-units // k)).sum()), full_bags=int((units // k).sum()),
                                  remainder_sizes=tuple(sorted(int(r) for r in remainders[remainders > 0])))
    return counts


def plot_sample(rows: DataFrame, *, fraction: float, seed: int) -> pd.DataFrame:
    """:data:`PLOT_COLUMNS` of the result rows (read by Spark) that
    :func:`lia_spark.kernels.posterior_grid.plot_sample_mask` keeps, collected to
    the driver (small by design): the same rule as a predicate on Spark's ``xxhash64``."""
    describe_jobs(rows.sparkSession, "posteriors: plot sample of the per-row results")
    threshold = plot_sample_threshold(fraction)
    if threshold is not None:
        stream = F.lit(hashing.signed_stream_key(seed, PLOT_SAMPLE_PURPOSE)).cast("long")
        rows = rows.where(F.xxhash64(stream, F.col("row_id")) < F.lit(threshold).cast("long"))
    return rows.select(*PLOT_COLUMNS).toPandas()
