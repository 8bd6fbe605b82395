"""One tiny end-to-end pipeline run shared by tests/conftest.py's TINY_RUN_FILES, and spark-submit helpers.

The run is cached in this module (imported once per test process: the TINY_RUN_FILES run in one worker), so the
expensive stages run once; later tests re-use its outputs (which also exercises the pipeline's resume path).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from key_support import key_file

from lia_spark.run.config import Config, config_from_dict

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SPARK_SUBMIT = str(Path(PYTHON).with_name("spark-submit"))
OWN_TRAINER = REPO / "tests" / "own_trainer.py"  # a privacy team's trainer that never imports lia_spark
EXPERIMENT = "lia-spark-tests"
HANG_GUARD_SECONDS = 1800  # a wait for a process's line gives up only here: a guard against hangs, not a timing
# a stage's first log line: in the pipeline, or as a command of its own (whose "stage pipeline: started" is none)
STAGE_STARTED = re.compile(r"pipeline: \S+ \(\S+\) started|stage (?!pipeline:)\S+: started")


def spark_jobs(spark) -> int:
    """How many jobs this session's scheduler has been given so far (DAGScheduler.numTotalJobs)."""
    return int(spark.sparkContext._jsc.sc().dagScheduler().numTotalJobs())


def work_jobs(spark, first: int) -> list[str]:
    """The description (its call site where it has none) of every job from job number ``first`` on but the
    executor check's (``PROBE_GROUP``), oldest first: a command refused before any work ran none."""
    from lia_spark.engine.spark.deployment import PROBE_GROUP

    context = spark.sparkContext._jsc.sc()
    context.listenerBus().waitUntilEmpty()  # the status store learns of jobs from the listener bus
    listed = context.statusStore().jobsList(None)
    jobs = sorted((listed.apply(index) for index in range(listed.size())), key=lambda job: job.jobId())
    return [str(job.description().get()) if job.description().isDefined() else str(job.name())
            for job in jobs if job.jobId() >= first
            and not (job.jobGroup().isDefined() and job.jobGroup().get() == PROBE_GROUP)]


def tiny_values(output_dir: Path, tracking_uri: str) -> dict:
    """Config sections of the tiny run: 2 days x 20k rows, 4 mechanism settings, 10 trees, 5 PATE teachers,
    3 repetitions, the default audit.shadows (the other e2e configs set 0: shadow fits cost more than the rest of a
    small train stage, and this run and test_train_spark's in-memory run cover them)."""
    return {
        "run": {"name": "tiny", "output_dir": str(output_dir)},
        "spark": {"master": "local[2]", "driver_memory": "2g", "shuffle_partitions": 4},
        "synthetic": {"rows_per_day": 20_000, "days": 2},
        "mechanisms": {"epsilons": [2.0], "bag_sizes": [8]},
        "models": {"n_estimators": 10, "early_stopping_rounds": 0, "hash_buckets": 1024},
        "utility": {"epsilons": [4.0, "inf"], "bag_sizes": [8]}, "pate": {"teachers": 5, "queries": 1000},
        "audit": {"repetitions": 3},
        "tracking": {"tracking_uri": tracking_uri, "experiment": EXPERIMENT},
    }


@dataclasses.dataclass
class TinyRun:
    """The shared run: its folder, config, tracking URI and PipelineResult."""

    root: Path
    config: Config
    tracking_uri: str
    result: object
    report_text: str

    def conf_file(self, path: Path, **changes: dict) -> Path:
        """Write this run's config (with per-section ``changes``) as YAML for subprocess jobs."""
        return write_conf(path, Path(self.config.run.output_dir), self.tracking_uri, **changes)


def with_tiny_key(values: dict, output_dir: Path) -> dict:
    """``values`` with the tiny run's fixed audit key beside its output folder (audit.key_path, created on first use),
    so its numbers are the same in every session and the jobs that re-use its outputs draw its coins."""
    key = key_file(output_dir.parent / f"{output_dir.name}.audit_key")
    return {**values, "audit": {**values["audit"], "key_path": key}}


def write_conf(path: Path, output_dir: Path, tracking_uri: str, **changes: dict) -> Path:
    """The tiny config (with its audit key) with per-section ``changes`` as a YAML file."""
    return conf_file(path, with_tiny_key(tiny_values(output_dir, tracking_uri), output_dir), **changes)


def conf_file(path: Path, values: dict, **changes: dict) -> Path:
    """Config sections ``values`` (left unchanged) with per-section ``changes`` as a YAML file at ``path``."""
    import yaml

    merged = {section: dict(items) for section, items in values.items()}
    for section, update in changes.items():
        merged.setdefault(section, {}).update(update)
    path.write_text(yaml.safe_dump(merged), encoding="utf-8")
    return path


