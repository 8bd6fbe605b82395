"""Inject stage: the injected design's training set for a trainer outside this project (docs/math.md §5.9).

The proxy M' is fitted on models.proxy_day (true labels, as the train stage fits it) and scores the target day's
rows (models.target_day: on the in-memory path its seeded sample of models.sample_rows_per_day, as the train stage's
target; on the distributed path the whole day) on the executors. Every one of those rows is a canary: it gets a
counterfactual label y1 and a fair coin b keyed on (K, purpose, row id), K the audit key
(:mod:`lia_spark.engine.models.audit_key`: drawn at random the first time and kept in the key file, audit.key_path or
``<run.output_dir>/audit_key``, never in these outputs), exactly the train stage's draws
(:func:`lia_spark.kernels.injected.inject`), and its label becomes y^b. Outputs under ``<run.output_dir>/inject``,
committed atomically:

- ``export`` (Parquet): the rows with the data table's columns, the label replaced by y^b. Every row is a canary
  and the table keeps the data's columns, so no column, order or file tells the trainer which labels changed.
- ``sealed`` (Parquet: row_id, label = y0, counterfactual_label = y1, hidden_bit = b, proxy_prediction): what the
  audit of the model trained on the export plays its game against (audit.model_uri, audit.predictions_path).
  It must never reach the trainer; nor must the key file, from which the coins can be recomputed (run.seed may
  reach it: only the day's sample and the model split are drawn from it, which the export shows anyway).
- ``criteo/day_N[.gz]`` (audit.export_tsv, audit.export_gzip): the export as a Criteo day file, the same rows and
  labels, one line per row in row_id order (line k is the export's row with the k-th smallest row_id).
- ``manifest.json``: the fingerprint (a digest covering the key's identifier, never the key), the row counts and the
  informative share (nothing derived from the coins).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lia_spark.engine.attacker_prior.sources import proxy_scores
from lia_spark.engine.models.audit_key import key_values, stage_key
from lia_spark.engine.models.classes import check_two_classes
from lia_spark.engine.models.execution import distributed_proxy, injected_frame
from lia_spark.engine.models.feature_frames import check_days_present, read_day
from lia_spark.engine.models.preparation import fit_proxy, in_memory_rows, sampled_day
from lia_spark.engine.runtime.outputs import delete_path, reported_path, write_text
from lia_spark.engine.runtime.stage import Input, Resolved, Stage, StageResult, StageRun
from lia_spark.engine.spark.filesystem import files_for, text_parts
from lia_spark.engine.spark.session import aggregate_row, describe_jobs
from lia_spark.kernels.criteo import FEATURE_COLUMNS, format_lines
from lia_spark.names import COUNTERFACTUAL_LABEL, HIDDEN_BIT, IN_MEMORY, LABEL, PROXY_PREDICTION, ROW_ID, TRUE_LABEL
from lia_spark.run import layout
from lia_spark.run.config import Config
from lia_spark.run.json_output import strict_json

logger = logging.getLogger(__name__)

CRITEO_LINE = "value"  # the one column of the text parts Spark writes


@dataclasses.dataclass
class InjectResult(StageResult):
    """What the inject stage wrote: where the export and the sealed table are, the rows exported, the informative
    canaries (y1 != y0, the m of the audit), the proxy's test metrics on its own day and the timings."""

    output_dir: str
    export_path: str
    tsv_path: str
    sealed_path: str
    target_day: int
    rows: int
    informative_canaries: int
    counterfactual: str
    proxy_metrics: dict[str, float]
    seconds: dict[str, float]
    skipped: bool = False

    @property
    def informative_share(self) -> float:
        """The share of exported rows whose counterfactual differs from the true label."""
        return self.informative_canaries / self.rows if self.rows else 0.0

    def console_summary(self) -> str:
        """Where the export is and what to do next."""
        tsv = f" and {self.tsv_path}" if self.tsv_path else ""
        return (f"inject: {self.rows} rows of day {self.target_day} exported to {self.export_path}{tsv} "
                f"({self.informative_canaries} informative canaries); train your model on it, then "
                "`lia-spark audit audit.model_uri=<its MLflow URI>` (or audit.predictions_path=<row_id, prediction>)")


def _target_rows(spark: SparkSession, config: Config) -> tuple[DataFrame, int]:
    """(the rows of models.target_day the train stage's target reads, the day's rows): the in-memory path's seeded
    sample of models.sample_rows_per_day, the distributed path's whole day."""
    if config.models.execution == IN_MEMORY:
        return sampled_day(spark, config, config.models.target_day)
    rows = read_day(spark, config.parquet_path, config.models.target_day)
    return rows, rows.count()


def _proxy(run: StageRun) -> tuple[Any, Any, dict[str, float], dict[str, float]]:
    """The proxy of models.execution, as the train stage fits it (in memory on the day's sample, or xgboost.spark on
    the whole day): (model, encoding, its test metrics on its own day, seconds)."""
    spark, config = run.spark, run.config
    if config.models.execution == IN_MEMORY:
        return fit_proxy(spark, config, in_memory_rows(spark, config, config.models.proxy_day))
    proxy_day = read_day(spark, config.parquet_path, config.models.proxy_day)
    model, spec, seconds = distributed_proxy(spark, config, proxy_day)
    return model, spec, {}, {"fit_proxy": seconds}


