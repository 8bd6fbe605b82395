"""The canary table of a model trained outside lia_spark on the inject stage's export (docs/math.md §5.9): the sealed
table (row_id, label = y0, counterfactual_label = y1, hidden_bit = b, proxy_prediction) with the model's prediction
of every canary as ``target_prediction``, from audit.model_uri (scored on the executors from the export's rows) or
audit.predictions_path (a table made elsewhere). Under audit.design=observational the model trained on the same rows'
true labels and the game reads y0 alone (§5.10). Nothing proportional to the canaries reaches the driver: the checks
are aggregations.
"""
from __future__ import annotations

import datetime
import logging
from typing import Any

import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lia_spark.engine.runtime.outputs import MARKER, path_exists
from lia_spark.engine.runtime.stage import Resolved
from lia_spark.engine.spark.filesystem import files_for
from lia_spark.engine.spark.session import aggregate_row, describe_jobs
from lia_spark.kernels.criteo import CAT_COLUMNS, HEX_DIGITS, TSV_COLUMNS
from lia_spark.kernels.injected import PROBABILITY_FIX, PredictionSummary, prediction_problem
from lia_spark.names import LABEL, PROXY_PREDICTION, ROW_ID, TARGET_PREDICTION
from lia_spark.run import layout
from lia_spark.run.config import Config
from lia_spark.run.tracking_uri import resolve_tracking_uri
from lia_spark.tracking.model_scoring import (ProbabilityModel, local_model_folder, model_facts, model_udf,
                                              pinned_model_uri, positive_probability, probability_model)

logger = logging.getLogger(__name__)

PREDICTION = "prediction"  # the column of an audit.predictions_path table
CLOCK_SLACK_SECONDS = 300.0  # a model may predate the export it trained on by this much (clocks differ)


def given_model(spark: SparkSession, config: Config) -> Resolved:
    """What the audit's fingerprint needs of audit.model_uri beyond its text: the registry's version behind an alias,
    a stage or ``latest`` (``audit.model_version``), and a local model folder's files (input ``model``)."""
    uri = config.audit.model_uri
    if not uri:
        return Resolved()
    pinned = pinned_model_uri(uri, resolve_tracking_uri(config.tracking))
    folder = local_model_folder(uri)
    return Resolved({"audit.model_version": pinned} if pinned != uri else {}, {"model": folder} if folder else {},
                    found=pinned)


def target_description(config: Config, pinned_uri: str) -> str:
    """The target as the headline names it: "its own mechanism (model <uri>)" or "(predictions <path>)"."""
    given = f"model {pinned_uri}" if config.audit.model_uri else f"predictions {config.audit.predictions_path}"
    return f"its own mechanism ({given})"


