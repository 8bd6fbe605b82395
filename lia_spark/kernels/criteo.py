"""The Criteo click-log format (docs/math.md §1.1): column names, storage schema and stable row ids.

A line is 40 tab-separated fields: ``label``, ``I1..I13`` (integers, may be negative), ``C1..C26``
(32-bit hashes as 8 lowercase hex characters); an empty field is missing. Stored as Parquet with
I* as int64 and C* as the hash's integer value (int64), nulls for missing.

:func:`parse_lines` validates and parses a whole Arrow batch of raw lines with numpy (no per-line
Python); malformed lines get a stable reason code from :data:`REASONS`.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lia_spark.kernels import _criteo_lines
from lia_spark.names import DAY, LABEL, MAX_DAY, POSITION_BITS, ROW_ID

INT_COLUMNS = tuple(f"I{j}" for j in range(1, 14))
CAT_COLUMNS = tuple(f"C{j}" for j in range(1, 27))
FEATURE_COLUMNS = INT_COLUMNS + CAT_COLUMNS
TSV_COLUMNS = (LABEL,) + FEATURE_COLUMNS

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


HEADER_PREFIX = b"label"
MAX_INT_DIGITS = 19  # an optional '-' plus 1..19 digits, accumulated in uint64 and checked against the int64 range
HEX_DIGITS = 8
# Malformed-line reasons: short stable codes, with the offending field for field-level errors.
# The first failing check in this order names the line: header, column count, label, I1..I13, C1..C26.
REASONS = (("header", "bad_column_count", "bad_label")
           + tuple(f"bad_int:{name}" for name in INT_COLUMNS)
           + tuple(f"bad_hex:{name}" for name in CAT_COLUMNS))
VALID = -1

_CR = 13
_LF = 10
_TAB = 9
_MINUS = ord("-")


@dataclasses.dataclass(frozen=True)
class ParsedLines:
    """A batch of parsed lines. ``reason[i]`` is an index into :data:`REASONS`, or ``VALID`` (-1).

    Values of invalid lines are unspecified; ``*_missing`` flag empty fields (stored as nulls).
    """

    reason: np.ndarray        # int16 (n,)
    label: np.ndarray         # int32 (n,)
    ints: np.ndarray          # int64 (n, 13)
    int_missing: np.ndarray   # bool (n, 13)
    cats: np.ndarray          # int64 (n, 26): the 32-bit hash value
    cat_missing: np.ndarray   # bool (n, 26)
    line_length: np.ndarray   # int64 (n,): bytes per line, newline excluded

    @property
    def valid(self) -> np.ndarray:
        """Boolean mask of well-formed lines."""
        return self.reason == VALID


def _buffers(lines: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets with n + 1 entries, data bytes padded with 8 zero bytes) of a binary/string Arrow array.

    The padding lets every field read 8 bytes from its start without bounds checks.
    """
    if lines.null_count:
        lines = pc.fill_null(lines, pa.scalar(b"", lines.type))
    offset_type = np.int64 if pa.types.is_large_binary(lines.type) or pa.types.is_large_string(lines.type) else np.int32
    _, offsets_buffer, data_buffer = lines.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[lines.offset: lines.offset + len(lines) + 1]
    raw = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return offsets.astype(np.int64), np.concatenate([raw, np.zeros(HEX_DIGITS, dtype=np.uint8)])


def _words(data: np.ndarray) -> np.ndarray:
    """Overlapping little-endian 8-byte words: ``_words(data)[i]`` holds ``data[i:i + 8]`` (a view, no copy)."""
    return np.ndarray(shape=(data.size - HEX_DIGITS + 1,), dtype="<u8", buffer=data, strides=(1,))


