"""Packing the posteriors stage's input by bagging unit, and the one shuffle that puts each unit on a partition.

Each row gets the bagging key ``xxhash64(stream, row_id)`` and its unit (the key's top bits,
:func:`lia_spark.kernels.mechanisms.bagging_units`); data rows carry -1 - label, prior rows the prior, and the rows of
each unit are packed into one Arrow IPC blob tagged with a per-unit partition code (:class:`UnitPacker`). Hash
partitioning on the codes puts each unit whole into its own partition (:func:`shuffled_units`: no range
sampling, no Spark sort, few large values instead of many rows), where :func:`bagged_units` pairs each label
with its prior in the unit's random order.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from lia_spark.engine.posteriors.reading import (LABEL, PRIOR, InputPart, input_parts, load_input, local_path,
                                                 side_row_counts, side_rows)
from lia_spark.engine.models.priors import prior_source, resolve_prior
from lia_spark.engine.spark.session import describe_jobs
from lia_spark.kernels import hashing, mechanisms, posterior_grid
from lia_spark.run.config import Config

ARROW_SIDE_SCHEMA = pa.schema([pa.field("row_id", pa.int64(), False), pa.field("value", pa.float64(), False)])
BLOB_SCHEMA = StructType([StructField("code", IntegerType(), False), StructField("blob", BinaryType(), False)])
ARROW_BLOB_SCHEMA = to_arrow_schema(BLOB_SCHEMA)


def partition_codes(partitions: int) -> list[int]:
    """The smallest integers c_0..c_{n-1} >= 0 with pmod(hash(c_p), n) = p: Spark's hash partitioning into n
    partitions (:func:`lia_spark.kernels.hashing.spark_hash_int`) sends c_p to partition p, so a column of codes places
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


def _packed_frame(batches: Iterator[pa.RecordBatch], *, packer: UnitPacker, side: str) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: the blobs of the ``side`` rows (column :data:`LABEL` or :data:`PRIOR`) of each batch."""
    for batch in batches:
        yield packer.blobs(*side_rows(side, batch.column("row_id"), batch.column(side)))


def _packed_files(batches: Iterator[pa.RecordBatch], *, packer: UnitPacker, parts: Sequence[InputPart]
                  ) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over ``spark.range(len(parts))``: pyarrow reads each part, the blobs of each batch."""
    for batch in batches:
        for index in batch.column("id").to_numpy():
            for row_ids, values in parts[index].side_rows():
                yield packer.blobs(row_ids, values)


def frame_blobs(rows: DataFrame, priors: DataFrame, *, seed: int, unit_bits: int) -> DataFrame:
    """Blobs (:class:`UnitPacker`) of data rows (row_id, label) and prior rows (row_id, prior) read by Spark."""
    packer = UnitPacker.for_units(seed, unit_bits)

    def packed(frame: DataFrame, side: str) -> DataFrame:
        return frame.select(F.col("row_id").cast("long"), side).mapInArrow(
            functools.partial(_packed_frame, packer=packer, side=side), BLOB_SCHEMA)

    return packed(rows, LABEL).unionByName(packed(priors, PRIOR))


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


def shuffled_units(blobs: DataFrame, *, unit_bits: int) -> DataFrame:
    """The blobs of :func:`frame_blobs` or :func:`file_blobs` shuffled to one partition per bagging unit."""
    return blobs.repartition(1 << unit_bits, "code")


def bagged_units(batches: Iterator[pa.RecordBatch], *, seed: int, unit_bits: int
                 ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """:func:`lia_spark.kernels.posterior_grid.paired_units` of the side rows (row_id, value) of one shuffled partition
    (:func:`unpacked` blobs), which holds whole units (buffered here: one unit of about
    mechanisms.rows_per_bagging_unit rows)."""
    parts = [(batch.column("row_id").to_numpy(), batch.column("value").to_numpy()) for batch in batches]
    if not parts:
        return
    yield from posterior_grid.paired_units(np.concatenate([ids for ids, _ in parts]),
                                           np.concatenate([value for _, value in parts]), seed=seed,
                                           unit_bits=unit_bits)


@dataclasses.dataclass(frozen=True)
class PosteriorInput:
    """The released days' input packed by bagging unit (``blobs``, read by ``reader``: "pyarrow" or "spark"), the
    counts of its data rows and prior rows and the bagging unit bits."""

    blobs: DataFrame
    reader: str
    data_rows: int
    prior_rows: int
    unit_bits: int


def posterior_input(spark: SparkSession, config: Config, days: Sequence[int]) -> PosteriorInput:
    """The input of the released ``days`` as one selection: counts both sides over all of them, picks the
    bagging units (:func:`lia_spark.kernels.mechanisms.bagging_unit_bits` of the smaller count: units, and so bags, span
    the days) and packs the rows: pyarrow reads local inputs in Python tasks (:func:`input_parts`,
    :func:`side_row_counts`, :func:`file_blobs`), Spark reads and counts any other (:func:`load_input`,
    :func:`frame_blobs`).

    Raises:
        ValueError: naming mechanisms.days when the data or the prior table holds no row of those days.
    """
    describe_jobs(spark, "posteriors: count rows and priors")
    section, seed = config.mechanisms, config.run.seed
    data_path, prior_path = local_path(config.parquet_path), local_path(prior_source(config))
    if data_path is None or prior_path is None:
        data, priors = load_input(spark, config, days)
        data_rows, prior_rows = data.count(), priors.count()
        reader, packed = "spark", functools.partial(frame_blobs, data, priors)
    else:
        parts = [*input_parts(data_path, side=LABEL, column=LABEL, days=days),
                 *input_parts(prior_path, side=PRIOR, column=resolve_prior(config).column, days=days)]
        rows = side_row_counts(spark, parts)
        data_rows, prior_rows = rows[LABEL], rows[PRIOR]
        reader, packed = "pyarrow", functools.partial(file_blobs, spark, parts)
    for count, path in ((data_rows, config.parquet_path), (prior_rows, prior_source(config))):
        if count == 0:
            raise ValueError(f"mechanisms.days: {path} holds no rows of the released days, got {list(days)}")
    unit_bits = mechanisms.bagging_unit_bits(min(data_rows, prior_rows), section.rows_per_bagging_unit)
    return PosteriorInput(packed(seed=seed, unit_bits=unit_bits), reader, data_rows, prior_rows, unit_bits)
