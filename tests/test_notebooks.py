"""The Databricks source notebooks: their format, and that each runs as plain Python on the tiny run's outputs."""
from __future__ import annotations

import os

import pytest
from pipeline_support import EXPERIMENT, REPO, run_notebook, tiny_run

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.py"))


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    return tiny_run(spark, tmp_path_factory)


def test_notebooks_are_databricks_source_files_with_widgets():
    assert [p.name for p in NOTEBOOKS] == ["01_explore_data.py", "02_run_audit.py", "03_compare_runs.py",
                                           "04_audit_own_model.py"]
    for path in NOTEBOOKS:
        text = path.read_text(encoding="utf-8")
        assert text.startswith("# Databricks notebook source\n"), path.name
        cells = text.split("\n# COMMAND ----------\n")
        assert len(cells) >= 5, path.name
        assert cells[0].splitlines()[1].startswith("# MAGIC %md"), path.name
        assert "notebook_parameters(globals()," in text, path.name
        compile(text, str(path), "exec")


def test_notebooks_install_the_built_wheel_then_restart_python_and_default_to_a_workspace_config():
    """The first code cell installs this version's wheel of `make wheel` (a comment when the file runs as plain
    Python), without the `spark` extra: the cluster's runtime provides pyspark. The next restarts Python on
    Databricks only. The config defaults to a workspace path."""
    from lia_spark import __version__

    for path in NOTEBOOKS:
        cells = path.read_text(encoding="utf-8").split("\n# COMMAND ----------\n")
        assert cells[1].strip() == f"# MAGIC %pip install ../dist/lia_spark-{__version__}-py3-none-any.whl", path.name
        assert cells[2].strip().startswith('if "dbutils" in globals():') and \
            "dbutils.library.restartPython()" in cells[2], path.name
    for path in [*NOTEBOOKS[:2], NOTEBOOKS[3]]:
        text = path.read_text(encoding="utf-8")
        assert '{"conf": WORKSPACE_CONF' in text and "notebook_conf(params[\"conf\"], globals())" in text, path.name
        assert "sparkContext" not in text and "_jvm" not in text, path.name


def test_workspace_config_falls_back_to_the_packaged_demo_outside_databricks(spark, tmp_path):
    from lia_spark.cli.main import WORKSPACE_CONF, notebook_conf
    from lia_spark.run.packaged_configs import packaged_config

    user = spark.sql("SELECT current_user()").first()[0]
    assert WORKSPACE_CONF.startswith("/Workspace/Users/{user}/")
    assert notebook_conf(WORKSPACE_CONF, {}) == "demo" and packaged_config("demo").is_file()
    workspace = WORKSPACE_CONF.replace("{user}", user)
    assert notebook_conf(WORKSPACE_CONF, {"dbutils": object()}) == workspace  # on Databricks: the user's file
    own = tmp_path / "my.yaml"
    own.write_text("run: {name: mine}\n", encoding="utf-8")
    assert notebook_conf(str(own), {}) == str(own)


def test_widgets_are_used_when_dbutils_exists():
    from lia_spark.cli.main import notebook_parameters

    class Widgets:
        def __init__(self):
            self.values = {}

        def text(self, name, default, label):
            self.values.setdefault(name, default)

        def get(self, name):
            return self.values[name]

    class DbUtils:
        widgets = Widgets()

    DbUtils.widgets.values["conf"] = "from-widget.yaml"
    values = notebook_parameters({"dbutils": DbUtils}, {"conf": "default.yaml", "overrides": ""})
    assert values == {"conf": "from-widget.yaml", "overrides": ""}
    os.environ["LIA_OVERRIDES"] = "run.force=true"
    try:
        assert notebook_parameters({}, {"conf": "default.yaml", "overrides": ""}) == {
            "conf": "default.yaml", "overrides": "run.force=true"}
    finally:
        del os.environ["LIA_OVERRIDES"]


def test_tables_use_databricks_display_when_the_notebook_has_it(spark, capsys):
    import pandas as pd

    from lia_spark.cli.main import notebook_display

    shown = []
    frame = pd.DataFrame({"run_id": ["a", "b"], "metrics.audit.eps_lb": [0.5, 1.25]})
    notebook_display(frame, {"display": shown.append})
    assert shown == [frame] and capsys.readouterr().out == ""
    notebook_display(frame, {})  # elsewhere: printed
    notebook_display(spark.createDataFrame(frame), {})  # a Spark frame too
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["run_id", "metrics.audit.eps_lb"] and lines[2].split() == ["b", "1.25"]
    assert lines[3:] == lines[:3]


def test_explore_data_notebook(run, tmp_path):
    conf = run.conf_file(tmp_path / "conf.yaml")
    output = run_notebook("01_explore_data.py", {"LIA_CONF": str(conf)}, tmp_path).stdout
    assert "click_rate" in output
    assert output.count("20000") >= 2


def test_run_audit_notebook_reuses_the_finished_stages(run, tmp_path):
    import mlflow

    conf = run.conf_file(tmp_path / "conf.yaml", tracking={"log_models": False})
    output = run_notebook("02_run_audit.py", {"LIA_CONF": str(conf), "LIA_OVERRIDES": "run.name=notebook"},
                          tmp_path).stdout
    assert "data=reused" in output and "audit=reused" in output and "report=ran" in output
    client = mlflow.MlflowClient(run.tracking_uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert client.search_runs([experiment.experiment_id], "attributes.run_name = 'notebook'")


def test_compare_runs_notebook(run, tmp_path):
    output = run_notebook("03_compare_runs.py", {"LIA_EXPERIMENT": EXPERIMENT, "LIA_TRACKING_URI": run.tracking_uri},
                      tmp_path).stdout
    assert "pipeline runs in 'lia-spark-tests'" in output
    assert run.result.mlflow_run_id in output
