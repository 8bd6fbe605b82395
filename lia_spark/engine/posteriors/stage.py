"""Stage ``posteriors``: release the days of mechanisms.days, as one selection, through the mechanisms of
docs/math.md §2, posteriors per docs/math.md §3.

Data movement only; the math is in :mod:`lia_spark.kernels.posterior_grid` (with :mod:`lia_spark.kernels.mechanisms`,
:mod:`lia_spark.kernels.posteriors` and :mod:`lia_spark.kernels.advantage`). The whole (mechanism x epsilon x bag
size) grid comes from one read of the input and one pass over the bagging units:

- :mod:`~lia_spark.engine.posteriors.reading`: the days' data rows (row_id, label) and prior rows
  (row_id, prior; :mod:`~lia_spark.engine.posteriors.prior` says which table and column), read by pyarrow
  in Python tasks for local Parquet inputs, by Spark for any other.
- :mod:`~lia_spark.engine.posteriors.units`: rows grouped by bagging unit (units, and so bags, are drawn over all
  released rows, whatever their day), each unit brought whole to one task: through a folder when the input and
  the output folder are local (the reading tasks write files by unit, the unit tasks read them), else packed into
  Arrow blobs and shuffled by Spark.
- :mod:`~lia_spark.engine.posteriors.writing`: one pass per unit runs every setting on chunks of whole bags and
  writes the per-row results (the workers themselves for a local output folder, Spark's writer for a remote
  one), returning only a digest per setting and histogram bin of |I|.
- :mod:`~lia_spark.engine.posteriors.summary`: summaries from the digest, exact percentiles from a narrow
  second pass over single bins; the driver draws the plots from a sample meanwhile.

Noise is keyed on (setting seed, bag id or row id); nothing depends on partitions, executors or retries.
Labels other than 0/1 and priors outside [0, 1] fail the job naming the row; a row id repeated on one side
fails naming the id; data rows without a prior are counted (``rows_without_prior``) and left out.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging
import math
import os
import shutil
import tempfile
import time
from typing import Any, Callable, TypedDict

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lia_spark.engine.attacker_prior.sources import prior_source, resolve_prior
from lia_spark.engine.models.feature_frames import check_days_present, released_day_field, released_days
from lia_spark.engine.posteriors.prior import check_prior_source
from lia_spark.engine.posteriors.summary import bag_counts, plot_sample, summarize_digest
from lia_spark.engine.posteriors.units import PosteriorInput, posterior_input, spill_units
from lia_spark.engine.posteriors.writing import spark_write_posteriors, write_posteriors, write_spilled_posteriors
from lia_spark.engine.runtime.outputs import copy_from_local, delete_path, local_folder, reported_path
from lia_spark.engine.runtime.parquet_reads import verified_frame
from lia_spark.engine.runtime.stage import Input, Resolved, Stage, StageResult, StageRun
from lia_spark.engine.spark.capabilities import inheriting_thread_target
from lia_spark.engine.spark.session import describe_jobs
from lia_spark.kernels.posterior_grid import Setting, settings_grid
from lia_spark.records.posteriors_summary import BagCount, SettingSummary
from lia_spark.run import layout
from lia_spark.run.config import Config

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PosteriorsResult(StageResult):
    """Outcome of the posteriors stage: where outputs went, the released days, the per-setting summary and bag
    counts."""

    output_path: str
    input_rows: int
    settings: int
    rows_written: bool
    summary: tuple[SettingSummary, ...]
    bags: dict[str, BagCount]
    plots: tuple[str, ...]
    seconds: float
    bagging_units: int = 1
    rows_without_prior: int = 0
    days: tuple[int, ...] = ()
    skipped: bool = False

    @property
    def summary_csv(self) -> str:
        return os.path.join(self.output_path, layout.SUMMARY_CSV)

    def to_dict(self) -> dict[str, Any]:
        payload = dataclasses.asdict(self)
        payload["summary"] = [row.to_dict() for row in self.summary]
        payload["bags"] = {k: count.to_dict() for k, count in self.bags.items()}
        payload["plots"] = list(self.plots)
        return payload

    @classmethod
    def decoded(cls, values: dict[str, Any]) -> dict[str, Any]:
        return {**values, "summary": tuple(SettingSummary.from_dict(row) for row in values["summary"]),
                "bags": {k: BagCount.from_dict(count) for k, count in values["bags"].items()},
                "plots": tuple(values["plots"]),
                "days": tuple(values.get("days", ()))}  # () = written before days were recorded

    def metrics(self) -> dict[str, float]:
        """Flat finite metrics: ``<setting key>.<statistic>`` per setting (an infinite |I| percentile is left out: the
        setting's ``share_infinite`` tells how many rows are unbounded) plus input size and throughput."""
        metrics = {"posteriors_input_rows": float(self.input_rows), "posteriors_seconds": self.seconds,
                   "posteriors_rows_without_prior": float(self.rows_without_prior)}
        for row in self.summary:
            metrics.update({f"{row.key}.{name}": value for name, value in row.statistics().items()})
        return metrics

    def artifacts(self) -> list[str]:
        """The summary CSV and the plot PNGs (URIs when the output folder is remote: see
        :func:`lia_spark.engine.runtime.outputs.local_copies`)."""
        return [self.summary_csv, *self.plots]

    def setting_rows(self) -> list[dict[str, Any]]:
        """The summary's rows (one nested MLflow run each)."""
        return [row.to_dict() for row in self.summary]


class PassGrid(TypedDict):
    """What the pass over the bagging units computes, as :func:`write_posteriors` and
    :func:`spark_write_posteriors` take it."""

    settings: list[Setting]
    seed: int
    unit_bits: int
    bags_per_group: int
    max_leakage: bool


def _summary_and_plots(spark: SparkSession, digest: pd.DataFrame, rows: str | DataFrame,
                       sample: Callable[[], pd.DataFrame], *, folder: str, staging: str
                       ) -> tuple[pd.DataFrame, list[str]]:
    """The summary (:func:`summarize_digest` of the digest and ``rows``), written as Parquet to
    ``staging/summary`` (any file system) and as ``summary.csv`` to the local ``folder``, and the plots of
    ``sample()`` in ``folder/plots``, read and drawn in a thread while Spark ranks |I|. Returns the summary
    and the plot files' names relative to ``folder``."""
    from lia_spark.present.plots import plot_posteriors

    def draw() -> list[str]:
        return plot_posteriors(sample(), output_dir=os.path.join(folder, layout.PLOTS))

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as plotter:
        plots = plotter.submit(inheriting_thread_target(spark, draw))  # its Spark jobs keep the job group
        summary = summarize_digest(spark, digest, rows)
        (spark.createDataFrame(summary).coalesce(1)
         .withColumn("epsilon", F.coalesce(F.col("epsilon"), F.lit(math.nan)))  # Arrow turns NaN into null
         .write.parquet(layout.under(staging, layout.SUMMARY)))
        summary.to_csv(os.path.join(folder, layout.SUMMARY_CSV), index=False)
        written = plots.result()
    return summary, [os.path.relpath(path, folder) for path in written]


def _worker_written(spark: SparkSession, source: PosteriorInput, folder: str, *, sample_fraction: float,
                    grid: PassGrid) -> pd.DataFrame:
    """The pass with rows written by the workers into the local ``folder``: local input parts go through a spill
    folder inside it (:func:`spill_units`, removed after the pass), any other input through Spark's shuffle."""
    if not source.parts:
        logger.info("posteriors: bagging units brought to their tasks by Spark's shuffle")
        return write_posteriors(source.blobs, output_dir=folder, sample_fraction=sample_fraction, **grid)
    spill_folder = os.path.join(folder, layout.UNIT_SPILL)
    logger.info("posteriors: bagging units brought to their tasks through %s", spill_folder)
    try:
        describe_jobs(spark, "posteriors: read the input into files by bagging unit")
        spill = spill_units(spark, source.parts, folder=spill_folder, seed=grid["seed"], unit_bits=grid["unit_bits"],
                            expected_rows=source.data_rows + source.prior_rows)
        describe_jobs(spark, "posteriors: bag, release, posteriors per unit; write per-row results")
        digest = write_spilled_posteriors(spark, spill, output_dir=folder, settings=grid["settings"],
                                          bags_per_group=grid["bags_per_group"], sample_fraction=sample_fraction,
                                          max_leakage=grid["max_leakage"])
    except BaseException:
        shutil.rmtree(spill_folder, ignore_errors=True)
        raise
    shutil.rmtree(spill_folder)
    return digest


def _released_days(spark: SparkSession, config: Config) -> Resolved:
    """The released days (:func:`~lia_spark.engine.models.feature_frames.released_days`) enter the fingerprint; the
    prior's table is checked first, schemas only, before the data table's days are read."""
    check_prior_source(spark, config, pending=())
    days = released_days(spark, config)
    return Resolved({"mechanisms.days": days}, found=days)


def _posteriors(run: StageRun) -> PosteriorsResult:
    """Release the days of config.mechanisms.days as one selection through the grid of settings; write rows,
    summaries and plots into ``run.staging`` (``rows`` if mechanisms.write_rows, ``summary`` (Parquet),
    ``summary.csv`` and ``plots/*.png``)."""
    spark, config, started, staging = run.spark, run.config, run.started, run.staging
    output_path = reported_path(layout.output_path(config, layout.POSTERIORS))
    days = run.resolved.found
    section = config.mechanisms
    settings = settings_grid(section)
    prior = resolve_prior(config)
    logger.info("posteriors: days %s, prior %s from %s, %d settings", list(days), prior.column, prior.path,
                len(settings))
    source = posterior_input(spark, config, days)
    data_rows, unit_bits = source.data_rows, source.unit_bits
    logger.info("posteriors: %d data rows, %d bagging units, read by %s", data_rows, 1 << unit_bits,
                source.reader)
    local_staging = local_folder(staging)
    describe_jobs(spark, "posteriors: bag, release, posteriors; write per-row results")
    grid: PassGrid = {"settings": settings, "seed": config.run.seed, "unit_bits": unit_bits,
                      "bags_per_group": section.bags_per_group, "max_leakage": section.max_leakage}
    sample_fraction = min(1.0, section.plot_sample_rows / max(min(data_rows, source.prior_rows), 1))
    if local_staging is not None:  # the Python workers write the rows and the plot sample themselves
        digest = _worker_written(spark, source, local_staging, sample_fraction=sample_fraction, grid=grid)
        logger.info("posteriors: rows written after %.1f s", time.monotonic() - started)
        sample_dir = os.path.join(local_staging, layout.PLOT_SAMPLE)
        summary, plots = _summary_and_plots(spark, digest, os.path.join(local_staging, layout.ROWS),
                                            functools.partial(verified_frame, sample_dir), folder=local_staging,
                                            staging=staging)
        shutil.rmtree(sample_dir)
    else:  # a remote folder: Spark writes the rows and reads them back; CSV and plots are copied
        digest = spark_write_posteriors(source.blobs, output_dir=staging, **grid)
        logger.info("posteriors: rows written after %.1f s", time.monotonic() - started)
        rows = spark.read.parquet(layout.under(staging, layout.ROWS))
        sample = functools.partial(plot_sample, rows, fraction=sample_fraction, seed=config.run.seed)
        with tempfile.TemporaryDirectory(prefix="lia-posteriors-") as local:
            summary, plots = _summary_and_plots(spark, digest, rows, sample, folder=local, staging=staging)
            for name in (layout.SUMMARY_CSV, *plots):
                copy_from_local(spark, os.path.join(local, name), layout.under(staging, name))
    input_rows = int(summary["rows"].max()) if len(summary) else 0
    logger.info("posteriors: %d input rows, %d result rows, summarized after %.1f s", input_rows,
                int(summary["rows"].sum()), time.monotonic() - started)
    bags = bag_counts(digest, settings)
    if not section.write_rows:
        delete_path(spark, layout.under(staging, layout.ROWS))
    if input_rows < data_rows:
        logger.warning("posteriors: %d of %d data rows have no prior in %s and were not released",
                       data_rows - input_rows, data_rows, prior_source(config))
    result = PosteriorsResult(
        output_path=output_path, input_rows=input_rows, settings=len(settings), rows_written=section.write_rows,
        summary=tuple(SettingSummary.from_dict(record) for record in summary.to_dict("records")),
        bagging_units=1 << unit_bits, rows_without_prior=data_rows - input_rows, days=days, bags=bags,
        plots=tuple(os.path.join(output_path, name) for name in plots),
        seconds=time.monotonic() - started)
    logger.info("posteriors: done in %.1f s (%.0f input rows/s)", result.seconds,
                input_rows / max(result.seconds, 1e-9))
    return result


POSTERIORS = Stage(
    name="posteriors", step="posteriors", result=PosteriorsResult, compute=_posteriors, resolved=_released_days,
    check=lambda spark, config: check_days_present(spark, config, released_day_field(config)),
    upfront=check_prior_source,
    fields=("run.seed", "data.source", "mechanisms.*"),
    outputs=lambda config: (layout.output_path(config, layout.POSTERIORS),),
    inputs=lambda config: (Input("data", lambda c: c.parquet_path, "data.parquet_path", lambda c: "data"),
                           Input("priors", prior_source, "mechanisms.prior_path",
                                 lambda c: resolve_prior(c).step or "", required=False)))
