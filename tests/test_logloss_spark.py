"""The Spark log-loss oracle against numpy, and `lia-spark logloss-attack` on local Spark with a real MLflow
sqlite store: the report's files, the defender's table, the MLflow runs (aggregates only), reuse on a re-run."""
from __future__ import annotations

from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from json_support import check_file, check_result
from pyspark.sql import functions as F

from lia_spark.engine.logloss.stage import FILES, POSITION, block_predictions, oracle_table, spark_log_loss
from lia_spark.engine.orchestration.commands import run_logloss_attack
from lia_spark.kernels import logloss
from lia_spark.kernels.criteo import make_row_id
from lia_spark.run.config import config_from_dict
from lia_spark.tracking.mlflow_runs import KIND_TAG

ROWS = 3000


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory) -> tuple[str, np.ndarray]:
    """Day 1 with positions 0..ROWS-1 and labels ~ Bernoulli(0.3); day 2 with a gap in its positions."""
    labels = np.random.default_rng(11).binomial(1, 0.3, ROWS)
    positions = np.concatenate([np.arange(ROWS), np.arange(10) * 2])
    days = np.concatenate([np.full(ROWS, 1), np.full(10, 2)])
    frame = pd.DataFrame({"row_id": make_row_id(days, positions), "label": np.concatenate([labels, np.ones(10)])
                          .astype(np.int32), "day": days.astype(np.int32)})
    path = str(tmp_path_factory.mktemp("logloss-data") / "data")
    spark.createDataFrame(frame).repartition(3).write.partitionBy("day").parquet(path)
    return path, labels


def _config(root: Path, data_path: str, **logloss_values):
    return config_from_dict({
        "run": {"name": "logloss-test", "output_dir": str(root / "out")},
        "data": {"parquet_path": data_path},
        "logloss": {"decimals": [2], "noises": ["laplace"], "noise_scales": [1e-3], "queries": 1,
                    "single_query_rows": 500,
                    **logloss_values},
        "tracking": {"tracking_uri": f"sqlite:///{root / 'mlflow.db'}", "experiment": "logloss-tests"},
    })


def test_spark_oracle_equals_numpy_log_loss(spark, data, tmp_path):
    path, labels = data
    rows = oracle_table(spark, _config(tmp_path, path))
    try:
        arbitrary = 1.0 / (1.0 + F.exp(-3.0 * F.sin(F.col(POSITION).cast("double"))))
        u = 1.0 / (1.0 + np.exp(-3.0 * np.sin(np.arange(ROWS, dtype=np.float64))))
        assert spark_log_loss(rows, arbitrary) == pytest.approx(logloss.log_loss(labels, u), rel=1e-12)
        block = logloss.binary_plan(n_rows=ROWS, tolerance=1e-10).block_predictions(20)
        assert spark_log_loss(rows, block_predictions(100, block)) == pytest.approx(
            logloss.log_loss(labels, logloss.full_predictions(ROWS, 100, block)), rel=1e-12)
    finally:
        rows.unpersist()


def test_days_whose_positions_have_gaps_are_refused(spark, data, tmp_path):
    with pytest.raises(ValueError, match=r"^logloss.day: .* positions 0\.\.18 for logloss.day=2"):
        oracle_table(spark, _config(tmp_path, data[0], day=2))


def test_logloss_attack_writes_the_report_and_tracks_aggregates_only(spark, data, tmp_path):
    config = _config(tmp_path, data[0])
    result = run_logloss_attack(spark, config)
    out = Path(result.output_path)
    assert sorted(str(Path(f).relative_to(out)) for f in result.files) == sorted(FILES)
    assert all(Path(f).is_file() for f in result.files)
    results = pd.read_csv(out / "results.csv")
    assert len(results) == 2 * (1 + 1 + 1)  # attacks x (exact + roundings + noises x scales)
    exact = results[results["oracle"] == "exact"].set_index("attack")
    assert (exact["accuracy"] == 1.0).all() and (exact["status"] == "exact").all()
    assert exact.loc["binary", "labels_per_query"] > exact.loc["primes", "labels_per_query"] >= 5
    assert (exact["queries_for_all"] == np.ceil(ROWS / exact["labels_per_query"])).all()
    defender = pd.read_csv(out / "defender.csv").set_index("oracle")
    assert defender.loc["round2", "primes"] == "stopped"  # 2 (e^{N tau} - 1) >= 1/2
    assert defender.loc["round2", "binary"] == "exact"  # |rounding error| <= tau: Lemma 2
    assert defender.loc["laplace0.001", "primes"] == "stopped"
    summary = check_file(out / "summary.json")  # standard JSON matching its schema, as results/logloss-attack.json
    assert check_result(result, "logloss-attack")["summary"] == summary
    assert summary["single_query"] == {**summary["single_query"], "rows": 500, "accuracy": 1.0}
    assert "round2" in summary["stopped_by"]["primes"]

    client = mlflow.MlflowClient(config.tracking.tracking_uri)
    parent = client.get_run(result.mlflow_run_id)
    assert parent.data.tags[KIND_TAG] == "pipeline"
    assert parent.data.metrics["logloss.binary_labels_per_query"] == exact.loc["binary", "labels_per_query"]
    stage = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert [run.info.run_name for run in stage] == ["logloss"]
    logged = {a.path for a in client.list_artifacts(stage[0].info.run_id, "logloss")}
    assert logged == {"logloss/results.csv", "logloss/defender.csv", "logloss/summary.json", "logloss/accuracy.png",
                      "logloss/labels_per_query.png"}
    # aggregates only: no metric, param or artifact holds one value per row
    assert len(stage[0].data.metrics) < 20 and len(parent.data.params) < 200

    again = run_logloss_attack(spark, config)
    assert again.skipped and again.summary == result.summary
