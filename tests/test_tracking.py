"""MLflow tracking of a real pipeline run: params, metrics, artifacts, models and nested runs
read back from the store."""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import importlib.metadata
import json
import math
import re
import socket
import subprocess
import threading
import warnings
from pathlib import Path

import mlflow
import numpy as np
import pytest
import yaml
from mlflow_support import free_port, logged_models, start_mlflow_server, stop_mlflow_server
from pipeline_support import REPO, spark_jobs, tiny_run, work_jobs

from lia_spark.cli.main import job_main
from lia_spark.engine.orchestration.pipeline import run_pipeline
from lia_spark.engine.runtime.outputs import read_marker
from lia_spark.names import setting_key
from lia_spark.run.fingerprint import code_version
from lia_spark.run.sections import TrackingConfig
from lia_spark.run.tracking_uri import resolve_tracking_uri
from lia_spark.tracking.mlflow_runs import DESCRIPTION_TAG, GIT_COMMIT_TAG, KIND_TAG, data_fingerprint, flatten
from lia_spark.tracking.store import TrackingError, check_tracking_store

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)

MODEL_SUFFIXES = (".ubj", ".json", ".cbm")


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    return tiny_run(spark, tmp_path_factory)


@pytest.fixture(scope="module")
def client(run):
    mlflow.set_tracking_uri(run.tracking_uri)  # fluent calls (search_logged_models, models:/ URIs) use the global
    return mlflow.MlflowClient(run.tracking_uri)  # URI, which other tests' pipelines leave on their own stores


def _children(client, run_id: str):
    experiment_id = client.get_run(run_id).info.experiment_id
    return client.search_runs([experiment_id], f"tags.mlflow.parentRunId = '{run_id}'")


def _same(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=1e-12, abs=1e-300)


def _tree(client, run_id: str) -> list:
    """The run and every run below it."""
    return [client.get_run(run_id),
            *(run for child in _children(client, run_id) for run in _tree(client, child.info.run_id))]


def test_flatten_and_fingerprint():
    assert flatten({"a": {"b": [1, 2], "c": "x", "d": {}}, "e": math.inf}) == {
        "a.b": "[1, 2]", "a.c": "x", "a.d": "{}", "e": "inf"}  # never the Infinity literal
    marker = {"rows": 40, "rows_per_day": {"0": 20, "1": 20}, "note": "x", "seconds": 10.6}
    params = data_fingerprint(marker)
    assert params["data.marker.rows"] == "40" and params["data.marker.rows_per_day"] == '{"0": 20, "1": 20}'
    assert "data.marker.seconds" not in params  # a timing is no identity (and no param)
    assert params["data.fingerprint"] != data_fingerprint({**marker, "rows": 41})["data.fingerprint"]


def test_end_closes_an_interrupted_stage_run_but_not_the_callers_outer_run(tmp_path):
    """A stage interrupted between start_stage and log_stage leaves its run open: end() closes it with the pipeline run
    (FAILED), and stops there, so a notebook's own active run stays open."""
    from lia_spark.run.config import config_from_dict
    from lia_spark.tracking.mlflow_runs import PipelineTracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = config_from_dict({"run": {"output_dir": str(tmp_path / "out")},
                               "tracking": {"tracking_uri": uri, "experiment": "interrupted"}})
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    outer = mlflow.start_run(experiment_id=client.create_experiment("outer"))
    try:
        tracker = PipelineTracker(config)
        tracker.start()
        tracker.start_stage("data")
        stage = mlflow.active_run().info.run_id
        tracker.end(failed=True)
        assert mlflow.active_run().info.run_id == outer.info.run_id
    finally:
        mlflow.end_run()
    assert client.get_run(stage).info.status == client.get_run(tracker.run_id).info.status == "FAILED"
    assert client.get_run(outer.info.run_id).info.status == "FINISHED"


def test_default_store_is_sqlite_in_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert resolve_tracking_uri(TrackingConfig()) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://example:5000")
    assert resolve_tracking_uri(TrackingConfig()) == "http://example:5000"
    assert resolve_tracking_uri(TrackingConfig(tracking_uri="databricks")) == "databricks"


