"""Nothing that is not lia_spark's is replaced or swept, no committed byte is used unchecked, impossible targets are
refused before any fit, and interrupted or full-disk runs end in one line (issue: lose nothing that is not ours)."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from pipeline_support import HANG_GUARD_SECONDS, REPO, STAGE_STARTED, conf_file, spark_jobs, work_jobs
from pyspark.sql import functions as F

from lia_spark.cli import main as cli
from lia_spark.cli.main import main
from lia_spark.engine.spark import session
from lia_spark.run import interrupts
from lia_spark.run.failures import failure_line

SMALL = {"run": {"name": "ownership", "stages": ["data", "train"]}, "spark": {"master": "local[2]"},
         "synthetic": {"rows_per_day": 2000, "days": 2},
         "models": {"n_estimators": 5, "early_stopping_rounds": 0, "hash_buckets": 1024},
         "audit": {"shadows": 0}, "tracking": {"enabled": False}}  # shadow fits: see tiny_values


def _conf(path: Path, output_dir: Path, **changes: dict) -> Path:
    return conf_file(path, {**SMALL, "run": {**SMALL["run"], "output_dir": str(output_dir)}}, **changes)


def _listing(*roots: Path) -> dict[str, bytes]:
    """Every file below ``roots`` with its bytes: what must be unchanged after a refusal."""
    return {str(path): path.read_bytes() for root in roots for path in sorted(root.rglob("*")) if path.is_file()}


def _folders_of_documents(*folders: Path) -> None:
    for folder in folders:
        folder.mkdir(parents=True)
        (folder / "precious.txt").write_text(f"{folder.name}: somebody's work\n", encoding="utf-8")


def _line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lia-spark: ")]
    assert len(lines) == 1, lines
    return lines[0]


def test_an_output_folder_of_somebody_elses_files_is_refused_and_left_as_it_was(spark, tmp_path, capsys):
    out = tmp_path / "out"
    _folders_of_documents(out / "data", out / "report", out / "data._tmp-0123456789ab", out / "data.gunzip")
    conf = _conf(tmp_path / "conf.yaml", out, run={"stages": ["data", "train", "report"]})
    before = _listing(tmp_path)
    jobs = spark_jobs(spark)
    assert main(["run", "--conf", str(conf), "run.force=true"]) == 2
    assert work_jobs(spark, jobs) == [], "refused before any Spark job but the executor check"
    line = _line(capsys)
    assert line.startswith(f"lia-spark: run.output_dir: {out}/data exists and holds files no lia_spark run wrote")
    assert "precious.txt" in line and "run.replace_foreign=true" in line
    assert _listing(tmp_path) == before

    assert main(["run", "--conf", str(conf), "run.replace_foreign=true", "run.stages=[data,train]"]) == 0
    assert not (out / "data" / "precious.txt").exists() and (out / "data" / "_LIA_COMPLETE").is_file()
    for kept in ("report", "data._tmp-0123456789ab", "data.gunzip"):  # not written, or nobody claimed them
        assert (out / kept / "precious.txt").is_file()

    before = _listing(tmp_path)
    assert main(["run", "--conf", str(conf)]) == 2  # data/ is lia_spark's now; the report step would replace report/
    assert _line(capsys).startswith(f"lia-spark: run.output_dir: {out}/report exists")
    assert _listing(tmp_path) == before


def test_a_data_folder_of_somebody_elses_files_is_refused_with_its_look_alike_siblings_kept(spark, tmp_path, capsys):
    documents = tmp_path / "docs"
    _folders_of_documents(documents, tmp_path / "docs._tmp-0123456789ab", tmp_path / "docs.gunzip")
    conf = _conf(tmp_path / "conf.yaml", tmp_path / "out", data={"parquet_path": str(documents)})
    before = _listing(tmp_path)
    jobs = spark_jobs(spark)
    assert main(["run", "--conf", str(conf)]) == 2
    assert work_jobs(spark, jobs) == [], "refused before any Spark job but the executor check"
    assert _line(capsys).startswith(f"lia-spark: data.parquet_path: {documents} exists and holds files")
    assert _listing(tmp_path) == before
    assert not (tmp_path / "out").exists(), "a refused run leaves no output folder behind"


@pytest.fixture(scope="module")
def trained(spark, tmp_path_factory):
    """A committed 2-day twin of 2,000 rows per day and its trained models."""
    root = tmp_path_factory.mktemp("trained")
    assert main(["run", "--conf", str(_conf(root / "conf.yaml", root / "out"))]) == 0
    return root


def _flip(path: Path, count: int = 64) -> None:
    """Invert ``count`` bytes in the middle of ``path`` (its size stays the same)."""
    with path.open("r+b") as stream:
        stream.seek(path.stat().st_size // 2)
        data = stream.read(count)
        stream.seek(path.stat().st_size // 2)
        stream.write(bytes(byte ^ 0xFF for byte in data))


@pytest.mark.parametrize("checksum_file", ["kept", "dropped"])
def test_flipped_bytes_in_committed_data_are_detected_and_never_used(trained, tmp_path, capsys, checksum_file):
    """64 bytes flipped in the target day's data file: with Hadoop's .crc the checksum fails, without it (a copy
    that drops hidden files) Parquet's page CRC does; either way the training that reads the file stops with one
    line naming the file and run.force=true, and nothing is committed from it."""
    out = tmp_path / "out"
    shutil.copytree(trained / "out", out)
    conf = _conf(tmp_path / "conf.yaml", out)
    damaged = next((out / "data" / "day=1").glob("*.parquet"))
    _flip(damaged)
    if checksum_file == "dropped":
        for crc in (out / "data").rglob(".*.crc"):
            crc.unlink()
    models_marker = (out / "models" / "_LIA_COMPLETE").read_text(encoding="utf-8")
    assert main(["train", "--conf", str(conf), "models.n_estimators=6"]) == 1
    line = _line(capsys)
    assert line.startswith("lia-spark: ") and damaged.name in line and "damaged" in line and "run.force=true" in line
    assert ("Checksum error" if checksum_file == "kept" else "CRC checksum verification failed") in line
    assert (out / "models" / "_LIA_COMPLETE").read_text(encoding="utf-8") == models_marker
    assert main(["run", "--conf", str(conf), "run.force=true"]) == 0


def test_a_changed_file_of_a_committed_output_recomputes_its_stage_with_one_warning(trained, tmp_path, caplog):
    out = tmp_path / "out"
    shutil.copytree(trained / "out", out)
    conf = _conf(tmp_path / "conf.yaml", out)
    metrics = out / "models" / "metrics.json"
    metrics.write_text(metrics.read_text(encoding="utf-8").replace("0", "1", 1), encoding="utf-8")  # same size
    with caplog.at_level(logging.WARNING, logger="lia_spark"):
        assert main(["run", "--conf", str(conf)]) == 0
    warnings = [record.getMessage() for record in caplog.records if "no longer holds the files" in record.getMessage()]
    assert len(warnings) == 1 and "metrics.json: content changed" in warnings[0]
    assert json.loads((out / "results" / "pipeline.json").read_text())["steps"][1]["status"] == "ran"
    assert main(["run", "--conf", str(conf)]) == 0
    assert json.loads((out / "results" / "pipeline.json").read_text())["steps"][1]["status"] == "reused"


def test_a_changed_file_of_a_committed_input_stops_the_stage_that_reads_it_before_any_work(trained, tmp_path,
                                                                                            capsys):
    """Only the audit runs, so nothing recomputes the train stage's folder it reads: a file changed there (same
    size) stops it with one line naming the file and run.force=true, before it reads anything."""
    out = tmp_path / "out"
    shutil.copytree(trained / "out", out)
    metrics = out / "models" / "metrics.json"
    metrics.write_text(metrics.read_text(encoding="utf-8").replace("0", "1", 1), encoding="utf-8")  # same size
    assert main(["audit", "--conf", str(_conf(tmp_path / "conf.yaml", out))]) == 1
    line = _line(capsys)
    assert line.startswith(f"lia-spark: {metrics}: damaged (content changed): the audit stage's input no longer"), line
    assert "run.force=true" in line and not (out / "audit").exists()


@pytest.mark.parametrize("overrides, field", [
    (["models.training_mechanism=pate", "pate.teachers=100000"], "pate.teachers"),
    (["models.training_mechanism=pate", "pate.queries=100000000"], "pate.queries"),
    (["models.training_mechanism=llp", "models.bag_size=4096"], "models.bag_size"),
])
def test_a_target_the_rows_cannot_hold_is_refused_before_any_fit(spark, trained, capsys, overrides, field):
    conf = str(trained / "conf.yaml")
    for command in (["train", "--conf", conf], ["run", "--conf", conf, "run.output_dir=" + str(trained / "new")]):
        jobs = spark_jobs(spark)
        assert main([*command, *overrides]) == 2
        line = _line(capsys)
        assert line.startswith(f"lia-spark: {field}: must be at most the target's about 1,600 training rows"), line
        # counting the day's rows is the check itself; every fit starts with a job collecting its features
        assert not [job for job in work_jobs(spark, jobs) if job.startswith("train:")], "refused before any fit"
    assert not (trained / "new").exists()


def test_a_full_disk_in_a_python_worker_names_the_folder_being_written(spark):
    """A Python worker's ENOSPC reaches the driver as a traceback in text: the line is the error's own, not "An
    exception was thrown from the Python worker", and names the folder the stage was writing with its free space."""

    @F.pandas_udf("long")
    def fill_the_disk(values: pd.Series) -> pd.Series:
        with open("/dev/full", "w", encoding="utf-8") as stream:  # answers every write with ENOSPC
            stream.write("x" * 100_000)
            stream.flush()
        return values

    with pytest.raises(Exception) as raised:
        spark.range(4).select(fill_the_disk("id")).collect()
    line, code = failure_line(raised.value)
    assert code == 1 and line.startswith("the folder being written: no space left on the device") and "Errno 28" in line
    # as lia_spark.engine.runtime.outputs.claimed adds it
    raised.value.add_note(f"lia-spark: writing {REPO} (12.5 MB written)")
    line, _ = failure_line(raised.value)
    assert line.startswith(f"{REPO}: no space left on the device (") and "free of" in line and "12.5 MB written" in line


