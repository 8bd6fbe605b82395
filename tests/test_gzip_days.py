"""Gzip days are read as ``gzip -d`` reads them, by both decoders of the ingest (ISA-L in a task for local files,
``data.split_gzip: true``; Spark's codec, ``false`` and every non-local file system): every member of a multi-member
file; zero padding after the last member ignored silently; trailing garbage ignored with one WARNING naming the file
and its bytes; a truncated member refused (or, when allowed, its lines before the damage kept and the loss
counted). The ingested rows are compared with what ``gzip -dc`` prints for the same file, line by line.
"""
from __future__ import annotations

import gzip
import logging
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_ingest_spark import _format, _random_rows, _table

from lia_spark import names
from lia_spark.engine.ingest.criteo_files import list_sources, walked_gzip
from lia_spark.engine.ingest.gzip_members import decode_members
from lia_spark.engine.ingest.stage import DamagedInputError
from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.engine.spark.filesystem import HadoopFiles
from lia_spark.run.config import config_from_dict
from lia_spark.run.failures import failure_line

GZIP = shutil.which("gzip")
pytestmark = pytest.mark.skipif(GZIP is None, reason="needs the gzip program, the reference decoder")


def _text(rows: int, seed: int) -> bytes:
    return "".join(line + "\n" for line in _format(_random_rows(np.random.default_rng(seed), rows))).encode()


def _days() -> dict[str, bytes]:
    """The gzip files of each case, by name."""
    first, second = _text(300, 1), _text(200, 2)
    large_first, large_second = _text(6000, 3), _text(4000, 4)  # members of more than one decoder read each
    whole = gzip.compress(large_first)
    return {
        "zero_padding": gzip.compress(first) + b"\0" * 512,
        "trailing_garbage": gzip.compress(first) + b"this is not gzip\n" * 3,
        "two_members_small": gzip.compress(first) + gzip.compress(second),
        "two_members_large": gzip.compress(large_first) + gzip.compress(large_second),
        "two_members_padded": gzip.compress(first) + gzip.compress(second) + b"\0" * 1024,
        "truncated": whole[: len(whole) * 2 // 3],
    }


DAYS = _days()


def _gzip_lines(path: Path) -> tuple[list[str], int]:
    """The lines ``gzip -dc`` prints for ``path`` (a cut last line included) and its exit code."""
    completed = subprocess.run([GZIP, "-dc", str(path)], capture_output=True, check=False)
    return completed.stdout.decode().split("\n")[:-1] + ([completed.stdout.decode().rsplit("\n", 1)[-1]]
                                                         if not completed.stdout.endswith(b"\n") else []), \
        completed.returncode


def _config(tmp_path: Path, folder: Path, split_gzip: bool, **data):
    return config_from_dict({
        "run": {"output_dir": str(tmp_path / "out")},
        "data": {"source": "criteo", "criteo_paths": [str(folder)], "split_gzip": split_gzip, **data},
        "tracking": {"enabled": False},
    })


def _day(tmp_path: Path, case: str) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "day_1.gz").write_bytes(DAYS[case])
    return folder


@pytest.mark.parametrize("split_gzip", [True, False], ids=["isal", "spark-codec"])
@pytest.mark.parametrize("case", ["zero_padding", "trailing_garbage", "two_members_small", "two_members_large",
                                  "two_members_padded"])
def test_an_intact_gzip_day_gives_the_lines_gzip_gives(spark, tmp_path, caplog, case, split_gzip):
    folder = _day(tmp_path, case)
    expected, code = _gzip_lines(folder / "day_1.gz")
    assert code == (2 if case == "trailing_garbage" else 0)  # gzip -d: 2 is its "trailing garbage ignored" warning
    config = _config(tmp_path, folder, split_gzip)
    with caplog.at_level(logging.WARNING, logger="lia_spark"):
        result = run_stage("ingest", spark, config)
    (counts,) = result.files
    assert (counts.status, counts.lines, result.malformed_rows, result.lost_lines) == ("ok", len(expected), 0, 0)
    table = _table(spark, config.parquet_path)
    assert list(table[names.ROW_ID]) == sorted(table[names.ROW_ID]) and set(table[names.DAY]) == {1}
    assert _format(table) == expected  # count and content, in order
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    if case == "trailing_garbage":
        assert [line for line in warnings if "trailing garbage ignored" in line] == [
            f"ingest: file:{folder}/day_1.gz: decompression OK, trailing garbage ignored: 51 byte(s) after the last "
            "of its 1 gzip member(s), as gzip -d ignores them; its lines are all kept"]
    else:
        assert not [line for line in warnings if "gzip" in line or "truncated" in line], warnings


