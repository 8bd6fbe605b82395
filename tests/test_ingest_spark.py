"""Ingest stage on real local Spark: round trips, stable row ids, malformed lines, corrupt gzip, threshold.

Expected tables come from an independent writer below (Python formatting of known values), not from
the parser under test.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from json_support import check_result

from lia_spark import names
from lia_spark.engine.ingest import local_files
from lia_spark.engine.ingest.criteo_files import decompressed_copies, list_sources
from lia_spark.engine.ingest.stage import QUARANTINE_DDL, DamagedInputError, IngestResult, MalformedShareError
from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.engine.runtime.outputs import MARKER
from lia_spark.kernels import criteo
from lia_spark.run.config import config_from_dict
from lia_spark.run.failures import USAGE_EXIT, failure_line


def _random_rows(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Criteo-like values: labels, heavy-tailed ints with -1s and gaps, 32-bit hashes with gaps."""
    data = {names.LABEL: rng.integers(0, 2, n).astype("int32")}
    for name in criteo.INT_COLUMNS:
        values = np.floor(np.exp(rng.normal(2, 3, n))).astype(np.int64) - (rng.random(n) < 0.05)
        data[name] = pd.array(np.where(rng.random(n) < 0.2, None, values), dtype="Int64")
    for name in criteo.CAT_COLUMNS:
        values = rng.integers(0, 1 << 32, n, dtype=np.int64)
        data[name] = pd.array(np.where(rng.random(n) < 0.2, None, values), dtype="Int64")
    return pd.DataFrame(data)


def _format(rows: pd.DataFrame) -> list[str]:
    """Criteo TSV lines of a table (ints in decimal, hashes as 8 lowercase hex digits, empty = missing)."""
    columns = [rows[names.LABEL].astype(str).tolist()]
    columns += [["" if pd.isna(v) else str(int(v)) for v in rows[name]] for name in criteo.INT_COLUMNS]
    columns += [["" if pd.isna(v) else f"{int(v):08x}" for v in rows[name]] for name in criteo.CAT_COLUMNS]
    return ["\t".join(fields) for fields in zip(*columns)]


def _write(path: Path, lines: list[str], *, gz: bool = False) -> Path:
    text = "".join(line + "\n" for line in lines).encode()
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(text))
    else:
        path.write_bytes(text)
    return path


def _expected(day: int, rows: pd.DataFrame, positions: np.ndarray) -> pd.DataFrame:
    frame = rows.copy()
    frame.insert(0, names.DAY, np.int32(day))
    frame.insert(0, names.ROW_ID, criteo.make_row_id(day, positions))
    return frame


def _config(tmp_path: Path, paths: list[Path], name: str = "out", **data):
    return config_from_dict({
        "run": {"output_dir": str(tmp_path / name)},
        "data": {"source": "criteo", "criteo_paths": [str(p) for p in paths], **data},
    })


def _marker(path: str) -> dict | None:
    """The completion marker of a local output folder (read directly, independent of engine.outputs)."""
    marker = Path(path) / MARKER
    return json.loads(marker.read_text()) if marker.exists() else None


def _table(spark, path: str) -> pd.DataFrame:
    columns = [c.split()[0] for c in criteo.STORAGE_DDL.split(", ")]
    frame = spark.read.schema(criteo.STORAGE_DDL).parquet(path).toPandas()
    frame = frame[columns].sort_values(names.ROW_ID).reset_index(drop=True)
    for name in criteo.FEATURE_COLUMNS:
        frame[name] = frame[name].astype("Int64")
    return frame.astype({names.DAY: "int32", names.LABEL: "int32"})