def test_parent_run_holds_config_seed_fingerprint_commit_and_versions(spark, run, client):
    parent = client.get_run(run.result.mlflow_run_id)
    params = parent.data.params
    assert parent.info.status == "FINISHED"
    assert parent.data.tags[KIND_TAG] == "pipeline"
    assert params["seed"] == params["run.seed"] == str(run.config.run.seed)
    assert params["mechanisms.epsilons"] == "[2.0]"
    assert params["run.output_dir"] == run.config.run.output_dir
    assert params["data.fingerprint"] == (
        data_fingerprint(read_marker(spark, run.config.parquet_path))["data.fingerprint"])
    (table,) = parent.inputs.dataset_inputs  # the data table as the run's input (log_input)
    assert table.dataset.name == "data" and table.dataset.digest == params["data.fingerprint"]
    assert json.loads(table.dataset.source)["path"] == run.config.parquet_path
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert parent.data.tags[GIT_COMMIT_TAG] == commit and "env.git_commit" not in params
    children = _children(client, run.result.mlflow_run_id)
    assert children and all(child.data.tags.get(GIT_COMMIT_TAG) == commit for child in children)  # stage runs too
    assert parent.data.tags[DESCRIPTION_TAG] == run.result.step("audit").result.headline.text()
    assert params["env.mlflow"] == mlflow.__version__
    assert params["env.lia-spark"] == code_version(), "the code that ran, as the executors' check reports it"
    xgboost_distribution = next(name for name in ("xgboost", "xgboost-cpu") if f"env.{name}" in params)
    for package in ("pyspark", "numpy", "scipy", "pandas", "pyarrow", xgboost_distribution, "catboost", "numba",
                    "dp-accounting"):
        assert params[f"env.{package}"] == importlib.metadata.version(package), package
    logged_config = Path(mlflow.artifacts.download_artifacts(f"{parent.info.artifact_uri}/config.yaml"))
    assert yaml.safe_load(logged_config.read_text(encoding="utf-8")) == json.loads(json.dumps(run.config.to_dict()))


def test_stage_runs_last_as_long_as_their_stages(run, client):
    """Each stage's run starts when the stage starts (not after it, as logging did before), and lasts its seconds."""
    stage_runs = sorted(_children(client, run.result.mlflow_run_id), key=lambda r: r.info.start_time)
    assert [r.info.run_name for r in stage_runs] == [o.step for o in run.result.steps]
    for stage_run, following in zip(stage_runs, [*stage_runs[1:], None]):
        outcome = run.result.step(stage_run.info.run_name)
        assert (stage_run.info.end_time - stage_run.info.start_time) / 1000 == pytest.approx(outcome.seconds, abs=0.002)
        if following is not None:  # the next stage starts after this one ended, not long after (logging in between)
            assert 0 <= following.info.start_time - stage_run.info.end_time < 30_000
    assert sum(r.info.end_time - r.info.start_time for r in stage_runs) > 0.5 * (
        stage_runs[-1].info.end_time - stage_runs[0].info.start_time)


def test_no_infinity_is_logged_as_a_huge_number(run, client):
    """MLflow stores inf as 1.8e308: only finite values are metrics anywhere in the run's tree, and an unbounded
    setting's |I| percentiles are absent while its share of infinite rows is there."""
    runs = _tree(client, run.result.mlflow_run_id)
    assert len(runs) > 10
    for logged in runs:
        assert all(math.isfinite(v) and abs(v) < 1e300 for v in logged.data.metrics.values()), logged.info.run_name
    plain_llp = next(r for r in runs if r.info.run_name == "posteriors/llp.epsinf.k8")
    assert plain_llp.data.tags["lia_spark.stage"] == "posteriors"
    assert plain_llp.data.params["setting"] == "llp.epsinf.k8"
    assert plain_llp.data.metrics["share_infinite"] > 0 and "abs_I_p99" not in plain_llp.data.metrics


