"""Every read of a committed Parquet output verifies its pages: one bit flipped inside a page of any column a stage
reads (the file's size kept, Hadoop's ``.crc`` beside it recomputed or removed, so only the page's own CRC can
tell) fails the stage with one line naming the file, its table and run.force=true (exit 1), whether Spark read the
page, pyarrow on the driver, or pyarrow in a Spark Python worker; and every page of every Parquet file a run
commits carries a CRC that matches, so the verification cannot pass for want of one."""
from __future__ import annotations

import contextlib
import math
import shutil
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest
from parquet_pages import flip_in_column, pages

from lia_spark.engine.orchestration.pipeline import run_pipeline
from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.engine.posteriors.summary import _rows_in_ranges, _setting_key
from lia_spark.engine.posteriors.writing import ROW_SCHEMA
from lia_spark.engine.runtime.outputs import MARKER
from lia_spark.engine.runtime.parquet_reads import verified_frame
from lia_spark.run.config import Config, config_from_dict
from lia_spark.run.failures import RUNTIME_EXIT, DamagedFileError, failure_line

STAGES = ["data", "train", "posteriors", "utility", "audit"]


@pytest.fixture(scope="module")
def committed(spark, tmp_path_factory) -> Config:
    """A small run's committed outputs (2 days x 2,000 rows; rows of the posteriors written), tracking off."""
    out = tmp_path_factory.mktemp("verified-reads") / "out"
    config = config_from_dict({
        "run": {"name": "verified-reads", "output_dir": str(out), "stages": STAGES},
        "synthetic": {"rows_per_day": 2000, "days": 2},
        "mechanisms": {"epsilons": [2.0], "bag_sizes": [8]},
        "models": {"n_estimators": 5, "early_stopping_rounds": 0, "hash_buckets": 1024},
        "utility": {"epsilons": [4.0], "bag_sizes": [8]},
        "audit": {"shadows": 0},
        "tracking": {"enabled": False},
    })
    run_pipeline(spark, config)
    return config


def _first_file(table: Path) -> Path:
    return sorted(path for path in table.rglob("*.parquet") if not path.name.startswith("."))[-1]


@contextlib.contextmanager
def _flipped(file: Path, column: str, crc: str) -> Iterator[None]:
    """One bit flipped inside the first data page of ``column`` in ``file`` (its Hadoop ``.crc`` recomputed or
    removed, ``crc``), the file and its ``.crc`` put back at exit."""
    hadoop_crc = file.with_name(f".{file.name}.crc")
    kept = {path: path.read_bytes() for path in (file, hadoop_crc) if path.exists()}
    flip_in_column(file, column, crc=crc)
    try:
        yield
    finally:
        for path, data in kept.items():
            path.write_bytes(data)


def _refused(error: BaseException, file: Path) -> str:
    """The command's line for ``error``: exit 1, one line naming ``file``, its table and run.force=true."""
    line, code = failure_line(error)
    table = file.parent.parent if file.parent.name.startswith("day=") else file.parent
    assert code == RUNTIME_EXIT, line
    assert "\n" not in line and file.name in line and line.startswith(f"{file}: damaged") and \
        f"in the table {table};" in line, line
    assert "its bytes changed after they were written" in line and "run.force=true" in line, line
    return line


# (stage, table below run.output_dir, column): every column each stage reads from a committed table.
READS = [
    ("posteriors", "data", "label"), ("posteriors", "data", "row_id"),  # pyarrow in Python workers
    ("posteriors", "truth", "eta"), ("posteriors", "truth", "row_id"),  # the prior
    ("train", "data", "label"), ("train", "data", "row_id"), ("train", "data", "I1"), ("train", "data", "C1"),
    ("audit", "models/canaries", "label"), ("audit", "models/canaries", "hidden_bit"),
    ("audit", "models/canaries", "counterfactual_label"), ("audit", "models/canaries", "target_prediction"),
    ("audit", "models/canaries", "proxy_prediction"), ("audit", "models/canaries", "row_id"),
    ("utility", "data", "label"), ("utility", "data", "I2"),
    ("utility", "posteriors/summary", "mean_additive_advantage"), ("utility", "posteriors/summary", "mechanism"),
]


@pytest.mark.parametrize("stage, table, column", READS, ids=[f"{s}-{t}-{c}" for s, t, c in READS])
def test_a_flipped_page_of_any_column_a_stage_reads_fails_the_stage_naming_the_file(committed, spark, stage, table,
                                                                                     column):
    out = Path(committed.run.output_dir)
    file = _first_file(out / table)
    output = out / {"posteriors": "posteriors", "train": "models", "audit": "audit", "utility": "utility"}[stage]
    marker = (output / MARKER).read_bytes()
    crc = "remove" if READS.index((stage, table, column)) % 2 else "recompute"
    with _flipped(file, column, crc), pytest.raises(Exception) as raised:
        run_stage(stage, spark, committed, reuse=False)
    _refused(raised.value, file)
    assert (output / MARKER).read_bytes() == marker  # the damaged values were not used: the old output stands


SUMMARY_COLUMNS_READ = ["mechanism", "epsilon", "bag_size", "I"]


@pytest.mark.parametrize("column", SUMMARY_COLUMNS_READ)
def test_the_summary_refuses_a_flipped_page_of_the_rows_the_workers_wrote(committed, spark, column, tmp_path):
    """The summary's exact percentiles read the stage's own result rows in Python workers (pyarrow)."""
    rows = tmp_path / "rows"
    shutil.copytree(Path(committed.run.output_dir) / "posteriors" / "rows", rows)
    file = _first_file(rows)
    flip_in_column(file, column, crc="remove")
    summary = pd.read_csv(Path(committed.run.output_dir) / "posteriors" / "summary.csv")
    everything = {_setting_key(row.mechanism, row.epsilon, row.bag_size): [(0, 0.0, math.inf)]
                  for row in summary.itertuples()}  # every row of every setting
    with pytest.raises(Exception) as raised:
        _rows_in_ranges(spark, str(rows), everything).collect()
    _refused(raised.value, file)


@pytest.mark.parametrize("column", ROW_SCHEMA.fieldNames())
def test_the_driver_refuses_a_flipped_page_of_any_result_column(committed, column, tmp_path):
    """The plot sample (the result rows' columns, read on the driver by :func:`verified_frame`)."""
    rows = tmp_path / "rows"
    shutil.copytree(Path(committed.run.output_dir) / "posteriors" / "rows", rows)
    file = _first_file(rows)
    verified_frame(str(rows))
    flip_in_column(file, column, crc="remove")
    with pytest.raises(DamagedFileError) as raised:
        verified_frame(str(rows))
    _refused(raised.value, file)


def test_every_page_of_every_committed_parquet_file_carries_a_matching_crc(committed):
    out = Path(committed.run.output_dir)
    files = [path for path in out.rglob("*.parquet") if not path.name.startswith(".")]
    tables = {str(path.relative_to(out)).split("/day=")[0].rsplit("/", 1)[0] for path in files}
    assert {"data", "truth", "models/canaries", "models/test_predictions", "posteriors/rows", "posteriors/summary",
            "audit/results"} <= tables
    unchecked = {str(path.relative_to(out)): [(page.column, page.type) for page in pages(path)
                                              if not page.crc_matches(path.read_bytes())] for path in files}
    assert {name: found for name, found in unchecked.items() if found} == {}
    assert all(pages(path) for path in files)
