"""Spark posteriors stage: exact bags, equality with the in-process kernels, partition invariance, summaries.

Reference values: bags from the in-process kernel mechanisms.assign_bags (a plain numpy sort of the hash
keys, same bagging units), releases and posteriors from the pure kernels called directly on those bags, summaries from
advantage.summarize on the stage's rows. Tolerances: releases, bags and counts exact; kernel outputs equal
to 1e-12 relative (the same float64 code on the same bags, batched differently); means 1e-12.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest

from lia_spark import advantage, mechanisms, posteriors
from lia_spark.config import config_from_dict
from lia_spark.criteo import STORAGE_DDL, make_row_id
from lia_spark.engine import privatize

ROWS = 20_000
SEED = 20261122
EPSILONS = (1.0, 4.0)
BAG_SIZES = (1, 8, 64)


@pytest.fixture(scope="module")
def stage(spark, tmp_path_factory):
    """A 2-day table (day 1 = ROWS rows), the eta truth table and one run of the stage on day 1."""
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
        "mechanisms": {"day": 1, "epsilons": list(EPSILONS), "bag_sizes": list(BAG_SIZES), "plot_sample_rows": 500},
    })
    result = privatize.run_posteriors(spark, config)
    rows = pd.read_parquet(out / "posteriors" / "rows")
    day1 = truth[truth["day"] == 1].merge(data[["row_id", "label"]], on="row_id").rename(columns={"eta": "prior"})
    return {"spark": spark, "config": config, "result": result, "rows": rows, "input": day1, "out": out}


def _setting_rows(rows: pd.DataFrame, setting: privatize.Setting) -> pd.DataFrame:
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
        cell = _setting_rows(stage["rows"], privatize.Setting(mechanism, eps, k))
        sizes = cell.groupby("bag_id").size()
        assert list(sizes.index) == list(range(-(-ROWS // k)))
        assert (sizes.iloc[:-1] == k).all() and sizes.iloc[-1] == (ROWS % k or k)
        np.testing.assert_array_equal(cell["bag_id"].to_numpy(), _reference_bags(cell["row_id"].to_numpy(), k))
    assert stage["result"].bagging_units == 1
    assert stage["result"].bags[str(k)] == {"bags": -(-ROWS // k), "full_bags": ROWS // k,
                                            "remainder_sizes": [ROWS % k] if ROWS % k else []}


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
            lap = privatize.Setting("llp_laplace", eps, k)
            released = mechanisms.laplace_release(sums, sizes, bag_ids, epsilon=eps,
                                                  seed=privatize.setting_seed(SEED, lap))
            expected = posteriors.llp_laplace_bags(priors, sizes, released, epsilon=eps)
            _assert_rows_equal(stage["rows"], lap, bagged, np.repeat(released, sizes), expected)
            geo = privatize.Setting("llp_geometric", eps, k)
            clipped, released = mechanisms.geometric_release(sums, sizes, bag_ids, epsilon=eps,
                                                             seed=privatize.setting_seed(SEED, geo))
            expected = posteriors.llp_geometric_bags(priors, sizes, clipped, epsilon=eps)
            _assert_rows_equal(stage["rows"], geo, bagged, np.repeat(released, sizes), expected)
        expected = posteriors.llp_bags(priors, sizes, sums)
        _assert_rows_equal(stage["rows"], privatize.Setting("llp", math.nan, k), bagged,
                           np.repeat(sums / sizes, sizes), expected)


def test_rr_settings_equal_kernels_in_process(stage):
    truth = stage["input"].sort_values("row_id", ignore_index=True)
    ids, labels = truth["row_id"].to_numpy(), truth["label"].to_numpy()
    for eps in EPSILONS:
        setting = privatize.Setting("rr", eps, 1)
        released = mechanisms.rr_release(labels, ids, epsilon=eps, seed=privatize.setting_seed(SEED, setting))
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
                               advantage.additive_advantage(reference["posterior"].to_numpy(), reference["prior"].to_numpy()),
                               rtol=1e-12, atol=1e-15)
    return cell


def test_summary_equals_in_process_summaries(stage):
    summary = pd.read_parquet(stage["out"] / "posteriors" / "summary").sort_values(privatize.SETTING_KEYS, ignore_index=True)
    csv = pd.read_csv(stage["out"] / "posteriors" / "summary.csv")
    assert list(summary.columns) == privatize.SUMMARY_COLUMNS == list(csv.columns)
    pd.testing.assert_frame_equal(csv, summary, check_dtype=False, rtol=1e-15)
    infinite_percentiles = 0
    for record in summary.to_dict("records"):
        setting = privatize.Setting(record["mechanism"], record["epsilon"], int(record["bag_size"]))
        cell = _setting_rows(stage["rows"], setting)
        result = posteriors.Posteriors(cell["posterior"].to_numpy(), cell["I"].to_numpy())
        expected = advantage.summarize(result, cell["prior"].to_numpy(), cell["label"].to_numpy(),
                                       mechanism=setting.mechanism, epsilon=setting.epsilon,
                                       bag_size=setting.bag_size).row()
        assert record["rows"] == expected["rows"] == ROWS
        for column in privatize.SUMMARY_COLUMNS[4:]:
            assert record[column] == pytest.approx(expected[column], rel=1e-12, abs=1e-15), (setting, column)
        infinite_percentiles += sum(math.isinf(record[f"abs_I_p{q}"]) for q in advantage.PERCENTILES)
    assert infinite_percentiles >= 4  # llp at k=1 releases every label: all |I| are inf


def test_plots_and_metrics_written(stage):
    result = stage["result"]
    assert len(result.plots) == 3 * 4
    for path in result.artifacts():
        assert os.path.getsize(path) > 1000, path
    metrics = result.metrics()
    assert metrics["posteriors_input_rows"] == ROWS
    # SPEC 3 closed form of RR's expected advantage; per-row gains are bounded by 1/2, so the 20k-row mean
    # lies within 0.005 (> 7 standard errors) of it.
    assert metrics["rr_eps4_mean_additive_advantage"] == pytest.approx(
        advantage.rr_closed_form_advantage(stage["input"]["prior"].to_numpy(), epsilon=4.0), abs=0.005)
    assert all(math.isfinite(v) for v in metrics.values())


def test_complete_output_is_reused(stage):
    result = stage["result"]
    again = privatize.run_posteriors(stage["spark"], stage["config"])
    assert again.skipped
    # NaN epsilons (llp) compare unequal as objects, so compare the summaries as frames.
    pd.testing.assert_frame_equal(pd.DataFrame(again.summary), pd.DataFrame(result.summary), check_like=True)


def test_partitioning_does_not_change_results(stage):
    spark = stage["spark"]
    source = stage["input"][["row_id", "label", "prior"]].iloc[:3000]
    settings = [privatize.Setting("rr", 1.0, 1), privatize.Setting("llp_geometric", 2.0, 8),
                privatize.Setting("llp_laplace", 2.0, 64)]
    outputs = []
    for partitions, shuffle_partitions in [(1, 1), (2, 2), (8, 5)]:
        data = spark.createDataFrame(source[["row_id", "label"]]).repartition(partitions)
        priors = spark.createDataFrame(source[["row_id", "prior"]].iloc[::-1]).repartition(partitions + 1)
        spark.conf.set("spark.sql.shuffle.partitions", shuffle_partitions)
        try:
            got = privatize.compute_posteriors(data, priors=priors, settings=settings, seed=SEED, unit_bits=2,
                                               bags_per_group=3)
            outputs.append(got.toPandas().sort_values(["mechanism", "row_id"], ignore_index=True))
        finally:
            spark.conf.unset("spark.sql.shuffle.partitions")
    assert len(outputs[0]) == 3 * len(source)
    for other in outputs[1:]:
        pd.testing.assert_frame_equal(other, outputs[0], check_exact=True)


def test_bagging_units_exact_bags_and_kernel_rule(stage):
    """Several units: exactly k rows per bag except at most one remainder bag per unit, ids as the kernel's."""
    spark, source = stage["spark"], stage["input"]
    settings = [privatize.Setting("llp", math.nan, 8), privatize.Setting("llp", math.nan, 64)]
    rows = privatize.compute_posteriors(spark.createDataFrame(source[["row_id", "label"]]),
                                        priors=spark.createDataFrame(source[["row_id", "prior"]]),
                                        settings=settings, seed=SEED, unit_bits=3).toPandas()
    unit_sizes = np.bincount(mechanisms.bagging_units(mechanisms.bagging_keys(source["row_id"], seed=SEED), unit_bits=3))
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


