"""Writing the posteriors stage's per-row results and their digest: one pass over the bagging units.

One ``mapInArrow`` pass, one task per unit (its rows shuffled by Spark, or read from the spill folder of
:func:`lia_spark.engine.posteriors.units.spill_units`): the worker pairs each label with its prior in the unit's random
order (:func:`lia_spark.engine.posteriors.units.bagged_units`) and runs every setting on chunks of whole bags
(:func:`lia_spark.kernels.posterior_grid.chunk_posteriors`). Memory is one unit (about mechanisms.rows_per_bagging_unit
rows) plus one Parquet row group. For a local output folder the workers write the rows themselves (pyarrow, one
file per partition, committed by rename, :func:`write_posteriors`) with a plot sample, and return only a digest:
per setting and histogram bin of |I| the rows, min, max and advantage sums, and the rows per unit. For a remote
one (hdfs://, s3a://, ...: Python workers have no Hadoop file system) Spark's writer writes the rows and a second
pass over the cached shuffled units computes the same digest (:func:`spark_write_posteriors`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
from typing import Iterator, Mapping, Sequence, cast

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

from lia_spark.engine.posteriors.units import (SHARED_FOLDER, UnitSpill, bagged_units, remove_attempt_leftovers,
                                               shuffled_units, unpacked)
from lia_spark.engine.spark.session import describe_jobs
from lia_spark.kernels import advantage
from lia_spark.kernels.posterior_grid import (DigestAccumulator, Setting, SettingRows, UnitChunk, chunk_posteriors,
                                              plot_sample_mask, rows_per_call, unit_chunks)
from lia_spark.names import SETTING_KEY
from lia_spark.run import layout

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
    StructField("max_leakage", DoubleType(), False),  # nats; NaN unless mechanisms.max_leakage
])
ARROW_ROW_SCHEMA = to_arrow_schema(ROW_SCHEMA)
PLOT_COLUMNS = ["row_id", *SETTING_KEY, "prior", "posterior", "I", "additive_advantage", "max_leakage"]
ARROW_PLOT_SCHEMA = pa.schema([ARROW_ROW_SCHEMA.field(name) for name in PLOT_COLUMNS])
UNIT_ROWS = "bagging_unit"  # digest rows holding the rows of one bagging unit (bin = the unit)
DIGEST_SCHEMA = StructType([
    StructField("mechanism", StringType(), False),  # or UNIT_ROWS
    StructField("epsilon", DoubleType(), False),
    StructField("bag_size", IntegerType(), False),
    StructField("bin", LongType(), False),  # lia_spark.kernels.advantage.abs_i_bins
    StructField("rows", LongType(), False),
    StructField("low", DoubleType(), False),  # min |I| in the bin
    StructField("high", DoubleType(), False),  # max |I| in the bin
    StructField("additive", DoubleType(), False),  # sum of the additive advantages
    StructField("realized", DoubleType(), False),  # sum of the realized advantages
    StructField("leakage", DoubleType(), False),  # sum of the rows' maximal leakage (NaN: not computed)
])
ARROW_DIGEST_SCHEMA = to_arrow_schema(DIGEST_SCHEMA)
ROWS_PER_ROW_GROUP = 1 << 20  # rows per Parquet row group of the worker-written result files (about)
ARROW_CODECS = {"none": "none", "uncompressed": "none", "snappy": "snappy", "gzip": "gzip", "brotli": "brotli",
                "lz4": "lz4", "lz4_raw": "lz4", "zstd": "zstd"}  # Spark's Parquet codec names -> pyarrow's


def row_batch(computed: SettingRows) -> pa.RecordBatch:
    """One setting's rows on one chunk as a :data:`ROW_SCHEMA` batch."""
    setting, columns = computed
    n = columns["row_id"].size
    by_name: Mapping[str, object] = columns  # the schema's remaining columns, read by name
    return pa.RecordBatch.from_arrays([
        pa.array(columns["row_id"]),
        pa.repeat(setting.mechanism, n),
        pa.array(np.full(n, setting.epsilon)),
        pa.array(np.full(n, setting.bag_size, dtype=np.int32)),
        pa.nulls(n, pa.int64()) if columns["bag_id"] is None else pa.array(columns["bag_id"]),
        *(pa.array(by_name[name]) for name in ARROW_ROW_SCHEMA.names[5:]),
    ], schema=ARROW_ROW_SCHEMA)


def setting_batches(chunk: UnitChunk, settings: Sequence[Setting], seed: int, *,
                    max_leakage: bool = False) -> Iterator[pa.RecordBatch]:
    """:func:`row_batch` of every setting of :func:`lia_spark.kernels.posterior_grid.chunk_posteriors` on one chunk."""
    for computed in chunk_posteriors(chunk, settings, seed, max_leakage=max_leakage):
        yield row_batch(computed)


