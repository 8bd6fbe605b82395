"""Criteo files the tasks read and write themselves (``data.task_io``, on local paths): the ingest stage's steps 1
and 3 without Spark's text reader and Parquet writer (:mod:`lia_spark.engine.ingest.stage` says when it applies).

The plain files (and step 0's decoded copies) are cut into byte ranges, *chunks*, sized as Spark sizes file splits
(``spark.sql.files.maxPartitionBytes``, at least ``spark.sql.files.openCostInBytes``, the input spread over every
core). A chunk owns the lines that start inside it: the line at byte 0 and every line after an LF at byte
p in [start - 1, end - 1). Chunks are grouped into tasks (:func:`task_groups`: about one split of bytes each, a
multiple of the cores, bytes balanced) as Spark packs small files into one partition, because a Python task costs
~0.2 s of its own. Two Spark jobs, each task taking its group's chunks in turn:

1. *count*: the lines a chunk owns are the LFs in bytes [max(start - 1, 0), end - 1), plus the first line for the
   chunk at byte 0; on the driver their sums per file, in chunk order, give each chunk's first line index;
2. *parse and write*: a task reads its chunk's lines in blocks of :data:`READ_BYTES`, parses them
   (:func:`lia_spark.kernels.criteo.parse_spans`), numbers them from its first line index, writes its valid rows
   as Parquet into the stage's staging folder (``day=<d>/part-<chunk>.snappy.parquet``, written under a hidden
   name and renamed, so a retried task leaves one complete file) and returns the scan rows of
   :func:`lia_spark.engine.ingest.criteo_files.scan_partition` (the chunk is the block), so the stage's counts,
   size checks and quarantine are the same code on both paths.

The parse job checks that each chunk holds the lines the count job found (a file changed during the ingest fails
it), and the driver checks the rows per day the written files' footers hold (:func:`rows_per_day`). Memory per
task stays near :data:`READ_BYTES` times a small factor, whatever the chunk size.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import uuid
from collections.abc import Iterator
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from lia_spark import names
from lia_spark.engine.ingest.criteo_files import (COPY_FILE, SCAN_DDL, SourceFile, checked_local, malformed_batch,
                                                  reason_counts, summary_batch, value_columns)
from lia_spark.engine.spark.filesystem import local_folder
from lia_spark.engine.spark.memory import byte_size
from lia_spark.engine.spark.session import default_parallelism
from lia_spark.kernels import criteo

logger = logging.getLogger(__name__)

READ_BYTES = 16 << 20  # bytes per read of a chunk
HIDDEN_SUFFIX = ".tmp"  # a chunk's Parquet file while it is written
_LF = 10
_FILE_SCHEMA = pa.schema([(names.ROW_ID, pa.int64()), (names.LABEL, pa.int32())]
                         + [(name, pa.int64()) for name in criteo.FEATURE_COLUMNS])


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Bytes [start, end) of the local text file ``path`` (``size`` bytes), input file ``file_index``."""

    file_index: int
    path: str
    start: int
    end: int
    size: int


def applies(sources: list[SourceFile], copies: dict[int, str], output: str) -> bool:
    """Whether every text to read (a plain source, or the decoded copy of a .gz) and the output are local paths the
    executors see; a non-empty .gz without a copy (``data.split_gzip: false``) is Spark's to decode."""
    texts = [copies.get(index, source.path) for index, source in enumerate(sources)]
    plain = all(index in copies or not source.gzip or source.size == 0 for index, source in enumerate(sources))
    return plain and all(local_folder(path) is not None for path in [output, *texts])


def plan_chunks(spark: SparkSession, sources: list[SourceFile], copies: dict[int, str]) -> list[Chunk]:
    """Every non-empty text cut into chunks of Spark's split size; paths absolute as the driver sees them (an
    executor's working directory is not the driver's)."""
    texts = []
    for index, source in enumerate(sources):
        path = os.path.abspath(f"{checked_local(copies[index])}/{COPY_FILE}" if index in copies
                               else checked_local(source.path))
        texts.append((index, path, os.path.getsize(path)))
    total = sum(size for _, _, size in texts)
    per_core = total // max(1, default_parallelism(spark))
    open_cost = cast(str, spark.conf.get("spark.sql.files.openCostInBytes", "4m"))  # a str default: never None
    split = min(_max_partition_bytes(spark), max(byte_size(open_cost), per_core))
    return [Chunk(index, path, start, min(start + split, size), size)
            for index, path, size in texts for start in range(0, size, max(1, split))]