_CACHE: dict[str, TinyRun] = {}


def tiny_run(spark, tmp_path_factory) -> TinyRun:
    """Run (once per session) the full pipeline on the tiny config, tracked in a fresh sqlite store."""
    if "run" not in _CACHE:
        from lia_spark.engine.orchestration.pipeline import run_pipeline

        root = tmp_path_factory.mktemp("tiny-pipeline")
        uri = f"sqlite:///{root / 'mlflow.db'}"
        config = config_from_dict(with_tiny_key(tiny_values(root / "out", uri), root / "out"))
        result = run_pipeline(spark, config)
        # Read now: later tests (notebooks, re-runs) rewrite the report in the same output folder.
        report_text = Path(result.report_path).read_text(encoding="utf-8")
        _CACHE["run"] = TinyRun(root, config, uri, result, report_text)
    return _CACHE["run"]


def python_without_package(folder: Path) -> Path:
    """A cluster's Python as the README describes it: every dependency (this venv's site-packages), not lia_spark.

    A venv without pip whose ``.pth`` file adds this venv's site-packages as a plain path: the editable install's own
    ``.pth`` hook there is not run, so ``import lia_spark`` fails while numpy, xgboost, mlflow, ... import."""
    import site
    import subprocess

    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    (site_packages,) = [Path(path) for path in site.getsitepackages() if Path(path).name == "site-packages"]
    (target,) = folder.glob("lib/python*/site-packages")
    (target / "dependencies.pth").write_text(f"{site_packages}\n", encoding="utf-8")
    python = folder / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import xgboost, numba, mlflow, pyspark\nimport lia_spark"],
                           capture_output=True, text=True, timeout=120, cwd=folder)
    assert "No module named 'lia_spark'" in probe.stderr, probe.stderr  # dependencies import, the package does not
    return python


def executor_jvms(launcher_pid: int) -> list:
    """The live executor JVMs (``CoarseGrainedExecutorBackend``) below a spark-submit process on local-cluster, as
    psutil processes; executors that exit meanwhile (gone, or zombies not yet reaped) are skipped."""
    import psutil

    found = []
    for child in psutil.Process(launcher_pid).children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "CoarseGrainedExecutorBackend" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def run_notebook(notebook: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """Run a Databricks source notebook of notebooks/ as plain Python (its parameters from ``env``'s ``LIA_*``)."""
    environment = {**os.environ, "MPLBACKEND": "Agg", "PYSPARK_PYTHON": PYTHON, "PYSPARK_DRIVER_PYTHON": PYTHON,
                   "SPARK_LOCAL_IP": "127.0.0.1", **env}
    completed = subprocess.run([PYTHON, str(REPO / "notebooks" / notebook)], env=environment, cwd=cwd,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


def submit(args: list[str], cwd: Path, *, python: Path | str = PYTHON, driver_python: Path | str = PYTHON,
           expect: int = 0) -> subprocess.CompletedProcess:
    """spark-submit with these executor and driver Pythons; ``python``'s folder first on PATH (a stray ``python``
    of the cluster is the one that lacks lia_spark)."""
    try:
        completed = subprocess.run([SPARK_SUBMIT, *args], env=submit_env(python, driver_python), cwd=cwd,
                                   capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as expired:  # its output so far says where it stopped
        stderr = expired.stderr.decode(errors="replace") if isinstance(expired.stderr, bytes) else expired.stderr
        pytest.fail(f"spark-submit still ran after 600 s; the end of its stderr:\n{(stderr or '')[-6000:]}")
    assert completed.returncode == expect, completed.stderr[-4000:]
    return completed


def submit_env(python: Path | str, driver_python: Path | str) -> dict[str, str]:
    """spark-submit's environment: executor and driver Pythons, the loopback address, ``python``'s folder first."""
    return {**os.environ, "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(driver_python),
            "SPARK_LOCAL_IP": "127.0.0.1", "PATH": f"{Path(python).parent}:{os.environ['PATH']}"}


def result_document(stdout: str, mounts: dict[str, Path] | None = None) -> dict:
    """The job's full result: the strict JSON file named on stdout ("full result (JSON): <path>"), a mounted
    Hadoop path read through its local folder."""
    (line,) = [line for line in stdout.splitlines() if "full result (JSON): " in line]
    path = line.split("full result (JSON): ", 1)[1]
    for prefix, folder in (mounts or {}).items():
        path = path.replace(prefix, str(folder))
    return json.loads(Path(path).read_text(encoding="utf-8"))