def _run_until(conf: Path, started_line: str, *extra: str) -> tuple[subprocess.Popen, Path]:
    log = conf.parent / "stderr.txt"
    process = subprocess.Popen([sys.executable, "-m", "lia_spark.cli.main", "run", "--conf", str(conf), *extra],
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    guard = time.monotonic() + HANG_GUARD_SECONDS
    while started_line not in log.read_text(encoding="utf-8"):
        assert process.poll() is None, log.read_text(encoding="utf-8")[-3000:]
        if time.monotonic() > guard:
            pytest.fail(f"hang guard: no {started_line!r} after {HANG_GUARD_SECONDS} s")
        time.sleep(0.5)
    return process, log


def _processes_writing(path: Path) -> list[str]:
    """The command lines of the processes other than this one holding ``path`` open (Linux's /proc)."""
    holders = []
    for process in Path("/proc").iterdir():
        if not process.name.isdigit() or int(process.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):  # a process that ended, or one of another user
            if any(os.readlink(fd) == str(path) for fd in (process / "fd").iterdir()):
                holders.append((process / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200])
    return holders


SLEEPING_GROUP = "tests-sleeping-job"


def _sleeping_job(spark):
    """One stage of two tasks that each sleep 120 s in their Python worker (until cancelled), in the job group
    :data:`SLEEPING_GROUP` (:func:`_sleeping_job_statuses`)."""
    def sleep_in_a_task(frames):  # local: pickled by value (the workers cannot import this test module)
        for frame in frames:
            time.sleep(120)
            yield frame

    spark.sparkContext.setLocalProperty("spark.jobGroup.id", SLEEPING_GROUP)  # this thread's next jobs
    return spark.range(0, 2, 1, numPartitions=2).mapInPandas(sleep_in_a_task, "id long")


def _sleeping_job_statuses(spark) -> list[str]:
    """The status of every job of :func:`_sleeping_job` run so far (FAILED for a cancelled one), and the job group
    cleared from this thread."""
    spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    tracker = spark.sparkContext.statusTracker()
    return [str(tracker.getJobInfo(job).status) for job in tracker.getJobIdsForGroup(SLEEPING_GROUP)]


def _sleeping_tasks_run(spark, timeout: float = 60.0) -> bool:
    """Wait until a task set in the scheduler's root pool runs both tasks of :func:`_sleeping_job` (the scheduler's
    own count, not the status tracker's, which lags); False after ``timeout`` s. A fixed delay is not enough: on a
    loaded machine planning alone can outlast it, and a signal before the job exists cancels nothing."""
    root = spark.sparkContext._jsc.sc().taskScheduler().rootPool()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(task_set.runningTasks() >= 2 for task_set in root.schedulableQueue().toArray()):
            return True
        time.sleep(0.1)
    return False


def test_a_signal_inside_a_spark_call_stops_code_that_goes_on_after_failures_and_cancels_the_job(spark):
    """SIGTERM comes while the main thread waits inside py4j (collect). pyspark's clean-up may then read the
    cancellation from the interrupted connection and raise it in place of the signal's exception, so code that
    records a failure and goes on (an audit-table cell, the fit-ahead, a best-effort MLflow call) asks
    ``interrupts.check()`` first: the command unwinds with the signal, and the running job is cancelled."""
    finished = threading.Event()

    def terminate_once_running() -> None:
        if _sleeping_tasks_run(spark) and not finished.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    previous = cli._stop_on_signals()
    signaller = threading.Thread(target=terminate_once_running, daemon=True)
    try:
        signaller.start()
        with pytest.raises(interrupts.Terminated):
            try:
                _sleeping_job(spark).collect()
            except Exception:  # noqa: BLE001 - as the audit table's handling of a failing cell
                interrupts.check()
                pytest.fail("a failure recorded after the signal: the command would go on")
        deadline = time.monotonic() + 30
        while spark.sparkContext.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not spark.sparkContext.statusTracker().getActiveJobsIds(), "the job was cancelled"
        assert _sleeping_job_statuses(spark)[-1:] == ["FAILED"], "cancelled, not run to its end"
    finally:
        finished.set()
        signaller.join()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        interrupts.received.clear()  # the command has unwound: jobs are no longer cancelled
    time.sleep(2 * cli.CANCEL_REPEAT_SECONDS)
    assert spark.range(3).count() == 3  # the session still answers


def test_the_wait_after_a_cancel_ends_once_the_killed_tasks_ended(spark):
    """A cancelled stage's task set is a zombie at once (``getSortedTaskSetQueue`` leaves it out) but stays in its
    pool until its killed tasks ended and Spark logged them; the command's last line waits for that."""
    def collect() -> None:
        with contextlib.suppress(Exception):  # the cancellation fails the job
            _sleeping_job(spark).collect()

    root = spark.sparkContext._jsc.sc().taskScheduler().rootPool()
    session.wait_for_killed_tasks(timeout_seconds=60)  # an earlier test's cancelled tasks may still be ending
    assert session._task_sets_in(root) == 0
    threading.Thread(target=collect, daemon=True).start()
    assert _sleeping_tasks_run(spark), "the tasks started"
    time.sleep(1)  # both tasks run their Python
    session.cancel_running_jobs()
    while root.getSortedTaskSetQueue().size():  # the cancel is an event of the DAG scheduler's loop
        time.sleep(0.05)
    assert session._task_sets_in(root) == 1, "the cancelled task set waits for its killed tasks"
    session.wait_for_killed_tasks(timeout_seconds=60)
    assert session._task_sets_in(root) == 0, "the tasks (sleeping 120 s unless killed) were killed and ended"


def test_a_signal_inside_a_jvm_call_that_runs_no_job_cancels_the_jobs_started_after_it(spark):
    """SIGTERM comes while the main thread waits inside a py4j call that runs no job (the JVM sleeps 3 s): the
    handler may not raise there and finds no job to cancel, so until the command unwinds a thread cancels every job
    it starts - the next one fails within seconds, not after its 120 s - and ``interrupts.check()`` (which job_main
    asks once the command ends) stops the command. Before, such a signal was lost: the command ran on, exit 0."""
    previous = cli._stop_on_signals()
    signaller = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        signaller.start()
        spark.sparkContext._jvm.java.lang.Thread.sleep(3000)
        assert interrupts.received == [signal.SIGTERM]
        with pytest.raises(Exception, match="cancel"):  # a job run to its end (120 s) would not raise
            _sleeping_job(spark).collect()
        assert _sleeping_job_statuses(spark)[-1:] == ["FAILED"]
        with pytest.raises(interrupts.Terminated):
            interrupts.check()
    finally:
        signaller.cancel()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        interrupts.received.clear()  # the command has unwound: jobs are no longer cancelled
    session.wait_for_killed_tasks(timeout_seconds=60)
    time.sleep(2 * cli.CANCEL_REPEAT_SECONDS)
    assert spark.range(3).count() == 3  # the session still answers


@pytest.mark.e2e
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_end_with_their_code_and_the_same_command_resumes(tmp_path, signum, code):
    out = tmp_path / "out"
    conf = _conf(tmp_path / "conf.yaml", out, run={"stages": ["data", "train", "posteriors"]},
                 synthetic={"rows_per_day": 20000, "days": 2})  # posteriors: ~30 s, the signal comes 2 s in
    process, log = _run_until(conf, "pipeline: posteriors (posteriors) started", "run.progress_seconds=1")
    time.sleep(2)
    process.send_signal(signum)
    assert process.wait(timeout=60) == code
    assert _processes_writing(log) == [], "Spark's processes ended before the last line: none can print after it"
    printed = log.read_text(encoding="utf-8")
    # no silence from the command's start: the JVM's start alone takes more than a second
    assert "pipeline: starting the Spark session (spark.master=local[2]), " in printed
    assert "posteriors failed" not in printed, "the stopped stage is interrupted, not failed (nor its Java stack shown)"
    last = printed.strip().splitlines()[-1]
    assert last == (f"lia-spark: interrupted ({signal.Signals(signum).name}); the lock is released, finished stages "
                    "are kept and the same command resumes")
    assert sorted(path.name for path in out.iterdir() if not path.name.startswith(".")) == [
        "audit_key", "data", "models", "truth"], "no lock, staging folder or claim is left"
    if signum == signal.SIGINT:
        return  # the folder is in the state SIGTERM leaves, from which the resume is shown once (~50 s less CI)
    resumed = subprocess.run([sys.executable, "-m", "lia_spark.cli.main", "run", "--conf", str(conf)], cwd=REPO,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "data=reused" in resumed.stdout and "train=reused" in resumed.stdout and "posteriors=ran" in resumed.stdout


@pytest.mark.e2e
def test_pate_with_100000_teachers_on_16k_rows_exits_2_before_the_first_stage(tmp_path):
    conf = _conf(tmp_path / "conf.yaml", tmp_path / "out", synthetic={"rows_per_day": 20000, "days": 2})
    completed = subprocess.run([sys.executable, "-m", "lia_spark.cli.main", "run", "--conf", str(conf),
                                "models.training_mechanism=pate", "pate.teachers=100000"], cwd=REPO,
                               capture_output=True, text=True, timeout=300, env={**os.environ})
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert completed.stderr.strip().splitlines()[-1].startswith(
        "lia-spark: pate.teachers: must be at most the target's about 16,000 training rows")
    assert not STAGE_STARTED.search(completed.stderr), "refused before the data stage (so before any fit)"
    assert not (tmp_path / "out" / "data").exists()


def test_training_rows_are_the_sampled_day_times_the_train_share_and_counted_only_when_limited():
    from lia_spark.run.config import load_config
    from lia_spark.run.limits import check_training_rows, training_rows

    config = load_config(None, [])  # sample_rows_per_day 1,000,000, train share 0.8, in memory
    assert training_rows(config, 2000) == 1600 and training_rows(config, 5_000_000) == 800_000
    assert training_rows(load_config(None, ["models.execution=distributed"]), 5_000_000) == 4_000_000

    def never() -> int:
        raise AssertionError("a mechanism without a row limit must not count rows")

    check_training_rows(config, never, source="test")  # the default target (no mechanism) has no row limit
    with pytest.raises(ValueError, match=r"^pate\.queries: must be at most the target's about 1,600 training rows"):
        check_training_rows(load_config(None, ["models.training_mechanism=pate"]), lambda: 2000, source="test")
