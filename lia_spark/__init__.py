"""lia_spark: label-inference auditing of label-privacy mechanisms on Apache Spark.

The Python API (:mod:`lia_spark.cli.api`, imported on first use so that ``import lia_spark`` stays light on the
executors): ``lia_spark.audit_predictions(table, ...)`` and ``lia_spark.run_command("pipeline", "demo", ...)``.
"""

__version__ = "0.1.0"

API = ("audit_predictions", "run_command", "PredictionsAudit")


def __getattr__(name: str):
    """``lia_spark.<name>`` for the names of :data:`API`, from :mod:`lia_spark.cli.api`."""
    if name in API:
        from lia_spark.cli import api

        return getattr(api, name)
    raise AttributeError(f"module 'lia_spark' has no attribute {name!r}")
