"""Progress lines of running stages (lia_spark.engine.runtime.progress): the line's wording,
a real slow Spark job reported
while it runs, a heartbeat for driver-side work, a reporting thread that ends with the block, run_stage's, and the
step's own count and ETA (model fits on the driver and in parallel tasks, the pipeline's step)."""
from __future__ import annotations

import logging
import re
import threading
import time
from types import SimpleNamespace

from lia_spark.engine.runtime.progress import (ConnectProgress, StageProgress, StepWork, pipeline_step, plan_work,
                                               progress_line, reporting_progress, work_done)
from lia_spark.engine.spark.session import describe_jobs
from lia_spark.run.config import load_config

LOGGER = "lia_spark.engine.runtime.progress"
TASK_LINE = re.compile(r"slow job: (\d+)/12 tasks of Spark stage \d+ done")


def _reporters() -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith("lia-spark-progress")]


def _lines(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == LOGGER]


def _sleepy(seconds: float):
    """A mapInPandas function taking ``seconds`` per batch (nested: shipped by value, the workers cannot import
    this module)."""
    def sleepy(batches):
        for batch in batches:
            time.sleep(seconds)
            yield batch

    return sleepy


def test_progress_line_names_tasks_rate_eta_and_the_running_jobs():
    stages = [StageProgress(12, tasks=200, completed=37, running=2), StageProgress(13, tasks=4, completed=0)]
    line = progress_line("posteriors", stages, elapsed=130, rates={12: 1.8},
                         doing="posteriors: bag, release, posteriors; write per-row results")
    # ETA = (200 - 37) / 1.8 = 90.6 s
    assert line == ("posteriors: bag, release, posteriors; write per-row results: 37/200 tasks of Spark stage 12 "
                    "done, 2 running, 1.8 tasks/s, ETA 1 min 31 s; 0/4 tasks of Spark stage 13 done (2 min 10 s in)")
    # the last tasks running: the rate of the finished ones says nothing of theirs (a 40-min fit after six short ones)
    assert progress_line("audit-table: targets", [StageProgress(30, 7, 6, 1)], elapsed=2440, rates={30: 0.0077}) == (
        "audit-table: targets: 6/7 tasks of Spark stage 30 done, 1 running, 0.0077 tasks/s, no ETA "
        "(the last 1 running: "
        "how long they take is not known) (40 min 40 s in)")
    assert progress_line("train", stages[:1], elapsed=7300, rates={}, doing="tiny: train").startswith(
        "train (tiny: train): 37/200 tasks of Spark stage 12 done, 2 running (2 h 01 min in)")
    assert progress_line("audit", [], elapsed=45, rates={}) == "audit: still running, 45 s in (no Spark stage active)"
    assert progress_line("train", [], elapsed=45, rates={}, doing="train: fitting the proxy (xgboost) on the driver") \
        == ("train: still running, 45 s in (no Spark stage active; last step named: fitting the proxy (xgboost) on "
            "the driver)")


def test_step_work_counts_units_and_gives_the_steps_eta_from_the_rate_so_far():
    assert StepWork("model fits", 3, started=0.0).text([], now=50) == (
        "0/3 model fits done, ETA of the step after the first")
    # 1 fit in 120 s: 2 left at that rate
    assert StepWork("model fits", 3, started=0.0, done=1).text([], now=120) == (
        "1/3 model fits done, ETA of the step 4 min 0 s (rate so far)")
    assert StepWork("model fits", 3, started=0.0, done=3).text([], now=300) == "3/3 model fits done"
    # 12 fits as the 12 tasks of one Spark stage: its 4 finished tasks count, the 200-task stage does not
    running = StepWork("model fits", 14, started=0.0, done=2, in_tasks=12)
    stages = [StageProgress(7, tasks=12, completed=4, running=2), StageProgress(8, tasks=200, completed=150)]
    assert running.text(stages, now=60) == "6/14 model fits done, ETA of the step 1 min 20 s (rate so far)"
    line = progress_line("utility", stages[:1], elapsed=60, rates={}, doing="utility: 12 fits in parallel tasks",
                         step="pipeline step 4/6; " + running.text(stages, now=60))
    assert line == ("utility: 12 fits in parallel tasks: pipeline step 4/6; 6/14 model fits done, ETA of the step "
                    "1 min 20 s (rate so far); 4/12 tasks of Spark stage 7 done, 2 running (1 min 0 s in)")
    assert progress_line("train", [], elapsed=45, rates={}, step="1/2 model fits done") == (
        "train: 1/2 model fits done; still running, 45 s in (no Spark stage active)")


def test_planned_work_belongs_to_the_innermost_reporting_block_and_ends_with_it():
    plan_work("model fits", 2)  # no reporting block: nothing to count, nothing raised
    work_done()
    with reporting_progress(None, "outer", 0):  # 0 s: no thread (no session needed), the counts are still kept
        from lia_spark.engine.runtime import progress

        plan_work("model fits", 2)
        with reporting_progress(None, "inner", 0):
            plan_work("cells", 5)
            work_done(2)
            assert (progress._STEPS.slots[-1].work.done, progress._STEPS.slots[0].work.done) == (2, 0)
        work_done(3)  # never beyond the plan
        assert [slot.work.done for slot in progress._STEPS.slots] == [2]
    assert progress._STEPS.slots == []


