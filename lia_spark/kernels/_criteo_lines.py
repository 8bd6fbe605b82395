"""Numba kernel: one pass over the bytes of Criteo lines that accepts exactly the well-formed ones.

A line (its bytes ``data[start:end]``, the LF excluded; one CR before the LF dropped) is accepted when it has 40
tab-separated fields, the label is ``0`` or ``1``, every non-empty I* is ``-?[0-9]{1,19}`` within the int64 range
[-2^63, 2^63 - 1] and every non-empty C* is 8 hex digits of either case; an empty field is missing. These are
:func:`lia_spark.kernels.criteo.parse_lines`' rules, so an accepted line is valid there with the same values, and
every other line is malformed there (its reason comes from that parser). Each byte is read once, left to right.
"""
from __future__ import annotations

import numpy as np

from lia_spark.kernels._jit import njit_for

_TAB, _CR, _MINUS, _ZERO = 9, 13, 45, 48
_FIELDS, _INTS, _CATS = 40, 13, 26
_MAX_DIGITS, _HEX_DIGITS = 19, 8
_INT64_MAX = np.uint64(2**63 - 1)
_NEGATIVE_LIMIT = np.uint64(2**63)

njit = njit_for(__file__)


def _digit_table(digits: str) -> np.ndarray:
    """Byte -> its digit value for the characters ``digits`` (either case), :data:`_MINUS_CODE` for '-',
    :data:`_BAD` for any other byte."""
    table = np.full(256, _BAD, dtype=np.uint8)
    table[_MINUS] = _MINUS_CODE
    for value, character in enumerate(digits):
        table[ord(character)] = table[ord(character.upper())] = value
    return table


_BAD, _MINUS_CODE = 255, 254
_DECIMAL = _digit_table("0123456789")
_HEX = _digit_table("0123456789abcdef")


@njit(nogil=True)
def accept_lines(data: np.ndarray, line_start: np.ndarray, line_end: np.ndarray, label: np.ndarray,
                 ints: np.ndarray, int_missing: np.ndarray, cats: np.ndarray, cat_missing: np.ndarray,
                 accepted: np.ndarray) -> None:
    """Parse lines ``data[line_start[i]:line_end[i]]`` into the output arrays; ``accepted[i]`` is True exactly for
    the well-formed lines (the values of the others are unspecified). Each byte is read once: a tab (or the line's
    end) ends a field, any other byte is a digit of the current field (decimal for the label and I*, after one
    leading '-' on I*; hex of either case on C*, by table lookup) or makes the line malformed; digit counts and the
    int64 range are checked at the field's end (a longer field may wrap its magnitude, and is rejected)."""
    for row in range(line_start.size):
        begin, end = line_start[row], line_end[row]
        if end > begin and data[end - 1] == _CR:
            end -= 1
        ok: bool | np.bool_  # a field's check compares numpy integers
        ok, field, digits, negative, magnitude = True, 0, 0, False, np.uint64(0)
        table, base = _DECIMAL, np.uint64(10)
        for position in range(begin, end + 1):
            byte = data[position] if position < end else _TAB
            if byte != _TAB:
                value = table[byte]
                if value >= _MINUS_CODE:
                    ok = value == _MINUS_CODE and 0 < field <= _INTS and digits == 0 and not negative
                    if not ok:
                        break
                    negative = True
                    continue
                digits += 1
                magnitude = magnitude * base + np.uint64(value)
                continue
            if field == 0:
                ok = digits == 1 and magnitude <= 1
                label[row] = np.int32(magnitude)
            elif field <= _INTS:
                missing = digits == 0 and not negative
                int_missing[row, field - 1] = missing
                limit = _NEGATIVE_LIMIT if negative else _INT64_MAX
                ok = missing or (0 < digits <= _MAX_DIGITS and magnitude <= limit)
                ints[row, field - 1] = -np.int64(magnitude - np.uint64(1)) - 1 if negative and magnitude \
                    else np.int64(magnitude)
            else:
                cat_missing[row, field - 1 - _INTS] = digits == 0
                ok = digits == 0 or digits == _HEX_DIGITS
                cats[row, field - 1 - _INTS] = np.int64(magnitude)
            if not ok or (field == _FIELDS - 1 and position < end):  # a bad field, or a 41st field
                ok = False
                break
            field, digits, negative, magnitude = field + 1, 0, False, np.uint64(0)
            if field == _INTS + 1:
                table, base = _HEX, np.uint64(16)
        accepted[row] = ok and field == _FIELDS