def task_groups(spark: SparkSession, chunks: list[Chunk]) -> list[list[int]]:
    """The chunks' positions grouped into tasks: at least as many as the cores, rounded up to a multiple of them, at
    least one per ``spark.sql.files.maxPartitionBytes`` of input (:func:`balanced_groups`)."""
    cores = max(1, default_parallelism(spark))
    sizes = [chunk.end - chunk.start for chunk in chunks]
    wanted = max(1, -(-sum(sizes) // max(1, _max_partition_bytes(spark))))
    return balanced_groups(sizes, -(-wanted // cores) * cores)


def _max_partition_bytes(spark: SparkSession) -> int:
    """``spark.sql.files.maxPartitionBytes``: the most bytes Spark reads in one file split."""
    configured = cast(str, spark.conf.get("spark.sql.files.maxPartitionBytes", "128m"))  # a str default: never None
    return byte_size(configured)


def balanced_groups(sizes: list[int], groups: int) -> list[list[int]]:
    """Positions of ``sizes`` in at most ``groups`` non-empty groups, largest first to the lightest group (LPT: no
    group exceeds the mean load by more than the largest size); each group in position order."""
    loads = [(0, group) for group in range(max(1, min(groups, len(sizes))))]
    members: list[list[int]] = [[] for _ in loads]
    for position in sorted(range(len(sizes)), key=lambda item: (-sizes[item], item)):
        load, group = min(loads)
        members[group].append(position)
        loads[group] = (load + sizes[position], group)
    return [sorted(group) for group in members if group]


def count_chunk_lines(chunk: Chunk, read_bytes: int = READ_BYTES) -> int:
    """Lines that start in the chunk: LFs in bytes [max(start - 1, 0), end - 1), plus the line at byte 0."""
    first, lines = max(chunk.start - 1, 0), int(chunk.start == 0 and chunk.size > 0)
    with open(chunk.path, "rb") as stream:
        stream.seek(first)
        remaining = chunk.end - 1 - first
        while remaining > 0:
            block = stream.read(min(read_bytes, remaining))
            if not block:
                break
            lines += int(np.count_nonzero(np.frombuffer(block, np.uint8) == _LF))
            remaining -= len(block)
    return lines


def chunk_blocks(chunk: Chunk,
                 read_bytes: int = READ_BYTES) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The chunk's lines in blocks (data, line_start, line_end): each block the bytes of whole lines (the file's last
    line with or without an LF) and their spans, from the first line starting at or after ``start`` through the last
    starting before ``end``."""
    with open(chunk.path, "rb") as stream:
        offset = max(chunk.start - 1, 0)
        stream.seek(offset)
        pending = np.zeros(0, np.uint8)
        if chunk.start > 0:  # skip the tail of the line that started in the previous chunk, through its LF
            while offset < chunk.end:
                block = np.frombuffer(stream.read(read_bytes), np.uint8)
                if not block.size:
                    return
                feeds = np.flatnonzero(block == _LF)
                if feeds.size:
                    offset, pending = offset + int(feeds[0]) + 1, block[feeds[0] + 1:]
                    break
                offset += block.size
        while offset < chunk.end:
            block = np.frombuffer(stream.read(read_bytes), np.uint8)
            data = np.concatenate([pending, block]) if pending.size else block
            final = not block.size
            if not data.size:
                return
            line_start, line_end, consumed = criteo.line_spans(data, final=final)
            owned = int(np.searchsorted(line_start, chunk.end - offset))  # lines starting before the chunk's end
            if owned < line_start.size:
                if owned:
                    yield data, line_start[:owned], line_end[:owned]
                return
            if consumed:
                yield data, line_start, line_end
            offset, pending = offset + consumed, data[consumed:]
            if final:
                return


def parse_chunks_fn(chunks: list[Chunk], groups: list[list[int]], first_lines: list[int],
                    file_days: dict[int, tuple[int, np.ndarray]], staging: str):
    """mapInArrow over task indices: parse each chunk of the task's group, write its valid rows under ``staging`` (a
    local folder) by day, and yield its scan rows (:mod:`module docstring <lia_spark.engine.ingest.local_files>`)."""

    def parse_chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column(0).to_pylist():
                for position in groups[task]:
                    yield from _parse_chunk(position, chunks[position], first_lines[position],
                                            file_days[chunks[position].file_index], staging)

    return parse_chunks


def _parse_chunk(position: int, chunk: Chunk, first_line: int, file_day: tuple[int, np.ndarray],
                 staging: str) -> Iterator[pa.RecordBatch]:
    """One chunk of :func:`parse_chunks_fn`."""
    key = (chunk.file_index, chunk.start)
    writers: dict[int, tuple[pq.ParquetWriter, str, str]] = {}
    seen, line_bytes, reasons = 0, 0, np.zeros(len(criteo.REASONS), np.int64)
    try:
        for data, line_start, line_end in chunk_blocks(chunk):
            parsed = criteo.parse_spans(data, line_start, line_end)
            reasons += reason_counts(parsed.reason)
            line_bytes += int(parsed.line_length.sum())
            bad = np.flatnonzero(~parsed.valid)
            if bad.size:
                yield malformed_batch([key] * bad.size, (seen + bad).tolist(), parsed.reason[bad].tolist(),
                                      criteo.span_lines(data, line_start[bad], line_end[bad]).to_pylist())
            keep = np.flatnonzero(parsed.valid)
            day, line_position = criteo.locate_lines(first_line + seen + keep, first_day=file_day[0],
                                                     day_starts=file_day[1])
            columns = [pa.array(criteo.make_row_id(day, line_position)), *value_columns(parsed, keep)]
            rows = pa.RecordBatch.from_arrays(columns, schema=_FILE_SCHEMA)
            days = np.unique(day).tolist()
            for value in days:
                if value not in writers:
                    writers[value] = _open_writer(staging, value, position)
                writers[value][0].write_batch(rows if len(days) == 1 else rows.filter(pa.array(day == value)))
            seen += line_start.size
    except BaseException:
        for writer, hidden, _ in writers.values():
            writer.close()
            os.remove(hidden)
        raise
    for writer, hidden, final in writers.values():
        writer.close()
        os.replace(hidden, final)
    yield summary_batch({key: seen}, {key: line_bytes}, {key: reasons})


def _open_writer(staging: str, day: int, position: int) -> tuple[pq.ParquetWriter, str, str]:
    """A Parquet writer of chunk ``position``'s rows of ``day``: (writer, hidden path, final path)."""
    folder = os.path.join(staging, f"{names.DAY}={day}")
    os.makedirs(folder, exist_ok=True)
    name = f"part-{position:05d}.snappy.parquet"
    hidden = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:12]}{HIDDEN_SUFFIX}")
    writer = pq.ParquetWriter(hidden, _FILE_SCHEMA, compression="snappy", write_page_checksum=True)
    return writer, hidden, os.path.join(folder, name)


