"""The Criteo click-log format (SPEC 1.1): column names, storage schema and stable row ids.

A line is 40 tab-separated fields: ``label``, ``I1..I13`` (integers, may be negative), ``C1..C26``
(32-bit hashes as 8 lowercase hex characters); an empty field is missing. Stored as Parquet with
I* as int64 and C* as the hash's integer value (int64), nulls for missing.
"""
from __future__ import annotations

import numpy as np

LABEL = "label"
INT_COLUMNS = tuple(f"I{j}" for j in range(1, 14))
CAT_COLUMNS = tuple(f"C{j}" for j in range(1, 27))
FEATURE_COLUMNS = INT_COLUMNS + CAT_COLUMNS
TSV_COLUMNS = (LABEL,) + FEATURE_COLUMNS
ROW_ID = "row_id"
DAY = "day"

# row_id = day * 2^40 + position of the line in its source file: stable under any partitioning.
POSITION_BITS = 40
MAX_DAY = 24

STORAGE_DDL = ", ".join(
    [f"{ROW_ID} long", f"{DAY} int", f"{LABEL} int"]
    + [f"{name} long" for name in INT_COLUMNS]
    + [f"{name} long" for name in CAT_COLUMNS]
)


def make_row_id(day, position) -> np.ndarray:
    """Stable row id ``day << 40 | position`` (position = 0-based line index within its source file/day)."""
    day_array = np.asarray(day, dtype=np.int64)
    position_array = np.asarray(position, dtype=np.int64)
    if np.any(position_array < 0) or np.any(position_array >= (1 << POSITION_BITS)):
        raise ValueError(f"position must be in [0, 2^{POSITION_BITS}), got range "
                         f"[{position_array.min()}, {position_array.max()}]")
    if np.any(day_array < 0) or np.any(day_array > MAX_DAY):
        raise ValueError(f"day must be in [0, {MAX_DAY}], got range [{day_array.min()}, {day_array.max()}]")
    return (day_array << POSITION_BITS) | position_array


def split_row_id(row_id) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`make_row_id`: (day, position)."""
    ids = np.asarray(row_id, dtype=np.int64)
    return ids >> POSITION_BITS, ids & ((1 << POSITION_BITS) - 1)
