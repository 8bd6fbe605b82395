"""Days of one class on Criteo-format files (the ingest path, no twin truth), as a user would give them: a day a
model learns from (the proxy's, the target's: the train stage on either execution path, the utility grid, the inject
stage's export) whose labels are all 1 or all 0 is refused before any fit, exit 2 naming the day's field, the day
and the class counts; a test split of one class leaves the run to finish with one warning naming the day, its AUC
null in the JSON and absent from MLflow. The log-loss attack learns nothing (it decodes the labels it is given) and
is not concerned."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import mlflow
import numpy as np
import pytest

from lia_spark.cli.main import main
from lia_spark.engine.models.classes import check_training_labels
from lia_spark.kernels import criteo, features
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config

ROWS = 2000
SMALL = ["models.n_estimators=5", "models.early_stopping_rounds=0", "models.hash_buckets=1024",
         "models.min_category_count=3", "tracking.enabled=false"]


def _lines(labels: np.ndarray, rng: np.random.Generator) -> str:
    """Criteo lines with these labels; I1 tells the label a little, so a model has something to learn."""
    lines = []
    for label in labels.tolist():
        ints = rng.integers(0, 50, len(criteo.INT_COLUMNS)) + 20 * label
        cats = rng.integers(0, 40, len(criteo.CAT_COLUMNS))
        lines.append("\t".join([str(label), *map(str, ints), *(f"{value:08x}" for value in cats)]))
    return "".join(f"{line}\n" for line in lines)


def _days(folder: Path, labels: dict[int, np.ndarray]) -> Path:
    rng = np.random.default_rng(5)
    folder.mkdir(parents=True, exist_ok=True)
    for day, day_labels in labels.items():
        (folder / f"day_{day}").write_text(_lines(day_labels, rng), encoding="ascii")
    return folder


def _mixed(rng: np.random.Generator) -> np.ndarray:
    return (rng.random(ROWS) < 0.3).astype(int)


def _split(day: int) -> np.ndarray:
    """The split code (0 train, 1 validation, 2 test) of each line of ``day`` under the default seed and split."""
    ids = criteo.make_row_id(np.full(ROWS, day), np.arange(ROWS))
    return features.split_codes(ids, seed=Config().run.seed, shares=Config().models.split)


def _command(tmp_path: Path, folder: Path, *overrides: str, command: str = "run") -> list[str]:
    return [command, f"run.output_dir={tmp_path / 'out'}", "data.source=criteo", f"data.criteo_paths=[{folder}]",
            *SMALL, *overrides]


def _one_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lia-spark: ")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("day, label, field, execution", [
    (1, 1, "models.target_day", "in_memory"),
    (1, 1, "models.target_day", "distributed"),
    (0, 0, "models.proxy_day", "in_memory"),
    (0, 0, "models.proxy_day", "distributed"),
])
def test_a_day_of_one_class_a_model_learns_from_is_refused_before_any_fit(spark, tmp_path, capsys, day, label, field,
                                                                          execution):
    rng = np.random.default_rng(day)
    labels = {0: _mixed(rng), 1: _mixed(rng)}
    labels[day] = np.full(ROWS, label)
    folder = _days(tmp_path / "criteo", labels)
    assert main(_command(tmp_path, folder, "run.stages=[data, train]", f"models.execution={execution}")) == 2
    counts = f"{ROWS:,} rows labelled 1, 0 labelled 0" if label else f"0 rows labelled 1, {ROWS:,} labelled 0"
    line = _one_line(capsys)
    assert line.startswith(f"lia-spark: {field}: day {day} holds one class only ({counts} in "), line
    assert f"got {day};" in line and "no model can learn from it" in line
    assert (tmp_path / "out" / "data").is_dir() and not (tmp_path / "out" / "models").exists()


@pytest.mark.parametrize("command, overrides, field", [
    ("run", ["run.stages=[data, utility]"], "models.target_day"),
    ("inject", [], "models.target_day"),
])
def test_the_utility_grid_and_the_inject_stage_refuse_a_target_day_of_one_class(spark, tmp_path, capsys, command,
                                                                                overrides, field):
    folder = _days(tmp_path / "criteo", {0: _mixed(np.random.default_rng(0)), 1: np.ones(ROWS, dtype=int)})
    assert main(_command(tmp_path, folder, "run.stages=[data]")) == 0
    capsys.readouterr()
    assert main(_command(tmp_path, folder, *overrides, command=command)) == 2
    assert _one_line(capsys).startswith(f"lia-spark: {field}: day 1 holds one class only")


def test_a_sample_that_loses_the_rarer_label_is_refused_before_the_fit(spark, tmp_path, capsys):
    labels = (_split(1) == 2).astype(int)  # clicks on the test rows only: the day has both labels, its train rows not
    folder = _days(tmp_path / "criteo", {0: _mixed(np.random.default_rng(0)), 1: labels})
    assert main(_command(tmp_path, folder, "run.stages=[data, train]")) == 2
    line = _one_line(capsys)
    train_rows = int((_split(1) == 0).sum())
    assert line.startswith(f"lia-spark: models.target_day: the {train_rows:,} training rows of day 1 "), line
    assert f"hold one class only (0 rows labelled 1, {train_rows:,} labelled 0)" in line


def test_a_test_split_of_one_class_warns_once_naming_the_day_and_leaves_the_auc_null(spark, tmp_path, capsys, caplog):
    rng = np.random.default_rng(3)
    labels = np.where(_split(1) == 2, 0, _mixed(rng))  # no click among day 1's test rows
    folder = _days(tmp_path / "criteo", {0: _mixed(rng), 1: labels})
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = ["run.stages=[data, train]", "tracking.enabled=true", f"tracking.tracking_uri={store}",
                 "tracking.log_models=false"]
    with caplog.at_level(logging.WARNING, logger="lia_spark"):
        assert main(_command(tmp_path, folder, *overrides)) == 0
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING
                and "holds one class only" in record.getMessage()]
    test_rows = int((_split(1) == 2).sum())
    assert warnings == [f"train: the test split of day 1 (models.target_day) holds one class only (0 rows labelled "
                        f"1, {test_rows:,} labelled 0): the test AUC of the target and the proxy is undefined (null "
                        "in the stage's JSON result, not logged to MLflow); the log-loss is still computed"]
    result = json.loads((tmp_path / "out" / "models" / "metrics.json").read_text(encoding="utf-8"))
    assert result["test_metrics"]["auc@target"] is None and result["test_metrics"]["auc@proxy"] is None
    assert result["test_metrics"]["log_loss@target"] > 0
    assert np.isfinite(result["test_metrics"]["auc@proxy_own_day"])  # the proxy's own day has both labels
    client = mlflow.MlflowClient(store)
    experiment = client.get_experiment_by_name(Config().tracking.experiment).experiment_id
    (train,) = client.search_runs([experiment], filter_string="attributes.run_name = 'train'")
    assert "auc_test_target" not in train.data.metrics and "log_loss_test_target" in train.data.metrics


def test_training_labels_of_one_class_are_refused_naming_the_field_and_the_counts():
    check_training_labels(np.array([0, 1, 0], dtype=np.int8), field="models.proxy_day", day=0)
    with pytest.raises(ConfigError, match=r"^models\.proxy_day: the 3 training rows of day 4 .* hold one class only "
                                          r"\(3 rows labelled 1, 0 labelled 0\), .*got 4;"):
        check_training_labels(np.ones(3, dtype=np.int8), field="models.proxy_day", day=4)
