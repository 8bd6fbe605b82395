"""Stage ``posteriors``: release one day's labels through the mechanisms of SPEC 2, posteriors per SPEC 3.

Data movement only; the math is in :mod:`lia_spark.mechanisms`, :mod:`lia_spark.posteriors` and
:mod:`lia_spark.advantage`. The whole (mechanism x epsilon x bag size) grid comes from one read of the input
and one shuffle:

- Keys in Spark SQL (no Python round trip): every data row and every prior row gets the bagging key
  ``xxhash64(stream, row_id)`` and its unit (the key's top bits, :func:`lia_spark.mechanisms.bagging_units`).
- One shuffle: the union of data rows (row_id, label) and prior rows (row_id, prior) is range-partitioned by
  unit and sorted by (unit, key, row_id, side) inside partitions, so each unit lies whole in one partition, in
  the random order of :func:`lia_spark.mechanisms.assign_bags`, with a row's label and prior side by side (the
  join is a merge of neighbours, done in the Python worker; rows without a prior are counted, not bagged).
- One ``mapInArrow`` pass streams each partition: rows at position p of unit u are in bag
  ``u * 2^40 + p div k`` for every k; chunks cut at multiples of lcm(k) hold whole bags of every size, so every
  bagged setting and every RR setting runs vectorized on each chunk and memory stays flat. All bags hold
  exactly k rows except at most one remainder bag per unit (SPEC 2: per independent bagging unit).
- Noise is keyed on (setting seed, bag id or row id); a setting's seed is derived from the run seed and the
  setting's name, so settings draw independent noise. Nothing depends on partitions, executors or retries.
- Summaries: one aggregation into histogram bins of |I| per setting, then an exact rank selection inside the
  few bins holding a wanted percentile (:func:`summarize_rows`): percentiles are exact order statistics,
  infinities stay infinite, and no sort of all rows is needed.
- Labels other than 0/1 fail the job naming the row; a row id repeated on one side fails naming the id; data
  rows without a prior are counted (``rows_without_prior``) and left out.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import math
import os
import time
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

from lia_spark import advantage, hashing, mechanisms, posteriors
from lia_spark.config import Config, MechanismsConfig
from lia_spark.engine.outputs import committed_output, local_output_path, marker_fields, reusable_marker

logger = logging.getLogger(__name__)

BAGGED_MECHANISMS = ("llp", "llp_laplace", "llp_geometric")
SETTING_KEYS = ["mechanism", "epsilon", "bag_size"]
ROWS_PER_CALL = 65_536  # input rows per chunk, at most ...
OUTPUT_ROWS_PER_CALL = 1 << 19  # ... and about this many output rows (input rows x settings)
_LOCAL_WRITES = "posteriors writes its CSV and plots"
PRIOR_ROW = -1  # label value marking a prior row in the bagging order

ORDERED_SCHEMA = StructType([
    StructField("row_id", LongType(), False),
    StructField("label", IntegerType(), False),  # PRIOR_ROW (-1) on prior rows
    StructField("prior", DoubleType(), False),  # NaN on data rows
])
ROW_SCHEMA = StructType([
    StructField("row_id", LongType(), False),
    StructField("mechanism", StringType(), False),
    StructField("epsilon", DoubleType(), False),  # NaN for plain LLP
    StructField("bag_size", IntegerType(), False),
    StructField("bag_id", LongType(), True),  # null for RR
    StructField("prior", DoubleType(), False),
    StructField("label", IntegerType(), False),
    StructField("released", DoubleType(), False),
    StructField("posterior", DoubleType(), False),
    StructField("I", DoubleType(), False),
    StructField("additive_advantage", DoubleType(), False),
    StructField("realized_advantage", DoubleType(), False),
])
ARROW_ROW_SCHEMA = to_arrow_schema(ROW_SCHEMA)
SUMMARY_COLUMNS = [
    "mechanism", "epsilon", "bag_size", "rows", "mean_additive_advantage", "realized_additive_advantage",
    *(f"abs_I_p{q}" for q in advantage.PERCENTILES), "share_infinite",
]


@dataclasses.dataclass(frozen=True)
class Setting:
    """One cell of the grid: a mechanism with its epsilon (NaN for plain LLP) and bag size (1 for RR)."""

    mechanism: str
    epsilon: float
    bag_size: int

    @property
    def name(self) -> str:
        """Stable text name, e.g. ``llp_laplace_eps1_k8`` (also the MLflow metric prefix)."""
        parts = [self.mechanism]
        if not math.isnan(self.epsilon):
            parts.append(f"eps{self.epsilon:g}")
        if self.mechanism != "rr":
            parts.append(f"k{self.bag_size}")
        return "_".join(parts)


def settings_grid(config: MechanismsConfig) -> list[Setting]:
    """The grid names x epsilons x bag sizes: RR uses only epsilon, LLP only k, noisy LLP both."""
    grid = []
    for mechanism in config.names:
        epsilons = (math.nan,) if mechanism == "llp" else config.epsilons
        bag_sizes = (1,) if mechanism == "rr" else config.bag_sizes
        grid.extend(Setting(mechanism, float(eps), int(k)) for k in bag_sizes for eps in epsilons)
    return grid


def setting_seed(seed: int, setting: Setting) -> int:
    """Seed of one setting's noise: the run seed mixed with the setting's name (63 bits)."""
    return int(hashing.stream_key(seed, f"posteriors/{setting.name}")) >> 1


def rows_per_call(bag_sizes: Sequence[int], *, settings: int = 1, bags_per_group: int = 0) -> int:
    """Input rows per chunk: a multiple of every bag size (so each chunk holds whole bags of every size)
    near ``bags_per_group`` x max(k), or when that is 0 near min(65536, 2^19 / settings)."""
    unit = math.lcm(*bag_sizes)
    target = bags_per_group * max(bag_sizes) if bags_per_group else min(ROWS_PER_CALL, OUTPUT_ROWS_PER_CALL // settings)
    return unit * max(1, round(target / unit))


# ----------------------------------------------------------------------------------------------- input


def prior_source(config: Config) -> str:
    """Where the prior column lives: mechanisms.prior_path, else the twin's truth table for ``eta``, else
    the canary table of the train stage."""
    if config.mechanisms.prior_path:
        return config.mechanisms.prior_path
    if config.mechanisms.prior_column == "eta":
        return os.path.join(config.run.output_dir, "truth")
    return os.path.join(config.run.output_dir, "models", "canaries")


def load_input(spark: SparkSession, config: Config) -> tuple[DataFrame, DataFrame]:
    """The day's data rows (row_id, label) and its prior rows (row_id, prior = the prior column), unjoined."""
    column, source = config.mechanisms.prior_column, prior_source(config)
    rows = (spark.read.parquet(config.parquet_path)
            .where(F.col("day") == config.mechanisms.day)
            .select(F.col("row_id").cast("long"), F.col("label").cast("int")))
    priors = spark.read.parquet(source)
    if column not in priors.columns:
        raise ValueError(f"mechanisms.prior_column: {source} has no column {column!r}, got {column!r}")
    if "day" in priors.columns:  # the truth table is day-partitioned: read only the released day
        priors = priors.where(F.col("day") == config.mechanisms.day)
    return rows, priors.select(F.col("row_id").cast("long"), F.col(column).cast("double").alias("prior"))