def test_connect_handler_keeps_the_unfinished_stages_of_running_operations():
    handler = ConnectProgress()
    stage = SimpleNamespace  # the client's StageInfo: stage_id, num_tasks, num_completed_tasks, done
    handler(stages=[stage(stage_id=3, num_tasks=8, num_completed_tasks=2, done=False),
                    stage(stage_id=2, num_tasks=4, num_completed_tasks=4, done=True)],
            inflight_tasks=2, operation_id="a", done=False)
    handler(stages=[stage(stage_id=1, num_tasks=5, num_completed_tasks=0, done=False)], inflight_tasks=1,
            operation_id="b", done=False)
    assert handler.stages() == [StageProgress(1, 5, 0), StageProgress(3, 8, 2)]
    handler(stages=[], inflight_tasks=0, operation_id="b", done=True)
    assert handler.stages() == [StageProgress(3, 8, 2)]


def test_a_slow_job_is_reported_while_it_runs_and_the_reporter_stops_with_it(spark, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    describe_jobs(spark, None)  # a description left by a caller outside a stage would name these lines
    # 6 waves of 0.5 s on 2 cores: after each of the first 4 waves tasks are still queued, so a rate gives an ETA
    # even when a loaded machine's reporter wakes late (a stage whose tasks all run has none: see the wording test)
    frame = spark.range(0, 12, numPartitions=12).mapInPandas(_sleepy(0.5), "id long")
    with reporting_progress(spark, "slow job", 0.3):
        assert _reporters()
        assert frame.count() == 12
    assert _reporters() == []  # the thread has ended when the block is left
    lines = _lines(caplog)
    done = [int(match.group(1)) for line in lines if (match := TASK_LINE.match(line))]
    assert done and done == sorted(done), lines
    assert any("tasks/s, ETA " in line for line in lines), lines  # once a task finished: rate and ETA
    time.sleep(1.0)
    assert _lines(caplog) == lines  # nothing logged after the block


def test_driver_work_gets_a_heartbeat_naming_no_spark_stage(spark, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    describe_jobs(spark, "fit: on the driver")
    try:
        with reporting_progress(spark, "fit", 0.2):
            time.sleep(0.9)
    finally:
        describe_jobs(spark, None)
    lines = _lines(caplog)
    assert lines and all(re.fullmatch(r"fit: still running, \d s in \(no Spark stage active; last step named: on "
                                      r"the driver\)", line) for line in lines), lines


def test_zero_seconds_reports_nothing(spark, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with reporting_progress(spark, "quiet", 0):
        assert _reporters() == []
        spark.range(0, 2, numPartitions=2).mapInPandas(_sleepy(0.3), "id long").count()
    assert _lines(caplog) == []


def test_run_stage_reports_its_progress_under_its_name(spark, caplog, tmp_path):
    from lia_spark.engine.orchestration.registry import run_stage

    caplog.set_level(logging.INFO, logger=LOGGER)
    config = load_config(None, [f"run.output_dir={tmp_path}", "run.progress_seconds=0.2",
                                "synthetic.rows_per_day=2000", "tracking.enabled=false"])
    run_stage("generate", spark, config)
    assert _reporters() == []
    lines = _lines(caplog)
    assert lines and all(line.startswith("generate") for line in lines), lines



def _slow_fit(shared, job, threads):
    """A stand-in for a model fit (module level: run_fits pickles it by reference for the driver path)."""
    time.sleep(job)
    return shared, job


def test_fits_on_the_driver_are_counted_with_the_steps_eta(spark, caplog):
    from lia_spark.engine.models.parallel_fits import run_fits

    caplog.set_level(logging.INFO, logger=LOGGER)
    describe_jobs(spark, None)
    with pipeline_step(2, 6), reporting_progress(spark, "train", 0.25):
        outcomes = run_fits(spark, 3, [(f"fit {index}", 0.6) for index in range(3)], _slow_fit, purpose="train",
                            in_tasks=False)
    assert [outcome.value for outcome in outcomes] == [(3, 0.6)] * 3
    counts = [re.match(r"train: pipeline step 2/6; (\d)/3 model fits done", line) for line in _lines(caplog)]
    done = [int(match.group(1)) for match in counts if match]
    assert len(done) == len(counts) > 2 and done == sorted(done) and done[-1] >= 2, _lines(caplog)
    assert any(re.search(r"[12]/3 model fits done, ETA of the step \d s \(rate so far\)", line)
               for line in _lines(caplog)), _lines(caplog)


def test_fits_in_parallel_tasks_count_as_their_tasks_finish(spark, caplog):
    from lia_spark.engine.models.parallel_fits import run_fits

    caplog.set_level(logging.INFO, logger=LOGGER)

    def slow(shared, job, threads):  # nested: shipped by value to workers that cannot import this module
        time.sleep(job)
        return job

    with reporting_progress(spark, "utility", 0.25):
        outcomes = run_fits(spark, 0, [(f"fit {index}", 0.7) for index in range(6)], slow, purpose="utility")
    assert {outcome.where for outcome in outcomes} == {"spark tasks"}
    done = [int(match.group(1)) for line in _lines(caplog)
            if (match := re.match(r"utility: 6 fits in parallel tasks: (\d)/6 model fits done", line))]
    assert done == sorted(done) and any(0 < count < 6 for count in done), _lines(caplog)
