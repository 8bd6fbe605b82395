"""One reuse rule for every stage (real local Spark and MLflow): an output is reused only when its fingerprint
(the fields the stage reads, the code version, the fingerprints of its inputs) matches; any change recomputes
that stage and everything downstream, and the outputs show the new values."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import mlflow
import pytest

from lia_spark.engine.orchestration.pipeline import run_pipeline
from lia_spark.engine.runtime.outputs import MARKER
from lia_spark.run.config import config_from_dict
from lia_spark.tracking.mlflow_runs import FINGERPRINT_TAG, REUSED_FROM_TAG, STAGE_TAG, STATUS_TAG

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)

STEPS = ("data", "train", "posteriors", "utility", "audit")


def _values(root: Path) -> dict:
    return {
        "run": {"name": "reuse", "output_dir": str(root / "out")},
        "spark": {"master": "local[2]", "driver_memory": "2g", "shuffle_partitions": 4},
        "synthetic": {"rows_per_day": 4000, "days": 2},
        "mechanisms": {"epsilons": [2.0], "bag_sizes": [8], "names": ["rr", "llp"]},
        "models": {"n_estimators": 5, "early_stopping_rounds": 0, "hash_buckets": 256},
        "utility": {"epsilons": ["inf"], "bag_sizes": [8]},
        "audit": {"repetitions": 2, "shadows": 0},  # shadow fits: see tiny_values
        "tracking": {"tracking_uri": f"sqlite:///{root / 'mlflow.db'}", "experiment": "reuse-tests"},
    }


class Runner:
    """Runs the pipeline with per-section changes to the base values; returns {step: status}."""

    def __init__(self, spark, root: Path) -> None:
        self.spark, self.root = spark, root

    def __call__(self, **changes: dict) -> dict[str, str]:
        values = _values(self.root)
        for section, update in changes.items():
            values[section].update(update)
        self.last = run_pipeline(self.spark, config_from_dict(values))
        return {step: self.last.step(step).status for step in STEPS}

    def summary(self, step: str) -> dict:
        return self.last.step(step).result.to_dict()

    def audit_summary(self) -> dict:
        return json.loads((self.root / "out" / "audit" / "summary.json").read_text(encoding="utf-8"))


def _ran(*steps: str) -> dict[str, str]:
    return {step: "ran" if step in steps else "reused" for step in STEPS}


@pytest.fixture(scope="module")
def runner(spark, tmp_path_factory):
    run = Runner(spark, tmp_path_factory.mktemp("reuse"))
    assert run() == _ran(*STEPS)
    return run


def test_identical_rerun_and_unread_fields_reuse_everything(runner):
    assert runner() == _ran()
    assert runner(run={"name": "renamed"}, tracking={"experiment": "reuse-tests-2"}) == _ran()


def test_reused_stages_reference_the_run_that_logged_their_outputs(runner):
    assert runner() == _ran()
    client = mlflow.MlflowClient(_values(runner.root)["tracking"]["tracking_uri"])
    parent = runner.last.mlflow_run_id
    experiment = client.get_run(parent).info.experiment_id
    children = client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{parent}'")
    audit_run = next(run for run in children if run.data.tags.get(STAGE_TAG) == "audit")
    producer = client.get_run(audit_run.data.tags[REUSED_FROM_TAG])
    assert producer.data.tags[STATUS_TAG] == "ran" and "status" not in producer.data.params
    assert producer.data.tags[FINGERPRINT_TAG] == audit_run.data.tags[FINGERPRINT_TAG]
    assert client.list_artifacts(audit_run.info.run_id) == []  # not logged again
    assert client.list_artifacts(producer.info.run_id) != []
    tags = client.get_run(parent).data.tags  # the audit headline on the parent run
    assert tags["audit.mechanism"] == "none" and tags["audit.claimed_eps"] == "inf"
    assert float(tags["audit.eps_lb"]) == pytest.approx(client.get_run(parent).data.metrics["audit.eps_lb"], rel=1e-5)
    assert tags["audit.headline"].startswith("eps >= ")


def test_audit_fields_recompute_the_audit_only(runner, caplog):
    runner()  # each test starts from the base configuration
    with caplog.at_level(logging.INFO, logger="lia_spark"):
        assert runner(audit={"confidence": 0.9}) == _ran("audit")
    assert any("audit.confidence 0.95 -> 0.9" in record.getMessage() for record in caplog.records)
    assert runner.audit_summary()["confidence"] == 0.9
    assert runner(audit={"delta": "1e-5", "confidence": 0.9}) == _ran("audit")
    summary = runner.audit_summary()
    assert (summary["delta"], summary["confidence"], summary["repetitions"]) == (1e-5, 0.9, 1)  # injected: one game


def test_mechanism_fields_recompute_posteriors_and_utility(runner):
    runner()
    assert runner(mechanisms={"epsilons": [1.0]}) == _ran("posteriors", "utility")
    epsilons = {row["epsilon"] for row in runner.summary("posteriors")["summary"] if row["mechanism"] == "rr"}
    assert epsilons == {1.0}
    assert runner(mechanisms={"epsilons": [1.0], "bag_sizes": [4]}) == _ran("posteriors", "utility")
    assert {row["bag_size"] for row in runner.summary("posteriors")["summary"] if row["mechanism"] == "llp"} == {4}


def test_model_fields_recompute_train_and_its_downstream(runner):
    runner()
    assert runner(models={"n_estimators": 6}) == _ran("train", "utility", "audit")
    assert runner(models={"n_estimators": 6}, utility={"bag_sizes": [4]}) == _ran("utility")
    assert {row["bag_size"] for row in runner.summary("utility")["table"] if row["mechanism"] == "llp"} == {4}


@pytest.mark.parametrize("damage", ["edit", "garbage"])
def test_a_hand_edited_or_corrupt_marker_is_not_trusted(runner, damage):
    runner()
    marker = runner.root / "out" / "audit" / MARKER
    content = json.loads(marker.read_text(encoding="utf-8"))
    content["canaries"] = content["canaries"] + 1
    marker.write_text(json.dumps(content) if damage == "edit" else "{not json", encoding="utf-8")
    assert runner() == _ran("audit")
    assert json.loads(marker.read_text(encoding="utf-8"))["canaries"] == content["canaries"] - 1


def test_seed_and_data_fields_recompute_everything(runner):  # last: it changes every output
    runner()
    assert runner(synthetic={"rows_per_day": 3000}) == _ran(*STEPS)
    assert runner.summary("data")["rows_per_day"] == 3000
    assert runner.summary("posteriors")["input_rows"] == 3000
    assert runner(synthetic={"rows_per_day": 3000}, run={"seed": 7}) == _ran(*STEPS)
