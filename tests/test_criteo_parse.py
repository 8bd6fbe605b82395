"""Criteo line parsing against a plain-Python reference parser (str.split, int(), int(x, 16)): the vectorized exact
parser and the compiled one (which accepts exactly the valid lines and hands the others to the exact parser)."""
from __future__ import annotations

import gzip
import re

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lia_spark.kernels import criteo

_INT = re.compile(r"-?[0-9]{1,19}")
_HEX = re.compile(r"[0-9a-fA-F]{8}")
PARSERS = (criteo.parse_lines, criteo.parse_lines_fast)


def reference_parse(line: str) -> tuple[str | None, list]:
    """(reason or None, [label, I1..I13, C1..C26] with None for missing) by the docs/math.md §1.1 rules,
    one line at a time."""
    if line[:5].lower() == "label":
        return "header", []
    fields = line.split("\t")
    if len(fields) != 40:
        return "bad_column_count", []
    if fields[0] not in ("0", "1"):
        return "bad_label", []
    values = [int(fields[0])]
    for name, text in zip(criteo.INT_COLUMNS, fields[1:14]):
        if text and not (_INT.fullmatch(text) and -2**63 <= int(text) < 2**63):
            return f"bad_int:{name}", []
        values.append(int(text) if text else None)
    for name, text in zip(criteo.CAT_COLUMNS, fields[14:]):
        if text and not _HEX.fullmatch(text):
            return f"bad_hex:{name}", []
        values.append(int(text, 16) if text else None)
    return None, values


def _vectorized(parsed: criteo.ParsedLines, i: int) -> tuple[str | None, list]:
    if parsed.reason[i] != criteo.VALID:
        return criteo.REASONS[parsed.reason[i]], []
    ints = [None if m else int(v) for v, m in zip(parsed.ints[i], parsed.int_missing[i])]
    cats = [None if m else int(v) for v, m in zip(parsed.cats[i], parsed.cat_missing[i])]
    return None, [int(parsed.label[i])] + ints + cats


def _check(lines: list[str], array_type=pa.binary()) -> None:
    array = pa.array([line.encode() for line in lines], array_type) if array_type != pa.string() else pa.array(lines)
    for parse in PARSERS:
        parsed = parse(array)
        assert [_vectorized(parsed, i) for i in range(len(lines))] == [reference_parse(line) for line in lines]
        assert list(parsed.line_length) == [len(line.encode()) for line in lines]


def _valid_line(rng: np.random.Generator) -> str:
    ints = ["" if rng.random() < 0.3 else str(int(rng.integers(-10, 10**int(rng.integers(1, 19))))) for _ in range(13)]
    cats = ["" if rng.random() < 0.3 else f"{int(rng.integers(0, 1 << 32)):08x}" for _ in range(26)]
    return "\t".join([str(int(rng.integers(0, 2)))] + ints + cats)


def test_valid_lines_match_reference_values():
    rng = np.random.default_rng(0)
    lines = [_valid_line(rng) for _ in range(500)]
    lines.append("\t".join(["0"] + ["-123456789012345678"] * 13 + ["FFFFFFFF"] * 26))  # extremes
    lines.append("\t".join(["1"] + [""] * 39))  # everything missing
    _check(lines)
    assert reference_parse(lines[-2])[1][1] == -123456789012345678 and reference_parse(lines[-2])[1][-1] == 2**32 - 1