def count_lines(spark: SparkSession, chunks: list[Chunk], groups: list[list[int]]) -> list[int]:
    """Job 1: the lines each chunk owns (:func:`count_chunk_lines`), one task per group of chunks."""
    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            positions = [position for task in batch.column(0).to_pylist() for position in groups[task]]
            yield pa.RecordBatch.from_pydict({"chunk": positions,
                                              "lines": [count_chunk_lines(chunks[p]) for p in positions]})

    counted: dict[int, int] = dict(_tasks(spark, groups).mapInArrow(count, "chunk long, lines long").collect())
    return [int(counted[position]) for position in range(len(chunks))]


def scan_and_write(spark: SparkSession, chunks: list[Chunk], groups: list[list[int]], first_lines: list[int],
                   file_days: dict[int, tuple[int, np.ndarray]], staging: str) -> DataFrame:
    """Job 2 (:func:`parse_chunks_fn`): the scan rows (SCAN_DDL), the valid rows written below ``staging``."""
    folder = os.path.abspath(checked_local(staging))
    return _tasks(spark, groups).mapInArrow(parse_chunks_fn(chunks, groups, first_lines, file_days, folder), SCAN_DDL)


def _tasks(spark: SparkSession, groups: list[list[int]]) -> DataFrame:
    """One row (the group's index) per partition: one task per group."""
    return spark.range(len(groups), numPartitions=max(1, len(groups)))


def rows_per_day(staging: str, threads: int = 16) -> dict[int, int]:
    """Rows in the visible Parquet files under ``staging``'s ``day=<d>`` folders, per day, from their footers (read
    by ``threads`` threads: the time is the file system's latency)."""
    root = checked_local(staging)
    files = [(int(folder.split("=", 1)[1]), os.path.join(root, folder, name))
             for folder in sorted(os.listdir(root)) if folder.startswith(f"{names.DAY}=")
             for name in sorted(os.listdir(os.path.join(root, folder))) if not name.startswith((".", "_"))]
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        counts = list(pool.map(lambda path: pq.read_metadata(path).num_rows, [path for _, path in files]))
    rows: dict[int, int] = {}
    for (day, _), count in zip(files, counts):
        rows[day] = rows.get(day, 0) + count
    return rows


def remove_unfinished(staging: str) -> None:
    """Delete the hidden files of chunk writes that did not finish (killed or failed task attempts)."""
    for folder, _, files in os.walk(checked_local(staging)):
        for name in files:
            if name.startswith(".") and name.endswith(HIDDEN_SUFFIX):
                os.remove(os.path.join(folder, name))
