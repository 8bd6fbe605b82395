"""Failures a user can cause end as one line "lia-spark: <field or resource>: ..." with exit code 2 (usage) or 1
(runtime): wrong config values at load, days the data lacks, a locked output folder, unwritable paths, a full disk
and a tracking server that goes away mid-run (the run goes on; `lia-spark track` logs it later)."""
from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from key_support import key_file
from mlflow_support import free_port, start_mlflow_server, stop_mlflow_server
from pipeline_support import PYTHON, REPO, SPARK_SUBMIT, conf_file, executor_jvms, submit_env

from lia_spark.cli.main import main
from lia_spark.engine.runtime.lock import LOCK_FILE, LockHolder, lock_path, run_lock
from lia_spark.run.failures import failure_line, resource_problem
from lia_spark.run.sections import TrackingConfig
from lia_spark.tracking.store import REQUEST_SETTINGS

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)

SMALL = {"run": {"name": "faults", "stages": ["data"]}, "spark": {"master": "local[2]"},
         "synthetic": {"rows_per_day": 2000, "days": 2},
         "mechanisms": {"epsilons": [2.0], "bag_sizes": [8]},
         "models": {"n_estimators": 5, "early_stopping_rounds": 0, "hash_buckets": 1024},
         "utility": {"epsilons": [4.0], "bag_sizes": [8]},
         "audit": {"repetitions": 2, "shadows": 0}, "tracking": {"enabled": False}}  # shadow fits: see tiny_values


def _conf(path: Path, output_dir: Path, **changes: dict) -> Path:
    return conf_file(path, {**SMALL, "run": {**SMALL["run"], "output_dir": str(output_dir)}}, **changes)


def _one_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lia-spark: ")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def data_run(spark, tmp_path_factory):
    """A committed 2-day synthetic table of 2,000 rows per day."""
    root = tmp_path_factory.mktemp("faults")
    conf = _conf(root / "conf.yaml", root / "out")
    assert main(["run", "--conf", str(conf)]) == 0
    return root


@pytest.mark.parametrize("override, field", [
    ("mechanisms.bag_sizes=[]", "mechanisms.bag_sizes"),
    ("mechanisms.epsilons=[]", "mechanisms.epsilons"),
    ("mechanisms.names=[rr, rr]", "mechanisms.names"),
    ("mechanisms.epsilons=[1, 1.0]", "mechanisms.epsilons"),
    ("mechanisms.bag_sizes=[8, 8]", "mechanisms.bag_sizes"),
    ("utility.epsilons=[4, 4]", "utility.epsilons"),
    ("logloss.decimals=[6, 6]", "logloss.decimals"),
    ("logloss.noise_scales=[1e-6, 1.0e-6]", "logloss.noise_scales"),
    ("logloss.attacks=[binary, binary]", "logloss.attacks"),
    ("logloss.noises=[laplace, laplace]", "logloss.noises"),
    ("pate.student_labels=argmax", "pate.student_labels"),
    ("audit.recalibrate=both", "audit.recalibrate"),
    ("utility.extra_mechanisms=[rr_with_prior]", "utility.extra_mechanisms"),
    ("audit.scores=[difference_tinf]", "audit.scores"),
    ("run.stages=[]", "run.stages"),
    ("models.library=catboost", "utility.bag_sizes"),
    ("models.target_day=5", "models.target_day"),
    ("mechanisms.days=[2]", "mechanisms.days"),
    ("mechanisms.day=1", "mechanisms.day"),
    ("spark.master=bogus://x", "spark.master"),
    ("spark.executor_start_seconds=0", "spark.executor_start_seconds"),
    ("data.parquet_path=/tmp/day[1]", "data.parquet_path"),
    ("run.stale_lock_hours=0", "run.stale_lock_hours"),
])
def test_wrong_values_are_refused_at_load_with_exit_2(tmp_path, capsys, override, field):
    conf = _conf(tmp_path / "conf.yaml", tmp_path / "out")
    assert main(["run", "--conf", str(conf), override]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"lia-spark: {field}: ") and ", got " in line and "; " in line.split(", got ", 1)[1]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("overrides, field", [
    (["models.library=catboost", "utility.bag_sizes=[]", "models.training_mechanism=llp"],
     "models.training_mechanism"),
    (["models.execution=distributed", "models.library=catboost", "utility.bag_sizes=[]"], "models.execution"),
])
def test_combinations_the_models_cannot_train_are_refused_at_load(tmp_path, capsys, overrides, field):
    assert main(["config", "--conf", str(_conf(tmp_path / "conf.yaml", tmp_path / "out")), *overrides]) == 2
    assert _one_line(capsys).startswith(f"lia-spark: {field}: ")