def test_every_stage_metric_is_logged_to_parent_and_stage_run(run, client):
    parent_metrics = client.get_run(run.result.mlflow_run_id).data.metrics
    stage_runs = {r.info.run_name: r for r in _children(client, run.result.mlflow_run_id)}
    assert set(stage_runs) == {o.step for o in run.result.steps}
    for outcome in run.result.steps:
        logged = stage_runs[outcome.step].data.metrics
        assert outcome.metrics(), f"{outcome.step} reported no metrics"
        for key, value in outcome.metrics().items():
            if not math.isfinite(value):
                assert f"{outcome.step}.{key}" not in parent_metrics and key not in logged
                continue
            assert _same(parent_metrics[f"{outcome.step}.{key}"], float(value)), (outcome.step, key)
            assert _same(logged[key], float(value)), (outcome.step, key)
        assert logged["seconds"] == pytest.approx(outcome.seconds)


def test_every_stage_artifact_is_logged(run, client):
    stage_runs = {r.info.run_name: r for r in _children(client, run.result.mlflow_run_id)}
    for outcome in run.result.steps:
        listed = {Path(a.path).name for a in client.list_artifacts(stage_runs[outcome.step].info.run_id, outcome.step)}
        expected = ({Path(p).name for p in outcome.artifacts()}
                    | ({"settings.json"} if outcome.setting_rows() else set()))
        assert expected == listed, outcome.step
        assert expected or outcome.step == "data", f"{outcome.step} reported no artifacts"
    report = client.list_artifacts(run.result.mlflow_run_id, "report")
    assert [a.path for a in report] == ["report/report.html"]


def test_per_row_labels_stay_in_the_output_folder_by_default(run, client):
    """tracking.log_row_data is false by default: the canary and test-prediction tables (row ids with true labels)
    are not in MLflow, although the train stage wrote them."""
    train = next(outcome for outcome in run.result.steps if outcome.step == "train")
    assert all(Path(path).exists() for path in train.result.row_data())
    stage_runs = {r.info.run_name: r for r in _children(client, run.result.mlflow_run_id)}
    listed = {Path(a.path).name for a in client.list_artifacts(stage_runs["train"].info.run_id, "train")}
    assert listed and not listed & {"canaries", "test_predictions"}


def test_models_are_logged_with_signatures_and_predict_like_the_files(run, client):
    import xgboost

    train = run.result.step("train")
    files = [Path(p) for p in train.artifacts() if Path(p).suffix in MODEL_SUFFIXES]
    boosters = {}
    for path in files:
        booster = xgboost.Booster()
        try:
            booster.load_model(str(path))
        except xgboost.core.XGBoostError:
            continue
        boosters[path.stem] = booster
    assert len(boosters) >= 2, "train must provide proxy and target model files"
    stage_run = next(r for r in _children(client, run.result.mlflow_run_id) if r.info.run_name == "train")
    logged = logged_models(client, stage_run)
    assert sorted(logged) == sorted([*boosters, *(f"{name}_raw_rows" for name in boosters)])
    rng = np.random.default_rng(7)
    for name in [name for name in logged if name in boosters]:
        booster, model_uri = boosters[name], logged[name]
        info = mlflow.models.get_model_info(model_uri)
        names = booster.feature_names or [f"f{i}" for i in range(booster.num_features())]
        assert info.signature.inputs.input_names() == names
        features = rng.normal(size=(50, booster.num_features()))
        loaded = mlflow.xgboost.load_model(model_uri)
        expected = booster.predict(xgboost.DMatrix(features, feature_names=booster.feature_names))
        np.testing.assert_array_equal(loaded.predict(xgboost.DMatrix(features, feature_names=loaded.feature_names)),
                                      expected)