def test_bagging_key_expression_equals_kernel(stage):
    ids = np.r_[stage["input"]["row_id"].to_numpy(), 0, -1, np.iinfo(np.int64).max, np.iinfo(np.int64).min]
    frame = stage["spark"].createDataFrame(pd.DataFrame({"row_id": ids}))
    got = frame.select("row_id", privatize.bagging_key(SEED).alias("key"),
                       privatize.bagging_unit(privatize.bagging_key(SEED), unit_bits=5).alias("unit")).toPandas()
    keys = mechanisms.bagging_keys(got["row_id"].to_numpy(), seed=SEED)
    np.testing.assert_array_equal(got["key"], keys)
    np.testing.assert_array_equal(got["unit"], mechanisms.bagging_units(keys, unit_bits=5))


def test_rows_without_prior_are_counted_and_repeated_rows_fail(stage):
    spark, source = stage["spark"], stage["input"].iloc[:2000]
    settings = [privatize.Setting("llp", math.nan, 8)]
    data = spark.createDataFrame(source[["row_id", "label"]])
    priors = spark.createDataFrame(source[["row_id", "prior"]].iloc[100:])
    rows = privatize.compute_posteriors(data, priors=priors, settings=settings, seed=SEED).toPandas()
    assert sorted(rows["row_id"]) == sorted(source["row_id"].iloc[100:])
    repeated = spark.createDataFrame(pd.concat([source[["row_id", "prior"]], source[["row_id", "prior"]].iloc[5:6]]))
    with pytest.raises(Exception, match=f"row_id: {source['row_id'].iloc[5]} appears more than once"):
        privatize.compute_posteriors(data, priors=repeated, settings=settings, seed=SEED).collect()


