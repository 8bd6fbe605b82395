"""Audit your own model (docs/usage.md): `lia-spark inject` exports the injected training set, a trainer that never
imports lia_spark (tests/own_trainer.py: plain xgboost, its own randomized response) trains on it and logs the model
to MLflow, and the audit scores it on the executors against the sealed coins."""
from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from key_support import key_file
from pipeline_support import OWN_TRAINER, conf_file

from lia_spark.cli.main import main
from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.kernels import criteo
from lia_spark.run import layout
from lia_spark.run.config import config_from_dict
from lia_spark.run.json_output import strict_json
from lia_spark.run.schemas import schema_for, validate

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)


def _values(root: Path, seed: int = 1) -> dict:
    """The own-model run of ``seed`` in ``root``, with a fixed audit key of that seed (audit.key_path)."""
    key = key_file(root / "audit_key", label=f"own model {seed}")
    return {"run": {"name": "own", "output_dir": str(root / "out"), "seed": seed},
            "spark": {"master": "local[2]", "driver_memory": "2g", "shuffle_partitions": 4},
            "synthetic": {"rows_per_day": 20_000, "days": 2},
            "models": {"n_estimators": 10, "early_stopping_rounds": 0, "hash_buckets": 1024},
            "audit": {"export_tsv": True, "export_gzip": True, "key_path": key},
            "tracking": {"tracking_uri": f"sqlite:///{root / 'mlflow.db'}", "experiment": "own"}}


@dataclasses.dataclass
class Injected:
    root: Path
    values: dict

    def config(self, **audit):
        return config_from_dict({**self.values, "audit": {**self.values["audit"], **audit}})

    def train(self, *arguments: str) -> str:
        """Run the team's trainer on the export; the model's URI."""
        config = self.config()
        done = subprocess.run([sys.executable, str(OWN_TRAINER), layout.export_path(config), "--tracking-uri",
                               config.tracking.tracking_uri, *arguments], capture_output=True, text=True,
                              check=True, cwd=self.root)
        return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def injected(spark, tmp_path_factory) -> Injected:
    root = tmp_path_factory.mktemp("own-model")
    found = Injected(root, _values(root))
    run_stage("generate", spark, found.config())
    result = run_stage("inject", spark, found.config())
    assert result.rows == 20_000 and 0 < result.informative_canaries < result.rows
    assert result.tsv_path.endswith("/inject/criteo/day_1.gz")
    validate(json.loads(strict_json(result)), "inject")
    manifest = Path(result.output_dir) / "manifest.json"
    validate(json.loads(manifest.read_text(encoding="utf-8")), schema_for(str(manifest)))
    return found


def test_the_export_holds_the_data_with_injected_labels_and_nothing_that_separates_canaries(spark, injected,
                                                                                          tmp_path):
    config = injected.config()
    data = pd.read_parquet(Path(config.parquet_path) / "day=1")
    export = pd.read_parquet(layout.export_path(config))
    sealed = pd.read_parquet(layout.sealed_path(config))
    assert list(export.columns) == list(spark.read.parquet(config.parquet_path).columns)  # the data's columns only
    merged = export.merge(data.drop(columns="label"), on="row_id", suffixes=("", "_data"))
    assert len(merged) == len(export) == len(data) == len(sealed)  # every row of the day, each a canary
    for column in data.columns.drop(["row_id", "label"]):
        pd.testing.assert_series_equal(merged[column], merged[f"{column}_data"], check_names=False)
    check = export.merge(sealed, on="row_id", suffixes=("", "_true"))
    assert (check["label_true"].to_numpy() == data.set_index("row_id").loc[check["row_id"], "label"].to_numpy()).all()
    expected = np.where(check["hidden_bit"] == 1, check["counterfactual_label"], check["label_true"])
    assert (check["label"].to_numpy() == expected).all()  # y^b: y1 where b = 1, y0 elsewhere
    assert 0.01 < (check["counterfactual_label"] != check["label_true"]).mean() < 0.5  # informative: y1 != y0
    with gzip.open(Path(config.run.output_dir) / "inject" / "criteo" / "day_1.gz", "rb") as day_file:
        lines = day_file.read().split(b"\n")
    assert lines[-1] == b"" and len(lines) == len(export) + 1  # one LF-ended line per exported row
    parsed = criteo.parse_lines(pa.array(lines[:-1]))  # in row_id order, each the row's values and injected label
    ordered = export.sort_values("row_id")
    assert parsed.valid.all() and (parsed.label == ordered["label"].to_numpy()).all()
    features = ordered[list(criteo.FEATURE_COLUMNS)]
    missing = np.concatenate([parsed.int_missing, parsed.cat_missing], axis=1)
    assert (missing == features.isna().to_numpy()).all()
    values = np.concatenate([parsed.ints, parsed.cats], axis=1)
    assert (values[~missing] == features.fillna(0).to_numpy(np.int64)[~missing]).all()
    other = config_from_dict(_values(tmp_path, seed=2))  # other coins: the same rows in the same files and order
    run_stage("generate", spark, other)
    run_stage("inject", spark, other)
    assert _rows_per_file(layout.export_path(other)) == _rows_per_file(layout.export_path(config))
    labels = pd.read_parquet(layout.export_path(other)).set_index("row_id")["label"]
    assert (labels.loc[export["row_id"]].to_numpy() != export["label"].to_numpy()).any()