def test_logged_models_score_raw_criteo_rows_through_pyfunc(spark, run, client):
    """The train stage's <model>_raw_rows pyfunc models take rows of the data table (I1..I13, C1..C26) and give the
    predictions the run reported for those rows (test_predictions: target and proxy); each has an input example."""
    from lia_spark.kernels.criteo import FEATURE_COLUMNS

    train = run.result.step("train")
    reported = spark.read.parquet(str(Path(train.result.output_dir) / "test_predictions"))
    rows = (spark.read.parquet(run.config.parquet_path).where(f"day = {run.config.models.target_day}")
            .join(reported, "row_id").orderBy("row_id").limit(300).toPandas())
    raw = rows[list(FEATURE_COLUMNS)].astype("float64")  # the signature's type: double
    stage_run = next(r for r in _children(client, run.result.mlflow_run_id) if r.info.run_name == "train")
    logged = logged_models(client, stage_run)
    for path in map(Path, train.result.model_files):
        model_uri = logged[f"{path.stem}_raw_rows"]
        assert mlflow.models.get_model_info(model_uri).saved_input_example_info is not None
        scored = mlflow.pyfunc.load_model(model_uri).predict(raw)
        np.testing.assert_allclose(np.asarray(scored, dtype=np.float64).ravel(),
                                   rows[f"{path.stem}_prediction"].to_numpy(np.float64), rtol=1e-6)


def test_one_nested_run_per_posterior_setting(run, client):
    posteriors = run.result.step("posteriors")
    summary = next(Path(p) for p in posteriors.artifacts() if Path(p).name == "summary.csv")
    with summary.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    stage_run = next(r for r in _children(client, run.result.mlflow_run_id) if r.info.run_name == "posteriors")
    settings = _children(client, stage_run.info.run_id)
    assert len(settings) == len(rows) > 0
    by_key = {(r.data.params["mechanism"], r.data.params["epsilon"], r.data.params["bag_size"]): r for r in settings}
    for row in rows:
        logged = by_key[(row["mechanism"], row["epsilon"], row["bag_size"])]
        assert logged.data.tags[KIND_TAG] == "setting"
        assert _same(logged.data.metrics["mean_additive_advantage"], float(row["mean_additive_advantage"]))
    table = client.load_table(stage_run.info.experiment_id, "posteriors/settings.json", run_ids=[stage_run.info.run_id])
    assert sorted(f"posteriors/{key}" for key in table["setting"]) == sorted(r.info.run_name for r in settings)


def test_one_setting_key_names_runs_metrics_and_report(run, client):
    """rr.eps2.k1 style everywhere: setting run names (``<stage>/<key>``: posteriors and utility share keys), their
    "setting" param, stage metric prefixes, the report."""
    assert setting_key("rr", 2.0, 1) == "rr.eps2.k1" and setting_key("llp", math.nan, 8) == "llp.epsinf.k8"
    assert setting_key("llp_laplace", 0.5, 8) == "llp_laplace.eps0.5.k8"
    parent = client.get_run(run.result.mlflow_run_id).data.metrics
    for stage in ("posteriors", "utility"):
        stage_run = next(r for r in _children(client, run.result.mlflow_run_id) if r.info.run_name == stage)
        names = {r.info.run_name for r in _children(client, stage_run.info.run_id)}
        keys = {setting_key(row["mechanism"], row["epsilon"], row["bag_size"])
                for row in run.result.step(stage).setting_rows()}
        assert names == {f"{stage}/{key}" for key in keys}
        assert all(r.info.run_name == f"{stage}/{r.data.params['setting']}"
                   for r in _children(client, stage_run.info.run_id))
        assert all(any(metric.startswith(f"{stage}.{key}.") for metric in parent) for key in keys), stage
        assert all(key in run.report_text for key in keys), stage
    assert not [m for m in parent if re.search(r"(rr|llp|lp_2st)\w*_eps|epsnan|eps=", m)]  # the old spellings


