"""Ingest stage: Criteo TSV (day_N[.gz] files, folders of them, or Kaggle train.txt) -> day-partitioned Parquet.

Two scans of the text, each a plain file scan feeding ``mapInArrow`` with whole Arrow batches
(parsing in one compiled pass, :func:`lia_spark.kernels.criteo.parse_lines_fast`, no per-row Python), around a driver
step. Where every text and the output are local paths the executors see and ``data.task_io`` is on (the default),
steps 1 and 3 are one job whose tasks read their own byte ranges of the text and write the Parquet themselves
(:mod:`lia_spark.engine.ingest.local_files`, after a job that counts each range's lines); the rest is the same:

0. *decompress* (``data.split_gzip``, default on): gzip is not splittable, so a scan of a .gz file is one task.
   Each .gz file is first decoded once, in one task per file (the files concurrently): by ISA-L when the files
   and the output are local paths the executors share (local runs, /dbfs or /Volumes mounts; about twice the rate
   of Spark's codec), else by Spark's own codec, into a plain text copy beside the output
   (``<data.parquet_path>.gunzip/gunzipped-file-<file index>``, deleted at the end);
   the scans below read the copies, cut into blocks like any plain file. Block starts are byte offsets in the
   decoded text either way, so line numbers, row ids and the quarantine do not change; the damage checks
   still read the original files;
1. *scan*: per file block (``_metadata.file_block_start``) count lines and bytes, count malformed lines
   per reason, and emit the malformed lines with their index inside the block (a small, cached output);
2. on the driver: turn the per-block line counts into the first line index of every block (cumulative
   sums in block order); check every file's decoded size against its size (plain) or against how it decodes as
   ``gzip -d`` decodes it (:mod:`lia_spark.engine.ingest.gzip_members`: every member, trailing zeros ignored,
   trailing garbage ignored with a warning; told by step 0's ISA-L decode, else by the gzip trailer's ISIZE, a
   strict re-read by Spark, or a walk of the file on the driver); write the quarantine; enforce
   ``data.max_malformed_share``;
3. *parse*: number each line as block first line + its index inside the block, so
   ``row_id = make_row_id(day, position in the file/day)`` never depends on partitioning, and write
   the valid rows partitioned by day; the written row counts per day are checked against step 1.

Row numbering relies on a file scan handing a partition's lines to Python in file order, block by
block (a narrow scan -> mapInArrow pipeline has no shuffle); tests check it under several split sizes
and Arrow batch sizes. A truncated or corrupt gzip is read up to the damage (Spark's
``ignoreCorruptFiles``, or ISA-L's streaming decoder, which keeps every byte decoded before it); the lines decoded
before it are kept (a cut last line is quarantined as
malformed) and the file gets one extra quarantine entry (reason ``truncated_gzip``, or ``size_mismatch``
for a plain file whose lines do not add up to its size) with null line number and raw line.
Quarantine line numbers are 1-based (the first line of a file is line 1).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import numpy as np
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lia_spark import names
from lia_spark.engine.ingest import local_files
from lia_spark.engine.ingest.criteo_files import (GZIP_MODULUS, SCAN_DDL, Decompressed, SourceFile, decompressed_copies,
                                                  gzip_trailer_size, list_sources, parse_partition_fn, read_lines,
                                                  scan_partition, walked_gzip)
from lia_spark.engine.ingest.gzip_members import GzipDecode
from lia_spark.engine.runtime.outputs import committed_output, scratch_folder
from lia_spark.engine.runtime.stage import Resolved, Stage, StageResult, StageRun
from lia_spark.engine.spark.session import describe_jobs
from lia_spark.kernels import criteo
from lia_spark.run.config import Config
from lia_spark.run.fingerprint import Fingerprint

logger = logging.getLogger(__name__)

QUARANTINE_DDL = "file string, line_number long, raw_line string, reason string"
_MALFORMED_DDL = "file_index int, file string, line_index long, raw_line string, reason string"
_QUARANTINE_FILE_ROWS = 1_000_000
TRUNCATED_GZIP = "truncated_gzip"
SIZE_MISMATCH = "size_mismatch"
LOST_TO_DAMAGED_FILE = "lost_to_damaged_file"


@dataclasses.dataclass(frozen=True)
class FileCounts:
    """Counts of one input file; ``lines == valid_rows + sum(malformed.values())``."""

    file: str
    day: str
    size_bytes: int
    lines: int
    valid_rows: int
    malformed: dict[str, int]
    status: str  # ok | empty | truncated_gzip | size_mismatch
    lost_lines: int = 0  # input lines lost to the damage (a lower bound: at least 1 for a damaged file)


@dataclasses.dataclass(frozen=True)
class IngestResult(StageResult):
    """What the ingest stage read and wrote. ``input_lines == valid_rows + malformed_rows``.

    ``corrupt_files`` (truncated gzip, size mismatch) and ``empty_files`` are damaged files: their lines decoded
    before the damage are in ``input_lines``, each such file has one quarantine entry, and ``lost_lines`` (at
    least one per damaged file: what a truncated gzip lost cannot be known) are input lines too, counted in
    ``malformed_rows`` and ``malformed_share`` under the reason ``lost_to_damaged_file``.
    """

    parquet_path: str
    quarantine_path: str
    input_lines: int
    valid_rows: int
    malformed_rows: int
    malformed_share: float
    malformed_by_reason: dict[str, int]
    corrupt_files: int
    empty_files: int
    lost_lines: int
    rows_per_day: dict[int, int]
    files: list[FileCounts]
    seconds: float
    skipped: bool = False

    @classmethod
    def decoded(cls, values: dict[str, Any]) -> dict[str, Any]:
        return {**values, "rows_per_day": {int(day): int(rows) for day, rows in values["rows_per_day"].items()},
                "files": [FileCounts(**item) for item in values["files"]]}

    def console_summary(self) -> str:
        """Rows per day, and the malformed and lost lines (by reason, with the quarantine) whenever there are any."""
        days = ", ".join(f"day {day}: {rows:,}" for day, rows in sorted(self.rows_per_day.items()))
        line = f"ingest: {self.valid_rows:,} valid rows of {self.input_lines:,} input lines ({days})"
        if self.malformed_rows:
            reasons = ", ".join(f"{reason} {count:,}" for reason, count in sorted(self.malformed_by_reason.items()))
            line += (f"; {self.malformed_rows:,} malformed ({self.malformed_share:.4%}: {reasons}) quarantined in "
                     f"{self.quarantine_path}")
        if self.lost_lines or self.corrupt_files or self.empty_files:
            line += (f"; {self.corrupt_files} damaged and {self.empty_files} empty file(s) lost at least "
                     f"{self.lost_lines:,} line(s)")
        return line

    def metrics(self) -> dict[str, float]:
        values = {
            "ingest_input_lines": float(self.input_lines),
            "ingest_valid_rows": float(self.valid_rows),
            "ingest_malformed_rows": float(self.malformed_rows),
            "ingest_malformed_share": self.malformed_share,
            "ingest_corrupt_files": float(self.corrupt_files),
            "ingest_empty_files": float(self.empty_files),
            "ingest_lost_lines": float(self.lost_lines),
            "ingest_seconds": self.seconds,
            "ingest_rows_per_second": self.input_lines / self.seconds if self.seconds > 0 else 0.0,
        }
        for reason, count in self.malformed_by_reason.items():
            values[f"ingest_malformed_{reason.replace(':', '_')}"] = float(count)
        return values


class MalformedShareError(ValueError):
    """The share of malformed lines exceeds ``data.max_malformed_share``; the data output was not written."""


class DamagedInputError(ValueError):
    """Input files are truncated, corrupt or empty and ``data.allow_truncated_files`` is false; the data output
    was not written (the quarantine names the files)."""


# --- driver-side bookkeeping ------------------------------------------------------------------------

@dataclasses.dataclass
class _FileScan:
    blocks: dict[int, int] = dataclasses.field(default_factory=dict)  # block start -> lines
    line_bytes: int = 0
    malformed: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def lines(self) -> int:
        return sum(self.blocks.values())


def _collect_scan(scanned: DataFrame, n_files: int) -> list[_FileScan]:
    files = [_FileScan() for _ in range(n_files)]
    for row in scanned.where(F.col("rel_index").isNull()).collect():
        entry = files[row.file_index]
        if row.reason is None:
            entry.blocks[row.block_start] = entry.blocks.get(row.block_start, 0) + row.lines
            entry.line_bytes += row.bytes
        else:
            entry.malformed[row.reason] = entry.malformed.get(row.reason, 0) + row.lines
    return files


def _reads_cleanly(spark: SparkSession, source: SourceFile, lines: int) -> bool:
    """Whether Spark decodes the whole file without error (corrupt files not ignored) into ``lines`` lines."""
    try:
        return spark.read.format("text").option("ignoreCorruptFiles", "false").option("lineSep", "\n").load(
            source.path).count() == lines
    except Exception as error:  # noqa: BLE001 - any read failure of this one file: it is walked
        logger.info("ingest: %s cannot be read to the end by Spark's codec: %s", source.path,
                    str(error).splitlines()[0])
        return False


def _file_status(spark: SparkSession, source: SourceFile, scan: _FileScan, decode: GzipDecode | None) -> str:
    """ok | empty | truncated_gzip | size_mismatch: a plain file's lines against its size; a gzip file's against
    how it decodes as ``gzip -d`` decodes it (``decode``: step 0's ISA-L decode, else :func:`_read_whole_by_spark`
    or :func:`walked_gzip`): every member decoded to its end (trailing zeros and garbage ignored, garbage with a
    warning) into the bytes the scan read."""
    if source.size == 0:
        return "empty"
    if not source.gzip:
        intact = criteo.decoded_size_matches(source.size, line_bytes=scan.line_bytes, lines=scan.lines)
        return "ok" if intact else SIZE_MISMATCH
    if decode is None and _read_whole_by_spark(spark, source, scan):
        return "ok"
    decode = decode or walked_gzip(spark, source)
    warning = decode.garbage_warning(source.path)
    if warning:
        logger.warning("ingest: %s", warning)
    intact = not decode.damage and criteo.decoded_size_matches(decode.decoded, line_bytes=scan.line_bytes,
                                                               lines=scan.lines)
    return "ok" if intact else TRUNCATED_GZIP


def _read_whole_by_spark(spark: SparkSession, source: SourceFile, scan: _FileScan) -> bool:
    """Whether Spark's codec read the whole gzip file into the scan's lines: its trailer's ISIZE (the last member's
    size mod 2^32) fits them, or a strict re-read gives as many (a multi-member file); else the file is walked on
    the driver (:func:`walked_gzip`: its members, trailing bytes, damage)."""
    isize = gzip_trailer_size(spark, source)
    fits = isize is not None and criteo.decoded_size_matches(isize, line_bytes=scan.line_bytes, lines=scan.lines,
                                                             modulus=GZIP_MODULUS)
    return fits or _reads_cleanly(spark, source, scan.lines)


def _block_offsets(scans: list[_FileScan]) -> dict[tuple[int, int], int]:
    """First 0-based line index of every block: lines of the file's earlier blocks (by block start)."""
    offsets = {}
    for index, scan in enumerate(scans):
        first_line = 0
        for start in sorted(scan.blocks):
            offsets[(index, start)] = first_line
            first_line += scan.blocks[start]
    return offsets


