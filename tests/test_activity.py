"""The command's heartbeat: a line naming the work whenever lia_spark has been silent for run.progress_seconds."""
from __future__ import annotations

import logging
import re
import time

from lia_spark.run.activity import current_activity, doing, duration_text, heartbeat

LOGGER = "lia_spark.run.activity"
BEAT = re.compile(r"command: (?P<work>.+), (?P<seconds>\d+) s in")


def _beats(caplog) -> list[re.Match]:
    return [match for record in caplog.records if record.name == LOGGER
            and (match := BEAT.fullmatch(record.getMessage()))]


def test_a_silent_command_names_its_innermost_work_from_that_works_start(caplog):
    caplog.set_level(logging.INFO, logger="lia_spark")
    with heartbeat("command", 0.1):
        with doing("starting the Spark session"):
            time.sleep(0.6)
            with doing("checking that the executors import lia_spark"):
                time.sleep(0.6)
                inner = len(_beats(caplog))
            time.sleep(0.6)
    after = len(_beats(caplog))
    time.sleep(0.5)
    works = [match["work"] for match in _beats(caplog)]
    assert len(works) == after, "nothing is logged once the block is left"
    assert works[0] == "starting the Spark session" and "checking that the executors import lia_spark" in works
    assert works[inner:] and set(works[inner:]) == {"starting the Spark session"}, "the outer work again after"
    assert current_activity() is None


def test_no_heartbeat_while_lia_spark_logs_lines_of_its_own(caplog):
    caplog.set_level(logging.INFO, logger="lia_spark")
    talking = logging.getLogger("lia_spark.engine.runtime.progress")
    with heartbeat("command", 0.5), doing("a stage that reports its progress"):
        for _ in range(20):
            talking.info("stage: 1/2 tasks done")
            time.sleep(0.05)
    assert _beats(caplog) == []


def test_no_heartbeat_at_zero_seconds_or_without_named_work(caplog):
    caplog.set_level(logging.INFO, logger="lia_spark")
    with heartbeat("command", 0), doing("anything"):
        time.sleep(0.3)
    with heartbeat("command", 0.1):
        time.sleep(0.4)
    assert _beats(caplog) == []


def test_durations_read_as_minutes_and_hours():
    assert [duration_text(seconds) for seconds in (0.4, 45, 90, 3600 + 5 * 60)] == ["0 s", "45 s", "1 min 30 s",
                                                                                      "1 h 05 min"]