def _rows_per_file(folder: str) -> list[list[int]]:
    parts = sorted(Path(folder).glob("part-*.parquet"), key=lambda path: path.name.split("-")[1])
    return [pd.read_parquet(part)["row_id"].tolist() for part in parts]


def test_an_honest_mechanism_certifies_below_its_claim_and_its_predictions_table_gives_the_same_bound(spark,
                                                                                                      injected):
    predictions = injected.root / "honest.parquet"
    uri = injected.train("--epsilon", "1", "--predictions", str(predictions))
    by_model = run_stage("audit", spark, injected.config(model_uri=uri, claimed_epsilon=1.0))
    headline = by_model.headline
    assert headline.claimed_epsilon == 1.0 and not headline.is_finding
    assert 0.0 < headline.eps_lb <= 1.0  # RR at eps = 1 on a memorizing model: a strong valid audit, below its claim
    assert f"model {uri}" in headline.text()
    _tracked_audit_shows_what_produced_it(spark, injected, uri, headline.eps_lb)
    by_table = run_stage("audit", spark, injected.config(predictions_path=str(predictions), claimed_epsilon=1.0))
    assert by_table.headline.eps_lb == pytest.approx(headline.eps_lb, abs=1e-12)
    assert by_table.summary.canaries == by_model.summary.canaries == headline.informative_canaries
    import mlflow

    mlflow.set_tracking_uri(injected.config().tracking.tracking_uri)
    version = mlflow.register_model(uri, "own-click").version
    client = mlflow.MlflowClient()
    client.set_registered_model_alias("own-click", "champion", version)
    by_alias = run_stage("audit", spark, injected.config(model_uri="models:/own-click@champion", claimed_epsilon=1.0))
    assert f"model models:/own-click/{version}" in by_alias.headline.text()  # pinned to the version it named
    assert by_alias.headline.eps_lb == pytest.approx(headline.eps_lb, abs=1e-12)
    marker = json.loads((Path(by_alias.output_path) / "_LIA_COMPLETE").read_text(encoding="utf-8"))
    assert marker["lia_fingerprint"]["parameters"]["audit.model_version"] == f"models:/own-click/{version}"


def _tracked_audit_shows_what_produced_it(spark, injected: Injected, uri: str, eps_lb: float) -> None:
    """`lia-spark run run.stages=[audit]` records the audit of the model in MLflow (the committed audit reused): its
    parent run shows the fields the audit and the inject stage read, not the train stage's target settings."""
    import mlflow

    from lia_spark.engine.orchestration.pipeline import run_pipeline

    values = {**injected.values, "run": {**injected.values["run"], "stages": ["audit"]},
              "audit": {**injected.values["audit"], "model_uri": uri, "claimed_epsilon": 1.0}}
    result = run_pipeline(spark, config_from_dict(values))
    assert [step.status for step in result.steps if step.step == "audit"] == ["reused"]
    parent = mlflow.MlflowClient(injected.config().tracking.tracking_uri).get_run(result.mlflow_run_id)
    params = parent.data.params
    assert params["audit.model_uri"] == uri and params["audit.claimed_epsilon"] == "1.0"
    assert params["models.proxy_day"] == "0" and "models.epsilon" not in params
    assert "models.training_mechanism" not in params and "mechanisms.epsilons" not in params
    assert parent.data.metrics["audit.eps_lb"] == pytest.approx(eps_lb)


def test_a_model_that_never_saw_the_injected_labels_certifies_nothing_and_plays_the_observational_game(spark,
                                                                                                         injected):
    config = injected.config()
    truth = injected.root / "truth.parquet"
    pd.read_parquet(Path(config.parquet_path) / "day=1", columns=["row_id", "label"]).to_parquet(truth)
    uri = injected.train("--epsilon", "inf", "--true-labels", str(truth))
    result = run_stage("audit", spark, injected.config(model_uri=uri))
    assert result.headline.eps_lb == 0.0  # the coins are independent of everything it trained on
    observed = run_stage("audit", spark, injected.config(model_uri=uri, design="observational", repetitions=5))
    headline = observed.headline  # the observational game on its true labels: valid at the proxy's measured error
    assert headline.design == "observational" and f"model {uri}" in headline.text()
    assert 0 < headline.measured_tau < 1 and headline.canaries == 20_000 and not headline.assumption