@pytest.mark.parametrize("array_type", [pa.binary(), pa.large_binary(), pa.string()])
def test_every_malformed_kind_is_named(array_type):
    base = _valid_line(np.random.default_rng(1)).split("\t")

    def replaced(index: int, text: str) -> str:
        return "\t".join(base[:index] + [text] + base[index + 1:])

    lines = {
        "header": "\t".join(criteo.TSV_COLUMNS), "LABEL\tstuff": "LABEL\tstuff",
        "empty": "", "39 fields": "\t".join(base[:39]), "41 fields": "\t".join(base + ["0"]),
        "label 2": replaced(0, "2"), "label empty": replaced(0, ""), "label 00": replaced(0, "00"),
        "I1 float": replaced(1, "1.5"), "I2 plus": replaced(2, "+5"), "I3 minus only": replaced(3, "-"),
        "I4 20 digits": replaced(4, "1" * 20), "I13 space": replaced(13, " 7"), "I5 double minus": replaced(5, "--1"),
        "I6 2^63": replaced(6, "9223372036854775808"), "I7 -2^63 - 1": replaced(7, "-9223372036854775809"),
        "C1 7 chars": replaced(14, "abcdef0"), "C2 9 chars": replaced(15, "abcdef012"),
        "C26 non hex": replaced(39, "abcdefg0"), "C7 unicode": replaced(20, "abcdef\u00e9"),
    }
    _check(list(lines.values()), array_type)
    reasons = [reference_parse(line)[0] for line in lines.values()]
    assert reasons == ["header", "header", "bad_column_count", "bad_column_count", "bad_column_count",
                       "bad_label", "bad_label", "bad_label", "bad_int:I1", "bad_int:I2", "bad_int:I3", "bad_int:I4",
                       "bad_int:I13", "bad_int:I5", "bad_int:I6", "bad_int:I7", "bad_hex:C1", "bad_hex:C2",
                       "bad_hex:C26", "bad_hex:C7"]


_TOKENS = ["", "0", "1", "-1", "7", "-", "--2", "+3", "1.5", " 4", "123456789012345678", "1234567890123456789",
           "-123456789012345678", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
           "-9223372036854775809", "9999999999999999999", "12345678901234567890", "00000000", "deadBEEF", "abcdef0",
           "abcdef012", "abcdefgh", "label", "\u00e9\u00e9",
           "ffffffff", "12345678", "2", "00", "-0", "0-1", "1-", "FfFfFfFf", "abcdefG0", "g0000000", "@0000000",
           "`0000000", "/0000000", ":0000000", "\t", "\u00ff"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_TOKENS), min_size=38, max_size=41).map("\t".join), min_size=1, max_size=30))
def test_random_token_lines_match_reference(lines):
    _check(lines)


def test_the_whole_int64_range_is_accepted_exactly():
    base = _valid_line(np.random.default_rng(3)).split("\t")
    values = ["9223372036854775807", "-9223372036854775808", "0000000000000000001", "-0", "999999999999999999"]
    line = "\t".join(base[:1] + values + base[6:])
    for parse in PARSERS:
        parsed = parse(pa.array([line.encode()]))
        assert parsed.reason[0] == criteo.VALID
        assert [int(v) for v in parsed.ints[0][:5]] == [2**63 - 1, -2**63, 1, 0, 999999999999999999]


def test_sliced_arrays_use_their_own_offsets():
    rng = np.random.default_rng(2)
    lines = [_valid_line(rng) for _ in range(20)] + ["bad"]
    array = pa.array([line.encode() for line in lines])[5:]
    for parse in PARSERS:
        parsed = parse(array)
        assert [_vectorized(parsed, i) for i in range(len(array))] == [reference_parse(line) for line in lines[5:]]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_TOKENS + ["\r", "1\r", "\r0", "abcdef01\r"]), min_size=39,
                         max_size=41).map("\t".join).map(lambda line: line.encode()), min_size=1, max_size=20),
       st.lists(st.booleans(), min_size=20, max_size=20))
def test_the_compiled_parser_equals_the_exact_one_around_carriage_returns(lines, crlf):
    # one CR before the (stripped) LF ends the line, any other CR is a byte of its field: both parsers agree
    array = pa.array([line + b"\r" if end else line for line, end in zip(lines, crlf)])
    exact, fast = criteo.parse_lines(array), criteo.parse_lines_fast(array)
    np.testing.assert_array_equal(fast.reason, exact.reason)
    np.testing.assert_array_equal(fast.line_length, exact.line_length)
    valid = exact.valid
    for name in ("label", "ints", "int_missing", "cats", "cat_missing"):
        np.testing.assert_array_equal(getattr(fast, name)[valid], getattr(exact, name)[valid])


def test_source_day_names():
    assert criteo.source_day("day_0") == 0 and criteo.source_day("day_23.gz") == 23
    assert criteo.source_day("train.txt") is None and criteo.source_day("train.txt.gz") is None
    for name in ("day_x", "day_25", "day_1.bz2", "test.txt", "data.tsv"):
        with pytest.raises(ValueError, match=re.escape(repr(name))):
            criteo.source_day(name)