# --------------------------------------------------------------------------------------------- bagging


def row_hash(seed: int, purpose: str) -> Column:
    """Spark SQL ``xxhash64(signed_stream_key(seed, purpose), row_id)``: a 64-bit key per row, no Python."""
    return F.xxhash64(F.lit(hashing.signed_stream_key(seed, purpose)).cast("bigint"), F.col("row_id").cast("bigint"))


def bagging_key(seed: int) -> Column:
    """The bagging key :func:`lia_spark.mechanisms.bagging_keys` as a Spark SQL expression on ``row_id``."""
    return row_hash(seed, mechanisms.BAGGING_PURPOSE)


def bagging_unit(key: Column, *, unit_bits: int) -> Column:
    """:func:`lia_spark.mechanisms.bagging_units` as a Spark SQL expression on the key."""
    if unit_bits == 0:
        return F.lit(0)
    return (F.shiftright(key, 64 - unit_bits) + (1 << (unit_bits - 1))).cast("int")


def _checked_labels() -> Column:
    """The label column, failing the job with a clear error on a value other than 0 or 1."""
    return F.when(F.col("label").isin(0, 1), F.col("label").cast("int")).otherwise(F.raise_error(F.concat(
        F.lit("label: must be 0 or 1, got "), F.coalesce(F.col("label").cast("string"), F.lit("null")),
        F.lit(" at row_id "), F.col("row_id").cast("string")))).alias("label")


