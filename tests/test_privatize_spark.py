"""Spark posteriors stage: exact bags, equality with the in-process kernels, partition invariance, summaries.

Reference values: bags from the in-process kernel mechanisms.assign_bags (a plain numpy sort of the hash
keys), releases and posteriors from the pure kernels called directly on those bags, summaries from
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


def _reference_bags(row_ids: np.ndarray, k: int) -> np.ndarray:
    """Bag id of every row (in the given order) from the in-process kernel."""
    return mechanisms.assign_bags(row_ids, bag_size=k, seed=SEED)


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
    assert stage["result"].bags[str(k)] == {"bags": -(-ROWS // k), "remainder_size": ROWS % k}


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
    for partitions, buckets in [(1, 1), (2, 0), (8, 5)]:
        frame = spark.createDataFrame(source).repartition(partitions)
        got = privatize.compute_posteriors(frame, settings=settings, seed=SEED, bags_per_group=3, buckets=buckets)
        outputs.append(got.toPandas().sort_values(["mechanism", "row_id"], ignore_index=True))
    assert len(outputs[0]) == 3 * len(source)
    for other in outputs[1:]:
        pd.testing.assert_frame_equal(other, outputs[0], check_exact=True)
