"""Stage ``posteriors``: release one day's labels through the mechanisms of docs/math.md §2, posteriors per docs/math.md §3.

Data movement only; the math is in :mod:`lia_spark.mechanisms`, :mod:`lia_spark.posteriors` and
:mod:`lia_spark.advantage`. The whole (mechanism x epsilon x bag size) grid comes from one read of the input
and one shuffle:

- Python tasks read the day's data rows (row_id, label) and prior rows (row_id, prior): pyarrow reads local
  Parquet inputs itself (:func:`file_blobs`; rows counted from the file footers where they tell,
  :func:`day_rows`), Spark reads any other (:func:`frame_blobs`). Each row gets the bagging key
  ``xxhash64(stream, row_id)`` and its unit (the key's top bits, :func:`lia_spark.mechanisms.bagging_units`);
  data rows carry -1 - label, prior rows the prior, and the rows of each unit are packed into one Arrow IPC
  blob tagged with a per-unit partition code (:class:`UnitPacker`).
- One shuffle of the blobs: hash partitioning on the codes puts each bagging unit whole into its own
  partition (:func:`shuffled_units`; no range sampling, no Spark sort, few large values instead of many rows).
- One ``mapInArrow`` pass per unit (:func:`bagged_units`): the worker sorts the unit by (key, row_id) in
  numpy (the random order of :func:`lia_spark.mechanisms.assign_bags`) and pairs each label with its prior,
  its neighbour after the sort (rows without a prior are counted, not bagged). Rows at position p of unit u
  are in bag ``u * 2^40 + p div k`` for every k; chunks cut at multiples of lcm(k) hold whole bags of every
  size, so every bagged and every RR setting runs vectorized on each chunk. All bags hold exactly k rows
  except at most one remainder bag per unit (docs/math.md §2.2: per independent bagging unit). Memory is one unit
  (about mechanisms.rows_per_bagging_unit rows) plus one Parquet row group.
- For a local output folder the stage's workers write the per-row results themselves (pyarrow, one file per
  partition, committed by rename, :func:`write_posteriors`) with a plot sample, and return only a digest: per
  setting and histogram bin of |I| the rows, min, max and advantage sums, and the rows per unit. For a remote
  one (hdfs://, s3a://, ...: Python workers have no Hadoop file system) Spark's writer writes the rows and a
  second pass over the cached shuffled units computes the same digest (:func:`spark_write_posteriors`); the
  plot sample is then a Spark filter on the rows read back (:func:`plot_sample`). Summaries come from the
  digest; a percentile whose bin holds several values is picked exactly by a second, narrow pass over just
  that bin (:func:`summarize_digest`, ranked on the driver or by a Spark window): exact order statistics,
  infinities kept, no sort of all rows. The driver draws the plots from the sample meanwhile.
- Noise is keyed on (setting seed, bag id or row id); a setting's seed is derived from the run seed and the
  setting's name, so settings draw independent noise. Nothing depends on partitions, executors or retries.
- Labels other than 0/1 and priors outside [0, 1] fail the job naming the row; a row id repeated on one side
  fails naming the id; data rows without a prior are counted (``rows_without_prior``) and left out.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import math
import os
import shutil
import tempfile
import time
import urllib.parse
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark import StorageLevel, inheritable_thread_target
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, DoubleType, IntegerType, LongType, StringType, StructField, StructType

from lia_spark import advantage, hashing, mechanisms, posteriors
from lia_spark.config import Config, MechanismsConfig
from lia_spark.engine.outputs import (committed_output, copy_from_local, delete_path, local_folder, marker_fields,
                                     reported_path, reusable_output, stage_fingerprint)

logger = logging.getLogger(__name__)

BAGGED_MECHANISMS = ("llp", "llp_laplace", "llp_geometric")
SETTING_KEYS = ["mechanism", "epsilon", "bag_size"]
LABEL, PRIOR = "label", "prior"  # the two sides of the input: data rows and prior rows
ARROW_SIDE_SCHEMA = pa.schema([pa.field("row_id", pa.int64(), False), pa.field("value", pa.float64(), False)])
BLOB_SCHEMA = StructType([StructField("code", IntegerType(), False), StructField("blob", BinaryType(), False)])
ARROW_BLOB_SCHEMA = to_arrow_schema(BLOB_SCHEMA)
INPUT_BATCH_ROWS = 1 << 20  # rows per batch read from an input file (bounds a reading task's memory)
INPUT_PART_ROWS = 1 << 21  # rows per reading task (about: whole row groups)
ROWS_PER_CALL = 65_536  # input rows per chunk, at most ...
OUTPUT_ROWS_PER_CALL = 1 << 19  # ... and about this many output rows (input rows x settings)
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
PLOT_COLUMNS = ["row_id", *SETTING_KEYS, "prior", "posterior", "I", "additive_advantage"]
ARROW_PLOT_SCHEMA = pa.schema([ARROW_ROW_SCHEMA.field(name) for name in PLOT_COLUMNS])
PLOT_SAMPLE_PURPOSE = "posteriors:plot_sample"
UNIT_ROWS = "bagging_unit"  # digest rows holding the rows of one bagging unit (bin = the unit)
DIGEST_SCHEMA = StructType([
    StructField("mechanism", StringType(), False),  # or UNIT_ROWS
    StructField("epsilon", DoubleType(), False),
    StructField("bag_size", IntegerType(), False),
    StructField("bin", LongType(), False),  # lia_spark.advantage.abs_i_bins
    StructField("rows", LongType(), False),
    StructField("low", DoubleType(), False),  # min |I| in the bin
    StructField("high", DoubleType(), False),  # max |I| in the bin
    StructField("additive", DoubleType(), False),  # sum of the additive advantages
    StructField("realized", DoubleType(), False),  # sum of the realized advantages
])
ARROW_DIGEST_SCHEMA = to_arrow_schema(DIGEST_SCHEMA)
DRIVER_SELECTED_ROWS = 1 << 23  # exact percentiles: up to this many bin rows are ranked on the driver
SELECTED_SCHEMA = "target int, abs_I double"  # result rows inside a percentile's bin (target = the bin's index)
ROWS_PER_ROW_GROUP = 1 << 20  # rows per Parquet row group of the worker-written result files (about)
ARROW_CODECS = {"none": "none", "uncompressed": "none", "snappy": "snappy", "gzip": "gzip", "brotli": "brotli",
                "lz4": "lz4", "lz4_raw": "lz4", "zstd": "zstd"}  # Spark's Parquet codec names -> pyarrow's
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


# --------------------------------------------------------------------------------------------- input


AUTO_PRIOR, TRUE_PRIOR, PROXY_PRIOR = "auto", "eta", "proxy_prediction"  # mechanisms.prior_column values


@dataclasses.dataclass(frozen=True)
class PriorSource:
    """The attacker's prior: ``column`` of the Parquet table at ``path``; ``step`` is the pipeline step that
    writes that table ("data" for the twin's truth, "train" for models/priors and models/canaries), None for
    a table of mechanisms.prior_path."""

    column: str
    path: str
    step: str | None


CANARY_COLUMNS = ("row_id", "label", "released_label", "target_prediction", "proxy_prediction")  # models/canaries


def proxy_priors_path(config: Config) -> str:
    """``<run.output_dir>/models/priors``: the proxy model's prediction for every row of mechanisms.day."""
    return os.path.join(config.run.output_dir, "models", "priors")


def resolve_prior(config: Config) -> PriorSource:
    """The prior every stage uses. Column: mechanisms.prior_column, where ``auto`` is ``eta`` when data.source
    is synthetic (the twin's true P(y=1|x)) and ``proxy_prediction`` otherwise. Table: mechanisms.prior_path
    when set, else ``<out>/truth`` for ``eta``, ``<out>/models/priors`` for ``proxy_prediction`` and
    ``<out>/models/canaries`` (the target's training rows only) for any other column."""
    section, out = config.mechanisms, config.run.output_dir
    column = section.prior_column
    if column == AUTO_PRIOR:
        column = TRUE_PRIOR if config.data.source == "synthetic" else PROXY_PRIOR
    if section.prior_path:
        return PriorSource(column, section.prior_path, None)
    if column == TRUE_PRIOR:
        return PriorSource(column, os.path.join(out, "truth"), "data")
    if column == PROXY_PRIOR:
        return PriorSource(column, proxy_priors_path(config), "train")
    return PriorSource(column, os.path.join(out, "models", "canaries"), "train")


def needs_proxy_priors(config: Config) -> bool:
    """True when the resolved prior is the train stage's ``models/priors`` table (so train writes it)."""
    return resolve_prior(config).path == proxy_priors_path(config)


def prior_source(config: Config) -> str:
    """The table holding the prior column (:func:`resolve_prior`)."""
    return resolve_prior(config).path


def _table_columns(spark: SparkSession, path: str) -> list[str] | None:
    """Columns of the Parquet table at ``path`` from its schema (file footers, no rows); None when it is missing
    or unreadable."""
    from pyspark.errors import AnalysisException

    try:
        return spark.read.parquet(path).columns
    except AnalysisException:
        return None


def check_prior_source(spark: SparkSession, config: Config, *, pending: Sequence[str] | None = None) -> None:
    """Fail early, naming mechanisms.prior_column / mechanisms.prior_path, when the posteriors stage could not
    read its prior (:func:`resolve_prior`). Only schemas are read, never rows.

    A table that a pipeline step writes (the twin's truth: ``data`` with data.source=synthetic; models/priors
    and models/canaries: ``train``) counts as resolvable when that step is in ``pending`` (the steps still to
    run before posteriors; default run.stages, and nothing is checked when posteriors is not among them) or
    when it already exists (stage outputs appear only once committed whole). The posteriors stage itself passes
    ``pending=()``.

    Raises:
        ValueError: eta asked for on data that is not the synthetic twin (without a prior_path), a prior_path
            that does not exist or is not Parquet, a table without row_id or the column, or a stage-written
            table that is missing and whose step does not run.
    """
    from lia_spark.engine.outputs import is_complete

    if pending is None:
        if "posteriors" not in config.run.stages:
            return
        pending = config.run.stages
    section, prior = config.mechanisms, resolve_prior(config)
    wanted = f"{section.prior_column!r}" + (f" (resolved to {prior.column!r})" if section.prior_column != prior.column
                                            else "")
    if prior.column == TRUE_PRIOR and prior.step is not None and config.data.source != "synthetic":
        raise ValueError(
            f"mechanisms.prior_column: eta exists only in the synthetic twin's truth table (data.source=synthetic); "
            f"use mechanisms.prior_column=auto (the proxy model's prediction) or set mechanisms.prior_path to a "
            f"table with row_id and eta, got prior_column='eta' with data.source={config.data.source!r}")
    if prior.step is None:
        columns = _table_columns(spark, prior.path)
        if columns is None:
            raise ValueError(
                f"mechanisms.prior_path: {prior.path} does not exist or is not a Parquet table; set it to a Parquet "
                f"table with row_id and {prior.column}, or leave it empty for the default table of "
                f"mechanisms.prior_column, got {prior.path!r}")
    else:
        if prior.step in pending:
            if prior.path != proxy_priors_path(config) and prior.step == "train" and prior.column not in CANARY_COLUMNS:
                raise ValueError(
                    f"mechanisms.prior_column: the train stage's canary table {prior.path} has no column "
                    f"{prior.column!r} (columns: {', '.join(CANARY_COLUMNS)}); use auto, eta, proxy_prediction or "
                    f"one of those, or set mechanisms.prior_path to a table with row_id and {prior.column}, "
                    f"got {wanted}")
            return  # the train stage writes models/priors whenever the resolved prior needs them
        columns = _table_columns(spark, prior.path)  # stage outputs appear only when committed whole
        if columns is None:
            writer = {"data": "the generate stage", "train": "the train stage"}[prior.step]
            folder = os.path.dirname(prior.path)
            why = (f"{folder} is complete but was committed without it (by a run whose prior did not need "
                   f"it); run step 'train' again with this configuration (run.force=true recomputes)"
                   if prior.step == "train" and is_complete(spark, folder)
                   else f"it is missing or incomplete; run step {prior.step!r} first (run.stages)")
            raise ValueError(
                f"mechanisms.prior_column: the prior {prior.column!r} is read from {prior.path}, which {writer} "
                f"writes, but {why}, or set mechanisms.prior_path to a Parquet table with row_id and "
                f"{prior.column}, got {wanted}")
    missing = [name for name in ("row_id", prior.column) if name not in columns]
    if missing:
        field = "mechanisms.prior_column" if "row_id" in columns else "mechanisms.prior_path"
        raise ValueError(
            f"{field}: {prior.path} has no column {', '.join(map(repr, missing))} (columns: {', '.join(columns)}); "
            f"set mechanisms.prior_column to its prior column or mechanisms.prior_path to a table with row_id and "
            f"{prior.column}, got prior_column={wanted}, prior_path={section.prior_path!r}")


def load_input(spark: SparkSession, config: Config) -> tuple[DataFrame, DataFrame]:
    """The day's data rows (row_id, label) and its prior rows (row_id, prior = the prior column), unjoined."""
    prior = resolve_prior(config)
    column, source = prior.column, prior.path
    rows = (spark.read.parquet(config.parquet_path)
            .where(F.col("day") == config.mechanisms.day)
            .select(F.col("row_id").cast("long"), F.col("label")))
    priors = spark.read.parquet(source)
    if column not in priors.columns:
        raise ValueError(f"mechanisms.prior_column: {source} has no column {column!r}, got {column!r}")
    if "day" in priors.columns:  # the truth table holds every day: read only the released day
        priors = priors.where(F.col("day") == config.mechanisms.day)
    return rows, priors.select(F.col("row_id").cast("long"), F.col(column).alias(PRIOR))


def side_rows(side: str, row_ids: pa.Array, raw: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(row ids, values) of one side's rows: a data row (side :data:`LABEL`) carries -1 - label (-1 or -2), a
    prior row (side :data:`PRIOR`) its prior in [0, 1], so one float column holds both sides.

    Raises:
        ValueError: naming the first row whose label is not 0 or 1, whose prior is not in [0, 1] (or NaN),
            or whose row id is null.
    """
    if row_ids.null_count:
        raise ValueError(f"row_id: must not be null, got null in a {side} row")
    ids = row_ids.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    values = raw.cast(pa.float64()).to_numpy(zero_copy_only=False)  # nulls -> NaN
    valid = ((values == 0.0) | (values == 1.0)) if side == LABEL else ((values >= 0.0) & (values <= 1.0))
    if not valid.all():
        at = int(np.argmin(valid))
        got = "null" if not raw[at].is_valid else "NaN" if math.isnan(values[at]) else raw[at].as_py()
        expected = "0 or 1" if side == LABEL else "in [0, 1]"
        raise ValueError(f"{side}: must be {expected}, got {got} at row_id {ids[at]}")
    return ids, (-1.0 - values if side == LABEL else values)


@dataclasses.dataclass(frozen=True)
class InputPart:
    """Whole row groups of one local Parquet file holding one side's rows, read by pyarrow in a Python task."""

    path: str
    side: str  # LABEL or PRIOR
    column: str  # the side's column in the file
    row_groups: tuple[int, ...]
    rows: int  # rows in those row groups (file footer)
    day: int | None  # keep only the rows of this day (the file has a day column); None: every row
    footer_day_rows: int | None = None  # rows of the day, when the row groups' day statistics tell

    def _batches(self, columns: list[str]) -> Iterator[pa.RecordBatch]:
        """The part's rows of its day, ``columns`` only, in batches of at most :data:`INPUT_BATCH_ROWS` rows."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        read = columns + (["day"] if self.day is not None and "day" not in columns else [])
        for batch in pq.ParquetFile(self.path).iter_batches(batch_size=INPUT_BATCH_ROWS, columns=read,
                                                            row_groups=list(self.row_groups), use_threads=False):
            yield batch if self.day is None else batch.filter(pc.equal(batch.column("day"), self.day))

    def side_rows(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """:func:`side_rows` of the part, batch by batch."""
        for batch in self._batches(["row_id", self.column]):
            yield side_rows(self.side, batch.column("row_id"), batch.column(self.column))

    def day_rows(self) -> int:
        """Rows of the part's day: from the footer when it tells, else the day column's matches."""
        if self.day is None:
            return self.rows
        if self.footer_day_rows is not None:
            return self.footer_day_rows
        return sum(batch.num_rows for batch in self._batches(["day"]))


def local_path(path: str) -> str | None:
    """``path`` as a local file system path (plain or ``file:`` URI), None for any other scheme or a glob
    pattern (Spark's reader expands those)."""
    if any(character in path for character in "*?[{"):
        return None
    parsed = urllib.parse.urlparse(path)
    if parsed.scheme == "file":
        return parsed.path
    return path if parsed.scheme == "" else None


def input_parts(path: str, *, side: str, column: str, day: int, rows_per_part: int = INPUT_PART_ROWS
                ) -> list[InputPart]:
    """The rows of ``day`` in the local Parquet dataset at ``path`` (hive-partitioned or not; a ``day`` column,
    if any, selects the day, as :func:`load_input` does) as parts of whole row groups, about ``rows_per_part``
    rows each."""
    import pyarrow.dataset as ds

    dataset = ds.dataset(path, format="parquet", partitioning="hive")
    field = "mechanisms.prior_column" if side == PRIOR else "data.parquet_path"
    for name in ("row_id", column):
        if name not in dataset.schema.names:
            raise ValueError(f"{field}: {path} has no column {name!r} for the {side} rows, got {column!r}")
    fragments = list(dataset.get_fragments())
    has_day = "day" in dataset.schema.names
    in_files = has_day and bool(fragments) and "day" in fragments[0].physical_schema.names
    if has_day and not in_files:  # day is a directory key: prune whole files
        fragments = list(dataset.get_fragments(filter=ds.field("day") == day))
    parts = []
    for fragment in fragments:
        metadata = fragment.metadata
        day_counts = [_day_rows_by_statistics(metadata, group, day) if in_files else None
                      for group in range(metadata.num_row_groups)]
        kept = [group for group, count in enumerate(day_counts) if count != 0]  # 0: statistics exclude the day
        groups: list[int] = []
        rows = 0
        for group in kept:
            groups.append(group)
            rows += metadata.row_group(group).num_rows
            if rows >= rows_per_part or group == kept[-1]:
                counts = [day_counts[g] for g in groups]
                known = None if None in counts else sum(counts)
                parts.append(InputPart(fragment.path, side, column, tuple(groups), rows, day if in_files else None,
                                       known))
                groups, rows = [], 0
    return parts


def _day_rows_by_statistics(metadata: Any, group: int, day: int) -> int | None:
    """Rows of ``day`` in one row group from its day column statistics: all non-null rows when min = max =
    day, 0 when day lies outside [min, max], None when the statistics do not tell."""
    row_group = metadata.row_group(group)
    statistics = row_group.column(metadata.schema.names.index("day")).statistics
    if statistics is None or not statistics.has_min_max or not statistics.has_null_count:
        return None
    if day < statistics.min or day > statistics.max:
        return 0
    if statistics.min == statistics.max == day:
        return row_group.num_rows - statistics.null_count
    return None


def _counted_parts(batches: Iterator[pa.RecordBatch], *, parts: Sequence[InputPart]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over part indices: (side, rows of the day) per part."""
    for batch in batches:
        chosen = [parts[index] for index in batch.column("id").to_numpy()]
        yield pa.RecordBatch.from_arrays([pa.array([part.side for part in chosen], pa.string()),
                                          pa.array([part.day_rows() for part in chosen], pa.int64())],
                                         names=["side", "rows"])


def day_rows(spark: SparkSession, parts: Sequence[InputPart]) -> dict[str, int]:
    """Rows per side (:data:`LABEL`, :data:`PRIOR`) in the parts: from the footers (row counts, day
    statistics) where they tell, else Python tasks read the day column."""
    rows, unknown = {LABEL: 0, PRIOR: 0}, []
    for part in parts:
        if part.day is not None and part.footer_day_rows is None:
            unknown.append(part)
        else:
            rows[part.side] += part.day_rows()
    if unknown:
        tasks = min(len(unknown), 4 * spark.sparkContext.defaultParallelism)
        counted = spark.range(len(unknown), numPartitions=tasks).mapInArrow(
            functools.partial(_counted_parts, parts=tuple(unknown)), "side string, rows long").collect()
        for side, count in counted:
            rows[side] += count
    return rows


# --------------------------------------------------------------------------------------------- bagging


def partition_codes(partitions: int) -> list[int]:
    """The smallest integers c_0..c_{n-1} >= 0 with pmod(hash(c_p), n) = p: Spark's hash partitioning into n
    partitions (:func:`lia_spark.hashing.spark_hash_int`) sends c_p to partition p, so a column of codes places
    rows exactly (no range sampling pass, no hash collisions)."""
    codes = np.full(partitions, -1, dtype=np.int64)
    block = max(1 << 16, 16 * partitions)
    for start in range(0, 1 << 31, block):
        candidates = np.arange(start, min(start + block, 1 << 31), dtype=np.int64)
        placed = hashing.spark_hash_int(candidates.astype(np.int32)).astype(np.int64) % partitions
        first_partitions, first_at = np.unique(placed, return_index=True)  # first = smallest code
        missing = codes[first_partitions] < 0
        codes[first_partitions[missing]] = candidates[first_at[missing]]
        if (codes >= 0).all():
            return codes.tolist()
    raise RuntimeError(f"partitions: no hash code found for all of {partitions} partitions")


@dataclasses.dataclass(frozen=True)
class UnitPacker:
    """Packs side rows (row_id, value) by bagging unit: one Arrow IPC stream (a *blob*) per unit, tagged with
    the unit's partition code (:func:`partition_codes`), so Spark shuffles a few large binary values instead
    of many narrow rows and hash partitioning on the code puts unit u whole on partition u."""

    seed: int
    unit_bits: int
    codes: tuple[int, ...]

    @classmethod
    def for_units(cls, seed: int, unit_bits: int) -> "UnitPacker":
        """The packer for 2^unit_bits units, one partition each."""
        return cls(seed, unit_bits, tuple(partition_codes(1 << unit_bits)))

    def blobs(self, row_ids: np.ndarray, values: np.ndarray) -> pa.RecordBatch:
        """:data:`BLOB_SCHEMA` batch: one (code, blob) per unit present in the rows."""
        units = mechanisms.bagging_units(mechanisms.bagging_keys(row_ids, seed=self.seed), unit_bits=self.unit_bits)
        order = np.argsort(units.astype(np.uint16) if self.unit_bits <= 16 else units, kind="stable")  # radix
        units, row_ids, values = units[order], row_ids[order], values[order]
        starts = np.flatnonzero(np.r_[True, units[1:] != units[:-1]]) if units.size else np.zeros(0, np.int64)
        sink, offsets = pa.BufferOutputStream(), [0]
        for start, end in zip(starts, np.r_[starts[1:], units.size]):
            batch = pa.RecordBatch.from_arrays([pa.array(row_ids[start:end]), pa.array(values[start:end])],
                                               schema=ARROW_SIDE_SCHEMA)
            with pa.ipc.new_stream(sink, ARROW_SIDE_SCHEMA) as writer:
                writer.write_batch(batch)
            offsets.append(sink.tell())
        blobs = pa.BinaryArray.from_buffers(pa.binary(), starts.size, [
            None, pa.py_buffer(np.asarray(offsets, dtype=np.int32)), sink.getvalue()])
        codes = pa.array(np.asarray(self.codes, dtype=np.int32)[units[starts]])
        return pa.RecordBatch.from_arrays([codes, blobs], schema=ARROW_BLOB_SCHEMA)


def _packed_frame(batches: Iterator[pa.RecordBatch], *, packer: UnitPacker, sides: tuple[str, ...]
                  ) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: the blobs of the ``sides`` (columns :data:`LABEL` and/or :data:`PRIOR`) of each batch."""
    for batch in batches:
        pairs = [side_rows(side, batch.column("row_id"), batch.column(side)) for side in sides]
        yield packer.blobs(np.concatenate([ids for ids, _ in pairs]), np.concatenate([v for _, v in pairs]))


def _packed_files(batches: Iterator[pa.RecordBatch], *, packer: UnitPacker, parts: Sequence[InputPart]
                  ) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over ``spark.range(len(parts))``: pyarrow reads each part, the blobs of each batch."""
    for batch in batches:
        for index in batch.column("id").to_numpy():
            for row_ids, values in parts[index].side_rows():
                yield packer.blobs(row_ids, values)


def frame_blobs(rows: DataFrame, priors: DataFrame | None, *, seed: int, unit_bits: int) -> DataFrame:
    """Blobs (:class:`UnitPacker`) of data rows (row_id, label) and prior rows (row_id, prior) read by Spark;
    ``priors=None``: ``rows`` hold both label and prior."""
    packer = UnitPacker.for_units(seed, unit_bits)

    def packed(frame: DataFrame, sides: tuple[str, ...]) -> DataFrame:
        columns = [F.col("row_id").cast("long"), *sides]
        return frame.select(*columns).mapInArrow(functools.partial(_packed_frame, packer=packer, sides=sides),
                                                 BLOB_SCHEMA)

    if priors is None:
        return packed(rows, (LABEL, PRIOR))
    return packed(rows, (LABEL,)).unionByName(packed(priors, (PRIOR,)))


def file_blobs(spark: SparkSession, parts: Sequence[InputPart], *, seed: int, unit_bits: int) -> DataFrame:
    """Blobs (:class:`UnitPacker`) of local Parquet parts read by pyarrow in Python tasks, one task per part:
    the rows never pass through the JVM's row format (about twice as fast as :func:`frame_blobs`)."""
    body = functools.partial(_packed_files, packer=UnitPacker.for_units(seed, unit_bits), parts=tuple(parts))
    return spark.range(len(parts), numPartitions=max(len(parts), 1)).mapInArrow(body, BLOB_SCHEMA)


def unpacked(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The (row_id, value) batches inside the blobs of :data:`BLOB_SCHEMA` batches."""
    for batch in batches:
        for blob in batch.column("blob"):
            yield from pa.ipc.open_stream(blob.as_buffer())


def _key_order(keys: np.ndarray, row_ids: np.ndarray, is_prior: np.ndarray) -> np.ndarray:
    """Permutation sorting rows by (key, row_id, data row before prior row). A run of equal keys is one row
    id's two sides, unless 64-bit keys collide or a row id repeats (then a full lexicographic sort)."""
    order = np.argsort(keys)
    ordered = keys[order]
    if (ordered[2:] == ordered[:-2]).any():
        return np.lexsort((is_prior, row_ids, keys))
    first = np.flatnonzero(ordered[1:] == ordered[:-1])  # runs of two: put them in (row_id, side) order
    left, right = order[first], order[first + 1]
    swap = (row_ids[left] > row_ids[right]) | ((row_ids[left] == row_ids[right]) & is_prior[left] & ~is_prior[right])
    order[first[swap]], order[first[swap] + 1] = right[swap], left[swap]
    return order


def bagged_units(batches: Iterator[pa.RecordBatch], *, seed: int, unit_bits: int
                 ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(unit, rows (row_id, label, prior) in the order (key, row_id)) for each bagging unit among the side rows
    (row_id, value) of one shuffled partition (:func:`unpacked` blobs), which holds whole units (buffered here:
    one unit of about mechanisms.rows_per_bagging_unit rows). Each data row is paired with its prior row; data
    rows without a prior are left out (and prior rows without data).

    Raises:
        ValueError: naming a row id that appears twice among the data rows or among the prior rows.
    """
    parts = [(batch.column("row_id").to_numpy(), batch.column("value").to_numpy()) for batch in batches]
    if not parts:
        return
    row_ids = np.concatenate([ids for ids, _ in parts])
    values = np.concatenate([value for _, value in parts])
    keys = mechanisms.bagging_keys(row_ids, seed=seed)
    is_prior = values >= 0.0
    order = _key_order(keys, row_ids, is_prior)
    row_ids, values, keys, is_prior = row_ids[order], values[order], keys[order], is_prior[order]
    same = row_ids[1:] == row_ids[:-1]
    repeated = same & (is_prior[1:] == is_prior[:-1])
    if repeated.any():
        raise ValueError(f"row_id: {int(row_ids[1:][repeated][0])} appears more than once in the data rows or "
                         f"the prior rows")
    data_at = np.flatnonzero(same)  # the data row; its prior row follows
    units = mechanisms.bagging_units(keys[data_at], unit_bits=unit_bits)
    starts = np.flatnonzero(np.r_[True, units[1:] != units[:-1]]) if units.size else units
    for start, end in zip(starts, np.r_[starts[1:], units.size]):
        at = data_at[start:end]
        yield int(units[start]), {"row_id": row_ids[at], "label": (-1.0 - values[at]).astype(np.int32),
                                  "prior": values[at + 1]}


def unit_chunks(units: Iterator[tuple[int, dict[str, np.ndarray]]], *, chunk_rows: int
                ) -> Iterator[tuple[int, int, dict[str, np.ndarray]]]:
    """(unit, position of the first row inside the unit, rows) in chunks of ``chunk_rows`` rows (a multiple of
    every bag size) or the rest of a unit, so every chunk holds whole bags (a unit's last bag may be short)."""
    for unit, rows in units:
        for start in range(0, rows["row_id"].size, chunk_rows):
            yield unit, start, {name: values[start:start + chunk_rows] for name, values in rows.items()}


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
                     seed: int) -> Iterator[tuple[Setting, pa.RecordBatch]]:
    """Every setting on one chunk of a unit (rows at positions first_position.. inside unit ``unit``, whole bags
    of every bagged size): bag of a row = :func:`lia_spark.mechanisms.unit_bag_ids`; (setting, its batch)."""
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
            yield setting, _row_batch(setting, rows, row_bags, np.repeat(released, bag_sizes), result)
    for setting in (s for s in settings if s.mechanism == "rr"):
        released = mechanisms.rr_release(labels, rows["row_id"], epsilon=setting.epsilon,
                                         seed=setting_seed(seed, setting))
        yield setting, _row_batch(setting, rows, None, released, posteriors.rr(priors, released, epsilon=setting.epsilon))


@dataclasses.dataclass(frozen=True)
class PassPlan:
    """What the one-shuffle pass needs in its Python workers (pickled with the mapInArrow body)."""

    settings: tuple[Setting, ...]
    seed: int
    unit_bits: int
    chunk_rows: int

    def chunks(self, batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, int, dict[str, np.ndarray]]]:
        """(unit, first position, rows) of whole bags from a shuffled partition of blobs (:func:`shuffled_units`)."""
        units = bagged_units(unpacked(batches), seed=self.seed, unit_bits=self.unit_bits)
        return unit_chunks(units, chunk_rows=self.chunk_rows)


def _stream_posteriors(batches: Iterator[pa.RecordBatch], *, plan: PassPlan) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: match labels with priors, cut units into chunks, run every setting on each chunk."""
    for unit, first_position, rows in plan.chunks(batches):
        for _, batch in chunk_posteriors(unit, first_position, rows, plan.settings, plan.seed):
            yield batch


class _DigestAccumulator:
    """Per-setting histogram digests of |I| (:func:`lia_spark.advantage.bin_digest`), merged as they pile up so
    memory stays bounded by settings x occupied bins, and the rows per bagging unit."""

    MERGE_EVERY = 64

    def __init__(self) -> None:
        self.parts: dict[str, tuple[Setting, list[dict[str, np.ndarray]]]] = {}  # by name: NaN epsilons
        self.unit_rows: dict[int, int] = {}

    def posteriors(self, plan: PassPlan, unit: int, first_position: int, rows: dict[str, np.ndarray]
                   ) -> Iterator[pa.RecordBatch]:
        """Each setting's batch of :func:`chunk_posteriors` on one chunk of :meth:`PassPlan.chunks`, added to the
        digests; the unit's rows counted."""
        self.unit_rows[unit] = first_position + rows["row_id"].size
        for setting, batch in chunk_posteriors(unit, first_position, rows, plan.settings, plan.seed):
            self.add(setting, batch)
            yield batch

    def add(self, setting: Setting, batch: pa.RecordBatch) -> None:
        _, parts = self.parts.setdefault(setting.name, (setting, []))
        parts.append(advantage.bin_digest(np.abs(batch.column("I").to_numpy()),
                                          batch.column("additive_advantage").to_numpy(),
                                          batch.column("realized_advantage").to_numpy()))
        if len(parts) >= self.MERGE_EVERY:
            parts[:] = [advantage.merge_bin_digests(parts)]

    def batches(self) -> Iterator[pa.RecordBatch]:
        """One batch of :data:`DIGEST_SCHEMA` rows per setting, then the rows per bagging unit (mechanism
        :data:`UNIT_ROWS`, bin = unit)."""
        for setting, parts in self.parts.values():
            digest = advantage.merge_bin_digests(parts)
            yield _digest_batch(setting.mechanism, setting.epsilon, setting.bag_size, digest)
        if self.unit_rows:
            units = np.fromiter(self.unit_rows, np.int64, len(self.unit_rows))
            sizes = {"bin": units, "rows": np.fromiter(self.unit_rows.values(), np.int64, len(self.unit_rows))}
            yield _digest_batch(UNIT_ROWS, math.nan, 0, {
                **{name: np.zeros(units.size) for name in advantage.DIGEST_FIELDS}, **sizes})


def _digest_batch(mechanism: str, epsilon: float, bag_size: int, digest: dict[str, np.ndarray]) -> pa.RecordBatch:
    n = digest["bin"].size
    return pa.RecordBatch.from_arrays([
        pa.repeat(mechanism, n), pa.array(np.full(n, epsilon)), pa.array(np.full(n, bag_size, dtype=np.int32)),
        *(pa.array(digest[name]) for name in advantage.DIGEST_FIELDS)], schema=ARROW_DIGEST_SCHEMA)


class RowGroupWriter:
    """Parquet file of result rows written batch by batch (pyarrow), in row groups of about
    :data:`ROWS_PER_ROW_GROUP` rows; dictionary encoding only for the few-valued setting columns."""

    def __init__(self, path: str, schema: pa.Schema, codec: str) -> None:
        import pyarrow.parquet as pq

        dictionary = [name for name in SETTING_KEYS if name in schema.names]
        self.schema = schema
        self.writer = pq.ParquetWriter(path, schema, compression=codec, use_dictionary=dictionary)
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0

    def add(self, batch: pa.RecordBatch) -> None:
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        if self.pending_rows >= ROWS_PER_ROW_GROUP:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.writer.write_table(pa.Table.from_batches(self.pending, self.schema),
                                    row_group_size=2 * ROWS_PER_ROW_GROUP)
        self.pending, self.pending_rows = [], 0

    def close(self) -> None:
        self.flush()
        self.writer.close()


@contextlib.contextmanager
def _task_parquet(directory: str, schema: pa.Schema, codec: str) -> Iterator[RowGroupWriter]:
    """A :class:`RowGroupWriter` for ``directory/part-<partition>.parquet`` of the running Spark task, written
    under a hidden name (readers skip it) and renamed when complete. The content depends only on the
    partition, so a retried or speculative attempt renames an identical file over it."""
    from pyspark import TaskContext

    context = TaskContext.get()
    name = f"part-{context.partitionId():05d}.parquet"
    temporary = os.path.join(directory, f".{name}.attempt-{context.taskAttemptId()}")
    os.makedirs(directory, exist_ok=True)
    writer = RowGroupWriter(temporary, schema, codec)
    try:
        yield writer
    finally:
        writer.close()  # a failed attempt leaves a hidden file, removed by the driver (check_result_files)
    os.replace(temporary, os.path.join(directory, name))


@dataclasses.dataclass(frozen=True)
class ResultFiles:
    """Where the Python workers write: the per-row results, the plot sample (``sample_fraction`` of the rows,
    :func:`plot_sample_mask`) and the Parquet codec."""

    rows_dir: str
    sample_dir: str
    sample_fraction: float
    codec: str


def _write_rows_and_digest(batches: Iterator[pa.RecordBatch], *, plan: PassPlan, files: ResultFiles
                           ) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the stage: the rows of :func:`_stream_posteriors` go to ``files.rows_dir`` and the
    plot sample to ``files.sample_dir`` (one file per partition, :func:`_task_parquet`); Spark gets back only
    their digest (:data:`DIGEST_SCHEMA`): per setting and bin of |I| (:func:`lia_spark.advantage.bin_digest`)
    plus the rows per bagging unit."""
    digests, sample = _DigestAccumulator(), []
    with _task_parquet(files.rows_dir, ARROW_ROW_SCHEMA, files.codec) as writer:
        for unit, first_position, rows in plan.chunks(batches):
            sampled = pa.array(plot_sample_mask(rows["row_id"], fraction=files.sample_fraction, seed=plan.seed))
            for batch in digests.posteriors(plan, unit, first_position, rows):
                writer.add(batch)
                sample.append(batch.select(PLOT_COLUMNS).filter(sampled))
    with _task_parquet(files.sample_dir, ARROW_PLOT_SCHEMA, files.codec) as writer:
        for batch in sample:
            writer.add(batch)
    yield from digests.batches()


def _digest_only(batches: Iterator[pa.RecordBatch], *, plan: PassPlan) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: the digest of :func:`_write_rows_and_digest` (the same per-unit computation) without
    writing anything."""
    digests = _DigestAccumulator()
    for unit, first_position, rows in plan.chunks(batches):
        for _ in digests.posteriors(plan, unit, first_position, rows):
            pass
    yield from digests.batches()


def shuffled_units(blobs: DataFrame, *, unit_bits: int) -> DataFrame:
    """The blobs of :func:`frame_blobs` or :func:`file_blobs` shuffled to one partition per bagging unit."""
    return blobs.repartition(1 << unit_bits, "code")


def _one_pass(blobs: DataFrame, *, settings: Sequence[Setting], seed: int, unit_bits: int, bags_per_group: int
              ) -> tuple[DataFrame, PassPlan]:
    """(:func:`shuffled_units` of the blobs, the plan of the pass over them)."""
    if not settings:
        raise ValueError(f"settings: must hold at least one setting, got {settings!r}")
    chunk_rows = rows_per_call([s.bag_size for s in settings], settings=len(settings), bags_per_group=bags_per_group)
    plan = PassPlan(settings=tuple(settings), seed=seed, unit_bits=unit_bits, chunk_rows=chunk_rows)
    return shuffled_units(blobs, unit_bits=unit_bits), plan


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
    blobs = frame_blobs(rows, priors, seed=seed, unit_bits=unit_bits)
    return posterior_rows(blobs, settings=settings, seed=seed, unit_bits=unit_bits, bags_per_group=bags_per_group)


def posterior_rows(blobs: DataFrame, *, settings: Sequence[Setting], seed: int, unit_bits: int = 0,
                   bags_per_group: int = 0) -> DataFrame:
    """:func:`compute_posteriors` of the input packed in ``blobs`` (:func:`frame_blobs` or :func:`file_blobs`
    with the same seed and unit_bits)."""
    ordered, plan = _one_pass(blobs, settings=settings, seed=seed, unit_bits=unit_bits, bags_per_group=bags_per_group)
    return ordered.mapInArrow(functools.partial(_stream_posteriors, plan=plan), ROW_SCHEMA)


def write_posteriors(blobs: DataFrame, *, output_dir: str, settings: Sequence[Setting], seed: int,
                     unit_bits: int = 0, bags_per_group: int = 0, sample_fraction: float = 1.0) -> pd.DataFrame:
    """The rows of :func:`compute_posteriors` for the input packed in ``blobs`` (:func:`frame_blobs` or
    :func:`file_blobs` with the same seed and unit_bits), written by the Python workers as Parquet files to
    ``output_dir/rows`` and a plot sample (:func:`plot_sample_mask`) to ``output_dir/_plot_sample``
    (``output_dir`` is a local path every executor and the driver see alike), and their digest
    (:data:`DIGEST_SCHEMA`, summed over units): per setting and bin of |I| the rows, min, max and advantage
    sums, and the rows per bagging unit (mechanism :data:`UNIT_ROWS`, bin = unit). Each unit's sums are fixed
    by its rows; adding them as decimals rounded to 1e-18 makes the totals independent of partitioning.
    Other arguments as :func:`compute_posteriors`.

    Raises:
        OSError: naming run.output_dir when the driver does not see every row the workers wrote.
    """
    ordered, plan = _one_pass(blobs, settings=settings, seed=seed, unit_bits=unit_bits, bags_per_group=bags_per_group)
    codec = ARROW_CODECS.get(blobs.sparkSession.conf.get("spark.sql.parquet.compression.codec", "zstd"), "zstd")
    files = ResultFiles(rows_dir=os.path.join(output_dir, "rows"), sample_dir=os.path.join(output_dir, "_plot_sample"),
                        sample_fraction=sample_fraction, codec=codec)
    digest = _digest_totals(ordered.mapInArrow(functools.partial(_write_rows_and_digest, plan=plan, files=files),
                                               DIGEST_SCHEMA))
    _committed_rows(files.sample_dir)
    check_result_files(files.rows_dir, expected=int(digest.loc[digest["mechanism"] == UNIT_ROWS, "rows"].sum())
                       * len(settings))
    return digest


def spark_write_posteriors(blobs: DataFrame, *, output_dir: str, settings: Sequence[Setting], seed: int,
                           unit_bits: int = 0, bags_per_group: int = 0) -> pd.DataFrame:
    """The rows of :func:`compute_posteriors` for the input packed in ``blobs``, written by Spark's DataFrame
    writer to ``output_dir/rows`` (any Hadoop file system; executors need no disk shared with the driver), and
    the digest :func:`write_posteriors` returns. The shuffled units are cached and passed over twice: the rows
    go to the writer, then the per-unit code of :func:`write_posteriors` runs the settings again and returns
    only their digest (no second read or shuffle of the input), so digest and summaries equal the local
    path's exactly. Other arguments as :func:`compute_posteriors`."""
    ordered, plan = _one_pass(blobs, settings=settings, seed=seed, unit_bits=unit_bits, bags_per_group=bags_per_group)
    ordered = ordered.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        ordered.mapInArrow(functools.partial(_stream_posteriors, plan=plan), ROW_SCHEMA).write.parquet(
            f"{output_dir}/rows")
        spark = blobs.sparkSession
        spark.sparkContext.setJobDescription("posteriors: digest of the per-row results (settings run again)")
        return _digest_totals(ordered.mapInArrow(functools.partial(_digest_only, plan=plan), DIGEST_SCHEMA))
    finally:
        ordered.unpersist()


def _digest_totals(digests: DataFrame) -> pd.DataFrame:
    """Digest rows (:data:`DIGEST_SCHEMA`) summed over bagging units, on the driver. Each unit's sums are fixed
    by its rows; adding them as decimals rounded to 1e-18 makes the totals independent of partitioning."""
    exact = "decimal(38,18)"  # units' sums added exactly, so the total does not depend on their order
    return (digests.groupBy(*SETTING_KEYS, "bin")
            .agg(F.sum("rows").alias("rows"), F.min("low").alias("low"), F.max("high").alias("high"),
                 F.sum(F.col("additive").cast(exact)).cast("double").alias("additive"),
                 F.sum(F.col("realized").cast(exact)).cast("double").alias("realized"))
            .withColumn("epsilon", F.coalesce(F.col("epsilon"), F.lit(math.nan)))  # Arrow turns NaN into null
            .toPandas())


def check_result_files(directory: str, *, expected: int) -> None:
    """Fail unless the driver sees ``expected`` rows in the files the Python workers committed to ``directory``.

    Raises:
        OSError: naming run.output_dir (workers writing to disks the driver does not see).
    """
    found = _committed_rows(directory)
    if found != expected:
        raise OSError(f"run.output_dir: the Python workers wrote {expected} result rows to {directory}, but the "
                      f"driver sees {found}; posteriors needs an output_dir at the same path on every node (local "
                      f"mode or a shared mount)")


def _committed_rows(directory: str) -> int:
    """Rows in the files :func:`_task_parquet` committed to ``directory``; hidden leftovers of failed attempts
    are removed."""
    import pyarrow.parquet as pq

    names = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    for name in (name for name in names if name.startswith(".")):
        os.remove(os.path.join(directory, name))
    return sum(pq.ParquetFile(os.path.join(directory, name)).metadata.num_rows for name in names
               if not name.startswith("."))


@dataclasses.dataclass(frozen=True)
class PosteriorInput:
    """One day's input packed by bagging unit (``blobs``, read by ``reader``: "pyarrow" or "spark"), the
    counts of its data rows and prior rows and the bagging unit bits."""

    blobs: DataFrame
    reader: str
    data_rows: int
    prior_rows: int
    unit_bits: int


def posterior_input(spark: SparkSession, config: Config) -> PosteriorInput:
    """The input of config.mechanisms.day: counts both sides, picks the bagging units
    (:func:`lia_spark.mechanisms.bagging_unit_bits` of the smaller count) and packs the rows: pyarrow reads
    local inputs in Python tasks (:func:`input_parts`, :func:`day_rows`, :func:`file_blobs`), Spark reads and
    counts any other (:func:`load_input`, :func:`frame_blobs`).

    Raises:
        ValueError: naming mechanisms.day when the data or the prior table holds no row of that day.
    """
    spark.sparkContext.setJobDescription("posteriors: count rows and priors")
    section, seed = config.mechanisms, config.run.seed
    data_path, prior_path = local_path(config.parquet_path), local_path(prior_source(config))
    if data_path is None or prior_path is None:
        data, priors = load_input(spark, config)
        data_rows, prior_rows = data.count(), priors.count()
        reader, packed = "spark", functools.partial(frame_blobs, data, priors)
    else:
        parts = [*input_parts(data_path, side=LABEL, column=LABEL, day=section.day),
                 *input_parts(prior_path, side=PRIOR, column=resolve_prior(config).column, day=section.day)]
        rows = day_rows(spark, parts)
        data_rows, prior_rows = rows[LABEL], rows[PRIOR]
        reader, packed = "pyarrow", functools.partial(file_blobs, spark, parts)
    for count, path in ((data_rows, config.parquet_path), (prior_rows, prior_source(config))):
        if count == 0:
            raise ValueError(f"mechanisms.day: {path} holds no rows of day {section.day}, got {section.day}")
    unit_bits = mechanisms.bagging_unit_bits(min(data_rows, prior_rows), section.rows_per_bagging_unit)
    return PosteriorInput(packed(seed=seed, unit_bits=unit_bits), reader, data_rows, prior_rows, unit_bits)


# ------------------------------------------------------------------------------------------ summaries


def summarize_digest(spark: SparkSession, digest: pd.DataFrame, rows: str | DataFrame, *,
                     driver_rows: int = DRIVER_SELECTED_ROWS) -> pd.DataFrame:
    """One row per setting with the columns :data:`SUMMARY_COLUMNS`, from the digest of
    :func:`write_posteriors` (or :func:`spark_write_posteriors`) and the result rows: the folder of files
    :func:`write_posteriors` wrote, or the rows as a Spark DataFrame.

    Means are digest sums over rows. Percentiles of |I| are exact order statistics
    (:func:`lia_spark.advantage.digest_percentiles`): read off a bin holding one value (RR, +inf), else
    selected among only the rows of that bin (bins are monotone in |I|, so the bin is exactly the rows with
    low <= |I| <= high): by ``np.partition`` on the driver when those bins hold at most ``driver_rows`` rows
    in all, else by a window ``row_number`` in Spark.
    """
    records, wanted = [], []
    cells = digest[digest["mechanism"] != UNIT_ROWS].sort_values([*SETTING_KEYS, "bin"], ignore_index=True)
    for (mechanism, epsilon, bag_size), cell in cells.groupby(SETTING_KEYS, sort=False, dropna=False):
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
                  "share_infinite": int(columns["rows"][columns["bin"] == advantage.INFINITE_BIN].sum()) / n}
        for q, where in located.items():
            if isinstance(where, tuple):
                at, rank = where
                wanted.append((setting, float(columns["low"][at]), float(columns["high"][at]), rank, q, len(records),
                               int(columns["rows"][at])))
            else:
                record[f"abs_I_p{q}"] = where
        records.append(record)
    for (*_, q, index, _), value in zip(wanted, _values_at_ranks(spark, rows, wanted, driver_rows=driver_rows)):
        records[index][f"abs_I_p{q}"] = value
    stats = pd.DataFrame(records, columns=SUMMARY_COLUMNS)
    stats["bag_size"] = stats["bag_size"].astype("int32")
    return stats.sort_values(SETTING_KEYS, ignore_index=True)


def _values_at_ranks(spark: SparkSession, rows: str | DataFrame, wanted: list[tuple], *, driver_rows: int
                     ) -> list[float]:
    """|I| at rank r among the rows of a setting with low <= |I| <= high, per wanted (setting, low, high, r, q,
    index, rows in the range).

    Python tasks read the result rows (:func:`_rows_in_ranges`: the setting columns and I) and return only the
    rows inside those ranges; ``np.partition`` on the driver (at most ``driver_rows`` rows in all) or one
    window ``row_number`` over them picks the ranks."""
    if not wanted:
        return []
    spark.sparkContext.setJobDescription("posteriors: exact order statistics of |I| inside histogram bins")
    ranges = sorted({(setting.name, low, high) for setting, low, high, *_ in wanted})
    index = {target: i for i, target in enumerate(ranges)}
    by_setting: dict[tuple, list[tuple[int, float, float]]] = {}
    for setting in {setting.name: setting for setting, *_ in wanted}.values():  # by name: NaN epsilons
        by_setting[_setting_key(setting.mechanism, setting.epsilon, setting.bag_size)] = [
            (index[(name, low, high)], low, high) for name, low, high in ranges if name == setting.name]
    selected = _rows_in_ranges(spark, rows, by_setting)
    if sum({(setting.name, low, high): rows for setting, low, high, *_, rows in wanted}.values()) <= driver_rows:
        table = selected.toArrow()
        targets, values = table.column("target").to_numpy(), table.column("abs_I").to_numpy()
        in_range = {target: values[targets == target] for target in index.values()}
        return [float(np.partition(in_range[index[(setting.name, low, high)]], rank)[rank])
                for setting, low, high, rank, *_ in wanted]
    ranked = selected.withColumn("rank", F.row_number().over(Window.partitionBy("target").orderBy("abs_I")) - 1)
    wanted_ranks = sorted({(index[(setting.name, low, high)], rank) for setting, low, high, rank, *_ in wanted})
    picked = (ranked.join(F.broadcast(spark.createDataFrame(wanted_ranks, "target int, rank int")), ["target", "rank"])
              .select("target", "rank", "abs_I").collect())
    values = {(row["target"], row["rank"]): float(row["abs_I"]) for row in picked}
    return [values[(index[(setting.name, low, high)], rank)] for setting, low, high, rank, *_ in wanted]


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
        return rows.where(inside).select(*SETTING_KEYS, "I").mapInArrow(
            functools.partial(_frame_rows_in_ranges, ranges=ranges), SELECTED_SCHEMA)
    files = [os.path.join(rows, name) for name in sorted(os.listdir(rows)) if name.endswith(".parquet")]
    body = functools.partial(_file_rows_in_ranges, files=tuple(files), ranges=ranges)
    tasks = max(1, min(len(files), spark.sparkContext.defaultParallelism * 4))
    return spark.range(len(files), numPartitions=tasks).mapInArrow(body, SELECTED_SCHEMA)


def _file_rows_in_ranges(batches: Iterator[pa.RecordBatch], *, files: Sequence[str],
                         ranges: dict[tuple, list[tuple[int, float, float]]]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over file indices: :func:`_in_ranges` of each row group of each file."""
    import pyarrow.parquet as pq

    for batch in batches:
        for file_index in batch.column("id").to_numpy():
            parquet = pq.ParquetFile(files[file_index], read_dictionary=["mechanism"])
            for group in range(parquet.num_row_groups):
                table = parquet.read_row_group(group, columns=[*SETTING_KEYS, "I"])
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


def bag_counts(digest: pd.DataFrame, settings: Sequence[Setting]) -> dict[str, dict[str, Any]]:
    """Per bagged size k: bags, bags of exactly k rows and the sizes of the remainder bags (at most one per
    unit), from the rows per bagging unit in the digest of :func:`write_posteriors`."""
    units = digest.loc[digest["mechanism"] == UNIT_ROWS, "rows"].to_numpy(np.int64)
    counts = {}
    for k in sorted({s.bag_size for s in settings if s.mechanism in BAGGED_MECHANISMS}):
        remainders = units % k
        counts[str(k)] = {"bags": int((-(-units // k)).sum()), "full_bags": int((units // k).sum()),
                          "remainder_sizes": sorted(int(r) for r in remainders[remainders > 0])}
    return counts


def plot_sample_mask(row_ids: np.ndarray, *, fraction: float, seed: int) -> np.ndarray:
    """Rows kept for the plots, the same rows in every setting: the row's hash xxhash64(stream, row_id)
    (:func:`lia_spark.hashing.spark_row_hash`), read as unsigned, lies below fraction x 2^64."""
    threshold = _plot_sample_threshold(fraction)
    if threshold is None:
        return np.ones(np.shape(row_ids), dtype=bool)
    return hashing.spark_row_hash(seed, PLOT_SAMPLE_PURPOSE, row_ids) < threshold


def plot_sample(rows: DataFrame, *, fraction: float, seed: int) -> pd.DataFrame:
    """:data:`PLOT_COLUMNS` of the result rows (read by Spark) that :func:`plot_sample_mask` keeps, collected to
    the driver (small by design): the same rule as a predicate on Spark's ``xxhash64``."""
    rows.sparkSession.sparkContext.setJobDescription("posteriors: plot sample of the per-row results")
    threshold = _plot_sample_threshold(fraction)
    if threshold is not None:
        stream = F.lit(hashing.signed_stream_key(seed, PLOT_SAMPLE_PURPOSE)).cast("long")
        rows = rows.where(F.xxhash64(stream, F.col("row_id")) < F.lit(threshold).cast("long"))
    return rows.select(*PLOT_COLUMNS).toPandas()


def _plot_sample_threshold(fraction: float) -> int | None:
    """The signed hash bound of the plot sample (signed hash < threshold <=> unsigned < fraction x 2^64), None
    when every row is kept."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction: must be in (0, 1], got {fraction!r}")
    threshold = math.floor(fraction * 2.0 ** 64) - 2 ** 63
    return None if threshold >= 2 ** 63 else threshold


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
        """The summary CSV and the plot PNGs (URIs when the output folder is remote: see
        :func:`lia_spark.engine.outputs.local_copies`)."""
        return [self.summary_csv, *self.plots]


def _native(value: Any) -> Any:
    """numpy scalars -> Python scalars (the marker is JSON)."""
    return value.item() if isinstance(value, np.generic) else value


def _summary_and_plots(spark: SparkSession, digest: pd.DataFrame, rows: str | DataFrame,
                       sample: Callable[[], pd.DataFrame], *, folder: str, staging: str
                       ) -> tuple[pd.DataFrame, list[str]]:
    """The summary (:func:`summarize_digest` of the digest and ``rows``), written as Parquet to
    ``staging/summary`` (any file system) and as ``summary.csv`` to the local ``folder``, and the plots of
    ``sample()`` in ``folder/plots``, read and drawn in a thread while Spark ranks |I|. Returns the summary
    and the plot files' names relative to ``folder``."""
    from lia_spark.plots import plot_posteriors  # driver only: keeps matplotlib out of the Python workers

    def draw() -> list[str]:
        return plot_posteriors(sample(), output_dir=os.path.join(folder, "plots"))

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as plotter:
        plots = plotter.submit(inheritable_thread_target(spark)(draw))  # its Spark jobs keep the job group
        summary = summarize_digest(spark, digest, rows)
        (spark.createDataFrame(summary).coalesce(1)
         .withColumn("epsilon", F.coalesce(F.col("epsilon"), F.lit(math.nan)))  # Arrow turns NaN into null
         .write.parquet(f"{staging}/summary"))
        summary.to_csv(os.path.join(folder, "summary.csv"), index=False)
        written = plots.result()
    return summary, [os.path.relpath(path, folder) for path in written]


def run_posteriors(spark: SparkSession, config: Config) -> PosteriorsResult:
    """Release config.mechanisms.day through the grid of settings; write rows, summaries and plots.

    Output ``<run.output_dir>/posteriors``: ``rows`` (if mechanisms.write_rows), ``summary`` (Parquet),
    ``summary.csv`` and ``plots/*.png``, committed atomically. Skipped when complete and not run.force.
    """
    output = os.path.join(config.run.output_dir, "posteriors")
    output_path = reported_path(output)
    fingerprint = stage_fingerprint(spark, "posteriors", config,
                                    inputs={"data": config.parquet_path, "priors": prior_source(config)})
    marker = reusable_output(spark, [output], fingerprint, force=config.run.force)
    if marker is not None:
        return PosteriorsResult.from_dict(marker, skipped=True)
    check_prior_source(spark, config, pending=())
    started = time.monotonic()
    section = config.mechanisms
    settings = settings_grid(section)
    prior = resolve_prior(config)
    logger.info("posteriors: day %d, prior %s from %s, %d settings", section.day, prior.column, prior.path,
                len(settings))
    metadata: dict[str, Any] = {}
    with committed_output(spark, output, metadata, fingerprint=fingerprint) as staging:
        source = posterior_input(spark, config)
        data_rows, unit_bits = source.data_rows, source.unit_bits
        logger.info("posteriors: %d data rows, %d bagging units, read by %s", data_rows, 1 << unit_bits,
                    source.reader)
        local_staging = local_folder(staging)
        spark.sparkContext.setJobDescription("posteriors: bag, release, posteriors; write per-row results")
        grid = {"settings": settings, "seed": config.run.seed, "unit_bits": unit_bits,
                "bags_per_group": section.bags_per_group}
        sample_fraction = min(1.0, section.plot_sample_rows / max(min(data_rows, source.prior_rows), 1))
        if local_staging is not None:  # the Python workers write the rows and the plot sample themselves
            digest = write_posteriors(source.blobs, output_dir=local_staging, sample_fraction=sample_fraction, **grid)
            logger.info("posteriors: rows written after %.1f s", time.monotonic() - started)
            sample_dir = os.path.join(local_staging, "_plot_sample")
            summary, plots = _summary_and_plots(spark, digest, os.path.join(local_staging, "rows"),
                                                functools.partial(pd.read_parquet, sample_dir), folder=local_staging,
                                                staging=staging)
            shutil.rmtree(sample_dir)
        else:  # a remote folder: Spark writes the rows and reads them back; CSV and plots are copied
            digest = spark_write_posteriors(source.blobs, output_dir=staging, **grid)
            logger.info("posteriors: rows written after %.1f s", time.monotonic() - started)
            rows = spark.read.parquet(f"{staging}/rows")
            sample = functools.partial(plot_sample, rows, fraction=sample_fraction, seed=config.run.seed)
            with tempfile.TemporaryDirectory(prefix="lia-posteriors-") as local:
                summary, plots = _summary_and_plots(spark, digest, rows, sample, folder=local, staging=staging)
                for name in ("summary.csv", *plots):
                    copy_from_local(spark, os.path.join(local, name), f"{staging}/{name}")
        input_rows = int(summary["rows"].max()) if len(summary) else 0
        logger.info("posteriors: %d input rows, %d result rows, summarized after %.1f s", input_rows,
                    int(summary["rows"].sum()), time.monotonic() - started)
        bags = bag_counts(digest, settings)
        if not section.write_rows:
            delete_path(spark, f"{staging}/rows")
        if input_rows < data_rows:
            logger.warning("posteriors: %d of %d data rows have no prior in %s and were not released",
                           data_rows - input_rows, data_rows, prior_source(config))
        result = PosteriorsResult(
            output_path=output_path, input_rows=input_rows, settings=len(settings), rows_written=section.write_rows,
            summary=tuple({key: _native(value) for key, value in record.items()} for record in summary.to_dict("records")),
            bagging_units=1 << unit_bits, rows_without_prior=data_rows - input_rows, bags=bags,
            plots=tuple(os.path.join(output_path, name) for name in plots),
            seconds=time.monotonic() - started)
        metadata.update(result.to_dict())
    logger.info("posteriors: done in %.1f s (%.0f input rows/s)", result.seconds, input_rows / max(result.seconds, 1e-9))
    return result
