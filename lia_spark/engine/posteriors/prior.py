"""The attacker's prior of the posteriors stage: which table and column it comes from, checked before any stage.

:func:`check_prior_source` fails in seconds, reading only schemas, when the prior of
:func:`lia_spark.engine.attacker_prior.sources.resolve_prior` cannot be read.
"""
from __future__ import annotations

from typing import Sequence

from pyspark.sql import SparkSession

from lia_spark import names
from lia_spark.engine.attacker_prior.sources import resolve_prior
from lia_spark.names import TRUE_PRIOR
from lia_spark.run import layout
from lia_spark.run.config import Config

# the canary table's columns a prior may be read from (one number per row: not the extra runs' lists)
PRIOR_CANARY_COLUMNS = tuple(column for column in names.CANARY_COLUMNS if column not in names.RUN_COLUMNS)


def _table_columns(spark: SparkSession, path: str) -> list[str] | None:
    """Columns of the Parquet table at ``path`` from its schema (file footers, no rows); None when it is missing
    or unreadable."""
    from pyspark.errors import AnalysisException

    try:
        return spark.read.parquet(path).columns
    except AnalysisException:
        return None


def check_prior_source(spark: SparkSession, config: Config, *, pending: Sequence[str] | None = None) -> None:
    """Fail early, naming mechanisms.prior_column / mechanisms.prior_path, when the posteriors stage could not
    read its prior (:func:`resolve_prior`). Only schemas are read, never rows.

    A table that a pipeline step writes (the twin's truth: ``data`` with data.source=synthetic; models/priors
    and models/canaries: ``train``) counts as resolvable when that step is in ``pending`` (the steps still to
    run before posteriors; default run.stages, and nothing is checked when posteriors is not among them) or
    when it already exists (stage outputs appear only once committed whole). The posteriors stage itself passes
    ``pending=()``.

    Raises:
        ValueError: eta asked for on data that is not the synthetic twin (without a prior_path), a prior_path
            that does not exist or is not Parquet, a table without row_id or the column, or a stage-written
            table that is missing and whose step does not run.
    """
    from lia_spark.engine.runtime.outputs import is_complete

    if pending is None:
        if "posteriors" not in config.run.stages:
            return
        pending = config.run.stages
    section, prior = config.mechanisms, resolve_prior(config)
    wanted = f"{section.prior_column!r}" + (f" (resolved to {prior.column!r})" if section.prior_column != prior.column
                                            else "")
    if prior.column == TRUE_PRIOR and prior.step is not None and config.data.source != "synthetic":
        raise ValueError(
            f"mechanisms.prior_column: eta exists only in the synthetic twin's truth table (data.source=synthetic); "
            f"use mechanisms.prior_column=auto (the proxy model's prediction) or set mechanisms.prior_path to a "
            f"table with row_id and eta, got prior_column='eta' with data.source={config.data.source!r}")
    if prior.step is None:
        columns = _table_columns(spark, prior.path)
        if columns is None:
            raise ValueError(
                f"mechanisms.prior_path: {prior.path} does not exist or is not a Parquet table; set it to a Parquet "
                f"table with row_id and {prior.column}, or leave it empty for the default table of "
                f"mechanisms.prior_column, got {prior.path!r}")
    else:
        if prior.step in pending:
            if (prior.path != layout.proxy_priors_path(config) and prior.step == "train"
                    and prior.column not in PRIOR_CANARY_COLUMNS):
                raise ValueError(
                    f"mechanisms.prior_column: the train stage's canary table {prior.path} has no column "
                    f"{prior.column!r} to read a prior from (columns: {', '.join(PRIOR_CANARY_COLUMNS)}); use auto, "
                    f"eta, proxy_prediction or one of those, or set mechanisms.prior_path to a table with row_id and "
                    f"{prior.column}, got {wanted}")
            return  # the train stage writes models/priors whenever the resolved prior needs them
        columns = _table_columns(spark, prior.path)  # stage outputs appear only when committed whole
        if columns is None:
            writer = {"data": "the generate stage", "train": "the train stage"}[prior.step]
            folder = layout.output_path(config, layout.MODELS)
            why = (f"{folder} is complete but was committed without it (by a run whose prior did not need "
                   f"it); run step 'train' again with this configuration (run.force=true recomputes)"
                   if prior.step == "train" and is_complete(spark, folder)
                   else f"it is missing or incomplete; run step {prior.step!r} first (run.stages)")
            raise ValueError(
                f"mechanisms.prior_column: the prior {prior.column!r} is read from {prior.path}, which {writer} "
                f"writes, but {why}, or set mechanisms.prior_path to a Parquet table with row_id and "
                f"{prior.column}, got {wanted}")
    missing = [name for name in ("row_id", prior.column) if name not in columns]
    if missing:
        field = "mechanisms.prior_column" if "row_id" in columns else "mechanisms.prior_path"
        raise ValueError(
            f"{field}: {prior.path} has no column {', '.join(map(repr, missing))} (columns: {', '.join(columns)}); "
            f"set mechanisms.prior_column to its prior column or mechanisms.prior_path to a table with row_id and "
            f"{prior.column}, got prior_column={wanted}, prior_path={section.prior_path!r}")


