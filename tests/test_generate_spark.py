"""Generate stage on local Spark: Parquet/truth/TSV outputs, partition invariance, gzip, resume.

Expected values come from the pure generator (lia_spark.kernels.synthetic), and the TSV is parsed back here with
plain Python (int(), int(x, 16)), independently of the Spark writer's formatting.
"""
from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from json_support import check_result

from lia_spark import names
from lia_spark.engine.generate.stage import partition_count
from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.engine.runtime.outputs import MARKER
from lia_spark.kernels import criteo, synthetic
from lia_spark.run.config import config_from_dict

ROWS_PER_DAY = 3_000
DAYS = 2
SEED = 77


def _config(out: Path, *, partitions: int, gz: bool):
    return config_from_dict({
        "run": {"output_dir": str(out), "seed": SEED},
        "synthetic": {"rows_per_day": ROWS_PER_DAY, "days": DAYS, "write_tsv": True, "gzip": gz,
                      "partitions": partitions},
    })


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    """The same twin written with 1 partition (plain TSV) and 4 partitions (gzip TSV)."""
    base = tmp_path_factory.mktemp("generate")
    one = run_stage("generate", spark, _config(base / "one", partitions=1, gz=False))
    four = run_stage("generate", spark, _config(base / "four", partitions=4, gz=True))
    return base, one, four


@pytest.fixture(scope="module")
def expected() -> dict[int, synthetic.TwinRows]:
    params = synthetic.calibrate_twin(seed=SEED, click_rate=0.032, days=DAYS)
    return {day: synthetic.generate_rows(params, day=day, positions=np.arange(ROWS_PER_DAY)) for day in range(DAYS)}


def _sorted_table(spark, path: str) -> pd.DataFrame:
    return spark.read.parquet(path).toPandas().sort_values(names.ROW_ID).reset_index(drop=True)


def test_result_counts_and_layout(runs, expected):
    base, one, four = runs
    assert one.rows == four.rows == ROWS_PER_DAY * DAYS
    assert one.rows_by_day == {"0": ROWS_PER_DAY, "1": ROWS_PER_DAY}
    assert check_result(one, "generate")["rows"] == check_result(four, "generate")["rows"]  # results/generate.json
    assert one.clicks == four.clicks == sum(int(rows.label.sum()) for rows in expected.values())
    assert (one.partitions, four.partitions) == (2, 4)  # rounded up to a multiple of the day count
    assert one.metrics()["click_rate"] == pytest.approx(one.clicks / one.rows)
    for name in ("data", "truth", "criteo"):
        assert (base / "one" / name / MARKER).is_file()
    assert sorted(p.name for p in (base / "four" / "criteo").iterdir() if not p.name.startswith((".", "_"))) == [
        "day_0.gz", "day_1.gz"]


def test_parquet_has_storage_columns_and_no_eta_and_matches_the_generator(spark, runs, expected):
    base, _, _ = runs
    df = spark.read.parquet(str(base / "one" / "data"))
    storage = dict(spark.createDataFrame([], criteo.STORAGE_DDL).dtypes)
    assert dict(df.dtypes) == storage
    table = _sorted_table(spark, str(base / "one" / "data"))
    for day, rows in expected.items():
        part = table[table[names.DAY] == day]
        np.testing.assert_array_equal(part[names.ROW_ID], rows.row_id)
        np.testing.assert_array_equal(part[names.LABEL], rows.label)
        for name in criteo.INT_COLUMNS + criteo.CAT_COLUMNS:
            np.testing.assert_array_equal(part[name].isna(), rows.missing[name])
            np.testing.assert_array_equal(part[name].fillna(0).astype(np.int64), rows.values[name])


def test_truth_holds_the_generators_eta(spark, runs, expected):
    base, _, _ = runs
    truth = _sorted_table(spark, str(base / "one" / "truth"))
    assert list(truth.columns) == ["row_id", "eta", "day"]
    np.testing.assert_array_equal(truth["eta"], np.concatenate([expected[d].eta for d in range(DAYS)]))


def test_same_seed_gives_identical_outputs_for_any_partition_count(spark, runs):
    base, _, _ = runs
    pd.testing.assert_frame_equal(_sorted_table(spark, str(base / "one" / "data")),
                                  _sorted_table(spark, str(base / "four" / "data")))
    pd.testing.assert_frame_equal(_sorted_table(spark, str(base / "one" / "truth")),
                                  _sorted_table(spark, str(base / "four" / "truth")))
    for day in range(DAYS):
        plain = (base / "one" / "criteo" / f"day_{day}").read_bytes()
        assert gzip.decompress((base / "four" / "criteo" / f"day_{day}.gz").read_bytes()) == plain
        # Spark's (Hadoop's) gzip reader also reads every member of the concatenated file.
        assert spark.read.text(str(base / "four" / "criteo" / f"day_{day}.gz")).count() == ROWS_PER_DAY


def test_tsv_lines_parse_back_to_the_generated_rows_in_position_order(runs, expected):
    base, _, _ = runs
    for day, rows in expected.items():
        text = (base / "one" / "criteo" / f"day_{day}").read_text(encoding="ascii")
        assert text.endswith("\n")
        lines = text[:-1].split("\n")
        assert len(lines) == ROWS_PER_DAY
        for position in range(0, ROWS_PER_DAY, 7):
            fields = lines[position].split("\t")
            assert len(fields) == 40
            assert int(fields[0]) == rows.label[position]
            for name, field in zip(criteo.INT_COLUMNS, fields[1:14]):
                if rows.missing[name][position]:
                    assert field == ""
                else:
                    assert field == str(int(field)) and int(field) == rows.values[name][position]
            for name, field in zip(criteo.CAT_COLUMNS, fields[14:]):
                if rows.missing[name][position]:
                    assert field == ""
                else:
                    assert len(field) == 8 and field == field.lower() and int(field, 16) == rows.values[name][position]


def test_rerun_reuses_complete_outputs(spark, runs):
    base, one, _ = runs
    again = run_stage("generate", spark, _config(base / "one", partitions=1, gz=False))
    assert again.skipped and again.clicks == one.clicks and again.intercepts == one.intercepts


def test_partition_count_is_a_multiple_of_the_days_and_rejects_other_sources(spark, tmp_path):
    config = _config(tmp_path, partitions=5, gz=False)
    assert partition_count(config, 2) == 6
    auto = config_from_dict({"synthetic": {"rows_per_day": 10_000_000, "days": 3}})
    assert partition_count(auto, 2) == 30
    with pytest.raises(ValueError, match="data.source"):
        run_stage("generate", spark, dataclasses.replace(config,
                                                         data=dataclasses.replace(config.data, source="criteo")))