def _utc(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _check_made_after_export(spark: SparkSession, config: Config, made_seconds: float | None, field: str,
                             value: str, made: str) -> None:
    """A model logged (or a predictions table written) before the export was committed cannot have trained on its
    labels: its predictions meet coins it never saw and would certify a valid but meaningless 0. Refused when it
    predates the export's marker by more than :data:`CLOCK_SLACK_SECONDS` (the trainer's clock and the file system's
    may differ); a re-run of the inject stage that reuses the export leaves the marker, and so the check, alone.

    Raises:
        ValueError: naming ``field``, both times and the fix.
    """
    marker = layout.under(layout.output_path(config, layout.INJECT), MARKER)
    if made_seconds is None or not path_exists(spark, marker):
        return
    ((_, _, committed_ms),) = files_for(spark, marker).list_files(marker)
    if made_seconds < committed_ms / 1000 - CLOCK_SLACK_SECONDS:
        raise ValueError(f"{field}: {made} at {_utc(made_seconds)}, before the export it is audited on was written "
                         f"({_utc(committed_ms / 1000)}, {layout.export_path(config)}), got {value!r}: it cannot "
                         "have trained on that export's labels, and its predictions would meet coins it never saw "
                         "(a meaningless 0); train again on the current export")


def _as_signature_type(column: str, kind: str | None) -> Column:
    """An export column as the model's signature declares it: a Criteo categorical declared ``string`` as its token
    in the Criteo day file (8 lowercase hex characters, as a trainer reading ``audit.export_tsv``'s file sees it), an
    integer column declared ``string`` in decimal, one declared ``double``/``float`` as a double (Arrow hands
    pandas a column with nulls as floats, one without as integers: the cast makes every batch alike); nulls stay
    null."""
    value = F.col(column)
    if kind == "string":
        text = F.lpad(F.lower(F.hex(value)), HEX_DIGITS, "0") if column in CAT_COLUMNS else value.cast("string")
        return text.alias(column)
    if kind in ("double", "float"):
        return value.cast(kind).alias(column)
    return value


def _model_predictions(spark: SparkSession, config: Config, pinned_uri: str) -> DataFrame:
    """(row_id, target_prediction) of every exported row, scored by the model on the executors from the export's
    columns without the label (those of the model's signature when it names its inputs, in the types it declares;
    else a native classifier's own feature names): a classifier of a native flavour by its ``predict_proba``
    (:func:`_probability_udf`), any other model by its pyfunc."""
    tracking_uri = resolve_tracking_uri(config.tracking)
    export = spark.read.parquet(layout.export_path(config))
    facts = model_facts(pinned_uri, tracking_uri)
    _check_made_after_export(spark, config, facts.logged_seconds, "audit.model_uri", pinned_uri, "logged")
    native = probability_model(pinned_uri, tracking_uri, facts.flavour)
    declared = facts.inputs
    named = list(declared) if declared is not None else list(native.inputs or ()) if native is not None else None
    if native is not None and not named:
        raise ValueError(f"audit.model_uri: the {native.flavour} classifier names none of its inputs (no signature "
                         f"with column names, no feature names), got {pinned_uri!r}; fit it on a pandas DataFrame of "
                         "the export's columns, or log it with a signature (mlflow.models.infer_signature(X))")
    columns = [column for column in export.columns if column != LABEL] if named is None else named
    source = "signature" if declared is not None else "feature names"
    missing = sorted(set(columns) - set(export.columns))
    if missing:
        raise ValueError(f"audit.model_uri: the model's {source} name inputs the export does not hold "
                         f"({', '.join(missing)}; the export holds {', '.join(export.columns)}), got {pinned_uri!r}; "
                         "train on the columns of <run.output_dir>/inject/export (or of its Criteo day file: "
                         f"{', '.join(TSV_COLUMNS)})")
    if LABEL in columns:
        raise ValueError(f"audit.model_uri: the model's {source} take the label column {LABEL!r} as an input, got "
                         f"{pinned_uri!r}; the audit never hands a model the labels: log it without {LABEL!r}")
    udf = model_udf(spark, pinned_uri, tracking_uri) if native is None else _probability_udf(native)
    logger.info("audit: scoring the exported rows with %s on the executors (%d input columns, %s)", pinned_uri,
                len(columns), f"P(y = 1) of its {native.flavour} predict_proba" if native else "its pyfunc")
    inputs = [_as_signature_type(column, (declared or {}).get(column)) for column in columns]
    return export.select(ROW_ID, udf(F.struct(*inputs)).alias(TARGET_PREDICTION))


def _probability_udf(model: ProbabilityModel) -> Any:
    """A pandas UDF of a struct of input columns: :func:`positive_probability` of each batch, on the executors (the
    loaded model travels in the UDF's closure, which Spark broadcasts when it is large)."""
    def score(rows: pd.DataFrame) -> pd.Series:
        return pd.Series(positive_probability(model, rows), index=rows.index)

    return F.pandas_udf(score, "double")  # type: ignore[call-overload]  # pyspark's stub omits the type-hint form


def _given_predictions(spark: SparkSession, config: Config) -> DataFrame:
    """(row_id, target_prediction) of audit.predictions_path's table."""
    path = config.audit.predictions_path
    written = [modified for _, _, modified in files_for(spark, path).list_files(path)]
    _check_made_after_export(spark, config, max(written) / 1000 if written else None, "audit.predictions_path", path,
                             "written")
    table = spark.read.parquet(path)
    missing = sorted({ROW_ID, PREDICTION} - set(table.columns))
    if missing:
        raise ValueError(f"audit.predictions_path: the table has no column {', '.join(missing)} (it holds "
                         f"{', '.join(table.columns)}), got {path!r}; write one row per exported row: {ROW_ID} "
                         f"(long), {PREDICTION} (P(y = 1))")
    return table.select(F.col(ROW_ID).cast("long"), F.col(PREDICTION).cast("double").alias(TARGET_PREDICTION))


def check_predictions(canaries: DataFrame, sealed_rows: int, field: str, value: str,
                      against: str = PROXY_PREDICTION) -> None:
    """One aggregation over the joined canaries' ``target_prediction`` (beside the baseline column ``against``), judged
    by :func:`lia_spark.kernels.injected.prediction_problem`.

    Raises:
        ValueError: naming ``field``, how many canaries fail and how.
    """
    prediction = F.col(TARGET_PREDICTION)
    number = prediction.isNotNull() & ~F.isnan(prediction)
    found = aggregate_row(canaries,
        F.count(F.lit(1)).alias("rows"),
        F.sum((~number).cast("long")).alias("missing"), F.min(prediction).alias("low"),
        F.max(prediction).alias("high"),
        F.sum((number & (prediction > 0) & (prediction < 1)).cast("long")).alias("soft"),
        F.corr(prediction, F.col(against)).alias("agreement"))
    problem = prediction_problem(PredictionSummary(
        rows=int(found["rows"]), expected=sealed_rows, missing=int(found["missing"] or 0),
        low=float(found["low"] if found["low"] is not None else 0.0),
        high=float(found["high"] if found["high"] is not None else 0.0), soft=int(found["soft"] or 0),
        agreement=found["agreement"]))
    if problem is not None:
        raise ValueError(f"{field}: {problem}, got {value!r}; {PROBABILITY_FIX}")


def own_model_canaries(spark: SparkSession, config: Config, pinned_uri: str) -> DataFrame:
    """The sealed table with the model's ``target_prediction`` of each canary, checked (:func:`check_predictions`)
    and persisted for the audit's passes (the model scores each row once): the caller unpersists it. Under
    audit.design=observational (a model trained on the exported rows' true labels) without y1 and b, so the game's
    label is y0."""
    sealed = spark.read.parquet(layout.sealed_path(config))
    if not config.audit.audit_design.injects_labels:  # a model trained on the true labels y0: no coins play
        sealed = sealed.select(ROW_ID, LABEL, PROXY_PREDICTION)
    if config.audit.model_uri:
        field, value, predictions = "audit.model_uri", pinned_uri, _model_predictions(spark, config, pinned_uri)
    else:
        field, value = "audit.predictions_path", config.audit.predictions_path
        predictions = _given_predictions(spark, config)
    canaries = sealed.join(predictions, ROW_ID, "left").persist(StorageLevel.MEMORY_AND_DISK)
    describe_jobs(spark, f"audit: check the predictions of {value}")
    try:
        check_predictions(canaries, sealed.count(), field, value)
    except Exception:
        canaries.unpersist()
        raise
    return canaries