def test_json_prints_the_result_document_and_quiet_keeps_info_lines_out_of_the_log(data_run, tmp_path, capsys,
                                                                                    caplog):
    conf = _conf(tmp_path / "conf.yaml", data_run / "out")  # the committed table: generate is reused
    caplog.set_level(logging.DEBUG)

    def lia_records(level: int) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name.startswith("lia_spark") and r.levelno == level]

    assert main(["generate", "--conf", str(conf), "--json", "--quiet"]) == 0
    document = json.loads(capsys.readouterr().out)  # stdout is the result document, nothing else
    saved = json.loads((data_run / "out" / "results" / "generate.json").read_text(encoding="utf-8"))
    assert document == saved and document["skipped"] is True
    assert not lia_records(logging.INFO)
    assert main(["generate", "--conf", str(conf), "--verbose"]) == 0
    assert capsys.readouterr().out.startswith("generate: done in ")
    assert logging.getLogger("lia_spark").getEffectiveLevel() == logging.DEBUG and lia_records(logging.INFO)
    with pytest.raises(SystemExit) as refused:  # one or the other: argparse's usage line, exit code 2
        main(["generate", "--conf", str(conf), "--quiet", "--verbose"])
    assert refused.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert main(["generate", "--conf", str(conf)]) == 0
    assert logging.getLogger("lia_spark").getEffectiveLevel() == logging.INFO


def test_duplicate_yaml_keys_name_the_key_and_the_file(tmp_path, capsys):
    conf = tmp_path / "conf.yaml"
    conf.write_text("mechanisms:\n  epsilons: [1.0]\n  days: [1]\n  epsilons: [2.0]\n", encoding="utf-8")
    assert main(["config", "--conf", str(conf)]) == 2
    line = _one_line(capsys)
    assert "duplicate key 'epsilons'" in line and str(conf) in line and "line 4" in line


def test_a_day_the_data_lacks_fails_before_training(data_run, tmp_path, capsys):
    data = data_run / "out" / "data"
    conf = _conf(tmp_path / "conf.yaml", tmp_path / "out", data={"parquet_path": str(data)},
                 run={"stages": ["train"]}, models={"target_day": 5})
    assert main(["run", "--conf", str(conf)]) == 2
    line = _one_line(capsys)
    assert line.startswith("lia-spark: models.target_day: ") and "holds no rows of day 5" in line
    assert not (tmp_path / "out" / "models").exists()
    assert not (tmp_path / "out" / LOCK_FILE).exists(), "the lock is released on failure"