def _batch(ids, labels, priors):
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([pa.array(np.asarray(ids, np.int64)), pa.array(np.asarray(labels, np.int32)),
                                       pa.array(np.asarray(priors, np.float64))], names=["row_id", "label", "prior"])


def test_matched_rows_merge_neighbours_across_batch_boundaries():
    """Pure stream assembly: data and prior rows in key order, cut into batches at every possible place."""
    rng = np.random.default_rng(5)
    ids = rng.choice(1 << 40, size=400, replace=False).astype(np.int64)
    labels, priors = rng.integers(0, 2, ids.size), rng.uniform(0.01, 0.99, ids.size)
    has_prior = rng.random(ids.size) < 0.9
    keys = mechanisms.bagging_keys(ids, seed=SEED)
    rows = pd.DataFrame({"row_id": np.r_[ids, ids[has_prior]], "label": np.r_[labels, np.full(has_prior.sum(), -1)],
                         "prior": np.r_[np.full(ids.size, np.nan), priors[has_prior]],
                         "key": np.r_[keys, keys[has_prior]]})
    rows = rows.sample(frac=1.0, random_state=1).sort_values("key", kind="stable", ignore_index=True)  # sides in any order
    order = np.argsort(keys[has_prior], kind="stable")
    for cut in (1, 2, 3, 50, 1000):
        batches = [_batch(*rows.iloc[start:start + cut][["row_id", "label", "prior"]].to_numpy().T)
                   for start in range(0, len(rows), cut)]
        got = list(privatize.matched_rows(iter(batches), seed=SEED, unit_bits=2, paired=False))
        merged = {name: np.concatenate([g[name] for g in got]) for name in ("unit", "row_id", "label", "prior")}
        np.testing.assert_array_equal(merged["row_id"], ids[has_prior][order])
        np.testing.assert_array_equal(merged["label"], labels[has_prior][order])
        np.testing.assert_array_equal(merged["prior"], priors[has_prior][order])
        np.testing.assert_array_equal(merged["unit"], mechanisms.bagging_units(keys[has_prior][order], unit_bits=2))


def test_key_collisions_are_ordered_by_row_id():
    """Two row ids with one 64-bit key (forced here; real collisions are rare) end up in (key, row_id) order."""
    rows = {"bag_key": np.array([5, 5, 5, 5, 9]), "row_id": np.array([8, 3, 8, 3, 1]),
            "label": np.array([-1, 1, 0, -1, 1]), "prior": np.array([0.2, np.nan, np.nan, 0.7, np.nan])}
    merged = privatize._paired_sides(privatize._in_key_order(rows), paired=False)
    assert merged["row_id"].tolist() == [3, 8] and merged["label"].tolist() == [1, 0]
    assert merged["prior"].tolist() == [0.7, 0.2]


def test_unit_chunks_hold_whole_bags_and_positions():
    units = np.repeat([0, 1, 3], [100, 37, 64])
    stream = ({"unit": units[i:i + 30], "row_id": np.arange(units.size)[i:i + 30]} for i in range(0, units.size, 30))
    chunks = list(privatize.unit_chunks(stream, chunk_rows=32))
    assert [(u, first, len(rows["row_id"])) for u, first, rows in chunks] == [
        (0, 0, 32), (0, 32, 32), (0, 64, 32), (0, 96, 4), (1, 0, 32), (1, 32, 5), (3, 0, 32), (3, 32, 32)]
    assert np.concatenate([rows["row_id"] for *_, rows in chunks]).tolist() == list(range(units.size))


def test_bad_labels_fail_naming_the_row(stage):
    spark = stage["spark"]
    data = spark.createDataFrame(pd.DataFrame({"row_id": [1, 2, 3], "label": [0, 2, 1]}))
    priors = spark.createDataFrame(pd.DataFrame({"row_id": [1, 2, 3], "prior": [0.1, 0.2, 0.3]}))
    with pytest.raises(Exception, match="label: must be 0 or 1, got 2 at row_id 2"):
        privatize.compute_posteriors(data, priors=priors, settings=[privatize.Setting("rr", 1.0, 1)], seed=SEED).collect()