def _file_days(sources: list[SourceFile], file_lines: list[int],
               kaggle_days: int) -> dict[int, tuple[int, np.ndarray]]:
    """file index -> (first day, first line of each day) for :func:`lia_spark.kernels.criteo.locate_lines`."""
    days = {}
    for index, (source, lines) in enumerate(zip(sources, file_lines)):
        if source.day is None:
            days[index] = (0, criteo.kaggle_day_starts(lines, days=kaggle_days))
        else:
            days[index] = (source.day, np.zeros(1, dtype=np.int64))
    return days


def _malformed_lines(spark: SparkSession, scanned: DataFrame, sources: list[SourceFile], scans: list[_FileScan],
                     offsets: dict[tuple[int, int], int]) -> DataFrame:
    """Malformed lines with their file and 0-based line index (block's first line + index in block); none without
    a Spark job when the scan found none."""
    if not any(scan.malformed for scan in scans):
        return spark.createDataFrame([], _MALFORMED_DDL)
    offset_rows = [(index, start, first, sources[index].path) for (index, start), first in offsets.items()]
    offset_frame = spark.createDataFrame(offset_rows, "file_index int, block_start long, first_line long, file string")
    return (scanned.where(F.col("rel_index").isNotNull())
            .join(F.broadcast(offset_frame), ["file_index", "block_start"])
            .select("file_index", "file", (F.col("first_line") + F.col("rel_index")).alias("line_index"),
                    "raw_line", "reason"))