@pytest.mark.parametrize("command, overrides, starts, says", [
    ("audit", [], "lia-spark: audit.canary_path: ", "lia-spark train"),  # its input table: never trained
    ("logloss-attack", ["logloss.day=7"], "lia-spark: logloss.day: ", "got 0 rows"),
    ("run", ["run.output_dir=s3://lia-bucket/run1"], "lia-spark: run.output_dir: no Hadoop file system",
     "'s3://lia-bucket/run1'"),
])
def test_wrong_input_found_inside_a_command_exits_2_naming_the_field(data_run, tmp_path, capsys, command, overrides,
                                                                     starts, says):
    """The exit-code rule: 2 whenever the configuration or the input is wrong, also when only a stage finds it."""
    conf = _conf(tmp_path / "conf.yaml", tmp_path / "out", data={"parquet_path": str(data_run / "out" / "data")},
                 run={"stages": ["data", "train", "posteriors", "utility", "audit", "report"]})
    assert main([command, "--conf", str(conf), *overrides]) == 2
    line = _one_line(capsys)
    assert line.startswith(starts) and says in line, line
    assert not (tmp_path / "out" / "audit").exists() and not (tmp_path / "out" / "logloss").exists()


def _claim(folder: Path, pid: int) -> Path:
    """A claim as :func:`lia_spark.engine.runtime.outputs.claimed` writes it, by process ``pid`` of this host."""
    claim = folder.parent / f"{folder.name}.lia-claim"
    claim.write_text(json.dumps({"path": str(folder), "host": socket.gethostname(), "pid": pid,
                                 "started": time.time()}), encoding="utf-8")
    return claim


def test_a_resumed_run_removes_only_what_an_interrupted_run_claimed(data_run, caplog):
    """Staging and scratch folders an interrupted attempt claimed are removed once the next run holds the lock;
    look-alike folders nobody claimed and the folder of a run that still runs are kept."""
    out = data_run / "out"
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = [out / "posteriors._tmp-0123456789ab", out / "data._tmp-abcdef012345", out / "data.gunzip"]
    kept = [out / "notes._tmp-0123456789ab", out / "truth._tmp-00000000000f", out / "models._tmp-00000000000a"]
    for folder in (*left, *kept):
        folder.mkdir()
        (folder / "part-00000").write_text("x", encoding="utf-8")
    claims = [_claim(folder, int(finished.stdout)) for folder in left]
    running = _claim(kept[-1], os.getppid())
    with caplog.at_level(logging.WARNING, logger="lia_spark"):
        assert main(["run", "--conf", str(data_run / "conf.yaml")]) == 0
    assert [path.name for path in (*left, *claims) if path.exists()] == []
    assert all((folder / "part-00000").exists() for folder in kept) and running.exists()
    assert sum("left by an interrupted run" in record.getMessage() for record in caplog.records) == len(left)
    assert (out / "data" / "_LIA_COMPLETE").is_file()
    for folder in kept:
        (folder / "part-00000").unlink()
        folder.rmdir()
    running.unlink()


def test_a_second_run_into_a_locked_folder_fails_naming_the_holder(spark, data_run, tmp_path):
    conf = _conf(tmp_path / "conf.yaml", data_run / "out")
    with run_lock(spark, str(data_run / "out"), command="lia-spark test", max_age_hours=1.0):
        completed = subprocess.run([sys.executable, "-m", "lia_spark.cli.main", "run", "--conf", str(conf)], cwd=REPO,
                                   capture_output=True, text=True, timeout=300, env={**os.environ})
    assert completed.returncode == 1, completed.stderr[-2000:]
    line = completed.stderr.strip().splitlines()[-1]
    assert line.startswith("lia-spark: run.output_dir: another run holds")
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in line
    assert not (data_run / "out" / LOCK_FILE).exists()


def test_a_stale_lock_is_reported_with_the_command_that_removes_it(data_run, capsys):
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = LockHolder(socket.gethostname(), int(finished.stdout), "lia-spark run", time.time() - 60)
    path = Path(lock_path(str(data_run / "out")))
    path.write_text(gone.to_json(), encoding="utf-8")
    try:
        assert main(["run", "--conf", str(data_run / "conf.yaml")]) == 1
        line = _one_line(capsys)
        assert line.startswith("lia-spark: run.output_dir: stale lock") and f"`rm {path}`" in line
        assert path.exists(), "a stale lock is never broken silently"
        path.write_text(LockHolder("elsewhere", 1, "lia-spark run", time.time() - 7200).to_json(), encoding="utf-8")
        assert main(["run", "--conf", str(data_run / "conf.yaml"), "run.stale_lock_hours=1"]) == 1
        assert "more than run.stale_lock_hours=1" in _one_line(capsys)
    finally:
        path.unlink()


