"""lia_spark: label-inference auditing of label-privacy mechanisms on Apache Spark.

The Python API (:mod:`lia_spark.cli.api`, imported on first use so that ``import lia_spark`` stays light on the
executors): ``lia_spark.run_command("pipeline", "demo", ...)`` runs any ``lia-spark`` command and returns its typed
result, ``lia_spark.audit_predictions(table, ...)`` audits a table of canaries and a model's predictions, and
``lia_spark.configure_logging()`` shows the progress lines the command line shows (README, "Python API").
"""

__version__ = "0.1.0"

API = ("audit_predictions", "run_command", "PredictionsAudit", "configure_logging")
__all__ = ["__version__", *API]


def __getattr__(name: str):
    """``lia_spark.<name>`` for the names of :data:`API`, from :mod:`lia_spark.cli.api`."""
    if name in API:
        from lia_spark.cli import api

        return getattr(api, name)
    raise AttributeError(f"module 'lia_spark' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names with the lazily imported API's (``dir(lia_spark)`` lists what ``__all__`` exports)."""
    return sorted({*globals(), *API})
