"""End-to-end pipeline on a tiny synthetic twin: every step runs, re-runs reuse outputs, bad input fails cleanly."""
from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import pytest
from pipeline_support import REPO, result_document, spark_jobs, submit, tiny_run, work_jobs

from lia_spark.cli.main import COMMAND_NAMES, main
from lia_spark.engine.orchestration.pipeline import run_pipeline
from lia_spark.engine.orchestration.registry import step_stage
from lia_spark.engine.runtime.outputs import MARKER, is_complete
from lia_spark.run.config import Config
from lia_spark.run.sections import PIPELINE_STAGES

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)

STAGE_STEPS = ("data", "train", "posteriors", "utility", "audit")


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    return tiny_run(spark, tmp_path_factory)


def _untracked(config: Config, **run_changes) -> Config:
    return dataclasses.replace(config, run=dataclasses.replace(config.run, **run_changes),
                               tracking=dataclasses.replace(config.tracking, enabled=False))


def _markers(config: Config) -> dict[str, bytes]:
    found = {}
    for step in STAGE_STEPS:
        for path in step_stage(step, config).outputs(config):
            marker = Path(path) / MARKER
            if marker.is_file():
                found[str(marker)] = marker.read_bytes()
    return found


def test_full_pipeline_runs_every_step_and_commits_its_output(spark, run):
    assert [o.step for o in run.result.steps] == list(PIPELINE_STAGES)
    assert {o.step: o.status for o in run.result.steps} == dict.fromkeys(PIPELINE_STAGES, "ran")
    assert run.result.spark_master == spark.sparkContext.master
    for step in STAGE_STEPS:
        assert all(is_complete(spark, path) for path in step_stage(step, run.config).outputs(run.config)), step
    data = run.result.step("data")
    assert data.stage == "generate"
    rows = spark.read.parquet(run.config.parquet_path).count()
    assert rows == 2 * 20_000


def test_utility_grid_trains_pate_at_every_epsilon_fitting_the_teachers_once(run):
    utility = run.result.step("utility").result
    assert utility.teacher_fits == 1 and utility.left_out == {}
    rows = [row for row in utility.table if row["mechanism"] == "pate"]
    assert sorted(row["epsilon"] for row in rows) == [4.0, math.inf]
    for row in rows:  # no posterior summary and no closed form: no advantage, but a trained student
        assert 0.5 < row["auc"] < 1.0 and row["advantage_source"] == "none"
        assert math.isnan(row["mean_additive_advantage"])


def test_report_embeds_every_plot_and_table(run):
    report = Path(run.result.report_path)
    assert report == Path(run.config.run.output_dir).resolve() / "report" / "report.html"
    text = run.report_text
    pngs = [p for p in run.result.artifacts() if p.endswith(".png")]
    csvs = [p for p in run.result.artifacts() if p.endswith(".csv")]
    assert text.count("data:image/png;base64,") == len(pngs) + 1  # + the mechanisms at matched utility
    assert run.result.step("report").result.figures == len(pngs) + 1
    assert 'alt="mechanisms_at_matched_utility.png"' in text
    assert run.result.step("report").result.tables == len(csvs)
    for step in STAGE_STEPS:
        assert f"<h2>{step} (" in text
    assert run.result.mlflow_run_id in text


def test_second_run_reuses_finished_stages_without_rewriting_them(spark, run):
    before = _markers(run.config)
    assert len(before) >= len(STAGE_STEPS)
    again = run_pipeline(spark, _untracked(run.config))
    assert {o.step: o.status for o in again.steps} == {**dict.fromkeys(STAGE_STEPS, "reused"), "report": "ran"}
    assert _markers(run.config) == before
    for first, second in zip(run.result.steps[:4], again.steps[:4]):
        assert second.metrics().keys() == first.metrics().keys(), first.step


def test_run_stages_selects_steps(spark, run):
    result = run_pipeline(spark, _untracked(run.config, stages=("report",)))
    assert {o.step: o.status for o in result.steps} == {**dict.fromkeys(STAGE_STEPS, "skipped"), "report": "ran"}


def test_missing_input_data_fails_before_any_stage(spark, tmp_path):
    config = _untracked(Config(), output_dir=str(tmp_path / "out"), stages=("train", "audit"))
    with pytest.raises(ValueError, match=r"run.stages: .*data.*missing or incomplete"):
        run_pipeline(spark, config)
    assert not (tmp_path / "out").exists()


