"""spark-submit packaging: the wheel, jobs/pipeline.py on local[2] and on local-cluster (separate executor JVMs)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from lia_spark.engine.outputs import is_complete
from lia_spark.run.sections import PIPELINE_STAGES
from pipeline_support import PYTHON, REPO, tiny_run, write_conf

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)

SPARK_SUBMIT = str(Path(PYTHON).with_name("spark-submit"))


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    return tiny_run(spark, tmp_path_factory)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dist")
    subprocess.run([PYTHON, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
                    str(folder), str(REPO)], check=True, timeout=300, capture_output=True)
    (built,) = folder.glob("lia_spark-*.whl")
    return built


def _submit(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": PYTHON, "PYSPARK_DRIVER_PYTHON": PYTHON, "SPARK_LOCAL_IP": "127.0.0.1"}
    completed = subprocess.run([SPARK_SUBMIT, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=400)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return completed


def _result(stdout: str, mounts: dict[str, Path] | None = None) -> dict:
    """The job's full result: the strict JSON file named on stdout ("full result (JSON): <path>"), a mounted
    Hadoop path read through its local folder."""
    (line,) = [line for line in stdout.splitlines() if "full result (JSON): " in line]
    path = line.split("full result (JSON): ", 1)[1]
    for prefix, folder in (mounts or {}).items():
        path = path.replace(prefix, str(folder))
    return json.loads(Path(path).read_text(encoding="utf-8"))


def test_wheel_holds_the_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("lia_spark/engine/pipeline.py", "lia_spark/tracking/mlflow_runs.py", "lia_spark/present/report.py",
                   "lia_spark/engine/stages.py", "lia_spark/kernels/hashing.py"):
        assert module in names


def test_wheel_requires_pyspark_only_with_the_spark_extra(wheel):
    """On a Databricks cluster (or any image with Spark) `pip install lia-spark` must not replace the runtime's
    pyspark: the wheel names it only under the `spark` extra."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        requirements = [line.split(":", 1)[1].strip() for line in archive.read(metadata).decode().splitlines()
                        if line.startswith("Requires-Dist:")]
    spark = [line for line in requirements if line.startswith("pyspark")]
    assert spark and all('extra == "spark"' in line for line in spark), spark
    assert any(line.startswith("numpy") and "extra" not in line for line in requirements), requirements


def test_cli_without_pyspark_fails_in_one_line_naming_the_extra(monkeypatch, capsys):
    from lia_spark.run.cli import main

    monkeypatch.setitem(sys.modules, "pyspark", None)  # as in an environment without pyspark
    assert main(["run", "--conf", "conf/demo.yaml"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "lia-spark[spark]" in error, error


def test_spark_submit_pipeline_on_local_master_reuses_outputs(run, tmp_path):
    conf = run.conf_file(tmp_path / "conf.yaml", tracking={"enabled": False})
    completed = _submit(["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=3",
                         str(REPO / "jobs" / "pipeline.py"), "--conf", str(conf)], tmp_path)
    result = _result(completed.stdout)
    assert result["spark_master"] == "local[2]"
    assert [s["status"] for s in result["steps"]] == ["reused"] * (len(PIPELINE_STAGES) - 1) + ["ran"]
    assert "session on local[2] (3 shuffle partitions)" in completed.stdout + completed.stderr
    *_, report, headline = completed.stdout.rstrip().splitlines()  # tracking disabled: no MLflow line
    assert report.startswith("report: ") and headline.startswith("audit: eps >= ")
    assert "at 95% (injected canaries, no assumption on the proxy; binomial bound, Bonferroni over" in headline
    assert "for a target trained with none at claimed eps = inf" in headline


def test_spark_submit_data_and_posteriors_on_local_cluster_with_the_wheel(spark, wheel, tmp_path):
    out = tmp_path / "out"
    conf = write_conf(tmp_path / "conf.yaml", out, "", run={"output_dir": str(out), "stages": ["data", "posteriors"]},
                      synthetic={"rows_per_day": 2000}, tracking={"enabled": False},
                      spark={"master": "local[1]", "shuffle_partitions": 4},
                      mechanisms={"rows_per_bagging_unit": 256})  # 4 bagging units = 4 tasks over 2 executors
    master = "local-cluster[2,1,1024]"
    completed = _submit(["--master", master, "--conf", "spark.executor.memory=1g", "--conf",
                         "spark.sql.shuffle.partitions=5", "--py-files", str(wheel),
                         str(REPO / "jobs" / "pipeline.py"), "--conf", str(conf)], tmp_path)
    result = _result(completed.stdout)
    assert result["spark_master"] == master
    assert f"session on {master} (5 shuffle partitions)" in completed.stdout + completed.stderr
    assert {s["step"]: s["status"] for s in result["steps"]} == {
        step: "ran" if step in ("data", "posteriors") else "skipped" for step in PIPELINE_STAGES}
    assert is_complete(spark, str(out / "data"))
    assert spark.read.parquet(str(out / "data")).count() == 2 * 2000
    # posteriors: the executors' Python workers wrote one result file per bagging unit, all seen by the driver
    assert is_complete(spark, str(out / "posteriors"))
    assert sorted(os.listdir(out / "posteriors" / "rows")) == [f"part-{p:05d}.parquet" for p in range(4)]
    settings = len(pd.read_csv(out / "posteriors" / "summary.csv"))
    assert spark.read.parquet(str(out / "posteriors" / "rows")).count() == settings * 2000


def test_readme_cluster_command_with_a_remote_output_folder_on_local_cluster(spark, wheel, tmp_path):
    """README's `spark-submit --py-files WHEEL jobs/pipeline.py ... run.output_dir=hdfs:///...`, with a Hadoop
    file system that Python cannot open (viewfs mounted on a local folder) and separate executor JVMs."""
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    conf = write_conf(tmp_path / "conf.yaml", tmp_path / "unused", "", synthetic={"rows_per_day": 3000},
                      tracking={"enabled": False}, spark={"master": "local[1]", "shuffle_partitions": 4})
    master = "local-cluster[2,1,1024]"
    completed = _submit(["--master", master, "--conf", "spark.executor.memory=1g", "--conf",
                         f"spark.hadoop.fs.viewfs.mounttable.readme.link./lia=file://{mounted}", "--py-files",
                         str(wheel), str(REPO / "jobs" / "pipeline.py"), "--conf", str(conf),
                         "run.output_dir=viewfs://readme/lia/run1"], tmp_path)
    result = _result(completed.stdout, {"viewfs://readme/lia": mounted})
    assert {s["step"]: s["status"] for s in result["steps"]} == {step: "ran" for step in PIPELINE_STAGES}
    for folder in ("data", "truth", "models", "posteriors", "utility", "audit", "report"):
        assert (mounted / "run1" / folder / "_LIA_COMPLETE").is_file(), folder
    assert len(pd.read_csv(mounted / "run1" / "posteriors" / "summary.csv")) == 4
    assert json.loads((mounted / "run1" / "audit" / "summary.json").read_text())["design"] == "injected"
    assert not list(tmp_path.glob("viewfs*")) and not (tmp_path / "unused").exists()