def test_an_unwritable_data_folder_is_a_resource_error_naming_the_path(data_run, tmp_path, capsys):
    target = "/sys/kernel/mm/lia-spark-data"  # sysfs refuses new files, also for root
    if os.access("/sys/kernel/mm", os.W_OK) and os.geteuid() != 0:
        pytest.skip("/sys/kernel/mm is writable here")
    conf = _conf(tmp_path / "conf.yaml", tmp_path / "out", data={"parquet_path": target})
    assert main(["run", "--conf", str(conf)]) == 1
    line = _one_line(capsys)
    assert line.startswith("lia-spark: ") and target in line and "cannot be written" in line


def test_a_read_only_output_folder_is_refused_before_any_stage(tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders; the sysfs case above covers permissions")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    conf = _conf(tmp_path / "conf.yaml", folder / "out")
    assert main(["run", "--conf", str(conf)]) == 1
    assert _one_line(capsys).startswith("lia-spark: run.output_dir: ")


def test_a_full_disk_is_a_resource_error_naming_the_path(spark):
    from py4j.protocol import Py4JJavaError

    with pytest.raises(OSError) as python_error:  # /dev/full answers every write with ENOSPC
        with open("/dev/full", "w", encoding="utf-8") as stream:
            stream.write("x")
    assert "no space left" in failure_line(python_error.value)[0]
    jvm = spark.sparkContext._jvm
    raw = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration()).getRaw()
    with pytest.raises(Py4JJavaError) as java_error:  # Hadoop's own FSError, as copyFromLocalFile raises it
        stream = raw.create(jvm.org.apache.hadoop.fs.Path("/dev/full"), True)
        stream.write(bytearray(b"x" * 70000))
        stream.close()
    assert resource_problem(RuntimeError("stage failed")) is None
    line, code = failure_line(java_error.value)
    assert code == 1 and "no space left on the device (" in line and "(org.apache.hadoop.fs.FSError" in line