def _assert_same(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    expected = expected.sort_values(names.ROW_ID).reset_index(drop=True)
    pd.testing.assert_frame_equal(actual, expected[actual.columns], check_dtype=False)


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    """Two clean days (3000 and 1700 rows) as plain and gzip TSV, with the expected tables."""
    root = tmp_path_factory.mktemp("days")
    rng = np.random.default_rng(7)
    tables = {0: _random_rows(rng, 3000), 1: _random_rows(rng, 1700)}
    for fmt in ("plain", "gz"):
        (root / fmt).mkdir()
        for day, rows in tables.items():
            _write(root / fmt / f"day_{day}", _format(rows), gz=fmt == "gz")
    expected = pd.concat([_expected(day, rows, np.arange(len(rows))) for day, rows in tables.items()])
    return root, expected


def test_round_trip_gzip_identical_rows_and_row_ids_then_resume(spark, tmp_path, days):
    root, expected = days
    config = _config(tmp_path, [root / "gz"])
    result = run_stage("ingest", spark, config)
    _assert_same(_table(spark, config.parquet_path), expected)
    assert (result.input_lines, result.valid_rows, result.malformed_rows) == (4700, 4700, 0)
    assert result.rows_per_day == {0: 3000, 1: 1700}
    assert [(Path(f.file).name, f.status) for f in result.files] == [("day_0.gz", "ok"), ("day_1.gz", "ok")]
    assert IngestResult.from_dict(_marker(config.parquet_path)) == result
    assert _marker(config.quarantine_path)["valid_rows"] == 4700
    resumed = run_stage("ingest", spark, config)
    assert resumed.skipped and dataclasses.replace(resumed, skipped=False) == result


@pytest.mark.parametrize("fmt, split_gzip", [("plain", True), ("gz", True), ("gz", False)])
def test_row_ids_do_not_depend_on_partitioning(spark, tmp_path, days, fmt, split_gzip):
    """Files cut into many blocks (plain files, and the decompressed copies of gzip files) and tiny Arrow batches
    give the same rows as one block per file (gzip read directly)."""
    root, expected = days
    settings = {"spark.sql.files.maxPartitionBytes": "131072", "spark.sql.files.openCostInBytes": "1024",
                "spark.sql.execution.arrow.maxRecordsPerBatch": "333"}
    previous = {key: spark.conf.get(key) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        lines = spark.read.text(str(root / "plain" / "day_0"))
        assert lines.select("_metadata.file_block_start").distinct().count() >= 4  # really split into blocks
        config = _config(tmp_path, [root / fmt], name="split", split_gzip=split_gzip)
        if fmt == "gz" and split_gzip:  # the copy that the scans read is cut into blocks too
            sources = list_sources(spark, [str(root / "gz")])
            copies = decompressed_copies(spark, sources, str(tmp_path / "copies")).copies
            copy = spark.read.text(copies[0])
            assert copy.select("_metadata.file_block_start").distinct().count() >= 4 and copy.count() == 3000
        result = run_stage("ingest", spark, config)
    finally:
        for key, value in previous.items():
            spark.conf.set(key, value)
    _assert_same(_table(spark, config.parquet_path), expected)
    assert [f.status for f in result.files] == ["ok", "ok"]
    assert not os.path.exists(f"{config.parquet_path}.gunzip")  # the decompressed copies are removed


def _malformed_day(rng: np.random.Generator) -> tuple[list[str], dict[int, str], pd.DataFrame]:
    """200 good lines with one malformed line of every kind spliced in; (lines, {0-based index: reason}, rows)."""
    rows = _random_rows(rng, 200)
    good = _format(rows)
    fields = good[0].split("\t")
    bad = {
        "header": "\t".join(criteo.TSV_COLUMNS),
        "bad_column_count": "\t".join(fields[:39]),
        "bad_label": "\t".join(["2"] + fields[1:]),
        "bad_int:I3": "\t".join(fields[:3] + ["1.5"] + fields[4:]),
        "bad_hex:C7": "\t".join(fields[:20] + ["0123456g"] + fields[21:]),
        "bad_hex:C26": "\t".join(fields[:39] + ["abc"]),
        "bad_hex:C12": "\t".join(fields[:25] + ["01\r23456"] + fields[26:]),  # a lone CR is a byte of its field
    }
    lines, reasons, keep = [], {}, []
    for i, line in enumerate(good):
        if i % 25 == 5 and len(reasons) < len(bad):
            reason = list(bad)[len(reasons)]
            reasons[len(lines)] = reason
            lines.append(bad[reason])
        keep.append(len(lines))
        lines.append(line + "\r" * (i % 2))  # CRLF and LF line ends mixed
    reasons[len(lines)] = "bad_column_count"  # an empty line at the end
    lines.append("")
    return lines, reasons, _expected(2, rows, np.array(keep))


def test_malformed_lines_empty_file_and_truncated_gzip(spark, tmp_path):
    rng = np.random.default_rng(11)
    lines, reasons, expected_day2 = _malformed_day(rng)
    folder = tmp_path / "in"
    folder.mkdir()
    _write(folder / "day_2", lines)
    _write(folder / "day_3", [])
    clean = _random_rows(rng, 2000)
    whole = gzip.compress("".join(line + "\n" for line in _format(clean)).encode())
    (folder / "day_4.gz").write_bytes(whole[: len(whole) * 2 // 3])
    config = _config(tmp_path, [folder], max_malformed_share=0.05, allow_truncated_files=True)
    result = run_stage("ingest", spark, config)

    by_file = {Path(f.file).name: f for f in result.files}
    assert by_file["day_2"].lines == len(lines) and by_file["day_2"].valid_rows == 200
    assert by_file["day_2"].malformed == {r: list(reasons.values()).count(r) for r in set(reasons.values())}
    assert (by_file["day_3"].lines, by_file["day_3"].status) == (0, "empty")
    truncated = by_file["day_4.gz"]
    assert truncated.status == "truncated_gzip" and 0 < truncated.lines < 2000
    assert result.corrupt_files == 1 and result.empty_files == 1
    assert result.input_lines == result.valid_rows + result.malformed_rows
    assert (truncated.lost_lines, by_file["day_3"].lost_lines, result.lost_lines) == (1, 1, 2)  # at least one each
    assert result.input_lines == sum(f.lines for f in result.files) + result.lost_lines
    cut_lines = truncated.lines - truncated.valid_rows  # the line cut by the truncation, if any
    assert result.malformed_rows == sum(result.malformed_by_reason.values()) == len(reasons) + cut_lines + 2
    assert result.malformed_by_reason["lost_to_damaged_file"] == 2
    assert check_result(result, "ingest")["lost_lines"] == 2  # results/ingest.json matches its schema

    data = _table(spark, config.parquet_path)
    _assert_same(data[data[names.DAY] == 2].reset_index(drop=True), expected_day2)
    kept = data[data[names.DAY] == 4].reset_index(drop=True)
    assert len(kept) == truncated.valid_rows >= truncated.lines - 1  # only the cut last line may be malformed
    _assert_same(kept, _expected(4, clean.iloc[: len(kept)], np.arange(len(kept))))

    quarantine = spark.read.schema(QUARANTINE_DDL).parquet(config.quarantine_path).toPandas()
    day2 = quarantine[quarantine["file"].str.endswith("/day_2")]
    assert dict(zip(day2["line_number"] - 1, day2["reason"])) == reasons  # 1-based line numbers
    assert list(day2["raw_line"]) == [lines[i] for i in sorted(reasons)]
    damaged = quarantine[quarantine["file"].str.endswith("/day_4.gz")]
    assert "truncated_gzip" in set(damaged["reason"]) and damaged["line_number"].isna().sum() == 1
    assert _marker(config.quarantine_path)["malformed_rows"] == result.malformed_rows
    summary = result.console_summary()  # what the ingest command prints on stdout
    assert f"{result.malformed_rows:,} malformed" in summary and config.quarantine_path in summary
    assert "1 damaged and 1 empty file(s) lost at least 2 line(s)" in summary and "bad_label" in summary


@pytest.mark.parametrize("damage", ["truncated_gzip", "plain_text_named_gz", "empty"])
def test_damaged_input_fails_unless_allowed(spark, tmp_path, damage):
    """Lines lost to a damaged file are input lines: the day fails, naming the field, unless it is allowed."""
    rng = np.random.default_rng(5)
    text = "".join(line + "\n" for line in _format(_random_rows(rng, 2000)))
    folder = tmp_path / "in"
    folder.mkdir()
    _write(folder / "day_0", _format(_random_rows(rng, 500)))
    if damage == "truncated_gzip":
        whole = gzip.compress(text.encode())
        (folder / "day_1.gz").write_bytes(whole[: len(whole) * 2 // 3])
    elif damage == "plain_text_named_gz":
        (folder / "day_1.gz").write_text(text)
    else:
        (folder / "day_1").write_text("")
    config = _config(tmp_path, [folder])
    with pytest.raises(DamagedInputError, match=r"data.allow_truncated_files: 1 input file\(s\) .*day_1"):
        run_stage("ingest", spark, config)
    assert not Path(config.parquet_path).exists() and _marker(config.quarantine_path) is not None
    allowed = run_stage("ingest", spark, _config(tmp_path, [folder], name="allowed", allow_truncated_files=True,
                                        max_malformed_share=0.01))
    assert allowed.lost_lines >= 1 and allowed.rows_per_day[0] == 500


def test_share_above_limit_fails_without_data_output(spark, tmp_path):
    lines, reasons, _ = _malformed_day(np.random.default_rng(3))
    path = _write(tmp_path / "day_2", lines)
    config = _config(tmp_path, [path], max_malformed_share=0.01)
    share = len(reasons) / len(lines)
    message = (rf"^data\.max_malformed_share: {100 * share:.4f}% of the input lines are malformed .*"
               r"got 0\.01 \(1\.0000%\)")
    with pytest.raises(MalformedShareError, match=message) as raised:
        run_stage("ingest", spark, config)
    assert failure_line(raised.value) == (str(raised.value), USAGE_EXIT)  # the input is wrong: exit 2
    assert str(config.quarantine_path) in str(raised.value)
    assert not Path(config.parquet_path).exists()
    assert _marker(config.quarantine_path) is not None
    assert spark.read.schema(QUARANTINE_DDL).parquet(config.quarantine_path).count() == len(reasons)


def test_kaggle_train_txt_is_cut_into_equal_consecutive_days(spark, tmp_path):
    rows = _random_rows(np.random.default_rng(5), 1000)
    lines = _format(rows)
    lines.insert(300, "1\tnot a row")  # a malformed line in day 2 still takes a position
    path = _write(tmp_path / "train.txt", lines)
    config = _config(tmp_path, [path], kaggle_days=7, max_malformed_share=0.01)
    result = run_stage("ingest", spark, config)
    starts = [d * 1001 // 7 for d in range(7)]  # floor(d N / 7) with N = 1001 lines
    line_index = np.array([i if i < 300 else i + 1 for i in range(1000)])
    day = np.array([sum(i >= s for s in starts) - 1 for i in line_index])
    position = line_index - np.array(starts)[day]
    expected = pd.concat([_expected(d, rows[day == d], position[day == d]) for d in range(7)])
    _assert_same(_table(spark, config.parquet_path), expected)
    assert result.rows_per_day == {d: int((day == d).sum()) for d in range(7)}
    assert result.malformed_by_reason == {"bad_column_count": 1} and result.files[0].day == "kaggle"


def test_round_trip_of_the_synthetic_twin(spark, tmp_path):
    """generate (Parquet + gzip TSV made of concatenated members) -> ingest the TSV -> the same table."""
    twin = config_from_dict({
        "run": {"output_dir": str(tmp_path / "twin")},
        "synthetic": {"rows_per_day": 2500, "days": 2, "write_tsv": True, "gzip": True, "partitions": 4},
    })
    run_stage("generate", spark, twin)
    config = _config(tmp_path, [tmp_path / "twin" / "criteo"], name="ingested")
    result = run_stage("ingest", spark, config)
    assert (result.input_lines, result.malformed_rows, result.corrupt_files) == (5000, 0, 0)
    pd.testing.assert_frame_equal(_table(spark, config.parquet_path), _table(spark, twin.parquet_path))


def test_reuse_follows_the_fields_read_and_the_input_files(spark, tmp_path, days):
    root, _ = days
    inputs = tmp_path / "in"
    shutil.copytree(root / "plain", inputs)
    config = _config(tmp_path, [inputs])
    first = run_stage("ingest", spark, config)
    assert not first.skipped and run_stage("ingest", spark, config).skipped
    assert run_stage("ingest", spark, _config(tmp_path, sorted(inputs.iterdir()))).skipped, "the folder's files, listed"
    assert not run_stage("ingest", spark, _config(tmp_path, [inputs], max_malformed_share=0.01)).skipped
    with open(inputs / "day_1", "a", encoding="utf-8") as handle:  # the input changes: one more line
        handle.write((inputs / "day_1").read_text(encoding="utf-8").splitlines()[0] + "\n")
    changed = run_stage("ingest", spark, _config(tmp_path, [inputs], max_malformed_share=0.01))
    assert not changed.skipped and changed.rows_per_day == {0: 3000, 1: 1701}


def test_isal_and_spark_decode_the_same_lines_of_multi_member_damaged_and_odd_line_ends(spark, tmp_path):
    """Step 0's two decoders (ISA-L in a task for local files, Spark's codec elsewhere) give the same lines: a
    two-member gzip with CRLF and a lone CR, a truncated gzip (what precedes the damage) and a plain file named .gz."""
    from lia_spark.engine.ingest import criteo_files

    rng = np.random.default_rng(23)
    text = "".join(line + "\n" for line in _format(_random_rows(rng, 3000))).encode()
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "day_0.gz").write_bytes(gzip.compress(text[:50_000].replace(b"\n", b"\r\n", 3) + b"x\ry\n")
                                      + gzip.compress(text[50_000:]))
    whole = gzip.compress(text)
    (folder / "day_1.gz").write_bytes(whole[: len(whole) // 2])
    (folder / "day_2.gz").write_bytes(text[:20_000])
    sources = criteo_files.list_sources(spark, [str(folder)])
    lines = {}
    for name, decode in (("isal", criteo_files._decoded_by_isal), ("spark", criteo_files._decoded_by_spark)):
        copies = decode(spark, list(enumerate(sources)), str(tmp_path / name)).copies
        frame = criteo_files.read_lines(spark, sources, copies).select("file_index", "line").toPandas()
        lines[name] = {index: sorted(group["line"].map(bytes)) for index, group in frame.groupby("file_index")}
    assert lines["isal"][0] == lines["spark"][0] and len(lines["isal"][0]) == 3001  # a lone CR ends no line
    spark_kept, isal_kept = set(lines["spark"].get(1, [])), set(lines["isal"][1])
    assert spark_kept <= isal_kept and len(isal_kept) < 3000  # ISA-L keeps every line decoded before the damage
    assert len(isal_kept - set(text.split(b"\n"))) <= 1  # but the cut last one is whole
    assert 2 not in lines["isal"] and 2 not in lines["spark"]  # not gzip: nothing decoded


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["", "a", "bb\r", "\r", "x" * 40, "0\t1"]), max_size=25), st.booleans(),
       st.integers(min_value=1, max_value=60), st.integers(min_value=1, max_value=9))
def test_chunks_own_every_line_once_whatever_the_chunk_and_read_sizes(tmp_path_factory, lines, final_lf, split,
                                                                      read_bytes):
    """The tasks' chunks: each line of the file comes from exactly one chunk, in order, as Spark's text reader cuts
    lines (at LF only, a final LF ends the last line), and each chunk's count is the lines its blocks hold."""
    path = tmp_path_factory.mktemp("chunks") / "day_0"
    text = "\n".join(lines).encode() + (b"\n" if final_lf and lines else b"")
    path.write_bytes(text)
    expected = text.split(b"\n")[:-1] if text.endswith(b"\n") else text.split(b"\n") if text else []
    found = []
    for start in range(0, len(text), split):
        chunk = local_files.Chunk(0, str(path), start, min(start + split, len(text)), len(text))
        owned = []
        for data, line_start, line_end in local_files.chunk_blocks(chunk, read_bytes):
            owned += [data[begin:end].tobytes() for begin, end in zip(line_start, line_end)]
        assert local_files.count_chunk_lines(chunk, read_bytes) == len(owned)
        found += owned
    assert found == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=1000), max_size=40), st.integers(min_value=1, max_value=12))
def test_task_groups_hold_every_chunk_once_with_balanced_bytes(sizes, groups):
    """LPT grouping: each chunk in exactly one group, in position order, at most ``groups`` groups and none empty,
    and no group above the mean load by more than the largest chunk."""
    grouped = local_files.balanced_groups(sizes, groups)
    assert sorted(position for group in grouped for position in group) == list(range(len(sizes)))
    assert all(group == sorted(group) and group for group in grouped)
    assert len(grouped) == min(groups, len(sizes))
    if sizes:
        loads = [sum(sizes[position] for position in group) for group in grouped]
        assert max(loads) <= sum(sizes) / len(grouped) + max(sizes)


def test_written_rows_are_counted_from_the_footers_and_a_shortfall_fails(tmp_path):
    """The task I/O path's check before the commit: rows per day from the visible files' footers (a killed attempt's
    hidden file is not counted); rows short of the scan's count fail the ingest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lia_spark.engine.ingest.stage import _verified

    for day, name, rows in ((0, "part-00000.snappy.parquet", 5), (0, "part-00001.snappy.parquet", 3),
                            (2, "part-00000.snappy.parquet", 4), (2, ".part-00001.snappy.parquet.ab.tmp", 100)):
        (tmp_path / f"{names.DAY}={day}").mkdir(exist_ok=True)
        pq.write_table(pa.table({"x": list(range(rows))}), tmp_path / f"{names.DAY}={day}" / name)
    assert local_files.rows_per_day(str(tmp_path)) == {0: 8, 2: 4}
    result = IngestResult(parquet_path="", quarantine_path="", input_lines=12, valid_rows=12, malformed_rows=0,
                          malformed_share=0.0, malformed_by_reason={}, corrupt_files=0, empty_files=0, lost_lines=0,
                          rows_per_day={0: 8, 1: 0, 2: 4}, files=[], seconds=0.0)
    written = local_files.rows_per_day(str(tmp_path))
    assert _verified(result, 0.0, written).valid_rows == 12
    with pytest.raises(RuntimeError, match=r"ingest wrote \{0: 8, 2: 4\} rows per day but the scan counted "
                                           r"\{0: 8, 2: 5\}; nothing was committed"):
        _verified(dataclasses.replace(result, rows_per_day={0: 8, 2: 5}), 0.0, written)


@pytest.mark.parametrize("input_kind", ["days", "kaggle"])
def test_the_tasks_write_what_spark_writes(spark, tmp_path, input_kind):
    """data.task_io (each task reads its byte range and writes its Parquet) against Spark's reader and writer, in
    chunks of at most 128 KiB: the same rows, row ids, quarantine and counts, on malformed lines, CRLF and a lone
    CR, empty lines, a line longer than a chunk, a last line without LF, a gzip day and Kaggle's train.txt."""
    rng = np.random.default_rng(29)
    folder = tmp_path / "in"
    folder.mkdir()
    lines, _, _ = _malformed_day(rng)
    good = _format(_random_rows(rng, 1500))
    if input_kind == "days":
        _write(folder / "day_2", lines)
        (folder / "day_5").write_bytes(("\n".join(good[:700] + ["1\t" + "7" * 300_000] + good[700:] + [""] * 3
                                                  + good[:5])).encode())  # no final LF
        _write(folder / "day_6", good, gz=True)
    else:
        _write(folder / "train.txt", lines + good)
    settings = {"spark.sql.files.maxPartitionBytes": "131072", "spark.sql.files.openCostInBytes": "1024"}
    previous = {key: spark.conf.get(key) for key in settings}
    results, tables, quarantines = {}, {}, {}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        for task_io in (True, False):
            config = _config(tmp_path, [folder], name=f"out-{task_io}", task_io=task_io, max_malformed_share=0.5)
            results[task_io] = dataclasses.replace(run_stage("ingest", spark, config), seconds=0.0)
            tables[task_io] = _table(spark, config.parquet_path)
            quarantines[task_io] = (spark.read.schema(QUARANTINE_DDL).parquet(config.quarantine_path).toPandas()
                                    .assign(file=lambda frame: frame["file"].str.rsplit("/", n=1).str[-1])
                                    .sort_values(["file", "line_number"]).reset_index(drop=True))
            written = [name for _, _, names_ in os.walk(config.parquet_path) for name in names_]
            assert not [name for name in written if name.endswith(local_files.HIDDEN_SUFFIX)]
    finally:
        for key, value in previous.items():
            spark.conf.set(key, value)
    assert dataclasses.replace(results[True], parquet_path="", quarantine_path="", files=[]) == dataclasses.replace(
        results[False], parquet_path="", quarantine_path="", files=[])
    assert [dataclasses.replace(item, file=Path(item.file).name) for item in results[True].files] == [
        dataclasses.replace(item, file=Path(item.file).name) for item in results[False].files]
    pd.testing.assert_frame_equal(tables[True], tables[False])
    pd.testing.assert_frame_equal(quarantines[True], quarantines[False])
    assert results[True].malformed_rows >= 8 and len(tables[True]) == results[True].valid_rows >= 1700


def test_a_file_that_changes_between_the_count_and_the_parse_fails_the_ingest():
    from lia_spark.engine.ingest.criteo_files import SourceFile
    from lia_spark.engine.ingest.stage import _check_chunk_lines, _FileScan

    sources = [SourceFile("/in/day_0", 100, 0), SourceFile("/in/day_1", 100, 1)]
    counted = [_FileScan(blocks={0: 3, 50: 2}), _FileScan(blocks={0: 4})]
    _check_chunk_lines(sources, [_FileScan(blocks={0: 3, 50: 2}), _FileScan(blocks={0: 4})], counted)
    with pytest.raises(RuntimeError, match=r"data.criteo_paths: \['/in/day_1'\] changed while they were ingested"):
        _check_chunk_lines(sources, [_FileScan(blocks={0: 3, 50: 2}), _FileScan(blocks={0: 5})], counted)