def bagging_order(rows: DataFrame, priors: DataFrame | None, *, seed: int, unit_bits: int) -> DataFrame:
    """Data rows and prior rows (schema :data:`ORDERED_SCHEMA`), range-partitioned by bagging unit (each unit
    whole in one partition) and sorted by key inside partitions (one long sort key: Spark's radix sort), so a
    row's label and its prior are neighbours. ``priors=None``: ``rows`` already hold label and prior."""
    if priors is None:
        sides = rows.select("row_id", _checked_labels(), F.col("prior").cast("double"))
    else:
        sides = (rows.select("row_id", _checked_labels(), F.lit(math.nan).alias("prior"))
                 .unionByName(priors.select("row_id", F.lit(PRIOR_ROW).alias("label"), F.col("prior").cast("double"))))
    partitions = min(1 << unit_bits, int(rows.sparkSession.conf.get("spark.sql.shuffle.partitions")))
    key = bagging_key(seed)  # evaluated on both sides of the shuffle instead of shuffling 8 more bytes per row
    return sides.repartitionByRange(partitions, bagging_unit(key, unit_bits=unit_bits)).sortWithinPartitions(key)


def _start_of_last_run(values: np.ndarray) -> int:
    """Index where the trailing run of values equal to the last one starts (0 for an empty array)."""
    if not values.size:
        return 0
    differs = np.flatnonzero(values != values[-1])
    return int(differs[-1]) + 1 if differs.size else 0