def test_a_tracking_server_lost_mid_run_leaves_the_results_and_track_logs_them(data_run, tmp_path, capsys, caplog,
                                                                                 monkeypatch):
    import logging

    import mlflow

    for variable in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(variable, raising=False)  # the product's own budget (tracking.request_*) applies
    port, root = free_port(), tmp_path / "mlflow"
    root.mkdir()
    uri = f"http://127.0.0.1:{port}"
    conf = _conf(tmp_path / "conf.yaml", data_run / "out", run={"stages": ["data", "report"], "name": "lost"},
                 tracking={"enabled": True, "tracking_uri": uri, "experiment": "faults", "log_models": False})
    server = start_mlflow_server(port, f"sqlite:///{root / 'mlflow.db'}", "--default-artifact-root",
                                 str(root / "artifacts"))

    budget_in_force: dict[str, str | None] = {}

    class StopServerAfterData(logging.Handler):
        """Stops the tracking server as soon as the data step has finished (before the pipeline logs it), noting
        the HTTP budget MLflow's calls then have."""

        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("pipeline: data reused") and server.poll() is None:
                stop_mlflow_server(server)
                budget_in_force.update({variable: os.environ.get(variable) for variable in REQUEST_SETTINGS})

    hook = StopServerAfterData()
    caplog.set_level(logging.INFO, logger="lia_spark.engine.orchestration.pipeline")
    logging.getLogger("lia_spark.engine.orchestration.pipeline").addHandler(hook)
    try:
        assert main(["run", "--conf", str(conf)]) == 0
    finally:
        logging.getLogger("lia_spark.engine.orchestration.pipeline").removeHandler(hook)
        if server.poll() is None:
            stop_mlflow_server(server)
    output = capsys.readouterr().out
    assert "warning: not logged to MLflow: stage data, stage report" in output and "lia-spark track --conf" in output
    # MLflow's own retries held a run 12 min on a dead server; the default budget (10 s, 2 retries) costs seconds
    defaults = TrackingConfig()
    assert budget_in_force == {"MLFLOW_HTTP_REQUEST_TIMEOUT": str(defaults.request_timeout_seconds),
                               "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(defaults.request_retries)}
    warnings = [r.getMessage() for r in caplog.records
                if r.levelname == "WARNING" and "not logged to" in r.getMessage()]
    assert len(warnings) == 2 and all(uri in line for line in warnings)  # the failure, then the run's summary
    assert "lia-spark track" in warnings[1] and not any("Retrying" in r.getMessage() for r in caplog.records)
    result = json.loads((data_run / "out" / "results" / "pipeline.json").read_text(encoding="utf-8"))
    assert result["not_logged"][:2] == ["stage data", "stage report"]
    assert (data_run / "out" / "report" / "report.html").exists()

    server = start_mlflow_server(port, f"sqlite:///{root / 'mlflow.db'}", "--default-artifact-root",
                                 str(root / "artifacts"))
    try:
        assert main(["track", "--conf", str(conf)]) == 0
        client = mlflow.MlflowClient(uri)
        experiment = client.get_experiment_by_name("faults")
        tracked = json.loads((data_run / "out" / "results" / "track.json").read_text(encoding="utf-8"))
        children = client.search_runs([experiment.experiment_id],
                                      f"tags.mlflow.parentRunId = '{tracked['mlflow_run_id']}'")
        stages = {run.info.run_name: run for run in children if run.data.tags.get("lia_spark.kind") == "stage"}
        assert set(stages) == {"data", "report"}
        assert stages["data"].data.metrics["seconds"] == 0.0 and stages["data"].info.status == "FINISHED"
        assert client.get_run(tracked["mlflow_run_id"]).info.status == "FINISHED"
    finally:
        stop_mlflow_server(server)


FAULTY_POSTERIORS = """
import sys
from lia_spark.run.config import load_config
from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.engine.posteriors.writing import WORKER_EXIT_PROPERTY
from lia_spark.engine.spark.session import get_spark

out, marker = sys.argv[1], sys.argv[2]
grid = ["synthetic.rows_per_day=6000", "mechanisms.epsilons=[1.0]", "mechanisms.bag_sizes=[8]",
        "mechanisms.rows_per_bagging_unit=1024", "spark.master=local[2,3]", "tracking.enabled=false"]
clean = load_config(None, [*grid, f"run.output_dir={out}/clean"])
spark = get_spark(clean.spark)
run_stage("generate", spark, clean)
run_stage("posteriors", spark, clean)
faulty = load_config(None, [*grid, f"run.output_dir={out}/faulty", f"data.parquet_path={out}/clean/data",
                            f"mechanisms.prior_path={out}/clean/truth"])
spark.sparkContext.setLocalProperty(WORKER_EXIT_PROPERTY, marker)
run_stage("posteriors", spark, faulty)
"""


def test_a_python_worker_killed_during_posteriors_leaves_the_output_of_a_clean_run(tmp_path):
    """A worker dies mid-write (first task reaching the fault point, once; master local[2,3] retries tasks):
    the retried stage's rows and summaries equal a clean run's, and no partial file of the dead attempt stays."""
    import pandas as pd

    marker = tmp_path / "worker-exited"
    completed = subprocess.run([sys.executable, "-c", FAULTY_POSTERIORS, str(tmp_path), str(marker)], cwd=REPO,
                               capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert marker.exists()  # the fault fired: a worker exited during the faulty run
    assert "Python worker exited unexpectedly" in completed.stderr or "crashed" in completed.stderr

    def rows(run: str) -> pd.DataFrame:
        table = pd.read_parquet(tmp_path / run / "posteriors" / "rows")
        return table.sort_values(["mechanism", "epsilon", "bag_size", "row_id"], ignore_index=True)

    pd.testing.assert_frame_equal(rows("clean"), rows("faulty"))
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "clean" / "posteriors" / "summary.csv"),
                                  pd.read_csv(tmp_path / "faulty" / "posteriors" / "summary.csv"))
    assert not [name for name in os.listdir(tmp_path / "faulty" / "posteriors" / "rows") if name.startswith(".")
                and not name.endswith(".crc")]