def _valid_rows_per_day(sources: list[SourceFile], scans: list[_FileScan], file_days: dict,
                        malformed: DataFrame) -> dict[int, int]:
    """Valid rows per day: a day file's valid lines; for Kaggle, each day's lines minus its malformed lines."""
    rows: dict[int, int] = {}
    for index, (source, scan) in enumerate(zip(sources, scans)):
        if source.day is not None:
            rows[source.day] = scan.lines - sum(scan.malformed.values())
            continue
        first_day, starts = file_days[index]
        day_sizes = np.diff(np.append(starts, scan.lines))
        rows.update({first_day + slot: int(size) for slot, size in enumerate(day_sizes)})
        if scan.malformed:
            slot = sum((F.when(F.col("line_index") >= int(start), 1).otherwise(0) for start in starts), F.lit(-1))
            for row in (malformed.where(F.col("file_index") == index).groupBy(slot.alias("slot")).count()
                        .collect()):
                rows[first_day + row.slot] -= row["count"]
    return rows


def lost_lines(source: SourceFile, scan: _FileScan, status: str) -> int:
    """Input lines lost to a damaged file, a lower bound: 0 when intact; for a plain file whose lines do not add up
    to its size, the missing bytes over the mean line length (at least 1); else 1 (a truncated gzip's lost tail or
    an empty file's lines cannot be counted)."""
    if status == "ok":
        return 0
    if status == SIZE_MISMATCH and scan.lines:
        missing = source.size - scan.line_bytes - scan.lines
        return max(1, -(-missing // max(1, round((scan.line_bytes + scan.lines) / scan.lines))))
    return 1


def _build_result(config: Config, sources: list[SourceFile], scans: list[_FileScan], statuses: list[str],
                  rows_per_day: dict[int, int], seconds: float) -> IngestResult:
    files = []
    for source, scan, status in zip(sources, scans, statuses):
        lines = scan.lines
        malformed = dict(sorted(scan.malformed.items()))
        files.append(FileCounts(file=source.path, day="kaggle" if source.day is None else str(source.day),
                                size_bytes=source.size, lines=lines, valid_rows=lines - sum(malformed.values()),
                                malformed=malformed, status=status, lost_lines=lost_lines(source, scan, status)))
    by_reason: dict[str, int] = {}
    for item in files:
        for reason, count in item.malformed.items():
            by_reason[reason] = by_reason.get(reason, 0) + count
    lost = sum(item.lost_lines for item in files)
    if lost:
        by_reason[LOST_TO_DAMAGED_FILE] = lost
    input_lines = sum(item.lines for item in files) + lost
    malformed_rows = sum(by_reason.values())
    return IngestResult(
        parquet_path=config.parquet_path, quarantine_path=config.quarantine_path, input_lines=input_lines,
        valid_rows=input_lines - malformed_rows, malformed_rows=malformed_rows,
        malformed_share=malformed_rows / input_lines if input_lines else 0.0,
        malformed_by_reason=dict(sorted(by_reason.items())),
        corrupt_files=sum(status in (TRUNCATED_GZIP, SIZE_MISMATCH) for status in statuses),
        empty_files=sum(status == "empty" for status in statuses), lost_lines=lost, rows_per_day=rows_per_day,
        files=files, seconds=seconds,
    )


def _write_quarantine(spark: SparkSession, path: str, malformed: DataFrame, sources: list[SourceFile],
                      statuses: list[str], metadata: dict, fingerprint: Fingerprint | None) -> None:
    """Malformed lines (1-based line numbers) plus one entry per damaged file; ~1M entries per Parquet file."""
    lines = malformed.select("file", (F.col("line_index") + 1).alias("line_number"), "raw_line", "reason")
    damaged = [(source.path, None, None, status) for source, status in zip(sources, statuses)
               if status in (TRUNCATED_GZIP, SIZE_MISMATCH)]
    entries = lines.unionByName(spark.createDataFrame(damaged, QUARANTINE_DDL))
    files = metadata["malformed_rows"] // _QUARANTINE_FILE_ROWS + 1  # coalesce never adds partitions
    with committed_output(spark, path, metadata, fingerprint=fingerprint) as staging:
        entries.coalesce(files).sortWithinPartitions("file", "line_number").write.parquet(staging)


def _write_data(spark: SparkSession, lines: DataFrame, result: IngestResult, block_offsets: dict, file_days: dict,
                started: float, staging: str) -> IngestResult:
    """Parse and write the valid rows to ``staging`` (:func:`_verified`)."""
    parsed = lines.mapInArrow(parse_partition_fn(block_offsets, file_days), criteo.STORAGE_DDL)
    parsed.write.partitionBy(names.DAY).parquet(staging)
    describe_jobs(spark, "ingest: verify written row counts")
    written = {row[names.DAY]: row["count"] for row in
               spark.read.schema(criteo.STORAGE_DDL).parquet(staging).groupBy(names.DAY).count().collect()}
    return _verified(result, started, written)


def _verified(result: IngestResult, started: float, written: dict[int, int]) -> IngestResult:
    """The result, its seconds to now; fail (nothing is committed) unless the rows ``written`` per day (read back
    from the staging folder's files) match the scan's counts."""
    expected = {day: rows for day, rows in result.rows_per_day.items() if rows}
    if written != expected:
        raise RuntimeError(f"ingest wrote {written} rows per day but the scan counted {expected}; "
                           "nothing was committed")
    return dataclasses.replace(result, seconds=time.monotonic() - started)


def _input_files(spark: SparkSession, config: Config) -> Resolved:
    """The files data.criteo_paths names, not their spelling (a folder and the list of its day files are the same
    input): their list enters the fingerprint, and each file's listing fingerprint."""
    sources = list_sources(spark, config.data.criteo_paths)
    files = [source.path for source in sources]
    return Resolved(values={"data.criteo_paths": files}, inputs={f"criteo:{path}": path for path in files},
                    found=sources)


def copies_folder(config: Config) -> str:
    """Step 0's decoded copies of the .gz inputs, beside the data table; deleted when the stage ends."""
    return f"{config.parquet_path}.gunzip"


def _sources_exist(spark: SparkSession, config: Config) -> None:
    """The pipeline's check before any stage: every file of data.criteo_paths exists with a Criteo day name."""
    list_sources(spark, config.data.criteo_paths)


def _ingest(run: StageRun) -> IngestResult:
    """Ingest ``data.criteo_paths`` into ``config.parquet_path`` (Parquet by day, schema ``STORAGE_DDL``); malformed
    lines go to ``config.quarantine_path`` (file, 1-based line_number, raw_line, reason).

    Raises:
        ValueError: bad input paths or names.
        DamagedInputError: a truncated, corrupt or empty input file without ``data.allow_truncated_files``
            (quarantine committed, data not written).
        MalformedShareError: malformed share above ``data.max_malformed_share``, lost lines of damaged files
            included (quarantine committed, data not written).
    """
    spark, config = run.spark, run.config
    sources = run.resolved.found
    logger.info("ingest: %d input files, %.1f MB", len(sources), sum(s.size for s in sources) / 1e6)
    with scratch_folder(spark, copies_folder(config)) as copies:
        return _ingest_sources(run, sources, copies)


def _scanned_and_written(run: StageRun, sources: list[SourceFile],
                         copies: dict[int, str]) -> tuple[DataFrame, dict, list[_FileScan]]:
    """Steps 1 and 3 by the tasks on local files (:mod:`lia_spark.engine.ingest.local_files`): the scan rows (the
    valid rows are written to the staging folder as they are collected), the files' days, and each file's chunk
    line counts as the count job found them."""
    spark, config = run.spark, run.config
    chunks = local_files.plan_chunks(spark, sources, copies)
    groups = local_files.task_groups(spark, chunks)
    describe_jobs(spark, f"ingest: count the lines of {len(chunks)} chunks of the text in {len(groups)} tasks")
    counted = [_FileScan() for _ in sources]
    for chunk, count in zip(chunks, local_files.count_lines(spark, chunks, groups)):
        counted[chunk.file_index].blocks[chunk.start] = count
    file_days = _file_days(sources, [scan.lines for scan in counted], config.data.kaggle_days)
    offsets = _block_offsets(counted)
    describe_jobs(spark, "ingest: parse the chunks, write their rows as Parquet by day, find malformed lines")
    scanned = local_files.scan_and_write(spark, chunks, groups,
                                         [offsets[(chunk.file_index, chunk.start)] for chunk in chunks], file_days,
                                         run.staging).persist(StorageLevel.MEMORY_AND_DISK)
    return scanned, file_days, counted


def _check_chunk_lines(sources: list[SourceFile], scans: list[_FileScan], counted: list[_FileScan]) -> None:
    """The parse job read the lines the count job found in every chunk, else an input changed meanwhile."""
    changed = sorted(source.path for source, scan, count in zip(sources, scans, counted)
                     if {start: n for start, n in count.blocks.items() if n} != {
                         start: n for start, n in scan.blocks.items() if n})
    if changed:
        raise RuntimeError(f"data.criteo_paths: {changed} changed while they were ingested (their lines were "
                           "counted, then read again, and differ); nothing was committed")


def _ingest_sources(run: StageRun, sources: list[SourceFile], copies_folder: str) -> IngestResult:
    """Steps 0-3 of the module docstring (see :func:`_ingest`)."""
    spark, config, started = run.spark, run.config, run.started
    decompressed = Decompressed({}, {})
    if config.data.split_gzip:
        describe_jobs(spark, "ingest: decompress gzip files once (one task per file)")
        decompressed = decompressed_copies(spark, sources, copies_folder)
    copies = decompressed.copies
    if copies:
        logger.info("ingest: %d gzip file(s) decompressed in %.1f s", len(copies), time.monotonic() - started)
    by_tasks = config.data.task_io and local_files.applies(sources, copies, run.staging)
    if by_tasks:
        scanned, file_days, chunk_lines = _scanned_and_written(run, sources, copies)
    else:
        lines = read_lines(spark, sources, copies)
        scanned = lines.mapInArrow(scan_partition, SCAN_DDL).persist(StorageLevel.MEMORY_AND_DISK)
        describe_jobs(spark, "ingest: scan lines, count blocks and malformed lines")
    try:
        scans = _collect_scan(scanned, len(sources))
        logger.info("ingest: scanned %d lines in %.1f s", sum(scan.lines for scan in scans), time.monotonic() - started)
        if by_tasks:
            _check_chunk_lines(sources, scans, chunk_lines)
        else:
            file_days = _file_days(sources, [scan.lines for scan in scans], config.data.kaggle_days)
        statuses = [_file_status(spark, source, scan, decompressed.decodes.get(index))
                    for index, (source, scan) in enumerate(zip(sources, scans))]
        offsets = _block_offsets(scans)
        malformed = _malformed_lines(spark, scanned, sources, scans, offsets)
        rows_per_day = _valid_rows_per_day(sources, scans, file_days, malformed)
        result = _build_result(config, sources, scans, statuses, rows_per_day, time.monotonic() - started)
        for item in result.files:
            if item.status != "ok":
                logger.warning("ingest: %s is %s (%d lines decoded)", item.file, item.status, item.lines)
        describe_jobs(spark, "ingest: write quarantine")
        _write_quarantine(spark, config.quarantine_path, malformed, sources, statuses, result.to_dict(),
                          run.fingerprint)
    finally:
        scanned.unpersist()
    logger.info("ingest: %d lines, %d valid, %d malformed (%s), %d corrupt files; quarantine written at %.1f s",
                result.input_lines, result.valid_rows, result.malformed_rows, result.malformed_by_reason,
                result.corrupt_files, time.monotonic() - started)
    damaged = {item.file: item.status for item in result.files if item.status != "ok"}
    if damaged and not config.data.allow_truncated_files:
        describe_jobs(spark, None)
        raise DamagedInputError(
            f"data.allow_truncated_files: {len(damaged)} input file(s) truncated, corrupt or empty, got {damaged}; "
            f"at least {result.lost_lines} input line(s) lost; data not written to {config.parquet_path} (see "
            f"{config.quarantine_path}); replace the files, or set data.allow_truncated_files=true to keep the "
            "lines decoded before the damage")
    limit = config.data.max_malformed_share
    if result.malformed_share > limit:
        describe_jobs(spark, None)
        raise MalformedShareError(
            f"data.max_malformed_share: {result.malformed_share:.4%} of the input lines are malformed "
            f"({result.malformed_rows:,} of {result.input_lines:,}: {result.malformed_by_reason}), more than the "
            f"limit, got {limit:g} ({limit:.4%}); data not written to {config.parquet_path}; the malformed lines "
            f"(file, line number, raw text) are in {config.quarantine_path}: fix or drop them, or raise "
            "data.max_malformed_share")
    if by_tasks:
        local_files.remove_unfinished(run.staging)
        result = _verified(result, started, local_files.rows_per_day(run.staging))
    else:
        describe_jobs(spark, "ingest: parse and write Parquet by day")
        result = _write_data(spark, lines, result, offsets, file_days, started, run.staging)
    describe_jobs(spark, None)
    logger.info("ingest: wrote %d rows to %s in %.1f s", result.valid_rows, config.parquet_path, result.seconds)
    return result


INGEST = Stage(
    name="ingest", step="data", result=IngestResult, compute=_ingest, resolved=_input_files,
    fields=("data.criteo_paths", "data.max_malformed_share", "data.kaggle_days", "data.allow_truncated_files"),
    outputs=lambda config: (config.parquet_path, config.quarantine_path), describes_input=True,
    upfront=_sources_exist, also_writes=lambda config: (copies_folder(config),))