@pytest.mark.parametrize("total", [0, 1, 6, 7, 45_840_617, 1000])
def test_kaggle_days_are_equal_consecutive_cuts(total):
    starts = criteo.kaggle_day_starts(total, days=7)
    sizes = np.diff(np.append(starts, total))
    assert starts[0] == 0 and sizes.sum() == total and sizes.max() - sizes.min() <= 1 and (sizes >= 0).all()
    lines = np.arange(total if total < 10_000 else 10_000)
    day, position = criteo.locate_lines(lines, first_day=0, day_starts=starts)
    assert (starts[day] + position == lines).all() and (position < sizes[day]).all()


def test_locate_lines_of_a_day_file():
    day, position = criteo.locate_lines(np.array([0, 5, 99]), first_day=3, day_starts=np.zeros(1, np.int64))
    assert day.tolist() == [3, 3, 3] and position.tolist() == [0, 5, 99]


def test_decoded_size_check_against_real_gzip_trailers():
    lines = ["a\tb", "", "ccc"]
    for text, line_bytes in (("\n".join(lines) + "\n", 6), ("\n".join(lines), 6), ("\r\n".join(lines) + "\r\n", 9),
                             ("\r\n".join(lines), 8)):  # a CRLF's CR is a byte of its line (parse_lines' length)
        packed = gzip.compress(text.encode())
        isize = int.from_bytes(packed[-4:], "little")
        assert isize == len(text.encode())
        assert sum(criteo.parse_lines(pa.array([line.encode() for line in text.split("\n")][:3])).line_length) \
            == line_bytes
        assert criteo.decoded_size_matches(isize, line_bytes=line_bytes, lines=3, modulus=1 << 32)
        assert criteo.decoded_size_matches(len(text.encode()), line_bytes=line_bytes, lines=3)
    assert not criteo.decoded_size_matches(12, line_bytes=3, lines=1)  # lines lost after the first
    assert criteo.decoded_size_matches(0, line_bytes=0, lines=0)
    assert not criteo.decoded_size_matches(4, line_bytes=0, lines=0)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=40), st.integers(min_value=0, max_value=2**32 - 1))
def test_formatted_lines_parse_back_to_the_same_values(rows, seed):
    """format_lines is the exact inverse of parse_lines: every value (the int64 extremes, 32-bit hashes 0 and
    2^32 - 1, missing fields) comes back, and each line matches the reference formatting."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 2, rows).astype(np.int32)
    extremes = np.array([-2**63, 2**63 - 1, 0, -1], dtype=np.int64)
    ints = np.where(rng.random((rows, 13)) < 0.2, rng.choice(extremes, (rows, 13)),
                    rng.integers(-2**63, 2**63 - 1, (rows, 13), dtype=np.int64, endpoint=True))
    cats = rng.choice(np.array([0, 2**32 - 1], np.int64), (rows, 26))
    cats = np.where(rng.random((rows, 26)) < 0.5, rng.integers(0, 2**32, (rows, 26), dtype=np.int64), cats)
    int_missing, cat_missing = rng.random((rows, 13)) < 0.3, rng.random((rows, 26)) < 0.3
    values = {**{name: ints[:, j] for j, name in enumerate(criteo.INT_COLUMNS)},
              **{name: cats[:, j] for j, name in enumerate(criteo.CAT_COLUMNS)}}
    missing = {**{name: int_missing[:, j] for j, name in enumerate(criteo.INT_COLUMNS)},
               **{name: cat_missing[:, j] for j, name in enumerate(criteo.CAT_COLUMNS)}}
    lines = criteo.format_lines(label, values, missing)
    expected = ["\t".join([str(label[i])] + ["" if int_missing[i, j] else str(ints[i, j]) for j in range(13)]
                          + ["" if cat_missing[i, j] else f"{cats[i, j]:08x}" for j in range(26)]) for i in range(rows)]
    assert lines.to_pylist() == expected
    parsed = criteo.parse_lines(lines)
    assert parsed.valid.all() and (parsed.label == label).all()
    assert (parsed.int_missing == int_missing).all() and (parsed.cat_missing == cat_missing).all()
    assert (parsed.ints[~int_missing] == ints[~int_missing]).all()
    assert (parsed.cats[~cat_missing] == cats[~cat_missing]).all()