@dataclasses.dataclass(frozen=True)
class PassPlan:
    """What the pass over the units needs in its Python workers (pickled with the mapInArrow body): with a ``spill``
    the pass runs over unit ids and reads each unit's rows from the spill's files, else over shuffled blobs."""

    settings: tuple[Setting, ...]
    seed: int
    unit_bits: int
    chunk_rows: int
    max_leakage: bool = False
    spill: UnitSpill | None = None

    def chunks(self, batches: Iterator[pa.RecordBatch]) -> Iterator[UnitChunk]:
        """Chunks of whole bags from a shuffled partition of blobs (:func:`shuffled_units`) or, with a spill, from
        the units whose ids the partition holds."""
        side_rows = self.spill.unit_batches(batches) if self.spill is not None else unpacked(batches)
        units = bagged_units(side_rows, seed=self.seed, unit_bits=self.unit_bits)
        return unit_chunks(units, chunk_rows=self.chunk_rows)


def _stream_posteriors(batches: Iterator[pa.RecordBatch], *, plan: PassPlan) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: match labels with priors, cut units into chunks, run every setting on each chunk."""
    for chunk in plan.chunks(batches):
        yield from setting_batches(chunk, plan.settings, plan.seed, max_leakage=plan.max_leakage)


def _digest_batch(mechanism: str, epsilon: float, bag_size: int, digest: dict[str, np.ndarray]) -> pa.RecordBatch:
    n = digest["bin"].size
    return pa.RecordBatch.from_arrays([
        pa.repeat(mechanism, n), pa.array(np.full(n, epsilon)), pa.array(np.full(n, bag_size, dtype=np.int32)),
        *(pa.array(digest[name]) for name in advantage.DIGEST_FIELDS)], schema=ARROW_DIGEST_SCHEMA)


def _digest_batches(digests: DigestAccumulator) -> Iterator[pa.RecordBatch]:
    """One :data:`DIGEST_SCHEMA` batch per setting, then the rows per bagging unit (mechanism :data:`UNIT_ROWS`,
    bin = unit)."""
    for setting, digest in digests.digests():
        yield _digest_batch(setting.mechanism, setting.epsilon, setting.bag_size, digest)
    units = digests.unit_digest()
    if units is not None:
        yield _digest_batch(UNIT_ROWS, math.nan, 0, units)


class RowGroupWriter:
    """Parquet file of result rows written batch by batch (pyarrow), in row groups of about
    :data:`ROWS_PER_ROW_GROUP` rows; dictionary encoding only for the few-valued setting columns; every page with
    its CRC (verified by every read)."""

    def __init__(self, path: str, schema: pa.Schema, codec: str) -> None:
        import pyarrow.parquet as pq

        dictionary = [name for name in SETTING_KEY if name in schema.names]
        self.schema = schema
        self.writer = pq.ParquetWriter(path, schema, compression=codec, use_dictionary=dictionary,
                                      write_page_checksum=True)
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
    if context is None:
        raise RuntimeError("posteriors: the workers write their results inside a Spark task, got no TaskContext")
    name = f"part-{context.partitionId():05d}.parquet"
    temporary = os.path.join(directory, f".{name}.attempt-{context.taskAttemptId()}")
    os.makedirs(directory, exist_ok=True)
    writer = RowGroupWriter(temporary, schema, codec)
    try:
        yield writer
    finally:
        writer.close()  # a failed attempt leaves a hidden file, removed by the driver (check_result_files)
    os.replace(temporary, os.path.join(directory, name))


WORKER_EXIT_PROPERTY = "lia_spark.fault.worker_exit_marker"  # fault tests only (a Spark local property)


def _fault_point() -> None:
    """Fault injection for the recovery test: when the job carries the local property
    :data:`WORKER_EXIT_PROPERTY` (a marker file path), the first task reaching this point creates the marker and
    kills its Python worker mid-write, as an out-of-memory kill would; Spark retries the task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("posteriors: the fault point is reached inside a Spark task, got no TaskContext")
    marker = context.getLocalProperty(WORKER_EXIT_PROPERTY)
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os._exit(137)


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
    their digest (:data:`DIGEST_SCHEMA`): per setting and bin of |I| (:func:`lia_spark.kernels.advantage.bin_digest`)
    plus the rows per bagging unit."""
    digests, sample = DigestAccumulator(), []
    with _task_parquet(files.rows_dir, ARROW_ROW_SCHEMA, files.codec) as writer:
        for chunk in plan.chunks(batches):
            sampled = pa.array(plot_sample_mask(chunk.rows["row_id"], fraction=files.sample_fraction, seed=plan.seed))
            for computed in digests.posteriors(chunk, plan.settings, plan.seed, max_leakage=plan.max_leakage):
                batch = row_batch(computed)
                writer.add(batch)
                sample.append(batch.select(PLOT_COLUMNS).filter(sampled))
                _fault_point()
    with _task_parquet(files.sample_dir, ARROW_PLOT_SCHEMA, files.codec) as writer:
        for batch in sample:
            writer.add(batch)
    yield from _digest_batches(digests)


def _digest_only(batches: Iterator[pa.RecordBatch], *, plan: PassPlan) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: the digest of :func:`_write_rows_and_digest` (the same per-unit computation) without
    writing anything."""
    digests = DigestAccumulator()
    for chunk in plan.chunks(batches):
        for _ in digests.posteriors(chunk, plan.settings, plan.seed, max_leakage=plan.max_leakage):
            pass
    yield from _digest_batches(digests)


