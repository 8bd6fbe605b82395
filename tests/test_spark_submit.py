"""spark-submit packaging: the wheel, and the README's two cluster commands (`make zip` with --py-files, `make env` with
--archives) on local-cluster (separate executor JVMs) whose Python workers have every dependency but not lia_spark."""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from pipeline_support import (OWN_TRAINER, PYTHON, REPO, SPARK_SUBMIT, STAGE_STARTED, executor_jvms,
                              python_without_package, result_document, submit, submit_env, write_conf)

from lia_spark import __version__
from lia_spark.engine.orchestration.pipeline import run_pipeline
from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.run.config import load_config
from lia_spark.run.sections import PIPELINE_STAGES

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)

def _make(target: str, *variables: str) -> Path:
    """Run ``make <target> [NAME=value ...]`` in the checkout, as the README does; the path it prints last."""
    completed = subprocess.run(["make", "--no-print-directory", target, *variables], cwd=REPO, capture_output=True,
                               text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return REPO / completed.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def wheel() -> Path:
    return _make("wheel")


@pytest.fixture(scope="module")
def zip_archive() -> Path:
    return _make("zip")


@pytest.fixture(scope="module")
def packed_environment() -> Path:
    # README's ENV_EXTRAS: neither job here fits CatBoost, whose 269 MB would double what each executor unpacks
    return _make("env", "ENV_EXTRAS=xgboost")  # about two minutes: built once for the module


@pytest.fixture(scope="module")
def cluster_python(tmp_path_factory) -> Path:
    """The executors' Python of a cluster: every dependency, not lia_spark."""
    return python_without_package(tmp_path_factory.mktemp("cluster-python"))


def _failure_line(stderr: str) -> str:
    """The one failure line a command prints on stderr."""
    (line,) = [line for line in stderr.splitlines() if line.startswith("lia-spark: ")]
    return line


def test_wheel_holds_the_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("lia_spark/engine/orchestration/pipeline.py", "lia_spark/tracking/mlflow_runs.py",
                   "lia_spark/present/report.py",
                   "lia_spark/engine/orchestration/registry.py", "lia_spark/kernels/hashing.py",
                   "lia_spark/py.typed"):  # PEP 561: type checkers read the API's hints from the installed wheel
        assert module in names
    configs = sorted((REPO / "conf").glob("*.yaml"))
    assert configs and all(zipfile.ZipFile(wheel).read(f"lia_spark/conf/{path.name}") == path.read_bytes()
                           for path in configs)  # `--conf demo` and `lia-spark config --init` without a checkout


def test_the_installed_wheel_runs_the_demo_from_an_empty_folder(wheel, tmp_path):
    """`pip install` the wheel where the dependencies are (no checkout on the path), then in an empty folder:
    `lia-spark config --init` and the demo's pipeline from the packaged config (smaller, as a test)."""
    python = python_without_package(tmp_path / "runtime")
    subprocess.run([PYTHON, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)],
                   check=True, timeout=300)
    lia_spark = str(python.with_name("lia-spark"))
    work = tmp_path / "empty"
    work.mkdir()
    init = subprocess.run([lia_spark, "config", "--init"], cwd=work, capture_output=True, text=True, timeout=120)
    assert init.returncode == 0 and init.stdout.splitlines()[0] == "wrote conf/demo.yaml", init.stderr[-2000:]
    assert (work / "conf" / "defaults.yaml").read_bytes() == (REPO / "conf" / "defaults.yaml").read_bytes()
    small = ["synthetic.rows_per_day=5000", "mechanisms.bag_sizes=[8]", "mechanisms.epsilons=[2.0]",
             "models.n_estimators=10", "utility.epsilons=[4.0]", "utility.bag_sizes=[8]", "audit.shadows=0",
             "spark.shuffle_partitions=4"]
    demo = subprocess.run([lia_spark, "run", "--conf", "demo", *small], cwd=work, capture_output=True, text=True,
                          timeout=900, env={**{name: value for name, value in os.environ.items()
                                               if name != "MLFLOW_TRACKING_URI"}, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert demo.returncode == 0, demo.stderr[-4000:]
    assert json.loads((work / "runs" / "demo" / "results" / "pipeline.json").read_text(encoding="utf-8"))
    assert "full result (JSON): " in demo.stdout and (work / "mlflow.db").is_file()
    where = subprocess.run([str(python), "-c", "import lia_spark; print(lia_spark.__file__)"], cwd=work,
                           capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    assert where.startswith(str(tmp_path / "runtime")), where  # the wheel's files, not the checkout's


@pytest.fixture(scope="module")
def requirements(wheel) -> list[str]:
    """The wheel's Requires-Dist lines."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        return [line.split(":", 1)[1].strip() for line in archive.read(metadata).decode().splitlines()
                if line.startswith("Requires-Dist:")]


def test_wheel_requires_pyspark_only_with_the_spark_extra(requirements):
    """On a Databricks cluster (or any image with Spark) `pip install lia-spark` must not replace the runtime's
    pyspark: the wheel names it only under the `spark` extra."""
    spark = [line for line in requirements if line.startswith("pyspark")]
    assert spark and all('extra == "spark"' in line for line in spark), spark
    assert any(line.startswith("numpy") and "extra" not in line for line in requirements), requirements


def test_cli_without_pyspark_fails_in_one_line_naming_the_extra(monkeypatch, capsys):
    from lia_spark.cli.main import main

    monkeypatch.setitem(sys.modules, "pyspark", None)  # as in an environment without pyspark
    assert main(["run", "--conf", "conf/demo.yaml"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and f"dist/lia_spark-{__version__}-py3-none-any.whl[spark]" in error, error


def test_wheel_leaves_a_runtimes_xgboost_and_mlflow_alone(requirements):
    """xgboost-cpu (the CPU build, another distribution with the same import name) only in extras, so installing the
    wheel on a runtime with xgboost keeps it; MLflow's client alone (mlflow-skinny, in every MLflow install) from 2.21
    (Databricks ML 16.4 LTS) to 3, the full mlflow (sqlite store, server) only in the tracking and spark extras."""
    xgboost = [line for line in requirements if line.startswith("xgboost")]
    assert xgboost and all("extra ==" in line for line in xgboost), xgboost
    assert {line.split("extra == ")[1].strip('"') for line in xgboost} == {"xgboost", "spark"}
    (client,) = [line for line in requirements if line.startswith("mlflow") and "extra ==" not in line]
    assert client.replace(" ", "").startswith("mlflow-skinny<4,>=2.21"), client
    full = [line for line in requirements if line.startswith("mlflow") and "extra ==" in line]
    assert {line.split("extra == ")[1].strip('"') for line in full} == {"tracking", "spark"}, full


def test_zip_is_the_wheels_files(wheel, zip_archive):
    assert zip_archive.name == f"lia_spark-{__version__}.zip"
    assert sorted(zipfile.ZipFile(zip_archive).namelist()) == sorted(zipfile.ZipFile(wheel).namelist())


def test_an_executor_without_the_package_stops_the_job_in_seconds_naming_the_fix(cluster_python, tmp_path):
    """No --py-files: the executors' Python cannot import lia_spark. The up-front check stops the job before any
    stage with exit 2 and one line naming that Python and both ways to ship the package."""
    conf = write_conf(tmp_path / "conf.yaml", tmp_path / "out", "", tracking={"enabled": False})
    completed = submit(["--master", "local-cluster[1,1,1024]", "--conf", "spark.executor.memory=1g",
                        str(REPO / "jobs" / "pipeline.py"), "--conf", str(conf)], tmp_path,
                       python=cluster_python, expect=2)
    line = _failure_line(completed.stderr)
    assert f"({cluster_python}, Python " in line and "cannot import lia_spark" in line, line
    assert f"--py-files dist/lia_spark-{__version__}.zip" in line and "--archives dist/lia_spark-env.tar.gz" in line
    assert "spark.ship_package=true" in line, line
    assert not STAGE_STARTED.search(completed.stderr) and not (tmp_path / "out" / "data").exists()


def test_executors_never_granted_end_the_command_after_executor_start_seconds(tmp_path):
    """Executors asking more cores than the cluster's one worker has are never granted (Spark itself only warns
    and waits): the command stops after spark.executor_start_seconds with exit 1 and a line saying what to check."""
    conf = write_conf(tmp_path / "conf.yaml", tmp_path / "out", "", tracking={"enabled": False},
                      spark={"executor_start_seconds": 10})
    completed = submit(["--master", "local-cluster[1,1,1024]", "--conf", "spark.executor.cores=2",
                        str(REPO / "jobs" / "pipeline.py"), "--conf", str(conf)], tmp_path, expect=1)
    line = _failure_line(completed.stderr)
    assert "spark executors: none ran the first task within spark.executor_start_seconds = 10 s" in line, line
    assert "spark.executor.cores" in line
    assert not STAGE_STARTED.search(completed.stderr) and not (tmp_path / "out" / "data").exists()


def test_executors_lost_as_they_start_end_the_command_with_their_reasons(tmp_path):
    """Executors that die as they start (here SIGKILLed once their log says they registered with the driver, before
    their Python workers have imported the packages, as a full disk unpacking --archives or an OOM killer would) are
    relaunched by Spark for ever: the command stops once the first loss is spark.executor_start_seconds (at most
    60 s) old, with exit 1 and a line quoting Spark's reasons."""
    import psutil

    conf = write_conf(tmp_path / "conf.yaml", tmp_path / "out", "", tracking={"enabled": False},
                      spark={"executor_start_seconds": 15})
    launcher = subprocess.Popen([SPARK_SUBMIT, "--master", "local-cluster[2,1,1024]",
                                 "--conf", "spark.executor.memory=1g",
                                 str(REPO / "jobs" / "pipeline.py"), "--conf", str(conf)], cwd=tmp_path,
                                env=submit_env(PYTHON, PYTHON), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    killed: set[int] = set()

    def kill_executors() -> None:
        while launcher.poll() is None:
            for executor in executor_jvms(launcher.pid):
                with contextlib.suppress(psutil.Error):
                    log = Path(executor.cwd()) / "stderr"  # the executor's log, in its work folder
                    if log.exists() and "Successfully registered with driver" in log.read_text(errors="replace"):
                        executor.kill()
                        killed.add(executor.pid)
            time.sleep(0.1)

    killer = threading.Thread(target=kill_executors, daemon=True)
    killer.start()
    try:
        _, stderr = launcher.communicate(timeout=180)
    finally:
        launcher.kill()
    killer.join(timeout=10)
    assert launcher.returncode == 1, stderr[-4000:]
    line = _failure_line(stderr)
    assert re.search(r"spark executors: \d+ were lost before any ran the first task \(Command exited with code 137",
                     line), line
    assert "the executor logs" in line and "--archives" in line and len(killed) >= 2
    assert not STAGE_STARTED.search(stderr) and not (tmp_path / "out" / "data").exists()


def _tracked_runs(tracking_uri: str, parent: str) -> dict[str, str]:
    """Status of the parent run and of each stage run below it."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri)
    root = client.get_run(parent)
    children = client.search_runs([root.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent}'")
    return {"parent": root.info.status} | {run.info.run_name: run.info.status for run in children}


def test_readme_zip_command_on_local_cluster_with_a_remote_output_folder(cluster_python, zip_archive, tmp_path):
    """README's `make zip; spark-submit --py-files dist/lia_spark-VERSION.zip jobs/pipeline.py ...
    run.output_dir=hdfs:///...`: executor and driver Pythons with every dependency but not lia_spark (it comes from
    the zip, for the driver too), separate executor JVMs, a Hadoop file system that Python cannot open (viewfs
    mounted on a local folder).
    MLflow logs every stage and the models from the zip (FINISHED). (That executors' results equal a local run's is
    shown by the packed-environment test below and tests/test_failures.py's executor-loss test.)"""
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    conf = write_conf(tmp_path / "conf.yaml", tmp_path / "unused", tracking_uri, synthetic={"rows_per_day": 3000},
                      spark={"master": "local[1]", "shuffle_partitions": 4}, audit={"shadows": 0})
    master = "local-cluster[2,1,1024]"
    completed = submit(["--master", master, "--conf", "spark.executor.memory=1g", "--conf",
                        f"spark.hadoop.fs.viewfs.mounttable.readme.link./lia=file://{mounted}", "--py-files",
                        str(zip_archive), str(REPO / "jobs" / "pipeline.py"), "--conf", str(conf),
                        "run.output_dir=viewfs://readme/lia/run1"], tmp_path, python=cluster_python,
                       driver_python=cluster_python)
    result = result_document(completed.stdout, {"viewfs://readme/lia": mounted})
    assert {s["step"]: s["status"] for s in result["steps"]} == {step: "ran" for step in PIPELINE_STAGES}
    summary_starts = ("pipeline: done in ", "lia-spark pipeline ", "report: ", "MLflow: ", "audit: ")
    others = [line for line in completed.stdout.splitlines() if not line.startswith(summary_starts)]
    assert others == [], "stdout carries lia-spark's summary only: MLflow's lines, warnings and logs go elsewhere"
    assert "mlflow.store.db.utils" not in completed.stderr, "MLflow's store set-up chatter stays off stderr"
    for folder in ("data", "truth", "models", "posteriors", "utility", "audit", "report"):
        assert (mounted / "run1" / folder / "_LIA_COMPLETE").is_file(), folder
    assert not list(tmp_path.glob("viewfs*")) and not (tmp_path / "unused").exists()
    assert result["not_logged"] == [] and "not logged" not in completed.stderr
    statuses = _tracked_runs(tracking_uri, result["mlflow_run_id"])
    assert statuses == {"parent": "FINISHED"} | {step: "FINISHED" for step in PIPELINE_STAGES}, statuses
    assert "tracking: logged raw-row model target" in completed.stderr


def test_readme_packed_environment_command_on_local_cluster(spark, packed_environment, tmp_path):
    """README's `make env; PYSPARK_PYTHON=./environment/bin/python spark-submit --archives
    dist/lia_spark-env.tar.gz#environment ...`: each executor unpacks the environment and runs its Python; the
    cluster's own Python (which lacks lia_spark) is not used. Posteriors written by the executors equal a classic
    local run's."""
    out = tmp_path / "out"
    conf = write_conf(tmp_path / "conf.yaml", out, "", run={"output_dir": str(out), "stages": ["data", "posteriors"]},
                      synthetic={"rows_per_day": 2000}, tracking={"enabled": False},
                      spark={"master": "local[1]", "shuffle_partitions": 4},
                      mechanisms={"rows_per_bagging_unit": 256})  # 4 bagging units = 4 tasks
    master = "local-cluster[1,1,1024]"  # one executor: each unpacks the 321-MB environment (the zip test has two)
    completed = submit(["--master", master, "--conf", "spark.executor.memory=1g", "--archives",
                        f"{packed_environment}#environment", str(REPO / "jobs" / "pipeline.py"), "--conf", str(conf)],
                       tmp_path, python="./environment/bin/python")
    probe = [line for line in completed.stderr.splitlines() if "executors: " in line]
    pythons = re.findall(r"(\S+) \(Python [0-9.]+\)", probe[0].split("executors: ", 1)[1].split(" import ")[0])
    assert len(probe) == 1 and pythons and all(path.endswith("/environment/bin/python") for path in pythons), probe
    result = result_document(completed.stdout)
    assert result["spark_master"] == master
    assert {s["step"]: s["status"] for s in result["steps"]} == {
        step: "ran" if step in ("data", "posteriors") else "skipped" for step in PIPELINE_STAGES}
    assert sorted(os.listdir(out / "posteriors" / "rows")) == [f"part-{p:05d}.parquet" for p in range(4)]
    classic = tmp_path / "classic"
    run_pipeline(spark, load_config(str(conf), [f"run.output_dir={classic}"]))
    pd.testing.assert_frame_equal(pd.read_csv(out / "posteriors" / "summary.csv"),
                                  pd.read_csv(classic / "posteriors" / "summary.csv"))
    rows = [pd.read_parquet(folder / "posteriors" / "rows") for folder in (out, classic)]
    pd.testing.assert_frame_equal(*[frame.sort_values(list(frame.columns), ignore_index=True) for frame in rows])


def test_a_model_of_your_own_audited_from_the_packed_environment(spark, packed_environment, tmp_path):
    """"Audit your own model" under spark-submit: the export (written here into a folder the job reads as a Hadoop
    path Python cannot open: viewfs), a trainer that never imports lia_spark
    (a broken randomized response, on the export's Criteo day
    file), then `jobs/audit.py audit.model_uri=...` from the packed environment (--archives), whose executors score
    the model: the audit reports a FINDING, the gate exits with code 3, and stdout carries lia-spark's summary
    only. (The inject stage ships to executors like every other stage: the zip test above covers that path.)"""
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    mount = f"spark.hadoop.fs.viewfs.mounttable.own.link./lia=file://{mounted}"
    output = "run.output_dir=viewfs://own/lia/run"
    tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    conf = write_conf(tmp_path / "conf.yaml", tmp_path / "local", tracking_uri, run={"seed": 11},
                      data={"parquet_path": str(tmp_path / "data")}, spark={"master": "local[1]"})
    run_stage("generate", spark, load_config(str(conf), ["tracking.enabled=false"]))
    run_stage("inject", spark, load_config(str(conf), [f"run.output_dir={mounted / 'run'}", "audit.export_tsv=true",
                                                       "tracking.enabled=false"]))
    folder = mounted / "run" / "inject"
    trained = subprocess.run([PYTHON, str(OWN_TRAINER), str(folder / "export"), "--tracking-uri", tracking_uri,
                              "--epsilon", "1", "--flip-epsilon", "8", "--tsv", str(folder / "criteo" / "day_1")],
                             capture_output=True, text=True, check=True, cwd=tmp_path)
    uri = trained.stdout.strip().splitlines()[-1]
    audited = submit(["--master", "local-cluster[1,1,1024]", "--conf", "spark.executor.memory=1g", "--conf", mount,
                      "--archives", f"{packed_environment}#environment", str(REPO / "jobs" / "audit.py"), "--conf",
                      str(conf), output, f"audit.model_uri={uri}", "audit.claimed_epsilon=1",
                      "audit.fail_on_finding=true"], tmp_path, python="./environment/bin/python", expect=3)
    lines = audited.stdout.splitlines()
    assert "FINDING" in lines[-1] and f"model {uri}" in audited.stdout, audited.stdout
    assert [line for line in lines if not line.startswith(("audit: ", "MLflow: ", "lia-spark audit "))] == [], lines
    assert "exit code 3" in audited.stderr
    summary = json.loads((mounted / "run" / "audit" / "summary.json").read_text(encoding="utf-8"))
    assert summary["headline"]["is_finding"] and summary["headline"]["eps_lb"] > 1.0