def _criteo_lines(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Exported rows as Criteo lines (:func:`lia_spark.kernels.criteo.format_lines`; Arrow keeps every int64)."""
    for batch in batches:
        values = {name: batch.column(name).fill_null(0).to_numpy() for name in FEATURE_COLUMNS}
        missing = {name: batch.column(name).is_null().to_numpy(zero_copy_only=False) for name in FEATURE_COLUMNS}
        lines = format_lines(batch.column(LABEL).to_numpy(), values, missing)
        yield pa.RecordBatch.from_arrays([lines], names=[CRITEO_LINE])


def _write_criteo_day(run: StageRun, export: DataFrame) -> str:
    """``export`` as one Criteo day file ``criteo/day_<models.target_day>[.gz]`` in ``run.staging``, its lines in
    row_id order: Spark writes ordered text parts, concatenated in partition order. Returns the file's name."""
    spark, config = run.spark, run.config
    name = f"day_{config.models.target_day}{'.gz' if config.audit.export_gzip else ''}"
    parts = run.under(layout.EXPORT_TSV, "_parts")
    describe_jobs(spark, f"inject: write {layout.EXPORT_TSV}/{name}")
    lines = export.orderBy(ROW_ID).mapInArrow(_criteo_lines, f"{CRITEO_LINE} string")
    lines.write.option("compression", "gzip" if config.audit.export_gzip else "none").text(parts)
    files = files_for(spark, parts)
    files.concatenate([path for _, path in text_parts(files, parts)], run.under(layout.EXPORT_TSV, name))
    delete_path(spark, parts)
    return name


def _inject(run: StageRun) -> InjectResult:
    """Fit the proxy, draw y1 and b on every row of the target day's sample, write the export, the sealed table and
    the manifest into ``run.staging``."""
    spark, config, key = run.spark, run.config, run.resolved.found
    m = config.models
    proxy, spec, proxy_metrics, seconds = _proxy(run)
    rows, total = _target_rows(spark, config)
    started = time.monotonic()
    with proxy_scores(spark, config, proxy, spec, rows) as scores:
        drawn = injected_frame(rows.join(scores, ROW_ID), config, key,
                               canaries=lambda part: np.ones(len(part), dtype=bool))
        drawn = drawn.persist(StorageLevel.MEMORY_AND_DISK)  # every row a canary; each write reads it
        try:
            describe_jobs(spark, "inject: write the export")
            drawn.select(*rows.columns).write.parquet(run.under(layout.EXPORT))
            tsv_name = _write_criteo_day(run, drawn.select(*rows.columns)) if config.audit.export_tsv else ""
            describe_jobs(spark, "inject: write the sealed table")
            drawn.select(ROW_ID, F.col(TRUE_LABEL).alias(LABEL), COUNTERFACTUAL_LABEL, HIDDEN_BIT,
                         PROXY_PREDICTION).write.parquet(run.under(layout.SEALED))
        finally:
            drawn.unpersist()
    counted = aggregate_row(spark.read.parquet(run.under(layout.SEALED)), F.count(F.lit(1)).alias("rows"),
                            F.sum((F.col(COUNTERFACTUAL_LABEL) != F.col(LABEL)).cast("long")).alias("informative"))
    seconds["inject"] = time.monotonic() - started
    seconds["total"] = time.monotonic() - run.started
    out = reported_path(layout.output_path(config, layout.INJECT))
    result = InjectResult(output_dir=out, export_path=layout.under(out, layout.EXPORT),
                          tsv_path=layout.under(out, layout.EXPORT_TSV, tsv_name) if tsv_name else "",
                          sealed_path=layout.under(out, layout.SEALED), target_day=m.target_day,
                          rows=int(counted["rows"]), informative_canaries=int(counted["informative"] or 0),
                          counterfactual=config.audit.counterfactual, proxy_metrics=proxy_metrics, seconds=seconds)
    if run.fingerprint is None:
        raise ValueError("inject: the stage is reusable, so its run has a fingerprint, got none")
    manifest = {"fingerprint": run.fingerprint.value, "rows": result.rows, "day_rows": total,
                "informative_canaries": result.informative_canaries,
                "informative_share": result.informative_share, "target_day": m.target_day,
                "counterfactual": result.counterfactual, "export": result.export_path,
                "export_tsv": result.tsv_path}
    write_text(spark, run.under(layout.INJECT_MANIFEST), strict_json(manifest) + "\n")
    logger.info("inject: %d rows of day %d exported, %d informative canaries (%.1f%%), in %.1f s", result.rows,
                m.target_day, result.informative_canaries, 100 * result.informative_share, seconds["total"])
    return result


def _days_present(spark: SparkSession, config: Config) -> None:
    check_days_present(spark, config, ("models.proxy_day", "models.target_day"))
    check_two_classes(spark, config)  # the proxy learns from its day, the export's trainer from the target day


def _audit_key(spark: SparkSession, config: Config) -> Resolved:
    """The audit key the coins are drawn from (:func:`lia_spark.engine.models.audit_key.stage_key`), its identifier in
    the fingerprint: another key recomputes the export."""
    key = stage_key(spark, config)
    return Resolved(key_values(key), found=key)


INJECT = Stage(
    name="inject", step="", result=InjectResult, compute=_inject, check=_days_present, resolved=_audit_key,
    fields=("run.seed", "models.library", "models.execution", "models.sample_rows_per_day", "models.proxy_day",
            "models.target_day", "models.n_estimators", "models.max_depth", "models.learning_rate",
            "models.early_stopping_rounds", "models.split", "models.hash_buckets", "models.categorical_encoding",
            "models.min_category_count", "models.num_workers", "audit.counterfactual", "audit.flip_share",
            "audit.export_tsv", "audit.export_gzip"),
    outputs=lambda config: (layout.output_path(config, layout.INJECT),),
    inputs=lambda config: (Input("data", lambda c: c.parquet_path, "data.parquet_path", lambda c: "data"),))