def _plan(*, settings: Sequence[Setting], seed: int, unit_bits: int, bags_per_group: int, max_leakage: bool,
          spill: UnitSpill | None = None) -> PassPlan:
    """The plan of the pass: chunks of whole bags of every size in ``settings``."""
    if not settings:
        raise ValueError(f"settings: must hold at least one setting, got {settings!r}")
    chunk_rows = rows_per_call([s.bag_size for s in settings], settings=len(settings), bags_per_group=bags_per_group)
    return PassPlan(settings=tuple(settings), seed=seed, unit_bits=unit_bits, chunk_rows=chunk_rows,
                    max_leakage=max_leakage, spill=spill)


def _one_pass(blobs: DataFrame, *, settings: Sequence[Setting], seed: int, unit_bits: int, bags_per_group: int,
              max_leakage: bool = False) -> tuple[DataFrame, PassPlan]:
    """(:func:`shuffled_units` of the blobs, the plan of the pass over them)."""
    plan = _plan(settings=settings, seed=seed, unit_bits=unit_bits, bags_per_group=bags_per_group,
                 max_leakage=max_leakage)
    return shuffled_units(blobs, unit_bits=unit_bits), plan


def posterior_rows(blobs: DataFrame, *, settings: Sequence[Setting], seed: int, unit_bits: int = 0,
                   bags_per_group: int = 0, max_leakage: bool = False) -> DataFrame:
    """Per-row releases, posteriors and advantages (schema :data:`ROW_SCHEMA`) for every setting, of the input
    packed in ``blobs``.

    Args:
        blobs: data rows and prior rows packed by :func:`~lia_spark.engine.posteriors.units.frame_blobs` or
            :func:`~lia_spark.engine.posteriors.units.file_blobs` with the same seed and unit_bits; labels
            are matched to priors on row_id (inner join; each side unique).
        settings: grid cells (see :func:`lia_spark.kernels.posterior_grid.settings_grid`).
        seed: run seed (bags and noise derive from it).
        unit_bits: 2^unit_bits independent bagging units (:func:`lia_spark.kernels.mechanisms.bagging_unit_bits`).
        bags_per_group: bags of the largest size per chunk (0 = automatic, see
            :func:`lia_spark.kernels.posterior_grid.rows_per_call`).
        max_leakage: also each row's maximal leakage (column ``max_leakage``, NaN when false).
    """
    return _pass_rows(*_one_pass(blobs, settings=settings, seed=seed, unit_bits=unit_bits,
                                 bags_per_group=bags_per_group, max_leakage=max_leakage))


def _pass_rows(ordered: DataFrame, plan: PassPlan) -> DataFrame:
    """The per-row results of the pass over the shuffled units ``ordered``."""
    return ordered.mapInArrow(functools.partial(_stream_posteriors, plan=plan), ROW_SCHEMA)


def write_posteriors(blobs: DataFrame, *, output_dir: str, settings: Sequence[Setting], seed: int,
                     unit_bits: int = 0, bags_per_group: int = 0, sample_fraction: float = 1.0,
                     max_leakage: bool = False) -> pd.DataFrame:
    """The rows of :func:`posterior_rows`, written by the Python workers as Parquet files to
    ``output_dir/rows`` and a plot sample (:func:`plot_sample_mask`) to ``output_dir/_plot_sample``
    (``output_dir`` is a local path every executor and the driver see alike), and their digest
    (:data:`DIGEST_SCHEMA`, summed over units): per setting and bin of |I| the rows, min, max and advantage
    sums, and the rows per bagging unit (mechanism :data:`UNIT_ROWS`, bin = unit). Each unit's sums are fixed
    by its rows; adding them as decimals rounded to 1e-18 makes the totals independent of partitioning.
    Other arguments as :func:`posterior_rows`.

    Raises:
        OSError: naming run.output_dir when the driver does not see every row the workers wrote.
    """
    ordered, plan = _one_pass(blobs, settings=settings, seed=seed, unit_bits=unit_bits, bags_per_group=bags_per_group,
                              max_leakage=max_leakage)
    return _worker_written(ordered, plan, output_dir=output_dir, sample_fraction=sample_fraction)