def test_a_broken_mechanism_is_a_finding_and_fails_the_gate_with_code_3(spark, injected, capsys, caplog):
    tsv = Path(injected.config().run.output_dir) / "inject" / "criteo" / "day_1.gz"  # hex strings, as the file says
    uri = injected.train("--epsilon", "1", "--flip-epsilon", "8", "--tsv", str(tsv))
    conf = conf_file(injected.root / "gate.yaml", injected.values)
    code = main(["audit", "--conf", str(conf), f"audit.model_uri={uri}", "audit.claimed_epsilon=1",
                 "audit.fail_on_finding=true"])
    shown = capsys.readouterr()
    assert code == 3, shown.err[-3000:]
    assert "FINDING" in shown.out.splitlines()[-1] and f"model {uri}" in shown.out
    assert "exit code 3" in shown.err
    summary = json.loads((injected.root / "out" / "audit" / "summary.json").read_text(encoding="utf-8"))
    assert summary["headline"]["is_finding"] and summary["headline"]["eps_lb"] > 1.0
    caplog.set_level(logging.INFO, logger="lia_spark")
    assert main(["audit", "--conf", str(conf), f"audit.model_uri={uri}", "audit.claimed_epsilon=1"]) == 0
    assert "audit: reusing" in caplog.text  # the gate is not part of the audit's fingerprint


def test_missing_predictions_are_refused_naming_the_field(spark, injected):
    config = injected.config()
    sealed = pd.read_parquet(layout.sealed_path(config), columns=["row_id"])
    partial = injected.root / "partial.parquet"
    pd.DataFrame({"row_id": sealed["row_id"].iloc[1:], "prediction": 0.5}).to_parquet(partial)
    with pytest.raises(ValueError, match=r"^audit.predictions_path: no prediction .* for 1 of 20000 canaries"):
        run_stage("audit", spark, injected.config(predictions_path=str(partial)))
    labels = injected.root / "labels.parquet"
    pd.DataFrame({"row_id": sealed["row_id"], "prediction": 1.0}).to_parquet(labels)
    with pytest.raises(ValueError, match=r"^audit.predictions_path: every prediction is 0 or 1"):
        run_stage("audit", spark, injected.config(predictions_path=str(labels)))
    proxy = pd.read_parquet(layout.sealed_path(config), columns=["row_id", "proxy_prediction"])
    inverted = injected.root / "inverted.parquet"
    pd.DataFrame({"row_id": proxy["row_id"], "prediction": 1.0 - proxy["proxy_prediction"]}).to_parquet(inverted)
    with pytest.raises(ValueError, match=r"^audit.predictions_path: the predictions fall as the proxy's P\(y = 1\) "
                                         r"rises \(correlation -1.00"):
        run_stage("audit", spark, injected.config(predictions_path=str(inverted)))


def test_a_model_or_table_older_than_the_export_is_refused(spark, injected):
    """A model logged before the export was written cannot have trained on its labels (its bound would be a
    meaningless 0): both ways in are refused, naming the field and the times."""
    uri = injected.train("--epsilon", "1")
    predictions = injected.root / "older.parquet"
    sealed = pd.read_parquet(layout.sealed_path(injected.config()), columns=["row_id"])
    pd.DataFrame({"row_id": sealed["row_id"], "prediction": 0.5}).to_parquet(predictions)
    marker = Path(injected.config().run.output_dir) / "inject" / "_LIA_COMPLETE"
    written = marker.stat()
    os.utime(marker, (written.st_atime, written.st_mtime + 3600))  # as if inject wrote a new export an hour later
    try:
        for field, value in (("model_uri", uri), ("predictions_path", str(predictions))):
            with pytest.raises(ValueError, match=rf"^audit.{field}: (logged|written) at .* before the export it is "
                                                 r"audited on was written .* train again on the current export"):
                run_stage("audit", spark, injected.config(**{field: value}))
    finally:
        os.utime(marker, (written.st_atime, written.st_mtime))


def test_an_audit_of_a_model_of_your_own_without_its_injection_names_the_command_that_writes_it(spark, tmp_path):
    from lia_spark.engine.orchestration.pipeline import run_pipeline

    values = {**_values(tmp_path), "tracking": {"enabled": False}}
    config = config_from_dict({**values, "run": {**values["run"], "stages": ["audit"]},
                               "audit": {"predictions_path": str(tmp_path / "predictions")}})
    with pytest.raises(ValueError, match=r"reads the canaries table but .*inject/sealed is missing or incomplete; "
                                         r"run `lia-spark inject` first or set run.output_dir"):
        run_pipeline(spark, config)
    with pytest.raises(ValueError, match=r"^run.output_dir: the audit stage reads the canaries table, but "
                                         r".*inject/sealed does not exist; run `lia-spark inject` first, or set "):
        run_stage("audit", spark, config)