def test_failing_stage_keeps_finished_outputs_and_fails_the_mlflow_run(spark, run, tmp_path):
    import mlflow

    out = tmp_path / "out"
    for name in ("data", "truth"):
        if (Path(run.config.run.output_dir) / name).exists():
            shutil.copytree(Path(run.config.run.output_dir) / name, out / name)
    config = dataclasses.replace(run.config, run=dataclasses.replace(run.config.run, output_dir=str(out), name="fails"),
                                 models=dataclasses.replace(run.config.models, proxy_day=7))
    with pytest.raises(RuntimeError, match=r"stage train \(train\) failed"):
        run_pipeline(spark, config)
    assert is_complete(spark, str(out / "data"))
    assert not is_complete(spark, step_stage("train", config).outputs(config)[0])
    assert not list(out.glob("models*_tmp-*")), "a failed stage must not leave staging folders"
    client = mlflow.MlflowClient(run.tracking_uri)
    experiment = client.get_experiment_by_name(run.config.tracking.experiment)
    parent = client.search_runs([experiment.experiment_id], "attributes.run_name = 'fails'")[0]
    assert parent.info.status == "FAILED"
    children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert {r.info.run_name: r.info.status for r in children} == {"data": "FINISHED", "train": "FAILED"}


@pytest.mark.parametrize("text, message", [
    (None, "file not found"),
    ("run: [unclosed", "not valid YAML"),
    ("run:\n  stages: [data, typo]\n", "run.stages"),
    ("tracking:\n  timeout_seconds: 0\n", "tracking.timeout_seconds"),
])
def test_bad_config_exits_2_with_the_field_named(tmp_path, capsys, text, message):
    conf = tmp_path / "conf.yaml"
    if text is not None:
        conf.write_text(text, encoding="utf-8")
    assert main(["run", "--conf", str(conf)]) == 2
    assert message in capsys.readouterr().err


def test_cli_lists_run_and_every_stage(capsys):
    assert main(["--help"]) == 0
    usage = capsys.readouterr().out  # help is output, not an error
    for command in ("run", "config", *COMMAND_NAMES):
        assert command in usage
    assert main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err


def test_cli_version_and_resolved_config_round_trip(tmp_path, capsys):
    from lia_spark import __version__
    from lia_spark.run.config import load_config

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"lia-spark {__version__}"
    overrides = ["audit.delta=1e-5", "models.epsilon=.inf", "mechanisms.epsilons=[0.5]",
                 "spark.extra={spark.executor.memory: 2g}"]
    assert main(["config", "--show", "--conf", str(REPO / "conf" / "demo.yaml"), *overrides]) == 0
    shown = tmp_path / "shown.yaml"
    shown.write_text(capsys.readouterr().out, encoding="utf-8")
    assert load_config(shown) == load_config(REPO / "conf" / "demo.yaml", overrides)
    assert main(["config", "audit.delta=-1"]) == 2 and "audit.delta" in capsys.readouterr().err


def test_demo_config_covers_every_step():
    from lia_spark.run.config import load_config

    config = load_config(REPO / "conf" / "demo.yaml")
    assert config.run.stages == tuple(PIPELINE_STAGES)
    assert config.tracking.enabled


def test_unwritable_output_folder_fails_before_any_stage(spark, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    config = _untracked(Config(), output_dir=str(blocker / "out"))
    jobs = spark_jobs(spark)
    with pytest.raises(PermissionError, match=r"run.output_dir: cannot write to .*a-file/out"):
        run_pipeline(spark, config)
    assert work_jobs(spark, jobs) == [], "refused before any Spark job but the executor check"


def test_spark_submit_pipeline_on_local_master_reuses_outputs(run, tmp_path):
    """jobs/pipeline.py under spark-submit on a local master, into the finished run's folder: every stage is
    reused but the report."""
    conf = run.conf_file(tmp_path / "conf.yaml", tracking={"enabled": False})
    completed = submit(["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=3",
                        str(REPO / "jobs" / "pipeline.py"), "--conf", str(conf)], tmp_path)
    result = result_document(completed.stdout)
    assert result["spark_master"] == "local[2]"
    assert [s["status"] for s in result["steps"]] == ["reused"] * (len(PIPELINE_STAGES) - 1) + ["ran"]
    # logs on stderr although spark-submit's launcher merges the Python driver's stderr into its stdout
    assert "session on local[2] (3 shuffle partitions)" in completed.stderr
    assert " INFO lia_spark" not in completed.stdout
    *_, report, headline = completed.stdout.rstrip().splitlines()  # tracking disabled: no MLflow line
    assert report.startswith("report: ") and headline.startswith("audit: eps >= ")
    assert "at 95% (injected canaries, no assumption on the proxy; binomial bound, Bonferroni over" in headline
    assert "for a target trained with none at claimed eps = inf" in headline