def write_spilled_posteriors(spark: SparkSession, spill: UnitSpill, *, output_dir: str, settings: Sequence[Setting],
                             bags_per_group: int = 0, sample_fraction: float = 1.0,
                             max_leakage: bool = False) -> pd.DataFrame:
    """:func:`write_posteriors` of the rows in ``spill`` (:func:`lia_spark.engine.posteriors.units.spill_units`; the
    run seed is the spill's): one task per bagging unit reads the unit's rows from the spill's files, so the rows
    never pass through Spark's shuffle. The same files and digest as :func:`write_posteriors` of the same rows'
    blobs."""
    plan = _plan(settings=settings, seed=spill.seed, unit_bits=spill.unit_bits, bags_per_group=bags_per_group,
                 max_leakage=max_leakage, spill=spill)
    units = 1 << spill.unit_bits
    return _worker_written(spark.range(units, numPartitions=units), plan, output_dir=output_dir,
                           sample_fraction=sample_fraction)


def _worker_written(ordered: DataFrame, plan: PassPlan, *, output_dir: str, sample_fraction: float) -> pd.DataFrame:
    """The pass of ``plan`` over ``ordered`` (one partition per unit), rows and plot sample written by the
    workers under ``output_dir``; returns the digest totals after checking the driver sees every row."""
    configured = ordered.sparkSession.conf.get("spark.sql.parquet.compression.codec", "zstd")
    codec = ARROW_CODECS.get(cast(str, configured), "zstd")  # a str default: never None
    files = ResultFiles(rows_dir=os.path.join(output_dir, layout.ROWS),
                        sample_dir=os.path.join(output_dir, layout.PLOT_SAMPLE), sample_fraction=sample_fraction,
                        codec=codec)
    digest = _digest_totals(ordered.mapInArrow(functools.partial(_write_rows_and_digest, plan=plan, files=files),
                                               DIGEST_SCHEMA))
    _committed_rows(files.sample_dir)
    check_result_files(files.rows_dir, expected=int(digest.loc[digest["mechanism"] == UNIT_ROWS, "rows"].sum())
                       * len(plan.settings))
    return digest


def spark_write_posteriors(blobs: DataFrame, *, output_dir: str, settings: Sequence[Setting], seed: int,
                           unit_bits: int = 0, bags_per_group: int = 0, max_leakage: bool = False) -> pd.DataFrame:
    """The rows of :func:`posterior_rows`, written by Spark's DataFrame writer to ``output_dir/rows`` (any Hadoop
    file system; executors need no disk shared with the driver), and the digest :func:`write_posteriors` returns.
    The shuffled units are cached and passed over twice: the rows go to the writer, then the per-unit code of
    :func:`write_posteriors` runs the settings again and returns only their digest (no second read or shuffle
    of the input), so digest and summaries equal the local path's exactly. Other arguments as
    :func:`posterior_rows`."""
    ordered, plan = _one_pass(blobs, settings=settings, seed=seed, unit_bits=unit_bits, bags_per_group=bags_per_group,
                              max_leakage=max_leakage)
    ordered = ordered.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        _pass_rows(ordered, plan).write.parquet(layout.under(output_dir, layout.ROWS))
        spark = blobs.sparkSession
        describe_jobs(spark, "posteriors: digest of the per-row results (settings run again)")
        return _digest_totals(ordered.mapInArrow(functools.partial(_digest_only, plan=plan), DIGEST_SCHEMA))
    finally:
        ordered.unpersist()


def _digest_totals(digests: DataFrame) -> pd.DataFrame:
    """Digest rows (:data:`DIGEST_SCHEMA`) summed over bagging units, on the driver. Each unit's sums are fixed
    by its rows; adding them as decimals rounded to 1e-18 makes the totals independent of partitioning."""
    exact = "decimal(38,18)"  # units' sums added exactly, so the total does not depend on their order
    return (digests.groupBy(*SETTING_KEY, "bin")
            .agg(F.sum("rows").alias("rows"), F.min("low").alias("low"), F.max("high").alias("high"),
                 F.sum(F.col("additive").cast(exact)).cast("double").alias("additive"),
                 F.sum(F.col("realized").cast(exact)).cast("double").alias("realized"),
                 F.sum(F.col("leakage").cast(exact)).cast("double").alias("leakage"))
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
                      f"driver sees {found}; {SHARED_FOLDER}")


def _committed_rows(directory: str) -> int:
    """Rows in the files :func:`_task_parquet` committed to ``directory``; hidden leftovers of failed attempts
    are removed."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(os.path.join(directory, name)).metadata.num_rows
               for name in remove_attempt_leftovers(directory))
