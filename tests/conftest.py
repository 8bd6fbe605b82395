"""Shared fixtures: one local SparkSession for the whole test run (start-up costs ~10-20 s); every test that uses it
(directly or through another fixture) is marked ``spark``, so ``make test-unit`` runs the others without a JVM."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import jvm_support
import pytest
from xdist.scheduler import LoadFileScheduling

from lia_spark.run.sections import SparkConfig

# Before any JVM starts: the tests' JVM options (tests/jvm_support.py says why), unless the user set their own
# (parallel test workers inherit the controller's: ours).
JVM_OPTIONS_BASE = jvm_support.submit_options(None)  # without the class archive
JVM_OPTIONS_OURS = os.environ.setdefault("SPARK_SUBMIT_OPTS", JVM_OPTIONS_BASE) == JVM_OPTIONS_BASE
JVM_MARKERS = ("spark", "e2e", "slow")  # the tests that start a JVM

SHUFFLE_PARTITIONS = 4
SESSION_SETTINGS: dict[str, str] = {}  # what the shared session had when the fixture handed it out


@pytest.fixture(scope="session")
def spark():
    from lia_spark.engine.spark.session import get_spark

    session = get_spark(SparkConfig(
        master="local[2]",
        app_name="lia-spark-tests",
        driver_memory="3g",
        shuffle_partitions=SHUFFLE_PARTITIONS,
        extra={"spark.ui.enabled": "false", "spark.sql.adaptive.enabled": "false"},
    ))
    SESSION_SETTINGS["spark.sql.shuffle.partitions"] = session.conf.get("spark.sql.shuffle.partitions")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _shared_session_settings_kept():
    """A test that changes the shared session's shuffle partitions must put them back: Spark's default (200, what
    ``spark.conf.unset`` leaves) once made every later test's shuffles 4-13x slower."""
    yield
    sql = sys.modules.get("pyspark.sql")
    session = sql.SparkSession.getActiveSession() if sql is not None and SESSION_SETTINGS else None
    if session is not None:
        changed = {key: session.conf.get(key) for key, value in SESSION_SETTINGS.items()
                   if session.conf.get(key) != value}
        for key in changed:
            session.conf.set(key, SESSION_SETTINGS[key])
        assert not changed, f"the test left the shared session with {changed}; put back {SESSION_SETTINGS}"


# The test files of the JVM tiers that take longest, run first (worker-seconds on 2 cores: e2e tier test_audit_key
# ~460 on a loaded machine, test_spark_submit ~420, the TINY_RUN_FILES ~250 - placed by their first file here -,
# test_failures 170, test_reuse_spark 145, test_own_model 130, test_ownership 110, test_audit_table 100; Spark tier
# test_train_spark 105, test_posteriors_spark 90, test_ownership 85, test_audit_spark 55): parallel workers take
# files in collection order (the Makefile's --no-loadscope-reorder: else pytest-xdist orders them by their number of
# tests), and a long file started last leaves the other worker idle at the end.
LONGEST_FILES_FIRST = ("test_audit_key.py", "test_spark_submit.py", "test_spark_connect.py", "test_failures.py",
                       "test_reuse_spark.py",
                       "test_own_model.py", "test_ownership.py", "test_audit_table.py", "test_train_spark.py",
                       "test_posteriors_spark.py", "test_audit_spark.py")
# The files that share pipeline_support.tiny_run (one pipeline, ~25 s of two cores, cached per process) run in one
# worker, as if they were one file (TinyRunSharing); with them spread over both, each worker ran the pipeline.
TINY_RUN_FILES = ("test_spark_connect.py", "test_tracking.py", "test_pipeline.py", "test_notebooks.py",
                  "test_report_browser.py", "test_reference_numbers.py")


class TinyRunSharing(LoadFileScheduling):
    """pytest-xdist's ``--dist loadfile`` (a file's tests in one worker, files handed out in collection order), the
    TINY_RUN_FILES one unit of work."""

    def _split_scope(self, nodeid: str) -> str:
        path = super()._split_scope(nodeid)
        return "tiny-run" if Path(path).name in TINY_RUN_FILES else path


def pytest_xdist_make_scheduler(config, log):
    """TinyRunSharing for the Makefile's ``--dist loadfile``; pytest-xdist's own scheduler for any other."""
    return TinyRunSharing(config, log) if config.getvalue("dist") == "loadfile" else None


def pytest_collection_modifyitems(config, items):
    """Mark every test whose fixtures include ``spark`` (the closure: also through module fixtures) as ``spark``;
    put the files of LONGEST_FILES_FIRST first (in that order; a file's tests keep theirs)."""
    missing = [name for name in {*LONGEST_FILES_FIRST, *TINY_RUN_FILES} if not Path(__file__).with_name(name).is_file()]
    unlisted = {item.path.name for item in items if hasattr(getattr(item, "module", None), "tiny_run")} - {
        *TINY_RUN_FILES}
    if missing or unlisted:
        raise pytest.UsageError(f"tests/conftest.py: LONGEST_FILES_FIRST or TINY_RUN_FILES name files that do not "
                                f"exist: {sorted(missing)}; files using tiny_run missing from TINY_RUN_FILES: "
                                f"{sorted(unlisted)}")
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
    rank = {name: position for position, name in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep collection order


def pytest_collection_finish(session):
    """When the selected tests start JVMs, they share a class-data sharing archive (built once per environment)."""
    if not JVM_OPTIONS_OURS or not any(item.get_closest_marker(marker) for item in session.items
                                       for marker in JVM_MARKERS):
        return
    archive, why_not = jvm_support.class_archive()
    os.environ["SPARK_SUBMIT_OPTS"] = jvm_support.submit_options(archive)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if why_not and reporter is not None:
        reporter.write_line(f"tests: JVMs start without a class-data sharing archive: {why_not}")
