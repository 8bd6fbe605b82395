"""Shared fixtures: one local SparkSession for the whole test run (start-up costs ~10-20 s); every test that uses it
(directly or through another fixture) is marked ``spark``, so ``make test-unit`` runs the others without a JVM."""
from __future__ import annotations

import pytest

from lia_spark.run.sections import SparkConfig


@pytest.fixture(scope="session")
def spark():
    from lia_spark.engine.spark.session import get_spark

    session = get_spark(SparkConfig(
        master="local[2]",
        app_name="lia-spark-tests",
        driver_memory="3g",
        shuffle_partitions=4,
        extra={"spark.ui.enabled": "false", "spark.sql.adaptive.enabled": "false"},
    ))
    yield session
    session.stop()


def pytest_collection_modifyitems(config, items):
    """Mark every test whose fixtures include ``spark`` (the closure: also through module fixtures) as ``spark``."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