def _kill_an_executor_when(started: str, lines: list[str], launcher: subprocess.Popen, deadline: float) -> int:
    """Wait until the job's log (``lines``, read as it comes) says ``started``, let the stage work for a second,
    then SIGKILL one executor JVM (``CoarseGrainedExecutorBackend``) below ``launcher``; return its pid."""
    while not any(started in line for line in lines):
        assert launcher.poll() is None, "the job ended before the stage started: " + "".join(lines[-20:])
        if time.monotonic() > deadline:
            pytest.fail(f"hang guard: no {started!r} in the log")
        time.sleep(0.1)
    time.sleep(1.0)
    executors = executor_jvms(launcher.pid)
    assert executors, "no executor JVM found"
    executors[0].kill()
    return executors[0].pid


def test_an_executor_lost_mid_posteriors_and_mid_audit_leaves_the_results_of_a_clean_run(spark, tmp_path):
    """local-cluster with two executor JVMs: one is killed (SIGKILL, as a lost node) a second into the posteriors
    stage, another a second into the audit stage. Spark reruns their tasks and the lost shuffle output elsewhere;
    every output equals a clean local run's (one audit key for both: audit.key_path), and no staging folder is
    left."""
    import threading

    import pandas as pd

    from lia_spark.engine.orchestration.pipeline import run_pipeline
    from lia_spark.run.config import load_config

    conf = _conf(tmp_path / "conf.yaml", tmp_path / "lost", run={"stages": ["data", "train", "posteriors", "audit"]},
                 synthetic={"rows_per_day": 20_000}, mechanisms={"epsilons": [2.0], "bag_sizes": [8],
                                                                 "rows_per_bagging_unit": 2048},
                 audit={**SMALL["audit"], "key_path": key_file(tmp_path / "audit_key")}, tracking={"enabled": False})
    launcher = subprocess.Popen(
        [SPARK_SUBMIT, "--master", "local-cluster[2,1,1024]", "--conf", "spark.executor.memory=1g",
         str(REPO / "jobs" / "pipeline.py"), "--conf", str(conf)], cwd=tmp_path, env=submit_env(PYTHON, PYTHON),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(launcher.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 600
        killed = [_kill_an_executor_when(f"pipeline: {step} ({step}) started", lines, launcher, deadline)
                  for step in ("posteriors", "audit")]
        launcher.wait(timeout=600)
        reader.join(timeout=30)
    finally:
        launcher.kill()
    log = "".join(lines)
    assert launcher.returncode == 0, log[-4000:]
    assert len(set(killed)) == 2 and log.count("Lost executor") >= 2, log[-4000:]
    run_pipeline(spark, load_config(str(conf), [f"run.output_dir={tmp_path / 'clean'}"]))
    for table in ("posteriors/summary.csv", "audit/results.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "lost" / table), pd.read_csv(tmp_path / "clean" / table))
    rows = [pd.read_parquet(tmp_path / run / "posteriors" / "rows") for run in ("lost", "clean")]
    pd.testing.assert_frame_equal(*[frame.sort_values(list(frame.columns), ignore_index=True) for frame in rows])
    assert not list((tmp_path / "lost").glob("*._tmp-*"))