def _parse_ints(data: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decimal fields ``-?[0-9]{1,19}`` within the int64 range [-2^63, 2^63 - 1] -> (value int64, missing, bad);
    digits read right to left into a uint64 magnitude (19 digits stay below 2^64), then range-checked and signed."""
    missing = length == 0
    negative = (length > 0) & (data[start] == _MINUS)
    digits = length - negative
    bad = ~missing & ((digits < 1) | (digits > MAX_INT_DIGITS))
    width = int(digits[~missing & ~bad].max(initial=0))
    magnitude = np.zeros(start.shape, dtype=np.uint64)
    last = start + length - 1
    for j in range(width):
        inside = (j < digits) & ~bad
        digit = data[last - j] - np.uint8(48)   # wraps to >= 208 for bytes below '0'
        bad |= inside & (digit > 9)
        magnitude += np.where(inside & (digit <= 9), digit, 0).astype(np.uint64) * np.uint64(10 ** j)
    bad |= magnitude > np.where(negative, np.uint64(2**63), np.uint64(2**63 - 1))
    magnitude = np.where(bad, np.uint64(0), magnitude)
    negated = (~magnitude + np.uint64(1)).view(np.int64)  # two's complement: -2^63 stays exact
    return np.where(negative, negated, magnitude.view(np.int64)), missing, bad


def _repeat(byte: int) -> np.uint64:
    return np.uint64(byte * 0x0101010101010101)


_HIGH = _repeat(0x80)


def _bytes_in_range(words: np.ndarray, low: int, high: int) -> np.ndarray:
    """Per byte of ASCII words: 0x80 where low <= byte <= high, else 0 (SWAR; no carries below 0x80)."""
    return (words + _repeat(0x80 - low)) & ~(words + _repeat(0x80 - high - 1)) & _HIGH


def _parse_hex(data: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """8-character hex fields -> (32-bit value as int64, missing, bad).

    One little-endian 8-byte load per field, decoded with SWAR arithmetic: a byte is a digit ('0'-'9')
    or a letter ('a'-'f' after setting bit 0x20); its value is ``(byte & 0xF) + 9 * is_letter``.
    """
    missing = length == 0
    words = _words(data)[start]
    lowered = words | _repeat(0x20)
    letters = _bytes_in_range(lowered, ord("a"), ord("f"))
    hex_bytes = _bytes_in_range(words, ord("0"), ord("9")) | letters
    bad = ~missing & ((length != HEX_DIGITS) | ((words & _HIGH) != 0) | (hex_bytes != _HIGH))
    nibbles = (words & _repeat(0x0F)) + (letters >> np.uint64(7)) * np.uint64(9)
    # byte k holds nibble k (k = 0 is the most significant hex digit): pair them, then order the 4 bytes
    low_nibbles = np.uint64(0x000F000F000F000F)
    pairs = ((nibbles & low_nibbles) << np.uint64(4)) | ((nibbles >> np.uint64(8)) & low_nibbles)
    value = np.zeros(start.shape, dtype=np.uint64)
    for k in range(4):  # the byte of hex digits (2k, 2k + 1) sits at bits 16k..16k+7 of pairs
        value |= ((pairs >> np.uint64(16 * k)) & np.uint64(0xFF)) << np.uint64(24 - 8 * k)
    return value.astype(np.int64), missing, bad


def _scatter(values: np.ndarray, rows: np.ndarray, n: int, fill) -> np.ndarray:
    out = np.full((n,) + values.shape[1:], fill, dtype=values.dtype)
    out[rows] = values
    return out


def parse_lines(lines: pa.Array) -> ParsedLines:
    """Parse raw Criteo lines (Arrow binary or string array, split at LF, the LF stripped) in one vectorized pass.

    A line is valid when it has exactly 40 tab-separated fields, the label is ``0`` or ``1``, every
    non-empty I* is ``-?[0-9]{1,18}`` and every non-empty C* is 8 hex digits (either case). A line
    starting with ``label`` is a header. Empty fields are missing values. One CR before the LF (a CRLF line end)
    is not part of the last field; a CR anywhere else is a byte of its field, which makes the line malformed.
    ``line_length`` counts every byte but the LF.
    """
    n = len(lines)
    offsets, data = _buffers(lines)
    line_start, line_end = offsets[:-1], offsets[1:]
    line_length = line_end - line_start
    crlf = np.zeros(n, dtype=bool)
    crlf[line_length > 0] = data[line_end[line_length > 0] - 1] == _CR
    line_end = line_end - crlf
    reason = np.full(n, VALID, dtype=np.int16)

    tabs = np.flatnonzero(data[offsets[0]:offsets[-1]] == _TAB) + offsets[0]
    first_tab = np.searchsorted(tabs, line_start)
    tab_count = np.searchsorted(tabs, line_end) - first_tab
    prefix = data[line_start[:, None] + np.arange(len(HEADER_PREFIX))] | np.uint8(0x20)
    header = (line_length >= len(HEADER_PREFIX)) & (prefix == np.frombuffer(HEADER_PREFIX, np.uint8)).all(axis=1)
    reason[tab_count != len(TSV_COLUMNS) - 1] = REASONS.index("bad_column_count")
    reason[header] = REASONS.index("header")

    rows = np.flatnonzero(reason == VALID)
    inner_tabs = tabs[first_tab[rows][:, None] + np.arange(len(TSV_COLUMNS) - 1)]
    field_start = np.concatenate([line_start[rows][:, None], inner_tabs + 1], axis=1)
    field_length = np.concatenate([inner_tabs, line_end[rows][:, None]], axis=1) - field_start

    label_byte = data[field_start[:, 0]]
    label_bad = (field_length[:, 0] != 1) | ((label_byte != ord("0")) & (label_byte != ord("1")))
    int_slice = slice(1, 1 + len(INT_COLUMNS))
    cat_slice = slice(1 + len(INT_COLUMNS), len(TSV_COLUMNS))
    int_values, int_missing_rows, int_bad = _parse_ints(data, field_start[:, int_slice], field_length[:, int_slice])
    cat_values, cat_missing_rows, cat_bad = _parse_hex(data, field_start[:, cat_slice], field_length[:, cat_slice])

    field_bad = np.concatenate([label_bad[:, None], int_bad, cat_bad], axis=1)
    any_bad = field_bad.any(axis=1)
    reason[rows[any_bad]] = REASONS.index("bad_label") + np.argmax(field_bad[any_bad], axis=1)

    label = label_byte.astype(np.int32) - ord("0")
    if rows.size < n:  # scatter the lines that had 40 fields back to their places
        label, int_values, int_missing_rows, cat_values, cat_missing_rows = (
            _scatter(values, rows, n, fill) for values, fill in (
                (label, 0), (int_values, 0), (int_missing_rows, True), (cat_values, 0), (cat_missing_rows, True)))
    return ParsedLines(reason=reason, label=label, ints=int_values, int_missing=int_missing_rows, cats=cat_values,
                       cat_missing=cat_missing_rows, line_length=line_length)


def parse_lines_fast(lines: pa.Array) -> ParsedLines:
    """:func:`parse_lines`' result in one compiled pass over the bytes (:func:`parse_spans`)."""
    offsets, data = _buffers(lines)
    return parse_spans(data, offsets[:-1], offsets[1:])


def parse_spans(data: np.ndarray, line_start: np.ndarray, line_end: np.ndarray) -> ParsedLines:
    """:func:`parse_lines`' result for the lines ``data[line_start[i]:line_end[i]]`` (LF excluded):
    :mod:`lia_spark.kernels._criteo_lines` accepts exactly the valid lines with the same
    values, reading each byte once; the lines it rejects are parsed again by :func:`parse_lines` for their reason.
    Value columns come out column-major (one contiguous array per column)."""
    n = line_start.size
    label = np.zeros(n, dtype=np.int32)
    ints = np.zeros((n, len(INT_COLUMNS)), np.int64, order="F")
    cats = np.zeros((n, len(CAT_COLUMNS)), np.int64, order="F")
    int_missing = np.ones((n, len(INT_COLUMNS)), bool, order="F")
    cat_missing = np.ones((n, len(CAT_COLUMNS)), bool, order="F")
    accepted = np.zeros(n, dtype=bool)
    _criteo_lines.accept_lines(data, line_start, line_end, label, ints, int_missing, cats, cat_missing, accepted)
    reason = np.full(n, VALID, dtype=np.int16)
    rejected = np.flatnonzero(~accepted)
    if rejected.size:
        reason[rejected] = parse_lines(span_lines(data, line_start[rejected], line_end[rejected])).reason
    return ParsedLines(reason=reason, label=label, ints=ints, int_missing=int_missing, cats=cats,
                       cat_missing=cat_missing, line_length=line_end - line_start)


def span_lines(data: np.ndarray, line_start: np.ndarray, line_end: np.ndarray) -> pa.Array:
    """The lines ``data[line_start[i]:line_end[i]]`` as an Arrow binary array (a copy)."""
    return pa.array([data[begin:end].tobytes() for begin, end in zip(line_start.tolist(), line_end.tolist())],
                    pa.binary())


def line_spans(data: np.ndarray, *, final: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """(line_start, line_end, consumed) of the lines in ``data``, a text that starts at a line start: each line ends
    at an LF (excluded); the bytes after the last LF are a line only when ``final`` (the end of the file), else they
    are left for the next read. ``consumed`` = the bytes the returned lines cover, their LFs included."""
    line_feeds = np.flatnonzero(data == _LF)
    consumed = int(line_feeds[-1]) + 1 if line_feeds.size else 0
    line_end = line_feeds
    if final and consumed < data.size:
        line_end, consumed = np.append(line_feeds, data.size), data.size
    line_start = np.concatenate([[0], line_end[:-1] + 1]) if line_end.size else line_end
    return line_start.astype(np.int64), line_end.astype(np.int64), consumed


_HEX_CHARACTERS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_NIBBLE_SHIFTS = np.arange(28, -1, -4, dtype=np.uint32)


def _hex_field(values: np.ndarray, missing: np.ndarray) -> pa.Array:
    """8 lowercase hex characters per present 32-bit value, the empty string where missing (no nulls)."""
    present = values[~missing].astype(np.uint32)
    nibbles = (present[:, None] >> _NIBBLE_SHIFTS) & np.uint32(0xF)
    data = _HEX_CHARACTERS[nibbles].tobytes()
    offsets = np.zeros(values.size + 1, dtype=np.int32)
    np.cumsum(np.where(missing, 0, HEX_DIGITS), out=offsets[1:])
    return pa.StringArray.from_buffers(values.size, pa.py_buffer(offsets), pa.py_buffer(data))


def format_lines(label: np.ndarray, values: Mapping[str, np.ndarray], missing: Mapping[str, np.ndarray]) -> pa.Array:
    """Criteo lines (no LF), the inverse of :func:`parse_lines` on valid lines: the label, I1..I13 in decimal,
    C1..C26 as 8 lowercase hex characters of their 32-bit value, an empty field where ``missing``."""
    fields = [pc.cast(pa.array(np.asarray(label)), pa.string())]
    for name in INT_COLUMNS:
        text = pc.cast(pa.array(np.asarray(values[name], dtype=np.int64)), pa.string())
        fields.append(pc.if_else(pa.array(np.asarray(missing[name], dtype=bool)), "", text))
    fields.extend(_hex_field(np.asarray(values[name], dtype=np.int64), np.asarray(missing[name], dtype=bool))
                  for name in CAT_COLUMNS)
    return pc.binary_join_element_wise(*fields, "\t")


_DAY_FILE = re.compile(r"day_(\d+)(\.gz)?")
_KAGGLE_FILE = re.compile(r"train\.txt(\.gz)?")


def source_day(name: str) -> int | None:
    """Day of an input file from its name: ``day_N[.gz]`` -> N, Kaggle ``train.txt[.gz]`` -> None.

    Raises:
        ValueError: any other name, or a day outside [0, MAX_DAY].
    """
    day_match = _DAY_FILE.fullmatch(name)
    if day_match:
        day = int(day_match.group(1))
        if day > MAX_DAY:
            raise ValueError(f"input file day must be in [0, {MAX_DAY}], got {name!r}")
        return day
    if _KAGGLE_FILE.fullmatch(name):
        return None
    raise ValueError(f"input file name must be day_N, day_N.gz, train.txt or train.txt.gz, got {name!r}")


def kaggle_day_starts(total_lines: int, *, days: int) -> np.ndarray:
    """First line of each day when ``total_lines`` consecutive lines are cut into ``days`` equal days.

    Day d holds lines [floor(d N / days), floor((d + 1) N / days)), so day sizes differ by at most one.
    """
    if days < 1:
        raise ValueError(f"days must be >= 1, got days={days}")
    if total_lines < 0:
        raise ValueError(f"total_lines must be >= 0, got total_lines={total_lines}")
    return (np.arange(days, dtype=np.int64) * total_lines) // days


def locate_lines(line_index: np.ndarray, *, first_day: int, day_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(day, position within the day) of 0-based line indices of one source file.

    A ``day_N`` file is one day (``first_day`` = N, ``day_starts`` = [0]); Kaggle's train.txt is several
    (``first_day`` = 0, ``day_starts`` from :func:`kaggle_day_starts`).
    """
    line_index = np.asarray(line_index, dtype=np.int64)
    slot = np.searchsorted(day_starts, line_index, side="right") - 1
    return first_day + slot, line_index - day_starts[slot]


def decoded_size_matches(expected_bytes: int, *, line_bytes: int, lines: int, modulus: int | None = None) -> bool:
    """Whether lines totalling ``line_bytes`` bytes (every byte but the LF that ends each line, as
    :func:`parse_lines` counts ``line_length``: a CRLF's CR included) can make a file of ``expected_bytes``.

    With or without a final line end. ``modulus`` = 2^32 for the gzip trailer's ISIZE (size mod 2^32). A truncated
    or corrupt file fails this check.
    """
    candidates = {line_bytes + lines, line_bytes + lines - 1}
    if lines == 0:
        candidates = {0}
    if modulus is not None:
        return expected_bytes % modulus in {c % modulus for c in candidates}
    return expected_bytes in candidates
