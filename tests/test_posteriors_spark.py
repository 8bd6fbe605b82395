"""Spark posteriors stage: exact bags, equality with the in-process kernels, partition invariance, summaries.

Reference values: bags from the in-process kernel mechanisms.assign_bags (a plain numpy sort of the hash
keys, same bagging units), releases and posteriors from the pure kernels called directly on those bags, summaries from
advantage.summarize on the stage's rows. Tolerances: releases, bags and counts exact; kernel outputs equal
to 1e-12 relative (the same float64 code on the same bags, batched differently); means 1e-12.
"""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from json_support import check_result

from lia_spark.engine.models.feature_frames import check_days_present, released_day_field, released_days
from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.engine.posteriors.reading import input_parts, load_input, local_path, side_row_counts, side_rows
from lia_spark.engine.posteriors.summary import SUMMARY_COLUMNS, summarize_digest
from lia_spark.engine.posteriors.units import (ARROW_SIDE_SCHEMA, UnitSpill, bagged_units, file_blobs, frame_blobs,
                                               partition_codes, posterior_input, row_units, shuffled_units, spill_units,
                                               unpacked)
from lia_spark.engine.posteriors.writing import (UNIT_ROWS, check_result_files, posterior_rows, write_posteriors,
                                                 write_spilled_posteriors)
from lia_spark.kernels import advantage, hashing, mechanisms, posteriors
from lia_spark.kernels.criteo import STORAGE_DDL, make_row_id
from lia_spark.kernels.posterior_grid import Setting, plot_sample_mask, setting_seed, settings_grid
from lia_spark.names import SETTING_KEY
from lia_spark.records.posteriors_summary import BagCount
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import config_from_dict

ROWS = 20_000
SEED = 20261122
EPSILONS = (1.0, 4.0)
BAG_SIZES = (1, 8, 64)


@pytest.fixture(scope="module")
def stage(spark, tmp_path_factory):
    """A 2-day table (day 1 = ROWS rows), the eta truth table and one run of the stage on day 1 (mechanisms.days
    = target, the default: models.target_day = 1)."""
    out = tmp_path_factory.mktemp("posteriors_stage")
    rng = np.random.default_rng(3)
    days = np.repeat([0, 1], [500, ROWS])
    positions = np.concatenate([np.arange(500), np.arange(ROWS)])
    eta = rng.beta(0.6, 8.0, size=days.size)
    eta[:50] = 0.5
    labels = (rng.random(days.size) < eta).astype(np.int32)
    data = pd.DataFrame({"row_id": make_row_id(days, positions), "day": days.astype(np.int32), "label": labels})
    schema = spark.createDataFrame([], STORAGE_DDL).schema
    for field in schema.fieldNames()[3:]:
        data[field] = pd.array([None] * len(data), dtype="Int64")
    spark.createDataFrame(data, schema).repartition(3).write.partitionBy("day").parquet(str(out / "data"))
    truth = pd.DataFrame({"row_id": data["row_id"], "day": data["day"], "eta": eta})
    spark.createDataFrame(truth).write.parquet(str(out / "truth"))
    config = config_from_dict({
        "run": {"output_dir": str(out), "seed": SEED},
        "mechanisms": {"epsilons": list(EPSILONS), "bag_sizes": list(BAG_SIZES), "plot_sample_rows": 500},
    })
    result = run_stage("posteriors", spark, config)
    rows = pd.read_parquet(out / "posteriors" / "rows")
    day1 = truth[truth["day"] == 1].merge(data[["row_id", "label"]], on="row_id").rename(columns={"eta": "prior"})
    return {"spark": spark, "config": config, "result": result, "rows": rows, "input": day1, "out": out}


def _posterior_rows(data, priors, settings, *, unit_bits=0, bags_per_group=0):
    """The stage's per-row results (Spark rows) of data rows (row_id, label) and prior rows (row_id, prior)."""
    blobs = frame_blobs(data, priors, seed=SEED, unit_bits=unit_bits)
    return posterior_rows(blobs, settings=settings, seed=SEED, unit_bits=unit_bits, bags_per_group=bags_per_group)


def _setting_rows(rows: pd.DataFrame, setting: Setting) -> pd.DataFrame:
    eps = rows["epsilon"].isna() if math.isnan(setting.epsilon) else rows["epsilon"] == setting.epsilon
    cell = rows[(rows["mechanism"] == setting.mechanism) & eps & (rows["bag_size"] == setting.bag_size)]
    return cell.sort_values("row_id", ignore_index=True)


def _reference_bags(row_ids: np.ndarray, k: int, unit_bits: int = 0) -> np.ndarray:
    """Bag id of every row (in the given order) from the in-process kernel."""
    return mechanisms.assign_bags(row_ids, bag_size=k, seed=SEED, unit_bits=unit_bits)


def test_grid_and_day_filter(stage):
    rows, result = stage["rows"], stage["result"]
    expected = len(EPSILONS) + len(BAG_SIZES) + 2 * len(EPSILONS) * len(BAG_SIZES)
    assert result.settings == expected == len(result.summary)
    assert len(rows) == expected * ROWS
    assert result.input_rows == ROWS
    assert set(rows["row_id"]) == set(stage["input"]["row_id"])


