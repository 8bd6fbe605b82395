"""Reading the posteriors stage's input: the data rows (row_id, label) and prior rows (row_id, prior) of the
released days.

Local Parquet inputs are read by pyarrow in Python tasks, in parts of whole row groups (:func:`input_parts`;
rows counted from the file footers where they tell, :func:`side_row_counts`); any other input by Spark
(:func:`load_input`). Both check every row the same way (:func:`side_rows`).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import urllib.parse
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lia_spark.engine.attacker_prior.sources import resolve_prior
from lia_spark.engine.runtime.parquet_reads import named_damage, verified_batches
from lia_spark.engine.spark.session import default_parallelism
from lia_spark.run.config import Config

LABEL, PRIOR = "label", "prior"  # the two sides of the input: data rows and prior rows
INPUT_BATCH_ROWS = 1 << 20  # rows per batch read from an input file (bounds a reading task's memory)
INPUT_PART_ROWS = 1 << 21  # rows per reading task (about: whole row groups)


def load_input(spark: SparkSession, config: Config, days: Sequence[int]) -> tuple[DataFrame, DataFrame]:
    """The data rows (row_id, label) of ``days`` and their prior rows (row_id, prior = the prior column),
    unjoined."""
    prior = resolve_prior(config)
    column, source = prior.column, prior.path
    rows = (spark.read.parquet(config.parquet_path)
            .where(F.col("day").isin(list(days)))
            .select(F.col("row_id").cast("long"), F.col("label")))
    priors = spark.read.parquet(source)
    if column not in priors.columns:
        raise ValueError(f"mechanisms.prior_column: {source} has no column {column!r}, got {column!r}")
    if "day" in priors.columns:  # the truth table holds every day: read only the released days
        priors = priors.where(F.col("day").isin(list(days)))
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
    days: tuple[int, ...] | None  # keep only the rows of these days (the file has a day column); None: every row
    footer_day_rows: int | None = None  # rows of those days, when the row groups' day statistics tell

    def _batches(self, columns: list[str]) -> Iterator[pa.RecordBatch]:
        """The part's rows of its days, ``columns`` only, in batches of at most :data:`INPUT_BATCH_ROWS` rows."""
        import pyarrow.compute as pc

        read = columns + (["day"] if self.days is not None and "day" not in columns else [])
        for batch in verified_batches(self.path, columns=read, row_groups=self.row_groups,
                                      batch_size=INPUT_BATCH_ROWS):
            if self.days is None:
                yield batch
            else:
                day = batch.column("day")
                yield batch.filter(pc.is_in(day, value_set=pa.array(self.days, day.type)))

    def side_rows(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """:func:`side_rows` of the part, batch by batch."""
        for batch in self._batches(["row_id", self.column]):
            yield side_rows(self.side, batch.column("row_id"), batch.column(self.column))

    def day_row_count(self) -> int:
        """Rows of the part's days: from the footer when it tells, else the day column's matches."""
        if self.days is None:
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


def input_parts(path: str, *, side: str, column: str, days: Sequence[int], rows_per_part: int = INPUT_PART_ROWS
                ) -> list[InputPart]:
    """The rows of ``days`` in the local Parquet dataset at ``path`` (hive-partitioned or not; a ``day`` column,
    if any, selects the days, as :func:`load_input` does) as parts of whole row groups, about ``rows_per_part``
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
        fragments = list(dataset.get_fragments(filter=ds.field("day").isin(list(days))))
    parts = []
    for fragment in fragments:
        with named_damage(fragment.path):
            metadata = fragment.metadata
        day_counts = [_day_row_count_from_statistics(metadata, group, days) if in_files else None
                      for group in range(metadata.num_row_groups)]
        kept = [group for group, count in enumerate(day_counts) if count != 0]  # 0: statistics exclude the days
        groups: list[int] = []
        rows = 0
        for group in kept:
            groups.append(group)
            rows += metadata.row_group(group).num_rows
            if rows >= rows_per_part or group == kept[-1]:
                counts = [day_counts[g] for g in groups]
                known = None if None in counts else sum(count or 0 for count in counts)
                parts.append(InputPart(fragment.path, side, column, tuple(groups), rows,
                                       tuple(days) if in_files else None, known))
                groups, rows = [], 0
    return parts


def _day_row_count_from_statistics(metadata: Any, group: int, days: Sequence[int]) -> int | None:
    """Rows of ``days`` (distinct) in one row group from its day column statistics: all non-null rows when
    every day in [min, max] is one of them, 0 when none of them lies in [min, max], None when the statistics
    do not tell."""
    row_group = metadata.row_group(group)
    statistics = row_group.column(metadata.schema.names.index("day")).statistics
    if statistics is None or not statistics.has_min_max or not statistics.has_null_count:
        return None
    inside = sum(statistics.min <= day <= statistics.max for day in days)
    if inside == 0:
        return 0
    if inside == statistics.max - statistics.min + 1:
        return row_group.num_rows - statistics.null_count
    return None


def _counted_parts(batches: Iterator[pa.RecordBatch], *, parts: Sequence[InputPart]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over part indices: (side, rows of the released days) per part."""
    for batch in batches:
        chosen = [parts[index] for index in batch.column("id").to_numpy()]
        yield pa.RecordBatch.from_arrays([pa.array([part.side for part in chosen], pa.string()),
                                          pa.array([part.day_row_count() for part in chosen], pa.int64())],
                                         names=["side", "rows"])


def side_row_counts(spark: SparkSession, parts: Sequence[InputPart]) -> dict[str, int]:
    """Rows per side (:data:`LABEL`, :data:`PRIOR`) in the parts: from the footers (row counts, day
    statistics) where they tell, else Python tasks read the day column."""
    rows, unknown = {LABEL: 0, PRIOR: 0}, []
    for part in parts:
        if part.days is not None and part.footer_day_rows is None:
            unknown.append(part)
        else:
            rows[part.side] += part.day_row_count()
    if unknown:
        tasks = min(len(unknown), 4 * default_parallelism(spark))
        counted = spark.range(len(unknown), numPartitions=tasks).mapInArrow(
            functools.partial(_counted_parts, parts=tuple(unknown)), "side string, rows long").collect()
        for side, count in counted:
            rows[side] += count
    return rows