@pytest.mark.parametrize("split_gzip", [True, False], ids=["isal", "spark-codec"])
def test_a_truncated_gzip_day_is_refused_or_its_decoded_lines_kept_when_allowed(spark, tmp_path, split_gzip):
    folder = _day(tmp_path, "truncated")
    expected, code = _gzip_lines(folder / "day_1.gz")
    assert code == 1 and 0 < len(expected) < 6000  # gzip -d: "unexpected end of file", what it decoded printed
    with pytest.raises(DamagedInputError) as raised:
        run_stage("ingest", spark, _config(tmp_path, folder, split_gzip))
    line, exit_code = failure_line(raised.value)
    assert exit_code == 2 and line.startswith("data.allow_truncated_files: 1 input file(s)") and "day_1.gz" in line
    allowed = _config(tmp_path, folder, split_gzip, allow_truncated_files=True, max_malformed_share=0.01)
    result = run_stage("ingest", spark, allowed)
    (counts,) = result.files
    cut = len(expected[-1].split("\t")) != 40  # gzip's last line, cut inside its fields
    assert cut  # (the case is built so): ISA-L keeps it, quarantined as malformed; Spark's codec never returns it
    assert counts.status == "truncated_gzip" and result.lost_lines == 1
    assert counts.lines == (len(expected) if split_gzip else len(expected) - 1)
    assert _format(_table(spark, allowed.parquet_path)) == expected[:-1]  # every whole line gzip printed


@pytest.mark.parametrize("case", sorted(DAYS))
@pytest.mark.parametrize("read_size", [1, 5, 4096])
def test_the_member_decoder_writes_what_gzip_writes_whatever_the_reads(tmp_path, case, read_size):
    """:func:`decode_members` on the bytes in reads of any size: gzip -dc's output, byte for byte, and the trailing
    bytes counted."""
    data = DAYS[case]
    if read_size == 1 and len(data) > 200_000:
        pytest.skip("one-byte reads of a large file: the small cases cover them")
    path = tmp_path / "day_1.gz"
    path.write_bytes(data)
    reference = subprocess.run([GZIP, "-dc", str(path)], capture_output=True, check=False).stdout
    written = []
    decoded = decode_members((data[start:start + read_size] for start in range(0, len(data), read_size)),
                             written.append)
    assert b"".join(written) == reference and decoded.decoded == len(reference)
    assert bool(decoded.damage) == (case == "truncated")
    assert (decoded.trailing, decoded.trailing_zeros) == {"zero_padding": (512, True), "two_members_padded": (
        1024, True), "trailing_garbage": (51, False)}.get(case, (0, True))


def test_a_gzip_day_on_a_hadoop_file_system_is_walked_through_the_jvm(spark, tmp_path):
    """:func:`walked_gzip` of a file only Hadoop reaches reads it through the JVM (``HadoopFiles.read_chunks``): the
    same bytes in order, so the same decode."""
    folder = _day(tmp_path, "trailing_garbage")
    path = folder / "day_1.gz"
    assert b"".join(HadoopFiles(spark).read_chunks(f"file://{path}", 4096)) == path.read_bytes()
    (source,) = list_sources(spark, [str(folder)])
    through_jvm = decode_members(HadoopFiles(spark).read_chunks(source.path, 1000))
    assert through_jvm == walked_gzip(spark, source) and through_jvm.trailing == 51