@pytest.mark.parametrize("k", BAG_SIZES)
def test_bags_exact_and_match_in_process_sort(stage, k):
    for mechanism in ("llp", "llp_geometric"):
        eps = math.nan if mechanism == "llp" else EPSILONS[0]
        cell = _setting_rows(stage["rows"], Setting(mechanism, eps, k))
        sizes = cell.groupby("bag_id").size()
        assert list(sizes.index) == list(range(-(-ROWS // k)))
        assert (sizes.iloc[:-1] == k).all() and sizes.iloc[-1] == (ROWS % k or k)
        np.testing.assert_array_equal(cell["bag_id"].to_numpy(), _reference_bags(cell["row_id"].to_numpy(), k))
    assert stage["result"].bagging_units == 1
    assert stage["result"].bags[str(k)] == BagCount(bags=-(-ROWS // k), full_bags=ROWS // k,
                                                    remainder_sizes=(ROWS % k,) if ROWS % k else ())


def test_bagged_settings_equal_kernels_in_process(stage):
    truth = stage["input"].sort_values("row_id", ignore_index=True)
    for k in BAG_SIZES:
        bag_of_row = _reference_bags(truth["row_id"].to_numpy(), k)
        order = np.lexsort((truth["row_id"].to_numpy(), bag_of_row))
        bagged = truth.iloc[order].reset_index(drop=True)
        bag_ids, sizes = np.unique(bag_of_row[order], return_counts=True)
        sums = np.add.reduceat(bagged["label"].to_numpy(np.int64), np.r_[0, np.cumsum(sizes)[:-1]])
        priors = bagged["prior"].to_numpy()
        for eps in EPSILONS:
            lap = Setting("llp_laplace", eps, k)
            released = mechanisms.laplace_release(sums, sizes, bag_ids, epsilon=eps,
                                                  seed=setting_seed(SEED, lap))
            expected = posteriors.llp_laplace_bags(priors, sizes, released, epsilon=eps)
            _assert_rows_equal(stage["rows"], lap, bagged, np.repeat(released, sizes), expected)
            geo = Setting("llp_geometric", eps, k)
            clipped, released = mechanisms.geometric_release(sums, sizes, bag_ids, epsilon=eps,
                                                             seed=setting_seed(SEED, geo))
            expected = posteriors.llp_geometric_bags(priors, sizes, clipped, epsilon=eps)
            _assert_rows_equal(stage["rows"], geo, bagged, np.repeat(released, sizes), expected)
        expected = posteriors.llp_bags(priors, sizes, sums)
        _assert_rows_equal(stage["rows"], Setting("llp", math.nan, k), bagged,
                           np.repeat(sums / sizes, sizes), expected)


def test_rr_settings_equal_kernels_in_process(stage):
    truth = stage["input"].sort_values("row_id", ignore_index=True)
    ids, labels = truth["row_id"].to_numpy(), truth["label"].to_numpy()
    for eps in EPSILONS:
        setting = Setting("rr", eps, 1)
        released = mechanisms.rr_release(labels, ids, epsilon=eps, seed=setting_seed(SEED, setting))
        expected = posteriors.rr(truth["prior"].to_numpy(), released, epsilon=eps)
        cell = _assert_rows_equal(stage["rows"], setting, truth, released, expected)
        assert cell["bag_id"].isna().all()
        np.testing.assert_allclose(np.abs(cell["I"]), eps, rtol=1e-12)


def _assert_rows_equal(rows, setting, reference, released, expected) -> pd.DataFrame:
    reference = reference.assign(released=released, posterior=expected.posterior, I=expected.multiplicative_advantage)
    reference = reference.sort_values("row_id", ignore_index=True)
    cell = _setting_rows(rows, setting)
    np.testing.assert_array_equal(cell["row_id"], reference["row_id"])
    np.testing.assert_array_equal(cell["label"], reference["label"])
    np.testing.assert_array_equal(cell["prior"], reference["prior"])
    np.testing.assert_allclose(cell["released"], reference["released"], rtol=0, atol=0)
    np.testing.assert_allclose(cell["posterior"], reference["posterior"], rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(cell["I"], reference["I"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cell["additive_advantage"],
                               advantage.additive_advantage(reference["posterior"].to_numpy(),
                                                            reference["prior"].to_numpy()),
                               rtol=1e-12, atol=1e-15)
    return cell


def test_summary_equals_in_process_summaries(stage):
    summary = pd.read_parquet(stage["out"] / "posteriors" / "summary").sort_values(list(SETTING_KEY), ignore_index=True)
    csv = pd.read_csv(stage["out"] / "posteriors" / "summary.csv")
    assert list(summary.columns) == list(SUMMARY_COLUMNS) == list(csv.columns)
    pd.testing.assert_frame_equal(csv, summary, check_dtype=False, rtol=1e-15)
    infinite_percentiles = 0
    for record in summary.to_dict("records"):
        setting = Setting(record["mechanism"], record["epsilon"], int(record["bag_size"]))
        cell = _setting_rows(stage["rows"], setting)
        result = posteriors.Posteriors(cell["posterior"].to_numpy(), cell["I"].to_numpy())
        expected = advantage.summarize(result, cell["prior"].to_numpy(), cell["label"].to_numpy(),
                                       mechanism=setting.mechanism, epsilon=setting.epsilon,
                                       bag_size=setting.bag_size).row()
        assert record["rows"] == expected["rows"] == ROWS
        for column in [name for name in SUMMARY_COLUMNS[4:] if name in expected]:  # leakage: its own test
            assert record[column] == pytest.approx(expected[column], rel=1e-12, abs=1e-15), (setting, column)
        infinite_percentiles += sum(math.isinf(record[f"abs_I_p{q}"]) for q in advantage.PERCENTILES)
    assert infinite_percentiles >= 4  # llp at k=1 releases every label: all |I| are inf


def test_result_is_standard_json_matching_its_schema(stage):
    """results/posteriors.json matches its schema; plain LLP's epsilon (no noise, NaN) is written as null."""
    written = check_result(stage["result"], "posteriors")
    llp = [row for row in written["summary"] if row["mechanism"] == "llp"]
    assert llp and all(row["epsilon"] is None for row in llp)


def test_plots_and_metrics_written(stage):
    result = stage["result"]
    assert len(result.plots) == 3 * 4
    for path in result.artifacts():
        assert os.path.getsize(path) > 1000, path
    metrics = result.metrics()
    assert metrics["posteriors_input_rows"] == ROWS
    # docs/math.md §3.7 closed form of RR's expected advantage; per-row gains are bounded by 1/2, so the 20k-row mean
    # lies within 0.005 (> 7 standard errors) of it.
    assert metrics["rr.eps4.k1.mean_additive_advantage"] == pytest.approx(
        advantage.rr_closed_form_advantage(stage["input"]["prior"].to_numpy(), epsilon=4.0), abs=0.005)
    assert all(math.isfinite(v) for v in metrics.values())


def test_complete_output_is_reused(stage):
    result = stage["result"]
    again = run_stage("posteriors", stage["spark"], stage["config"])
    assert again.skipped
    # NaN epsilons (llp) compare unequal as objects, so compare the summaries as frames.
    pd.testing.assert_frame_equal(pd.DataFrame(again.summary), pd.DataFrame(result.summary), check_like=True)


def test_partitioning_does_not_change_results(stage):
    spark = stage["spark"]
    source = stage["input"][["row_id", "label", "prior"]].iloc[:3000]
    settings = [Setting("rr", 1.0, 1), Setting("llp_geometric", 2.0, 8),
                Setting("llp_laplace", 2.0, 64)]
    outputs = []
    session_partitions = spark.conf.get("spark.sql.shuffle.partitions")
    for partitions, shuffle_partitions in [(1, 1), (2, 2), (8, 5)]:
        data = spark.createDataFrame(source[["row_id", "label"]]).repartition(partitions)
        priors = spark.createDataFrame(source[["row_id", "prior"]].iloc[::-1]).repartition(partitions + 1)
        spark.conf.set("spark.sql.shuffle.partitions", shuffle_partitions)
        try:
            got = _posterior_rows(data, priors, settings, unit_bits=2, bags_per_group=3)
            outputs.append(got.toPandas().sort_values(["mechanism", "row_id"], ignore_index=True))
        finally:  # the session's value, not Spark's default (unset: 200 partitions for every later test's shuffles)
            spark.conf.set("spark.sql.shuffle.partitions", session_partitions)
    assert len(outputs[0]) == 3 * len(source)
    for other in outputs[1:]:
        pd.testing.assert_frame_equal(other, outputs[0], check_exact=True)


def test_bagging_units_exact_bags_and_kernel_rule(stage):
    """Several units: exactly k rows per bag except at most one remainder bag per unit, ids as the kernel's."""
    spark, source = stage["spark"], stage["input"]
    settings = [Setting("llp", math.nan, 8), Setting("llp", math.nan, 64)]
    rows = _posterior_rows(spark.createDataFrame(source[["row_id", "label"]]),
                           spark.createDataFrame(source[["row_id", "prior"]]), settings, unit_bits=3).toPandas()
    unit_sizes = np.bincount(mechanisms.bagging_units(mechanisms.bagging_keys(source["row_id"], seed=SEED),
                                                      unit_bits=3))
    assert unit_sizes.size == 8 and unit_sizes.min() > 64
    for setting in settings:
        cell = _setting_rows(rows, setting)
        np.testing.assert_array_equal(cell["bag_id"], _reference_bags(cell["row_id"].to_numpy(), setting.bag_size, 3))
        sizes = cell.groupby("bag_id").size()
        units = sizes.index.to_numpy() >> mechanisms.UNIT_SHIFT
        np.testing.assert_array_equal(np.bincount(units, weights=sizes.to_numpy()), unit_sizes)
        short = sizes[sizes != setting.bag_size]
        assert sorted(short) == sorted(n % setting.bag_size for n in unit_sizes if n % setting.bag_size)
        assert len(set(short.index.to_numpy() >> mechanisms.UNIT_SHIFT)) == len(short)


def test_partition_hash_equals_sparks_hash(stage):
    """hashing.spark_hash_int is Spark SQL hash() of an int, so partition codes are found without a Spark job."""
    values = np.r_[np.random.default_rng(5).integers(-2**31, 2**31, 3000), 0, 1, -1, 2**31 - 1, -2**31]
    frame = stage["spark"].createDataFrame(pd.DataFrame({"x": values.astype(np.int32)}))
    got = frame.selectExpr("x", "hash(x) AS h", "pmod(hash(x), 200) AS p").toPandas()
    np.testing.assert_array_equal(got["h"], hashing.spark_hash_int(got["x"].to_numpy()))
    codes = pd.DataFrame({"x": np.asarray(partition_codes(200), dtype=np.int32)})
    placed = stage["spark"].createDataFrame(codes).selectExpr("pmod(hash(x), 200) AS p").toPandas()
    assert placed["p"].tolist() == list(range(200))


def test_bagging_keys_equal_sparks_xxhash64(stage):
    """The documented key: Spark SQL xxhash64(signed_stream_key(seed, purpose), row_id), so users can redo it."""
    from pyspark.sql import functions as F

    ids = np.r_[stage["input"]["row_id"].to_numpy(), 0, -1, np.iinfo(np.int64).max, np.iinfo(np.int64).min]
    stream = F.lit(hashing.signed_stream_key(SEED, mechanisms.BAGGING_PURPOSE)).cast("bigint")
    frame = stage["spark"].createDataFrame(pd.DataFrame({"row_id": ids}))
    got = frame.select("row_id", F.xxhash64(stream, F.col("row_id")).alias("key")).toPandas()
    np.testing.assert_array_equal(got["key"], mechanisms.bagging_keys(got["row_id"].to_numpy(), seed=SEED))


def test_rows_without_prior_are_counted_and_repeated_rows_fail(stage):
    spark, source = stage["spark"], stage["input"].iloc[:2000]
    settings = [Setting("llp", math.nan, 8)]
    data = spark.createDataFrame(source[["row_id", "label"]])
    priors = spark.createDataFrame(source[["row_id", "prior"]].iloc[100:])
    rows = _posterior_rows(data, priors, settings).toPandas()
    assert sorted(rows["row_id"]) == sorted(source["row_id"].iloc[100:])
    repeated = spark.createDataFrame(pd.concat([source[["row_id", "prior"]], source[["row_id", "prior"]].iloc[5:6]]))
    with pytest.raises(Exception, match=f"row_id: {source['row_id'].iloc[5]} appears more than once"):
        _posterior_rows(data, repeated, settings).collect()


def test_bagged_units_pair_sides_in_key_order_from_any_batches():
    """Pure unit assembly: data and prior rows in any order and batch cuts, some rows without a partner."""
    rng = np.random.default_rng(5)
    ids = rng.choice(1 << 40, size=400, replace=False).astype(np.int64)
    labels, priors = rng.integers(0, 2, ids.size), rng.uniform(0.01, 0.99, ids.size)
    priors[:3] = [0.0, 1.0, 0.5]
    has_prior, has_data = rng.random(ids.size) < 0.9, rng.random(ids.size) < 0.95
    sides = pd.DataFrame({"row_id": np.r_[ids[has_data], ids[has_prior]],
                          "value": np.r_[-1.0 - labels[has_data], priors[has_prior]]}).sample(frac=1.0, random_state=1)
    both = has_prior & has_data
    keys = mechanisms.bagging_keys(ids[both], seed=SEED)
    order = np.argsort(keys, kind="stable")
    for cut in (1, 3, 1000):
        batches = [pa.RecordBatch.from_pandas(sides.iloc[start:start + cut], preserve_index=False)
                   for start in range(0, len(sides), cut)]
        units = list(bagged_units(iter(batches), seed=SEED, unit_bits=2))
        assert [unit for unit, _ in units] == sorted({unit for unit, _ in units})
        merged = {name: np.concatenate([rows[name] for _, rows in units]) for name in ("row_id", "label", "prior")}
        np.testing.assert_array_equal(merged["row_id"], ids[both][order])
        np.testing.assert_array_equal(merged["label"], labels[both][order])
        np.testing.assert_array_equal(merged["prior"], priors[both][order])
        np.testing.assert_array_equal(np.concatenate([np.full(rows["row_id"].size, unit) for unit, rows in units]),
                                      mechanisms.bagging_units(keys[order], unit_bits=2))


def test_bad_labels_fail_naming_the_row(stage):
    spark = stage["spark"]
    data = spark.createDataFrame(pd.DataFrame({"row_id": [1, 2, 3], "label": [0, 2, 1]}))
    priors = spark.createDataFrame(pd.DataFrame({"row_id": [1, 2, 3], "prior": [0.1, 0.2, 0.3]}))
    with pytest.raises(Exception, match="label: must be 0 or 1, got 2 at row_id 2"):
        _posterior_rows(data, priors, [Setting("rr", 1.0, 1)]).collect()
    labels = spark.createDataFrame(pd.DataFrame({"row_id": [1, 2, 3], "label": [0, 1, 1]}))
    for bad in (1.5, -0.25, math.nan):
        priors = spark.createDataFrame(pd.DataFrame({"row_id": [1, 2, 3], "prior": [0.1, 0.2, bad]}))
        with pytest.raises(Exception, match=r"prior: must be in \[0, 1\], got (1.5|-0.25|NaN|null) at row_id 3"):
            _posterior_rows(labels, priors, [Setting("rr", 1.0, 1)]).collect()


@pytest.mark.parametrize("unit_bits", [0, 3, 7])
def test_each_unit_is_shuffled_whole_to_its_own_partition(stage, unit_bits):
    """Hash partitioning on the blobs' codes puts every row of unit u on partition u, nothing else there."""
    from pyspark.sql import functions as F

    spark = stage["spark"]
    frame = spark.range(4000, numPartitions=3).select(F.col("id").alias("row_id"), (F.col("id") % 2).alias("label"),
                                                     F.lit(0.5).alias("prior"))
    blobs = shuffled_units(frame_blobs(frame.select("row_id", "label"), frame.select("row_id", "prior"), seed=SEED,
                                       unit_bits=unit_bits), unit_bits=unit_bits)

    def placement(batches):
        from pyspark import TaskContext

        for batch in unpacked(batches):
            partition = pa.array(np.full(batch.num_rows, TaskContext.get().partitionId(), dtype=np.int32))
            yield pa.RecordBatch.from_arrays([batch.column("row_id"), partition], names=["row_id", "partition"])

    placed = blobs.mapInArrow(placement, "row_id long, partition int").toPandas()
    keys = mechanisms.bagging_keys(placed["row_id"].to_numpy(), seed=SEED)
    np.testing.assert_array_equal(placed["partition"], mechanisms.bagging_units(keys, unit_bits=unit_bits))
    assert len(placed) == 2 * 4000 and placed["row_id"].value_counts().eq(2).all()


def test_worker_written_files_equal_spark_rows_for_any_partitioning(stage, tmp_path):
    """write_posteriors: the files hold exactly posterior_rows' rows, whatever the input partitioning; a
    rerun into the same folder (a retried job) replaces them with identical files and drops attempt leftovers."""
    import pyarrow.parquet as pq

    spark, source = stage["spark"], stage["input"][["row_id", "label", "prior"]].iloc[:5000]
    settings = [Setting("rr", 2.0, 1), Setting("llp", math.nan, 8),
                Setting("llp_laplace", 1.0, 64)]
    expected = (_posterior_rows(spark.createDataFrame(source[["row_id", "label"]]),
                                spark.createDataFrame(source[["row_id", "prior"]]), settings, unit_bits=2)
                .toPandas().sort_values(["mechanism", "row_id"], ignore_index=True))
    digests = []
    for partitions in (1, 3):
        data = spark.createDataFrame(source[["row_id", "label"]]).repartition(partitions)
        priors = spark.createDataFrame(source[["row_id", "prior"]].iloc[::-1]).repartition(partitions + 1)
        (tmp_path / "rows").mkdir(exist_ok=True)
        (tmp_path / "rows" / ".part-00000.parquet.attempt-7").write_bytes(b"partial")
        blobs = frame_blobs(data, priors, seed=SEED, unit_bits=2)
        digests.append(write_posteriors(blobs, output_dir=str(tmp_path), settings=settings, seed=SEED,
                                                  unit_bits=2, sample_fraction=0.1))
        names = sorted(os.listdir(tmp_path / "rows"))
        assert names == [f"part-{p:05d}.parquet" for p in range(4)]
        written = pq.read_table(tmp_path / "rows").to_pandas().sort_values(["mechanism", "row_id"], ignore_index=True)
        pd.testing.assert_frame_equal(written, expected, check_exact=True, check_dtype=False)
        sample = pd.read_parquet(tmp_path / "_plot_sample")
        kept = plot_sample_mask(source["row_id"].to_numpy(), fraction=0.1, seed=SEED)
        assert sorted(sample["row_id"]) == sorted(np.repeat(source["row_id"].to_numpy()[kept], len(settings)))
    keys = [*list(SETTING_KEY), "bin"]
    first, second = (d.sort_values(keys, ignore_index=True) for d in digests)
    pd.testing.assert_frame_equal(first, second, check_exact=True)
    units = first[first["mechanism"] == UNIT_ROWS]
    assert units["rows"].sum() == len(source) and units["bin"].tolist() == [0, 1, 2, 3]
    with pytest.raises(OSError, match="run.output_dir: the Python workers wrote 15001 result rows"):
        check_result_files(str(tmp_path / "rows"), expected=15001)
    # exact percentiles inside the bins: ranked on the driver or by Spark's window, the same exact values
    on_driver = summarize_digest(spark, second, str(tmp_path / "rows"))
    in_spark = summarize_digest(spark, second, str(tmp_path / "rows"), driver_rows=0)
    pd.testing.assert_frame_equal(on_driver, in_spark, check_exact=True)
    selected = 0
    for setting, summary in zip(sorted(settings, key=lambda s: (s.mechanism, s.bag_size)), on_driver.itertuples()):
        cells = first[first["mechanism"] == setting.mechanism]
        located = advantage.digest_percentiles({name: cells[name].to_numpy() for name in advantage.DIGEST_FIELDS})
        selected += sum(isinstance(where, tuple) for where in located.values())
        abs_i = np.abs(_setting_rows(expected, setting)["I"].to_numpy())
        assert summary.mechanism == setting.mechanism
        assert [getattr(summary, f"abs_I_p{q}") for q in advantage.PERCENTILES] == [
            advantage.exact_percentile(abs_i, q) for q in advantage.PERCENTILES]
    assert selected > 0  # some percentiles needed the rows of their bin


def test_stage_without_rows_keeps_summaries_only(stage, tmp_path):
    config = config_from_dict({
        "run": {"output_dir": str(tmp_path), "seed": SEED},
        "data": {"parquet_path": str(stage["out"] / "data")},
        "mechanisms": {"names": ["rr", "llp"], "epsilons": [1.0], "bag_sizes": [8], "write_rows": False,
                       "plot_sample_rows": 100, "prior_path": str(stage["out"] / "truth")},
    })
    result = run_stage("posteriors", stage["spark"], config)
    assert not result.rows_written and result.input_rows == ROWS
    listed = sorted(name for name in os.listdir(tmp_path / "posteriors") if not name.endswith(".crc"))
    assert listed == ["_LIA_COMPLETE", "plots", "summary", "summary.csv"]
    summary = pd.read_csv(tmp_path / "posteriors" / "summary.csv")
    assert summary["rows"].tolist() == [ROWS, ROWS]


def test_max_leakage_rows_and_summary(stage, tmp_path):
    """mechanisms.max_leakage: each row's leakage (the kernel's, checked in test_posterior_grid), summarized as
    its mean per setting beside the closed-form worst case (>= every row's value); off by default (NaN)."""
    config = config_from_dict({
        "run": {"output_dir": str(tmp_path), "seed": SEED},
        "data": {"parquet_path": str(stage["out"] / "data")},
        "mechanisms": {"names": ["rr", "llp", "llp_laplace"], "epsilons": [1.0], "bag_sizes": [8],
                       "max_leakage": True, "plot_sample_rows": 100, "prior_path": str(stage["out"] / "truth")},
    })
    result = run_stage("posteriors", stage["spark"], config)
    assert sorted(name for name in map(os.path.basename, result.plots) if "max_leakage" in name) == [
        f"cdf_max_leakage_{mechanism}.png" for mechanism in ("llp", "llp_laplace", "rr")]
    rows = pd.read_parquet(tmp_path / "posteriors" / "rows")
    summary = pd.read_csv(tmp_path / "posteriors" / "summary.csv")
    for record in summary.itertuples():
        mine = rows[(rows["mechanism"] == record.mechanism) & (rows["bag_size"] == record.bag_size)]
        assert record.mean_max_leakage == pytest.approx(mine["max_leakage"].mean(), rel=1e-12)
        assert (mine["max_leakage"] <= record.worst_case_leakage + 1e-12).all()
        assert 0.0 <= record.worst_case_leakage <= math.log(2.0) + 1e-12
    default = pd.read_csv(stage["out"] / "posteriors" / "summary.csv")
    assert default["mean_max_leakage"].isna().all() and stage["rows"]["max_leakage"].isna().all()


def _side_rows_of(blobs) -> pd.DataFrame:
    """Every (row_id, value) packed in a blob frame, in row id then value order."""
    batches = [pa.RecordBatch.from_pandas(blobs.toPandas(), preserve_index=False)]
    table = pa.Table.from_batches(list(unpacked(iter(batches))), ARROW_SIDE_SCHEMA)
    return table.to_pandas().sort_values(["row_id", "value"], ignore_index=True)


def test_pyarrow_reader_packs_what_spark_reads(stage):
    """Local inputs: pyarrow tasks (hive day directories for the data, an in-file day column for the truth
    table) pack exactly the rows Spark's reader packs; a file: URI reads the same; other schemes go to Spark."""
    spark, config = stage["spark"], stage["config"]
    source = posterior_input(spark, config, [1])
    assert source.reader == "pyarrow" and source.data_rows == source.prior_rows == ROWS and source.unit_bits == 0
    assert {part.side for part in source.parts} == {"label", "prior"}  # the stage spills them (no Spark shuffle)
    data, priors = load_input(spark, config, [1])
    expected = _side_rows_of(frame_blobs(data, priors, seed=SEED, unit_bits=3))
    assert len(expected) == 2 * ROWS
    parts = [*input_parts(f"{stage['out']}/data", side="label", column="label", days=[1], rows_per_part=5000),
             *input_parts(str(stage["out"] / "truth"), side="prior", column="eta", days=[1])]
    assert {part.days for part in parts} == {None, (1,)}  # directories pruned / rows filtered
    got = _side_rows_of(file_blobs(spark, parts, seed=SEED, unit_bits=3))
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert local_path(f"file://{stage['out']}/data") == f"{stage['out']}/data"
    assert local_path("/dbfs/x") == "/dbfs/x"
    assert local_path("s3a://bucket/x") is None and local_path("dbfs:/x") is None
    assert local_path("/data/day=*/") is None
    with pytest.raises(ValueError, match=r"mechanisms.days: .*/data holds no rows of the released days, got \[5\]"):
        posterior_input(spark, config, [5])
    missing_day = config_from_dict({**config.to_dict(), "mechanisms": {"days": [0, 5]}, "synthetic": {"days": 6}})
    with pytest.raises(ConfigError, match=r"mechanisms.days: .*/data holds no rows of days \[5\] \(days present: "
                                          r"\[0, 1\]\), got \[0, 5\]"):
        check_days_present(spark, missing_day, released_day_field(missing_day))
    assert released_days(spark, missing_day) == (0, 5), "a list is read off the config, checked after reuse"


@pytest.mark.parametrize("unit_bits", [0, 3])
def test_spilled_units_give_the_files_and_digest_of_the_shuffle(stage, tmp_path, unit_bits):
    """Local parts through the spill folder (the stage's path for local inputs and outputs): each unit's rows in
    the files are exactly the unit's side rows, and the pass writes the same files, row for row, and the same
    digest as the blob shuffle; a failed attempt's leftover is removed."""
    import pyarrow.parquet as pq

    spark = stage["spark"]
    parts = [*input_parts(f"{stage['out']}/data", side="label", column="label", days=[1], rows_per_part=5000),
             *input_parts(str(stage["out"] / "truth"), side="prior", column="eta", days=[1])]
    settings = [Setting("rr", 2.0, 1), Setting("llp", math.nan, 8), Setting("llp_geometric", 1.0, 64)]
    folder = tmp_path / "spill"
    with pytest.raises(RuntimeError, match=f"data.parquet_path: the input changed .* counted as {2 * ROWS + 1}, "
                                           f"the reading tasks read {2 * ROWS}"):
        spill_units(spark, parts, folder=str(folder), seed=SEED, unit_bits=unit_bits, expected_rows=2 * ROWS + 1)
    (folder / ".part-00000.units.attempt").write_bytes(b"partial")
    spill = spill_units(spark, parts, folder=str(folder), seed=SEED, unit_bits=unit_bits, expected_rows=2 * ROWS)
    assert sorted(os.listdir(folder)) == [f"part-{p:05d}.units" for p in range(len(parts))]
    side = _side_rows_of(file_blobs(spark, parts, seed=SEED, unit_bits=unit_bits))
    units = row_units(side["row_id"].to_numpy(), seed=SEED, unit_bits=unit_bits)
    for unit in range(1 << unit_bits):
        table = pa.Table.from_batches(list(spill.unit_rows(unit)), ARROW_SIDE_SCHEMA)
        got = table.to_pandas().sort_values(["row_id", "value"], ignore_index=True)
        pd.testing.assert_frame_equal(got, side[units == unit].reset_index(drop=True), check_exact=True)
    through_spark = write_posteriors(file_blobs(spark, parts, seed=SEED, unit_bits=unit_bits),
                                     output_dir=str(tmp_path / "shuffled"), settings=settings, seed=SEED,
                                     unit_bits=unit_bits, sample_fraction=0.1)
    through_files = write_spilled_posteriors(spark, spill, output_dir=str(tmp_path / "spilled"), settings=settings,
                                             sample_fraction=0.1)
    keys = [*SETTING_KEY, "bin"]
    pd.testing.assert_frame_equal(through_files.sort_values(keys, ignore_index=True),
                                  through_spark.sort_values(keys, ignore_index=True), check_exact=True)
    for name in ("rows", "_plot_sample"):
        files = sorted(os.listdir(tmp_path / "shuffled" / name))
        assert sorted(os.listdir(tmp_path / "spilled" / name)) == files and len(files) == 1 << unit_bits
        for file in files:
            pd.testing.assert_frame_equal(pq.read_table(tmp_path / "spilled" / name / file).to_pandas(),
                                          pq.read_table(tmp_path / "shuffled" / name / file).to_pandas(),
                                          check_exact=True)


def test_spill_files_hold_each_units_rows_and_fail_naming_the_output_folder(tmp_path):
    """Pure spill files: every unit reads back exactly its rows from files of several different segments (empty
    ones too); a file a task cannot see, a cut one or one of other units fails naming run.output_dir."""
    rng = np.random.default_rng(8)
    batches = [(rng.choice(1 << 40, size=size, replace=False).astype(np.int64), rng.random(size))
               for size in (300, 0, 41, 1)]
    spill = UnitSpill(str(tmp_path), parts=2, unit_bits=2, seed=SEED)
    assert spill.write(0, iter(batches[:3])) == 341
    with pytest.raises(OSError, match=r"run.output_dir: the task of bagging unit 0 does not see .*part-00001.units"):
        list(spill.unit_rows(0))
    assert spill.write(1, iter(batches[3:])) == 1
    row_ids = np.concatenate([ids for ids, _ in batches])
    values = np.concatenate([value for _, value in batches])
    units = row_units(row_ids, seed=SEED, unit_bits=2)
    assert np.bincount(units, minlength=4).min() > 0
    for unit in range(4):
        got = pa.Table.from_batches(list(spill.unit_rows(unit)), ARROW_SIDE_SCHEMA).to_pandas()
        expected = pd.DataFrame({"row_id": row_ids[units == unit], "value": values[units == unit]})
        pd.testing.assert_frame_equal(got.sort_values("row_id", ignore_index=True),
                                      expected.sort_values("row_id", ignore_index=True), check_exact=True)
    other_units = UnitSpill(str(tmp_path), parts=2, unit_bits=3, seed=SEED)
    with pytest.raises(OSError, match=r"run.output_dir: .*part-00000.units is not a complete spill file of 8"):
        list(other_units.unit_rows(0))
    size = os.path.getsize(spill.path(0))
    for cut in (size - 8, size - 30, 5):
        with open(spill.path(0), "r+b") as file:
            file.truncate(cut)
        with pytest.raises(OSError, match=r"run.output_dir: .*part-00000.units is not a complete spill file of 4"):
            list(spill.unit_rows(1))


def test_input_parts_hold_whole_row_groups_of_the_day(spark, tmp_path):
    """Parts of whole row groups; row groups whose day statistics exclude the day are skipped, single-day ones
    are counted from the footer, mixed ones by reading the day column (a Spark job)."""
    import pyarrow.parquet as pq

    ids = np.arange(1000)
    for name, days in (("sorted", np.repeat([3, 4], 500)), ("mixed", 3 + ids % 2)):
        (tmp_path / name).mkdir()
        table = pa.table({"row_id": ids, "day": days.astype(np.int32), "eta": np.linspace(0, 1, 1000)})
        pq.write_table(table, tmp_path / name / "priors.parquet", row_group_size=100)
    parts = input_parts(str(tmp_path / "sorted"), side="prior", column="eta", days=[4], rows_per_part=250)
    assert [(part.row_groups, part.rows, part.footer_day_rows) for part in parts] == [
        ((5, 6, 7), 300, 300), ((8, 9), 200, 200)]
    assert side_row_counts(spark, parts) == {"label": 0, "prior": 500}
    np.testing.assert_array_equal(np.concatenate([ids for part in parts for ids, _ in part.side_rows()]),
                                  np.arange(500, 1000))
    parts = input_parts(str(tmp_path / "mixed"), side="prior", column="eta", days=[4], rows_per_part=250)
    assert [(part.row_groups, part.rows, part.footer_day_rows) for part in parts] == [
        ((0, 1, 2), 300, None), ((3, 4, 5), 300, None), ((6, 7, 8), 300, None), ((9,), 100, None)]
    assert side_row_counts(spark, parts) == {"label": 0, "prior": 500}
    np.testing.assert_array_equal(np.concatenate([ids for part in parts for ids, _ in part.side_rows()]),
                                  np.arange(1, 1000, 2))
    parts = input_parts(str(tmp_path / "mixed"), side="prior", column="eta", days=[4, 3], rows_per_part=250)
    assert [part.footer_day_rows for part in parts] == [300, 300, 300, 100]  # every day in [min, max] selected
    with pytest.raises(ValueError, match="mechanisms.prior_column: .* has no column 'score' for the prior rows"):
        input_parts(str(tmp_path / "sorted"), side="prior", column="score", days=[4])
    with pytest.raises(ValueError, match="data.parquet_path: .* has no column 'label' for the label rows"):
        input_parts(str(tmp_path / "sorted"), side="label", column="label", days=[4])


def test_bad_rows_in_local_files_fail_naming_the_row(stage, tmp_path):
    """The pyarrow reader checks as Spark's path does: labels 0/1, priors in [0, 1], no null row ids."""
    import pyarrow.parquet as pq

    cases = [("label", "label", pa.array([0, 2, 1], pa.int32()), "label: must be 0 or 1, got 2 at row_id 2"),
             ("label", "label", pa.array([0, None, 1], pa.int64()), "label: must be 0 or 1, got null at row_id 2"),
             ("prior", "eta", pa.array([0.1, 0.2, 1.5]), r"prior: must be in \[0, 1\], got 1.5 at row_id 3"),
             ("prior", "eta", pa.array([0.1, math.nan, 0.5]), r"prior: must be in \[0, 1\], got NaN at row_id 2")]
    for number, (side, column, values, message) in enumerate(cases):
        folder = tmp_path / str(number)
        folder.mkdir()
        pq.write_table(pa.table({"row_id": pa.array([1, 2, 3], pa.int64()), column: values}), folder / "p.parquet")
        parts = input_parts(str(folder), side=side, column=column, days=[1])
        with pytest.raises(Exception, match=message):
            file_blobs(stage["spark"], parts, seed=SEED, unit_bits=0).collect()
    with pytest.raises(ValueError, match="row_id: must not be null, got null in a label row"):
        side_rows("label", pa.array([1, None], pa.int64()), pa.array([0, 1]))


DAY_ROWS = 1500  # rows per day of the 3-day table


@pytest.fixture(scope="module")
def three_days(spark, tmp_path_factory):
    """A 3-day table (DAY_ROWS rows per day, five files per day) and its eta truth table; the stage releases
    every day (mechanisms.days=all) in 4 bagging units."""
    root = tmp_path_factory.mktemp("three_days")
    rng = np.random.default_rng(19)
    days = np.repeat([0, 1, 2], DAY_ROWS)
    eta = rng.beta(0.6, 8.0, size=days.size)
    data = pd.DataFrame({"row_id": make_row_id(days, np.tile(np.arange(DAY_ROWS), 3)), "day": days.astype(np.int32),
                         "label": (rng.random(days.size) < eta).astype(np.int32), "prior": eta})
    spark.createDataFrame(data.drop(columns="label")).write.parquet(str(root / "truth"))
    five_files_per_day = spark.createDataFrame(data.drop(columns="prior")).repartition(5)
    five_files_per_day.write.partitionBy("day").parquet(str(root / "data"))
    config = config_from_dict({
        "run": {"output_dir": str(root), "seed": SEED},
        "data": {"parquet_path": str(root / "data")},
        "mechanisms": {"days": "all", "names": ["rr", "llp", "llp_laplace"], "epsilons": [1.0], "bag_sizes": [8],
                       "rows_per_bagging_unit": 1000, "plot_sample_rows": 100, "prior_path": str(root / "truth"),
                       "prior_column": "prior"},
    })
    result = run_stage("posteriors", spark, config)
    rows = pd.read_parquet(root / "posteriors" / "rows").sort_values([*SETTING_KEY, "row_id"], ignore_index=True)
    return {"spark": spark, "config": config, "data": data, "result": result, "rows": rows}


def test_all_days_are_one_selection_whose_bags_span_days(three_days):
    """mechanisms.days=all: every row of the 3 days is released once per setting, bagging units and bags are drawn
    over the whole selection (the kernel's bags of all row ids; bags hold rows of several days), the rows equal
    those of one Spark partition of the union, and the resolved days are in the result and the fingerprint."""
    spark, data, result, rows = (three_days[key] for key in ("spark", "data", "result", "rows"))
    assert result.days == (0, 1, 2) and result.input_rows == 3 * DAY_ROWS and result.bagging_units == 4
    assert [record.rows for record in result.summary] == [3 * DAY_ROWS] * 3
    for setting in (Setting("rr", 1.0, 1), Setting("llp", math.nan, 8), Setting("llp_laplace", 1.0, 8)):
        np.testing.assert_array_equal(_setting_rows(rows, setting)["row_id"], np.sort(data["row_id"]))
    llp = _setting_rows(rows, Setting("llp", math.nan, 8))
    np.testing.assert_array_equal(llp["bag_id"], _reference_bags(llp["row_id"].to_numpy(), 8, unit_bits=2))
    days_per_bag = pd.Series(llp["row_id"].to_numpy() >> 40).groupby(llp["bag_id"]).nunique()
    assert (days_per_bag >= 2).mean() > 0.5 and days_per_bag.max() == 3
    one_partition = _posterior_rows(spark.createDataFrame(data[["row_id", "label"]]).coalesce(1),
                                    spark.createDataFrame(data[["row_id", "prior"]]).coalesce(1),
                                    settings_grid(three_days["config"].mechanisms), unit_bits=2).toPandas()
    pd.testing.assert_frame_equal(one_partition.sort_values([*SETTING_KEY, "row_id"], ignore_index=True), rows,
                                  check_exact=True, check_dtype=False)
    with open(os.path.join(result.output_path, "_LIA_COMPLETE"), encoding="utf-8") as handle:
        marker = json.load(handle)
    assert marker["days"] == [0, 1, 2] and marker["lia_fingerprint"]["parameters"]["mechanisms.days"] == [0, 1, 2]
