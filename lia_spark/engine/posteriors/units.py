"""Grouping the posteriors stage's input by bagging unit, and bringing each unit whole to one task.

Each row gets the bagging key ``xxhash64(stream, row_id)`` and its unit (the key's top bits,
:func:`lia_spark.kernels.mechanisms.bagging_units`); data rows carry -1 - label, prior rows the prior. Two ways to
bring each unit whole to one task, where :func:`bagged_units` pairs each label with its prior in the unit's random
order:

- through Spark: the rows of each unit are packed into one Arrow IPC blob tagged with a per-unit partition code
  (:class:`UnitPacker`), and hash partitioning on the codes puts each unit into its own partition
  (:func:`shuffled_units`: no range sampling, no Spark sort, few large values instead of many rows);
- through a folder, when the input and the output folder are local paths every task sees (:func:`spill_units`):
  the reading tasks write their rows ordered by unit to one file each (:class:`UnitSpill`) and the task of unit u
  reads its rows from every file; no row passes through the JVM.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import uuid
from typing import Iterator, NoReturn, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from lia_spark.engine.attacker_prior.sources import prior_source, resolve_prior
from lia_spark.engine.posteriors.reading import (LABEL, PRIOR, InputPart, input_parts, load_input, local_path,
                                                 side_row_counts, side_rows)
from lia_spark.engine.spark.capabilities import collect_arrow
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


def row_units(row_ids: np.ndarray, *, seed: int, unit_bits: int) -> np.ndarray:
    """The bagging unit of each row: the top ``unit_bits`` bits of its bagging key."""
    return mechanisms.bagging_units(mechanisms.bagging_keys(row_ids, seed=seed), unit_bits=unit_bits)


def unit_order(units: np.ndarray, *, unit_bits: int) -> np.ndarray:
    """The stable order that groups rows by unit (a radix sort for up to 2^16 units)."""
    return np.argsort(units.astype(np.uint16) if unit_bits <= 16 else units, kind="stable")


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
        units = row_units(row_ids, seed=self.seed, unit_bits=self.unit_bits)
        order = unit_order(units, unit_bits=self.unit_bits)
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


SHARED_FOLDER = "posteriors needs an output_dir at the same path on every node (local mode or a shared mount)"
SPILL_MAGIC = 0x4C49415350494C4C  # "LIASPILL": the trailer's first word in every spill file


@dataclasses.dataclass(frozen=True)
class UnitSpill:
    """The side rows (row_id, value) of the input parts by bagging unit (keys of ``seed``), in a local ``folder``
    every task and the driver see alike: one file per part (``part-<p>.units``, committed by rename), a segment per
    batch read, in which each unit's row ids are followed by its values. A footer holds each segment's first byte
    and rows, then the row offsets of the units in every segment, unit-major ((2^unit_bits + 1) x segments), so the
    task of unit u reads its two offset rows in one call; a trailer holds :data:`SPILL_MAGIC`, unit_bits and the
    number of segments. The task of unit u reads just the unit's bytes of every file (:meth:`unit_rows`)."""

    folder: str
    parts: int
    unit_bits: int
    seed: int

    def path(self, part: int) -> str:
        """The committed file of part ``part``."""
        return os.path.join(self.folder, f"part-{part:05d}.units")

    def write(self, part: int, batches: Iterator[tuple[np.ndarray, np.ndarray]]) -> int:
        """Write part ``part``'s side rows (batches of row ids and values) under a hidden name, renamed when
        complete (a retried attempt writes identical bytes); returns the rows written."""
        os.makedirs(self.folder, exist_ok=True)
        temporary = os.path.join(self.folder, f".part-{part:05d}.units.{uuid.uuid4().hex}")
        first_bytes, segment_rows, offsets = [], [], []
        with open(temporary, "xb") as file:
            for row_ids, values in batches:
                units = row_units(row_ids, seed=self.seed, unit_bits=self.unit_bits)
                order = unit_order(units, unit_bits=self.unit_bits)
                counts = np.bincount(units, minlength=1 << self.unit_bits)
                ends = np.cumsum(counts)
                starts = ends - counts
                words = np.empty(2 * row_ids.size, dtype=np.int64)  # unit u: its ids, then its values
                position = np.arange(row_ids.size)
                sorted_units = units[order]
                words[position + starts[sorted_units]] = row_ids[order]
                words[position + ends[sorted_units]] = values[order].view(np.int64)
                first_bytes.append(file.tell())
                segment_rows.append(row_ids.size)
                offsets.append(np.r_[0, ends])
                file.write(words.tobytes())
            segments = len(first_bytes)
            unit_major = np.array(offsets, dtype=np.int64).reshape(segments, (1 << self.unit_bits) + 1).T
            for trailer in (first_bytes, segment_rows, unit_major, [SPILL_MAGIC, self.unit_bits, segments]):
                file.write(np.ascontiguousarray(trailer, dtype=np.int64).tobytes())
        os.replace(temporary, self.path(part))
        return int(sum(segment_rows))

    def unit_rows(self, unit: int) -> Iterator[pa.RecordBatch]:
        """The rows of bagging unit ``unit`` in every part's file, one (row_id, value) batch per file.

        Raises:
            OSError: naming run.output_dir when a part's file is missing, short or not a spill file of these
                units (a task that does not see the folder the others wrote).
        """
        for part in range(self.parts):
            try:
                descriptor = os.open(self.path(part), os.O_RDONLY)
            except FileNotFoundError:
                raise OSError(f"run.output_dir: the task of bagging unit {unit} does not see {self.path(part)}, "
                              f"which a reading task wrote; {SHARED_FOLDER}") from None
            try:
                row_ids, values = self._part_rows(descriptor, part, unit)
            finally:
                os.close(descriptor)
            if row_ids.size:
                yield pa.RecordBatch.from_arrays([pa.array(row_ids), pa.array(values)], schema=ARROW_SIDE_SCHEMA)

    def _part_rows(self, descriptor: int, part: int, unit: int) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, values) of ``unit`` in one part's file."""
        size = os.fstat(descriptor).st_size
        magic, unit_bits, segments = (int(word) for word in self._words(descriptor, size - 24, 3, part))
        footer_start = size - 24 - 8 * segments * ((1 << self.unit_bits) + 3)
        if magic != SPILL_MAGIC or unit_bits != self.unit_bits or segments < 0 or footer_start < 0:
            self._broken(part)
        placement = self._words(descriptor, footer_start, 2 * segments, part)
        first_bytes, segment_rows = placement[:segments], placement[segments:]
        if not np.array_equal(first_bytes, np.r_[0, np.cumsum(16 * segment_rows)][:segments]) or (
                segments and first_bytes[-1] + 16 * segment_rows[-1] != footer_start):
            self._broken(part)
        low, high = self._words(descriptor, footer_start + 16 * segments + 8 * unit * segments, 2 * segments,
                                part).reshape(2, segments)
        row_ids, values = [], []
        for segment in np.flatnonzero(high > low):
            count = int(high[segment] - low[segment])
            words = self._words(descriptor, int(first_bytes[segment] + 16 * low[segment]), 2 * count, part)
            row_ids.append(words[:count])
            values.append(words[count:].view(np.float64))
        if not row_ids:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        return np.concatenate(row_ids), np.concatenate(values)

    def _words(self, descriptor: int, offset: int, count: int, part: int) -> np.ndarray:
        """``count`` int64 words at byte ``offset`` of part ``part``'s file."""
        data = os.pread(descriptor, 8 * count, offset) if offset >= 0 else b""
        if len(data) != 8 * count:
            self._broken(part)
        return np.frombuffer(data, np.int64)

    def _broken(self, part: int) -> NoReturn:
        raise OSError(f"run.output_dir: {self.path(part)} is not a complete spill file of {1 << self.unit_bits} "
                      f"bagging units (partly written, or written by another run)")

    def unit_batches(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """mapInArrow side of a pass over ``spark.range(2^unit_bits)``: the rows of each unit id in ``batches``."""
        for batch in batches:
            for unit in batch.column("id").to_numpy():
                yield from self.unit_rows(int(unit))


def _spilled_parts(batches: Iterator[pa.RecordBatch], *, spill: UnitSpill, parts: Sequence[InputPart]
                   ) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over part indices: pyarrow reads each part, :meth:`UnitSpill.write` writes its file."""
    for batch in batches:
        indices = batch.column("id").to_numpy()
        written = [spill.write(int(index), parts[index].side_rows()) for index in indices]
        yield pa.RecordBatch.from_arrays([pa.array(indices), pa.array(written, pa.int64())], names=["part", "rows"])


def remove_attempt_leftovers(folder: str) -> list[str]:
    """Remove the hidden files failed task attempts left in ``folder`` (tolerating an attempt that renames its file
    meanwhile); returns the names of the other files, sorted."""
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    for name in names:
        if name.startswith("."):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(folder, name))
    return [name for name in names if not name.startswith(".")]


def spill_units(spark: SparkSession, parts: Sequence[InputPart], *, folder: str, seed: int, unit_bits: int,
                expected_rows: int) -> UnitSpill:
    """The local Parquet ``parts`` read by pyarrow in Python tasks, one task per part, their rows written by unit
    to ``folder`` (:class:`UnitSpill`); the driver checks it sees every file and that the tasks wrote the
    ``expected_rows`` the parts were counted to hold.

    Raises:
        OSError: naming run.output_dir when the driver does not see a file a task wrote.
        RuntimeError: naming data.parquet_path when the tasks read another number of rows than was counted
            (the input changed while the stage ran).
    """
    spill = UnitSpill(folder, len(parts), unit_bits, seed)
    body = functools.partial(_spilled_parts, spill=spill, parts=tuple(parts))
    written = collect_arrow(spark.range(len(parts), numPartitions=max(len(parts), 1)).mapInArrow(
        body, "part long, rows long")).column("rows").to_numpy().sum()
    remove_attempt_leftovers(folder)
    missing = [spill.path(part) for part in range(len(parts)) if not os.path.exists(spill.path(part))]
    if missing:
        raise OSError(f"run.output_dir: the reading tasks wrote {missing[0]}, but the driver does not see it; "
                      f"{SHARED_FOLDER}")
    if written != expected_rows:
        raise RuntimeError(f"data.parquet_path: the input changed while the posteriors stage ran: its data and "
                           f"prior rows were counted as {expected_rows}, the reading tasks read {written}")
    return spill


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
    counts of its data rows and prior rows, the bagging unit bits and, for local inputs, the ``parts`` pyarrow
    reads (:func:`spill_units` can shuffle them through a folder instead of Spark)."""

    blobs: DataFrame
    reader: str
    data_rows: int
    prior_rows: int
    unit_bits: int
    parts: tuple[InputPart, ...] = ()


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
    parts: list[InputPart] = []
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
    return PosteriorInput(packed(seed=seed, unit_bits=unit_bits), reader, data_rows, prior_rows, unit_bits,
                          tuple(parts))