def _in_key_order(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Rows ordered by (key, row_id, data row before prior row). The stream is sorted by key only; a run of
    equal keys holds one row id (its data row and prior row) unless two row ids collide in the 64-bit key,
    the only case sorted here."""
    keys, ids = rows["bag_key"], rows["row_id"]
    if not ((keys[1:] == keys[:-1]) & (ids[1:] != ids[:-1])).any():
        return rows
    order = np.lexsort((rows["label"] == PRIOR_ROW, ids, keys))
    return {name: values[order] for name, values in rows.items()}


def _paired_sides(rows: dict[str, np.ndarray], *, paired: bool) -> dict[str, np.ndarray]:
    """Rows holding both a label and a prior. Unpaired, each row id's data row and prior row are neighbours
    (in either order) and are merged; rows without a partner are left out. A repeated row id raises."""
    ids, is_prior = rows["row_id"], rows["label"] == PRIOR_ROW
    same = ids[1:] == ids[:-1]
    repeated = same if paired else (same & (is_prior[1:] == is_prior[:-1])) | np.r_[same[1:] & same[:-1], False]
    if repeated.any():
        row_id = int(ids[1:][repeated][0])
        raise ValueError(f"row_id: {row_id} appears more than once in the "
                         f"{'input' if paired else 'data rows or the prior rows'}")
    if paired:
        return rows
    first = np.flatnonzero(same)
    data_at = np.where(is_prior[first], first + 1, first)
    prior_at = 2 * first + 1 - data_at
    return {"bag_key": rows["bag_key"][data_at], "row_id": ids[data_at], "label": rows["label"][data_at],
            "prior": rows["prior"][prior_at]}


def matched_rows(batches: Iterator[pa.RecordBatch], *, seed: int, unit_bits: int, paired: bool
                 ) -> Iterator[dict[str, np.ndarray]]:
    """Rows (unit, row_id, label, prior) holding both a label and a prior, in the order (key, row_id).

    ``batches`` follow :func:`bagging_order`; keys are recomputed from the row ids (cheaper than shipping them).
    The trailing run of equal keys of a batch is held back until the next batch (the run may continue there).
    """
    carry = {"bag_key": np.zeros(0, np.int64), "row_id": np.zeros(0, np.int64), "label": np.zeros(0, np.int32),
             "prior": np.zeros(0, np.float64)}
    for batch in itertools.chain(batches, [None]):
        if batch is not None:
            incoming = {name: batch.column(name).to_numpy(zero_copy_only=False) for name in ORDERED_SCHEMA.fieldNames()}
            incoming["bag_key"] = mechanisms.bagging_keys(incoming["row_id"], seed=seed)
            rows = {name: np.concatenate((held, incoming[name])) for name, held in carry.items()}
        else:
            rows = carry
        keep = rows["row_id"].size if batch is None else _start_of_last_run(rows["bag_key"])
        carry = {name: values[keep:] for name, values in rows.items()}
        if keep:
            merged = _paired_sides(_in_key_order({name: values[:keep] for name, values in rows.items()}), paired=paired)
            if merged["row_id"].size:
                yield {"unit": mechanisms.bagging_units(merged["bag_key"], unit_bits=unit_bits),
                       "row_id": merged["row_id"], "label": merged["label"], "prior": merged["prior"]}


def unit_chunks(matched: Iterator[dict[str, np.ndarray]], *, chunk_rows: int
                ) -> Iterator[tuple[int, int, dict[str, np.ndarray]]]:
    """(unit, position of the first row inside the unit, rows) in chunks of ``chunk_rows`` rows (a multiple of
    every bag size) or the rest of a unit, so every chunk holds whole bags (a unit's last bag may be short)."""
    buffer: dict[str, np.ndarray] | None = None
    position = 0
    for rows in itertools.chain(matched, [None]):
        if rows is not None:
            buffer = rows if buffer is None else {name: np.concatenate((buffer[name], rows[name])) for name in rows}
        while buffer is not None and buffer["unit"].size:
            units = buffer["unit"]
            end = int(np.searchsorted(units, units[0], side="right"))
            unit_done = rows is None or end < units.size
            if end >= chunk_rows:
                take = chunk_rows
            elif unit_done:
                take = end
            else:
                break
            yield int(units[0]), position, {name: values[:take] for name, values in buffer.items()}
            position = 0 if take == end and unit_done else position + take
            buffer = {name: values[take:] for name, values in buffer.items()}


# ------------------------------------------------------------------------------------------ posteriors


def _row_batch(setting: Setting, rows: dict[str, np.ndarray], bag_ids: np.ndarray | None, released: np.ndarray,
               result: posteriors.Posteriors) -> pa.RecordBatch:
    """Per-row output of one setting (:data:`ROW_SCHEMA`): posteriors plus the additive and realized advantages."""
    n, prior, label = rows["row_id"].size, rows["prior"], rows["label"]
    return pa.RecordBatch.from_arrays([
        pa.array(rows["row_id"]),
        pa.repeat(setting.mechanism, n),
        pa.array(np.full(n, setting.epsilon)),
        pa.array(np.full(n, setting.bag_size, dtype=np.int32)),
        pa.nulls(n, pa.int64()) if bag_ids is None else pa.array(bag_ids),
        pa.array(prior),
        pa.array(label.astype(np.int32, copy=False)),
        pa.array(np.asarray(released, dtype=np.float64)),
        pa.array(result.posterior),
        pa.array(result.multiplicative_advantage),
        pa.array(advantage.additive_advantage(result.posterior, prior)),
        pa.array(advantage.realized_advantage(result.posterior, prior, label)),
    ], schema=ARROW_ROW_SCHEMA)


def chunk_posteriors(unit: int, first_position: int, rows: dict[str, np.ndarray], settings: Sequence[Setting],
                     seed: int) -> Iterator[pa.RecordBatch]:
    """Every setting on one chunk of a unit (rows at positions first_position.. inside unit ``unit``, whole bags
    of every bagged size): bag of a row = :func:`lia_spark.mechanisms.unit_bag_ids`; one batch per setting."""
    labels, priors = rows["label"].astype(np.int64), rows["prior"]
    positions = first_position + np.arange(labels.size, dtype=np.int64)
    for k in sorted({s.bag_size for s in settings if s.mechanism in BAGGED_MECHANISMS}):
        row_bags = mechanisms.unit_bag_ids(np.full(labels.size, unit), positions, bag_size=k)
        bag_ids, bag_sizes = np.unique(row_bags, return_counts=True)
        sums = mechanisms.bag_sums(labels, bag_sizes)
        for setting in (s for s in settings if s.bag_size == k and s.mechanism in BAGGED_MECHANISMS):
            eps, noise_seed = setting.epsilon, setting_seed(seed, setting)
            if setting.mechanism == "llp":
                released = sums / bag_sizes
                result = posteriors.llp_bags(priors, bag_sizes, sums)
            elif setting.mechanism == "llp_laplace":
                released = mechanisms.laplace_release(sums, bag_sizes, bag_ids, epsilon=eps, seed=noise_seed)
                result = posteriors.llp_laplace_bags(priors, bag_sizes, released, epsilon=eps)
            else:
                clipped, released = mechanisms.geometric_release(sums, bag_sizes, bag_ids, epsilon=eps, seed=noise_seed)
                result = posteriors.llp_geometric_bags(priors, bag_sizes, clipped, epsilon=eps)
            yield _row_batch(setting, rows, row_bags, np.repeat(released, bag_sizes), result)
    for setting in (s for s in settings if s.mechanism == "rr"):
        released = mechanisms.rr_release(labels, rows["row_id"], epsilon=setting.epsilon,
                                         seed=setting_seed(seed, setting))
        yield _row_batch(setting, rows, None, released, posteriors.rr(priors, released, epsilon=setting.epsilon))


def _stream_posteriors(batches: Iterator[pa.RecordBatch], *, settings: Sequence[Setting], seed: int, unit_bits: int,
                       paired: bool, chunk_rows: int) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: match labels with priors, cut units into chunks, run every setting on each chunk."""
    matched = matched_rows(batches, seed=seed, unit_bits=unit_bits, paired=paired)
    for unit, first_position, rows in unit_chunks(matched, chunk_rows=chunk_rows):
        yield from chunk_posteriors(unit, first_position, rows, settings, seed)


def compute_posteriors(rows: DataFrame, *, settings: Sequence[Setting], seed: int, priors: DataFrame | None = None,
                       unit_bits: int = 0, bags_per_group: int = 0) -> DataFrame:
    """Per-row releases, posteriors and advantages (schema :data:`ROW_SCHEMA`) for every setting.

    Args:
        rows: data rows (row_id, label), or (row_id, label, prior) when ``priors`` is None.
        settings: grid cells (see :func:`settings_grid`).
        seed: run seed (bags and noise derive from it).
        priors: prior rows (row_id, prior), matched to ``rows`` on row_id (inner join; each side unique).
        unit_bits: 2^unit_bits independent bagging units (:func:`lia_spark.mechanisms.bagging_unit_bits`).
        bags_per_group: bags of the largest size per chunk (0 = automatic, see :func:`rows_per_call`).
    """
    if not settings:
        raise ValueError(f"settings: must hold at least one setting, got {settings!r}")
    chunk_rows = rows_per_call([s.bag_size for s in settings], settings=len(settings), bags_per_group=bags_per_group)
    body = functools.partial(_stream_posteriors, settings=tuple(settings), seed=seed, unit_bits=unit_bits,
                             paired=priors is None, chunk_rows=chunk_rows)
    return bagging_order(rows, priors, seed=seed, unit_bits=unit_bits).mapInArrow(body, ROW_SCHEMA)


def posterior_rows(spark: SparkSession, config: Config) -> tuple[DataFrame, int, int]:
    """(per-row results of every setting of the grid for config.mechanisms.day, data rows of the day,
    bagging unit bits): counts the day's data and prior rows, picks the units, plans the one-shuffle pass."""
    section = config.mechanisms
    spark.sparkContext.setJobDescription("posteriors: count rows and priors")
    data, priors = load_input(spark, config)
    data_rows = data.count()
    unit_bits = mechanisms.bagging_unit_bits(min(data_rows, priors.count()), section.rows_per_bagging_unit)
    rows = compute_posteriors(data, priors=priors, settings=settings_grid(section), seed=config.run.seed,
                              unit_bits=unit_bits, bags_per_group=section.bags_per_group)
    return rows, data_rows, unit_bits


# ------------------------------------------------------------------------------------------ summaries


def percentile_rank(n: int, q: float) -> int:
    """0-based rank of the q-th percentile among n sorted values: ceil(q n / 100) - 1, at least 0, the
    order statistic of :func:`lia_spark.advantage.exact_percentile` (no interpolation, so inf stays inf)."""
    return max(int(math.ceil(q / 100.0 * n)), 1) - 1


BINS_PER_OCTAVE = 16
_ZERO_BIN, _INFINITE_BIN, _NAN_BIN = -(1 << 20), 1 << 20, (1 << 20) + 1


def _abs_i_bin(abs_i: Column) -> Column:
    """Histogram bin of |I|, monotone in |I|: floor(16 log2 |I|), with 0, +inf and NaN in their own bins."""
    return (F.when(F.isnan(abs_i), F.lit(_NAN_BIN)).when(abs_i == 0.0, F.lit(_ZERO_BIN))
            .when(abs_i == math.inf, F.lit(_INFINITE_BIN))
            .otherwise(F.floor(F.log2(abs_i) * BINS_PER_OCTAVE)).cast("int"))


def summarize_rows(rows: DataFrame) -> pd.DataFrame:
    """One row per setting with the columns :data:`SUMMARY_COLUMNS` (exact percentiles of |I|).

    Exact order statistics at :func:`percentile_rank` without sorting all rows: one aggregation gives counts,
    min, max and advantage sums per (setting, bin of |I|) (bins monotone in |I|); a wanted rank falls in a
    known bin, whose value is known when min = max (e.g. RR, +-inf) and is otherwise picked by a window
    ``row_number`` over the rows of that bin only. Means are sums over bins divided by the row count.
    """
    spark = rows.sparkSession
    abs_i = F.abs(F.col("I"))
    spark.sparkContext.setJobDescription("posteriors: histogram of |I| per setting")
    bins = (rows.select(*SETTING_KEYS, abs_i.alias("abs_I"), "additive_advantage", "realized_advantage")
            .groupBy(*SETTING_KEYS, _abs_i_bin(F.col("abs_I")).alias("bin"))
            .agg(F.count(F.lit(1)).alias("rows"), F.min("abs_I").alias("low"), F.max("abs_I").alias("high"),
                 F.sum("additive_advantage").alias("additive"), F.sum("realized_advantage").alias("realized"))
            .toPandas())
    bins = bins.sort_values([*SETTING_KEYS, "bin"], ignore_index=True)
    records, wanted = [], []
    for (mechanism, epsilon, bag_size), cell in bins.groupby(SETTING_KEYS, sort=False, dropna=False):
        if (cell["bin"] == _NAN_BIN).any():
            raise ValueError(f"I: NaN in setting {Setting(mechanism, epsilon, int(bag_size)).name}")
        n = int(cell["rows"].sum())
        record = {"mechanism": mechanism, "epsilon": epsilon, "bag_size": int(bag_size), "rows": n,
                  "mean_additive_advantage": cell["additive"].sum() / n,
                  "realized_additive_advantage": cell["realized"].sum() / n,
                  "share_infinite": int(cell.loc[cell["bin"] == _INFINITE_BIN, "rows"].sum()) / n}
        ends = cell["rows"].cumsum().to_numpy()
        for q in advantage.PERCENTILES:
            rank = percentile_rank(n, q)
            at = int(np.searchsorted(ends, rank, side="right"))
            if cell["low"].iloc[at] == cell["high"].iloc[at]:
                record[f"abs_I_p{q}"] = float(cell["low"].iloc[at])
            else:
                wanted.append((mechanism, epsilon, int(bag_size), int(cell["bin"].iloc[at]),
                               rank - int(ends[at] - cell["rows"].iloc[at]), q, len(records)))
        records.append(record)
    if wanted:
        for (*_, q, index), value in zip(wanted, _ranks_in_bins(rows, wanted)):
            records[index][f"abs_I_p{q}"] = value
    stats = pd.DataFrame(records, columns=SUMMARY_COLUMNS)
    stats["bag_size"] = stats["bag_size"].astype("int32")
    return stats.sort_values(SETTING_KEYS, ignore_index=True)


def _ranks_in_bins(rows: DataFrame, wanted: list[tuple]) -> list[float]:
    """|I| at (setting, bin, rank inside the bin) for each wanted tuple: a window row_number over those bins."""
    spark = rows.sparkSession
    spark.sparkContext.setJobDescription("posteriors: exact order statistics of |I| inside histogram bins")
    targets = (spark.createDataFrame(pd.DataFrame([w[:5] for w in wanted], columns=[*SETTING_KEYS, "bin", "rank"]),
                                     "mechanism string, epsilon double, bag_size int, bin int, rank long")
               .withColumn("epsilon", F.coalesce(F.col("epsilon"), F.lit(math.nan))))  # Arrow turns NaN into null
    keys = [*SETTING_KEYS, "bin"]
    in_bins = (rows.select(*SETTING_KEYS, F.abs(F.col("I")).alias("abs_I"))
               .withColumn("bin", _abs_i_bin(F.col("abs_I")))
               .join(F.broadcast(targets.select(*keys).distinct()), keys))
    picked = (in_bins.withColumn("rank", F.row_number().over(Window.partitionBy(*keys).orderBy("abs_I")) - 1)
              .join(F.broadcast(targets), [*keys, "rank"]).toPandas())
    values = {(Setting(m, e, int(k)).name, int(b), int(r)): float(v) for m, e, k, b, r, v in
              picked[[*keys, "rank", "abs_I"]].itertuples(index=False)}
    return [values[(Setting(m, e, k).name, b, r)] for m, e, k, b, r, *_ in wanted]


def bag_counts(rows: DataFrame, settings: Sequence[Setting]) -> dict[str, dict[str, Any]]:
    """Per bag size k: bags, bags of exactly k rows and the sizes of the remainder bags (at most one per unit),
    from the rows per unit (bag_id div 2^40) of one bagged setting."""
    bagged = [s for s in settings if s.mechanism in BAGGED_MECHANISMS]
    if not bagged:
        return {}
    first = bagged[0]
    rows.sparkSession.sparkContext.setJobDescription("posteriors: rows per bagging unit")
    same_epsilon = F.isnan("epsilon") if math.isnan(first.epsilon) else F.col("epsilon") == first.epsilon
    units = (rows.where((F.col("mechanism") == first.mechanism) & same_epsilon & (F.col("bag_size") == first.bag_size))
             .groupBy(F.shiftright("bag_id", mechanisms.UNIT_SHIFT)).count().toPandas()["count"].to_numpy(np.int64))
    counts = {}
    for k in sorted({s.bag_size for s in bagged}):
        remainders = units % k
        counts[str(k)] = {"bags": int((-(-units // k)).sum()), "full_bags": int((units // k).sum()),
                          "remainder_sizes": sorted(int(r) for r in remainders[remainders > 0])}
    return counts


def sample_rows(rows: DataFrame, *, fraction: float, seed: int) -> pd.DataFrame:
    """A bounded random sample for plots: the same rows in every setting, kept when the row's key
    xxhash64(stream, row_id), read as unsigned, lies below fraction x 2^64 (a filter in Spark SQL)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction: must be in (0, 1], got {fraction!r}")
    columns = ["row_id", *SETTING_KEYS, "prior", "posterior", "I", "additive_advantage"]
    key = row_hash(seed, "posteriors:plot_sample")
    threshold = math.floor(fraction * 2.0 ** 64) - 2 ** 63  # signed key < threshold <=> unsigned key < fraction 2^64
    rows.sparkSession.sparkContext.setJobDescription("posteriors: sample rows for plots")
    kept = rows.select(*columns) if threshold >= 2 ** 63 else rows.select(*columns).where(key < F.lit(threshold))
    return kept.toPandas()


# ------------------------------------------------------------------------------------------------ stage


@dataclasses.dataclass(frozen=True)
class PosteriorsResult:
    """Outcome of the posteriors stage: where outputs went, the per-setting summary and bag counts."""

    output_path: str
    input_rows: int
    settings: int
    rows_written: bool
    summary: tuple[dict[str, Any], ...]
    bags: dict[str, dict[str, Any]]
    plots: tuple[str, ...]
    seconds: float
    bagging_units: int = 1
    rows_without_prior: int = 0
    skipped: bool = False

    @property
    def summary_csv(self) -> str:
        return os.path.join(self.output_path, "summary.csv")

    def to_dict(self) -> dict[str, Any]:
        payload = dataclasses.asdict(self)
        payload["summary"] = [dict(row) for row in self.summary]
        payload["plots"] = list(self.plots)
        return payload

    @classmethod
    def from_dict(cls, payload: dict[str, Any], *, skipped: bool = False) -> "PosteriorsResult":
        values = marker_fields(cls, payload)
        values.update(summary=tuple(values["summary"]), plots=tuple(values["plots"]), skipped=skipped)
        return cls(**values)

    def metrics(self) -> dict[str, float]:
        """Flat finite metrics: ``<setting>_<statistic>`` per setting plus input size and throughput."""
        metrics = {"posteriors_input_rows": float(self.input_rows), "posteriors_seconds": self.seconds,
                   "posteriors_rows_without_prior": float(self.rows_without_prior)}
        for row in self.summary:
            name = Setting(row["mechanism"], float(row["epsilon"]), int(row["bag_size"])).name
            for column in SUMMARY_COLUMNS[4:]:
                if math.isfinite(row[column]):
                    metrics[f"{name}_{column}"] = float(row[column])
        return metrics

    def artifacts(self) -> list[str]:
        """The summary CSV and the plot PNGs (local paths)."""
        return [self.summary_csv, *self.plots]


def _native(value: Any) -> Any:
    """numpy scalars -> Python scalars (the marker is JSON)."""
    return value.item() if isinstance(value, np.generic) else value


def run_posteriors(spark: SparkSession, config: Config) -> PosteriorsResult:
    """Release config.mechanisms.day through the grid of settings; write rows, summaries and plots.

    Output ``<run.output_dir>/posteriors``: ``rows`` (if mechanisms.write_rows), ``summary`` (Parquet),
    ``summary.csv`` and ``plots/*.png``, committed atomically. Skipped when complete and not run.force.
    """
    output = os.path.join(config.run.output_dir, "posteriors")
    local_output = local_output_path(output, writes=_LOCAL_WRITES)
    marker = reusable_marker(spark, output, force=config.run.force, stage="posteriors")
    if marker is not None:
        return PosteriorsResult.from_dict(marker, skipped=True)
    started = time.monotonic()
    section = config.mechanisms
    settings = settings_grid(section)
    logger.info("posteriors: day %d, prior %s, %d settings", section.day, section.prior_column, len(settings))
    metadata: dict[str, Any] = {}
    with committed_output(spark, output, metadata) as staging:
        rows, data_rows, unit_bits = posterior_rows(spark, config)
        logger.info("posteriors: %d data rows, %d bagging units", data_rows, 1 << unit_bits)
        if section.write_rows:
            spark.sparkContext.setJobDescription("posteriors: write per-row posteriors")
            rows.write.parquet(f"{staging}/rows")
            stored = spark.read.parquet(f"{staging}/rows")
            logger.info("posteriors: rows written after %.1f s", time.monotonic() - started)
        else:
            stored = rows.persist(StorageLevel.DISK_ONLY)
        summary = summarize_rows(stored)
        input_rows = int(summary["rows"].max()) if len(summary) else 0
        logger.info("posteriors: %d input rows, %d result rows, summarized after %.1f s", input_rows,
                    int(summary["rows"].sum()), time.monotonic() - started)
        (spark.createDataFrame(summary).coalesce(1)
         .withColumn("epsilon", F.coalesce(F.col("epsilon"), F.lit(math.nan)))  # Arrow turns NaN into null
         .write.parquet(f"{staging}/summary"))
        local_staging = local_output_path(staging, writes=_LOCAL_WRITES)
        summary.to_csv(os.path.join(local_staging, "summary.csv"), index=False)
        fraction = min(1.0, section.plot_sample_rows / max(input_rows, 1))
        sample = sample_rows(stored, fraction=fraction, seed=config.run.seed)
        from lia_spark.plots import plot_posteriors  # driver only: keeps matplotlib out of the Python workers

        written = plot_posteriors(sample, output_dir=os.path.join(local_staging, "plots"))
        bags = bag_counts(stored, settings)
        if not section.write_rows:
            stored.unpersist()
        if input_rows < data_rows:
            logger.warning("posteriors: %d of %d data rows have no prior in %s and were not released",
                           data_rows - input_rows, data_rows, prior_source(config))
        result = PosteriorsResult(
            output_path=local_output, input_rows=input_rows, settings=len(settings), rows_written=section.write_rows,
            summary=tuple({key: _native(value) for key, value in record.items()} for record in summary.to_dict("records")),
            bagging_units=1 << unit_bits, rows_without_prior=data_rows - input_rows, bags=bags,
            plots=tuple(os.path.join(local_output, os.path.relpath(p, local_staging)) for p in written),
            seconds=time.monotonic() - started)
        metadata.update(result.to_dict())
    logger.info("posteriors: done in %.1f s (%.0f input rows/s)", result.seconds, input_rows / max(result.seconds, 1e-9))
    return result