def test_a_silent_server_is_asked_once_within_the_timeout():
    """A server that accepts the connection and never answers: one GET /health, given up after timeout_seconds."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent.settimeout(30)
        accepted: list[socket.socket] = []

        def accept_all() -> None:
            with contextlib.suppress(OSError):
                while True:
                    accepted.append(silent.accept()[0])

        listener = threading.Thread(target=accept_all, daemon=True)
        listener.start()
        with pytest.raises(TrackingError, match=r"is unreachable \(timed out\)"):
            check_tracking_store(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_seconds=0.5)
        for connection in accepted:
            connection.close()
    assert len(accepted) == 1, "no retry"


def test_unreachable_server_fails_fast_before_any_stage(spark, tmp_path, capsys):
    uri = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TrackingError, match="unreachable"):
        check_tracking_store(uri, timeout_seconds=2.0)
    conf = tmp_path / "conf.yaml"
    conf.write_text(yaml.safe_dump({"run": {"output_dir": str(tmp_path / "out")},
                                    "tracking": {"tracking_uri": uri, "timeout_seconds": 2.0}}), encoding="utf-8")
    jobs = spark_jobs(spark)
    assert job_main("pipeline", ["--conf", str(conf)]) == 1
    assert "is unreachable" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert work_jobs(spark, jobs) == [], "refused before any Spark job but the executor check"


def test_real_mlflow_server_receives_a_pipeline_run(spark, run, tmp_path, capsys):
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    server = start_mlflow_server(port, f"sqlite:///{tmp_path / 'server.db'}", "--artifacts-destination",
                                 str(tmp_path / "artifacts"))
    try:
        config = dataclasses.replace(run.config, tracking=dataclasses.replace(
            run.config.tracking, tracking_uri=uri, experiment="served", log_models=False))
        result = run_pipeline(spark, config)
        served = mlflow.MlflowClient(uri).get_run(result.mlflow_run_id)
        assert served.info.status == "FINISHED"
        assert served.data.params["run.seed"] == str(run.config.run.seed)
        for key, value in result.step("audit").metrics().items():
            assert _same(served.data.metrics[f"audit.{key}"], float(value)), key
        assert result.mlflow_location == f"{uri}/#/experiments/{served.info.experiment_id}/runs/{result.mlflow_run_id}"
        assert [a.path for a in mlflow.MlflowClient(uri).list_artifacts(result.mlflow_run_id, "report")] == [
            "report/report.html"]
        assert "View run" not in capsys.readouterr().out  # MLflow's URL lines stay off stdout: the summary names it
    finally:
        stop_mlflow_server(server)


def test_catboost_model_file_is_logged_with_signature_and_predicts_like_the_file(tmp_path):
    import pandas as pd
    from catboost import CatBoostClassifier

    from lia_spark.tracking.model_logging import log_model_file

    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"I1": rng.normal(size=300), "C1": rng.choice(["a", "b", "c"], size=300)})
    labels = (frame["I1"] + (frame["C1"] == "a") > 0.5).astype(int)
    model = CatBoostClassifier(iterations=5, depth=2, verbose=False, thread_count=1, cat_features=["C1"],
                               allow_writing_files=False)
    model.fit(frame, labels)
    model.save_model(str(tmp_path / "target.cbm"))
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.MlflowClient().create_experiment("catboost", artifact_location=(tmp_path / "mlruns").as_uri())
    with mlflow.start_run(experiment_id=experiment):
        uri = log_model_file(tmp_path / "target.cbm")
    info = mlflow.models.get_model_info(uri)
    assert info.signature.inputs.input_names() == ["I1", "C1"]
    assert [spec.type.name for spec in info.signature.inputs.inputs] == ["double", "string"]
    loaded = mlflow.catboost.load_model(uri)
    np.testing.assert_array_equal(loaded.predict_proba(frame), model.predict_proba(frame))


def _raw_rows(rng: np.random.Generator, n: int):
    """Raw Criteo rows as the data table stores them (integers and 32-bit categorical values, some missing)."""
    import pandas as pd

    from lia_spark.kernels.criteo import CAT_COLUMNS, INT_COLUMNS

    frame = pd.DataFrame({name: rng.integers(0, 50, n).astype(float) for name in INT_COLUMNS}
                         | {name: rng.choice([11.0, 22.0, 33.0, 4_000_000_000.0], n) for name in CAT_COLUMNS})
    frame.iloc[::7, 3] = np.nan
    frame.iloc[::5, 20] = np.nan
    return frame


def test_raw_row_model_scores_criteo_rows_through_pyfunc_like_the_booster(tmp_path):
    """An xgboost model trained on frequency-encoded features, logged with its encoding and an output transform
    (margin offset, best iteration, RR noise correction): mlflow.pyfunc scores raw rows exactly as encoding + booster
    + transform do, and the model carries a signature and an input example."""
    import xgboost

    from lia_spark.kernels import features, label_mechanisms, model_output
    from lia_spark.kernels.criteo import CAT_COLUMNS
    from lia_spark.tracking.model_logging import log_raw_row_model

    rng = np.random.default_rng(11)
    raw = _raw_rows(rng, 400)
    counts = {name: np.unique(raw[name].dropna().to_numpy(np.int64), return_counts=True) for name in CAT_COLUMNS}
    spec = features.FeatureSpec(encoding="frequency", hash_buckets=16,
                                vocabulary=features.vocabulary_from_counts(counts, min_count=5, max_size=3))
    encoded = features.encode_features(raw, spec)
    labels = (raw["I1"] + 10 * (raw["C2"] == 22.0) > 30).astype(int)
    booster = xgboost.train({"max_depth": 3}, xgboost.DMatrix(encoded.to_numpy(np.float32), labels,
                                                              feature_names=list(encoded.columns)), 5)
    booster.save_model(str(tmp_path / "target.ubj"))
    encoding = features.save_spec(spec, features.encoding_file(str(tmp_path / "target.ubj")))
    assert encoding == str(tmp_path / "target.encoding.npz")
    transform = model_output.OutputTransform(margin_offset=0.3, best_iteration=3, rr_epsilon=2.0)
    output = model_output.save_output_transform(transform, model_output.output_transform_file(encoding))
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.MlflowClient().create_experiment("raw", artifact_location=(tmp_path / "mlruns").as_uri())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mlflow.start_run(experiment_id=experiment):
            uri = log_raw_row_model(tmp_path / "target.ubj", Path(encoding), Path(output))
        loaded = mlflow.pyfunc.load_model(uri)
    assert not [str(w.message) for w in caught if "type hint" in str(w.message)]  # MLflow 3 warned on each load
    info = mlflow.models.get_model_info(uri)
    assert info.signature.inputs.input_names()[:2] == ["I1", "I2"] and len(info.signature.inputs.inputs) == 39
    assert info.saved_input_example_info is not None
    assert info.flavors["python_function"].get("model_code_path"), info.flavors  # models from code: nothing pickled
    model_files = {path.name for path in Path(mlflow.artifacts.download_artifacts(uri)).rglob("*")}
    assert not {name for name in model_files if name.endswith(".pkl")}, model_files
    scored = loaded.predict(raw)
    margins = booster.predict(xgboost.DMatrix(encoded.to_numpy(np.float32), feature_names=list(encoded.columns)),
                              output_margin=True, iteration_range=(0, 4))
    expected = label_mechanisms.debias_rr_predictions(1 / (1 + np.exp(-(margins.astype(np.float64) + 0.3))),
                                                      epsilon=2.0)
    np.testing.assert_allclose(np.asarray(scored, dtype=np.float64).ravel(), expected, rtol=1e-6)
    assert len(np.unique(expected)) > 2
    # the types a user feeds: int64 columns (missing as None), and text as Criteo files write it ("" missing)
    as_int64 = raw.astype("Int64").astype(object).where(raw.notna(), None)
    as_text = raw.astype(object).where(raw.isna(), raw.fillna(0).astype(np.int64).astype(str)).where(raw.notna(), "")
    for name in CAT_COLUMNS:
        as_text[name] = [f"{int(v):08x}" if v == v else "" for v in raw[name]]
    loaded = mlflow.pyfunc.load_model(uri)
    for frame in (as_int64, as_text):
        np.testing.assert_array_equal(np.asarray(loaded.predict(frame), dtype=np.float64).ravel(),
                                      np.asarray(scored, dtype=np.float64).ravel())
