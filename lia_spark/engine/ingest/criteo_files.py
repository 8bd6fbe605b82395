"""Criteo text files in Spark passes, for the ingest stage (:mod:`lia_spark.engine.ingest.stage`): the input listing,
the one-task-per-file gzip decode, the line scan that counts blocks and finds malformed lines, and the parse that
numbers each line by its block's first line (the algorithm is in the ingest stage's docstring).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F

from lia_spark import names
from lia_spark.engine.ingest.gzip_members import GzipDecode, decode_members
from lia_spark.engine.spark.filesystem import LocalFiles, files_for, local_folder
from lia_spark.kernels import criteo

logger = logging.getLogger(__name__)

SCAN_DDL = ("file_index int, block_start long, rel_index long, reason string, raw_line string, "
             "lines long, bytes long")


_SCAN_SCHEMA = pa.schema([
    ("file_index", pa.int32()), ("block_start", pa.int64()), ("rel_index", pa.int64()),
    ("reason", pa.string()), ("raw_line", pa.string()), ("lines", pa.int64()), ("bytes", pa.int64()),
])


_STORAGE_SCHEMA = pa.schema(
    [(names.ROW_ID, pa.int64()), (names.DAY, pa.int32()), (names.LABEL, pa.int32())]
    + [(name, pa.int64()) for name in criteo.FEATURE_COLUMNS]
)


GZIP_MODULUS = 1 << 32

_COPY_PREFIX = "gunzipped-file-"  # step 0's copy of source file i: <data.parquet_path>.gunzip/gunzipped-file-<i>
COPY_FILE = "part-00000"  # the decoded text inside a copy folder written by ISA-L

_DECOMPRESS_THREADS = 64  # concurrent Spark jobs of step 0 (one task each)
_DECODE_CHUNK = 1 << 20  # compressed bytes per read of the gzip decoder

@dataclasses.dataclass(frozen=True)
class SourceFile:
    """One input file: its path, size, day (None for Kaggle train.txt) and compression."""

    path: str
    size: int
    day: int | None

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def gzip(self) -> bool:
        return self.name.endswith(".gz")


def list_sources(spark: SparkSession, paths: tuple[str, ...] | list[str]) -> list[SourceFile]:
    """Expand files and folders (one level; names starting with ``.`` or ``_`` skipped) into source files.

    Raises:
        ValueError: no files, an unrecognized file name, two files for one day, or train.txt mixed
            with other inputs.
    """
    sources = []
    for path in paths:
        try:
            files = files_for(spark, path)
            found = files.exists(path)
        except ValueError as error:
            raise ValueError(f"data.criteo_paths: {error}") from None
        if not found:
            raise ValueError(f"data.criteo_paths: no such file or folder, got {path!r}")
        for item in files.list_folder(path):
            if item.is_folder or item.name.startswith((".", "_")):
                continue
            sources.append(SourceFile(path=item.path, size=item.size, day=criteo.source_day(item.name)))
    if not sources:
        raise ValueError(f"data.criteo_paths: no day_N[.gz] or train.txt files found, got {list(paths)!r}")
    days = [source.day for source in sources]
    if None in days and len(sources) > 1:
        raise ValueError(f"data.criteo_paths: Kaggle train.txt must be the only input, got {[s.path for s in sources]}")
    duplicates = sorted({day for day in days if day is not None and days.count(day) > 1})  # train.txt is alone
    if duplicates:
        raise ValueError(f"data.criteo_paths: more than one file for day(s) {duplicates}, "
                         f"got {sorted(s.path for s in sources)}")
    return sorted(sources, key=lambda source: (source.day is None, source.day))


def gzip_trailer_size(spark: SparkSession, source: SourceFile) -> int | None:
    """ISIZE (uncompressed size mod 2^32) from the last 4 bytes of a gzip file; None if too short."""
    if source.size < 18:  # 10-byte header + 8-byte trailer
        return None
    trailer = files_for(spark, source.path).read_bytes(source.path, source.size - 4, 4)
    return int.from_bytes(trailer, "little")


@dataclasses.dataclass(frozen=True)
class Decompressed:
    """Step 0's plain text copies (file index -> copy folder) and, for the files ISA-L decoded, how each decoded
    (:class:`~lia_spark.engine.ingest.gzip_members.GzipDecode`; Spark's codec tells nothing of the kind)."""

    copies: dict[int, str]
    decodes: dict[int, GzipDecode]


def decompressed_copies(spark: SparkSession, sources: list[SourceFile], folder: str) -> Decompressed:
    """Step 0: a plain text copy of each non-empty .gz source, one task per file, the files concurrently; lines
    decoded before any damage are kept, as in a direct read. Local files (the executors see the driver's paths: local
    runs, /dbfs or /Volumes mounts) are decoded by ISA-L (:func:`decode_gzip_file`, about twice Spark's decode rate),
    as ``gzip -d`` decodes them; other file systems by Spark's own gzip codec."""
    gzip_sources = [(index, source) for index, source in enumerate(sources) if source.gzip and source.size > 0]
    if not gzip_sources:
        return Decompressed({}, {})
    if all(local_folder(path) is not None for path in [folder] + [source.path for _, source in gzip_sources]):
        return _decoded_by_isal(spark, gzip_sources, folder)
    return _decoded_by_spark(spark, gzip_sources, folder)


def checked_local(path: str) -> str:
    """``path`` as the local path :func:`local_folder` gives, where the caller has checked that it gives one."""
    local = local_folder(path)
    if local is None:
        raise ValueError(f"ingest: a path checked to be local is not, got {path!r}")
    return local


def decode_gzip_file(source: str, copy: str) -> GzipDecode:
    """Decode the gzip file ``source`` into ``copy`` (local paths) as ``gzip -d`` does
    (:func:`~lia_spark.engine.ingest.gzip_members.decode_members`: every member, trailing zeros and garbage
    ignored, at damage what was decoded before it kept)."""
    os.makedirs(os.path.dirname(copy), exist_ok=True)
    with open(copy, "wb") as out:
        return decode_members(LocalFiles().read_chunks(source, _DECODE_CHUNK), out.write)


def walked_gzip(spark: SparkSession, source: SourceFile) -> GzipDecode:
    """How the gzip file ``source`` decodes (:func:`decode_members`, the text counted, not kept), read on the
    driver: for a file Spark's codec decoded, whose trailer does not tell."""
    files = LocalFiles() if local_folder(source.path) is not None else files_for(spark, source.path)
    return decode_members(files.read_chunks(source.path, _DECODE_CHUNK))


_DECODE_COLUMNS = "file_index long, bytes long, members long, trailing long, trailing_zeros boolean, damage string, " \
                  "seconds double"


def _decoded_by_isal(spark: SparkSession, gzip_sources: list[tuple[int, SourceFile]], folder: str) -> Decompressed:
    """:func:`decompressed_copies` for local files: one Spark task per file runs :func:`decode_gzip_file`."""
    copies = {index: f"{folder}/{_COPY_PREFIX}{index}" for index, _ in gzip_sources}
    work = [(index, os.path.abspath(checked_local(source.path)),
             os.path.abspath(f"{checked_local(copies[index])}/{COPY_FILE}"))  # executors have their own working folder
            for index, source in gzip_sources]

    def decode(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            for position in frame["id"].tolist():
                index, source, copy = work[position]
                started = time.monotonic()
                decoded = decode_gzip_file(source, copy)
                yield pd.DataFrame({"file_index": [index], "bytes": [decoded.decoded], "members": [decoded.members],
                                    "trailing": [decoded.trailing], "trailing_zeros": [decoded.trailing_zeros],
                                    "damage": [decoded.damage], "seconds": [time.monotonic() - started]})

    rows = spark.range(len(work), numPartitions=len(work)).mapInPandas(decode, _DECODE_COLUMNS).collect()
    paths = dict(gzip_sources)
    decodes = {}
    for row in sorted(rows, key=lambda row: row["file_index"]):
        decodes[row["file_index"]] = GzipDecode(row["bytes"], row["members"], row["trailing"], row["trailing_zeros"],
                                                row["damage"])
        logger.info("ingest: %s decoded by ISA-L: %.1f MB in %.1f s (%.0f MB/s)%s", paths[row["file_index"]].path,
                    row["bytes"] / 1e6, row["seconds"], row["bytes"] / 1e6 / max(row["seconds"], 1e-9),
                    f"; decoding stopped at damage: {row['damage']}" if row["damage"] else "")
    return Decompressed(copies, decodes)


def _text_reader(spark: SparkSession) -> DataFrameReader:
    """Spark's text reader as both the gzip decode and the scan use it: lines end at LF only (Spark's default also
    ends them at a lone CR, which would split a line and shift every later row id of its day); a truncated or corrupt
    gzip is read up to the damage (``ignoreCorruptFiles``), and ingest counts what it lost."""
    return spark.read.format("text").option("ignoreCorruptFiles", "true").option("lineSep", "\n")


def _decoded_by_spark(spark: SparkSession, gzip_sources: list[tuple[int, SourceFile]],
                      folder: str) -> Decompressed:
    """:func:`decompressed_copies` on any Hadoop file system: Spark's gzip codec decodes each file in one task."""

    def decompress(item: tuple[int, SourceFile]) -> tuple[int, str]:
        index, source = item
        copy = f"{folder}/{_COPY_PREFIX}{index}"
        (_text_reader(spark).load(source.path)
         .coalesce(1)
         .write.mode("overwrite").text(copy))
        return index, copy

    with ThreadPoolExecutor(max_workers=min(len(gzip_sources), _DECOMPRESS_THREADS)) as pool:
        return Decompressed(dict(pool.map(decompress, gzip_sources)), {})


def read_lines(spark: SparkSession, sources: list[SourceFile], copies: dict[int, str]) -> DataFrame:
    """Raw lines as binary with (file_index, block_start), in file order within each partition; a source with a
    decompressed copy (step 0) is read from it. Lines end at LF only (Spark's default also ends them at a lone CR,
    which would split a line and shift every later row id of its day); a CRLF's CR is stripped by the parser."""
    index_of_name = F.create_map(*[item for i, source in enumerate(sources)
                                   for item in (F.lit(source.name), F.lit(i))])
    copy_index = F.regexp_extract(F.col("_metadata.file_path"), f"/{_COPY_PREFIX}([0-9]+)/[^/]*$", 1)
    frame = _text_reader(spark).load([copies.get(index, source.path) for index, source in enumerate(sources)])
    by_name = index_of_name[F.col("_metadata.file_name")]
    file_index = F.when(copy_index != "", copy_index).otherwise(by_name) if copies else by_name
    return frame.select(
        file_index.cast("int").alias("file_index"),
        F.col("_metadata.file_block_start").alias("block_start"),
        F.col("value").cast("binary").alias("line"),
    )


def _runs(batch: pa.RecordBatch) -> list[tuple[tuple[int, int], int, int]]:
    """Maximal runs of equal (file_index, block_start) in a batch: [((file, block), begin, end)]."""
    files = batch.column("file_index").to_numpy()
    blocks = batch.column("block_start").to_numpy()
    change = np.flatnonzero((files[1:] != files[:-1]) | (blocks[1:] != blocks[:-1])) + 1
    bounds = np.concatenate([[0], change, [batch.num_rows]])
    return [((int(files[b]), int(blocks[b])), int(b), int(e)) for b, e in zip(bounds[:-1], bounds[1:])]


def malformed_batch(keys: list[tuple[int, int]], rel_index: list[int], reasons: list[int],
                    raw: list[bytes]) -> pa.RecordBatch:
    """Scan rows of malformed lines: (file_index, block_start) key, index inside the block, reason, raw text."""
    return pa.RecordBatch.from_pydict({
        "file_index": [key[0] for key in keys], "block_start": [key[1] for key in keys], "rel_index": rel_index,
        "reason": [criteo.REASONS[code] for code in reasons],
        "raw_line": [line.decode("utf-8", "replace") for line in raw],
        "lines": [None] * len(keys), "bytes": [None] * len(keys),
    }, schema=_SCAN_SCHEMA)


def summary_batch(lines_seen: dict[tuple[int, int], int], bytes_seen: dict[tuple[int, int], int],
                  reasons_seen: dict[tuple[int, int], np.ndarray]) -> pa.RecordBatch:
    """Scan rows of block counts: per block its lines and bytes, then one row per malformed reason with its count."""
    summary: dict[str, list] = {name: [] for name in _SCAN_SCHEMA.names}
    for key, count in lines_seen.items():
        entries = [(None, count, bytes_seen[key])] + [
            (criteo.REASONS[code], int(n), None) for code, n in enumerate(reasons_seen[key]) if n]
        for reason, lines_count, byte_count in entries:
            for name, value in zip(_SCAN_SCHEMA.names, (key[0], key[1], None, reason, None, lines_count, byte_count)):
                summary[name].append(value)
    return pa.RecordBatch.from_pydict(summary, schema=_SCAN_SCHEMA)


def reason_counts(reasons: np.ndarray) -> np.ndarray:
    """Malformed lines per reason code (index into :data:`lia_spark.kernels.criteo.REASONS`)."""
    return np.bincount(reasons[reasons != criteo.VALID], minlength=len(criteo.REASONS))


def scan_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Step 1: per-block line/byte counts, per-block reason counts, and every malformed line."""
    lines_seen: dict[tuple[int, int], int] = {}
    bytes_seen: dict[tuple[int, int], int] = {}
    reasons_seen: dict[tuple[int, int], np.ndarray] = {}
    for batch in batches:
        lines = batch.column("line")
        parsed = criteo.parse_lines_fast(lines)
        bad_rows: list[int] = []
        bad_keys: list[tuple[int, int]] = []
        bad_index: list[int] = []
        for key, begin, end in _runs(batch):
            base = lines_seen.get(key, 0)
            lines_seen[key] = base + end - begin
            bytes_seen[key] = bytes_seen.get(key, 0) + int(parsed.line_length[begin:end].sum())
            reasons = parsed.reason[begin:end]
            reasons_seen[key] = reasons_seen.get(key, 0) + reason_counts(reasons)
            bad = np.flatnonzero(reasons != criteo.VALID)
            bad_rows.extend(begin + bad)
            bad_keys.extend([key] * bad.size)
            bad_index.extend(base + bad)
        if bad_rows:
            raw = lines.take(pa.array(bad_rows, pa.int64())).to_pylist()
            yield malformed_batch(bad_keys, bad_index, [parsed.reason[row] for row in bad_rows], raw)
    if lines_seen:
        yield summary_batch(lines_seen, bytes_seen, reasons_seen)


def value_columns(parsed: criteo.ParsedLines, keep: np.ndarray) -> list[pa.Array]:
    """label, I1..I13, C1..C26 of the lines ``keep`` (indices), nulls where a field is missing."""
    rows = keep if keep.size < parsed.reason.size else slice(None)
    return [pa.array(parsed.label[rows])] + [
        pa.array(np.ascontiguousarray(values[rows, j]), mask=np.ascontiguousarray(missing[rows, j]))
        for values, missing in ((parsed.ints, parsed.int_missing), (parsed.cats, parsed.cat_missing))
        for j in range(values.shape[1])]


def parse_partition_fn(block_offsets: dict[tuple[int, int], int], file_days: dict[int, tuple[int, np.ndarray]]):
    """Step 3: valid rows in the storage schema, row_id from (day, line position) of each line."""

    def parse_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        lines_seen: dict[tuple[int, int], int] = {}
        for batch in batches:
            parsed = criteo.parse_lines_fast(batch.column("line"))
            line_index = np.empty(batch.num_rows, dtype=np.int64)
            file_index = np.empty(batch.num_rows, dtype=np.int64)
            for key, begin, end in _runs(batch):
                base = lines_seen.get(key, 0)
                lines_seen[key] = base + end - begin
                line_index[begin:end] = block_offsets[key] + base + np.arange(end - begin)
                file_index[begin:end] = key[0]
            keep = np.flatnonzero(parsed.valid)
            day = np.empty(keep.size, dtype=np.int64)
            position = np.empty(keep.size, dtype=np.int64)
            for index in np.unique(file_index[keep]):
                rows = file_index[keep] == index
                first_day, day_starts = file_days[int(index)]
                day[rows], position[rows] = criteo.locate_lines(line_index[keep][rows], first_day=first_day,
                                                                day_starts=day_starts)
            columns = [pa.array(criteo.make_row_id(day, position)), pa.array(day.astype(np.int32)),
                       *value_columns(parsed, keep)]
            yield pa.RecordBatch.from_arrays(columns, schema=_STORAGE_SCHEMA)

    return parse_partition
