"""Shared fixtures: one local SparkSession for the whole test run (start-up costs ~10-20 s); every test that uses it
(directly or through another fixture) is marked ``spark``, so ``make test-unit`` runs the others without a JVM."""
from __future__ import annotations

import os
import sys

import pytest

import jvm_support
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


def pytest_collection_modifyitems(config, items):
    """Mark every test whose fixtures include ``spark`` (the closure: also through module fixtures) as ``spark``."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


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
