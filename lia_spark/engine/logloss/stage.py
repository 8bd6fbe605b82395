"""``lia-spark logloss-attack``: label inference from log-loss scores against a Spark oracle (docs/math.md §8).

The oracle holds one day of the data table (``<data>/day=d``: row_id, label) and answers a submitted
prediction vector with its log-loss, a Spark aggregate ``-(1/N) sum(label ? ln u : ln(1 - u))`` (exact float64;
the service's rounding and noise are applied to that one number, :class:`lia_spark.kernels.logloss.OracleSettings`).
A row's position is the low 40 bits of its row_id (its line in the day's source file); the stage requires the
positions of the day to be exactly 0..N-1, the alignment of predictions to rows that the attacks assume.

The submitted vector of a block query is a Spark expression of the position (1/2 outside the block, the
block's b predictions from an array literal inside), so no query ships anything proportional to the rows.
The attacks decode each block on the driver; only the labels of the ``logloss.queries`` attacked blocks per
(attack, oracle setting) reach the driver (to measure accuracy), plus, for the single-query attack in exact
arithmetic, the oracle's exact answer on the first ``logloss.single_query_rows`` rows (one integer of about
17 bits per row, reduced per partition). "Queries for N labels" is the plan's ceil(N / b), not a replay of
N / b Spark jobs.

Outputs under ``<run.output_dir>/logloss`` (committed atomically, fingerprinted): ``results.csv`` (one row per
attack x oracle setting), ``defender.csv`` (which settings stop each attack), ``summary.json`` and
``plots/accuracy.png``, ``plots/labels_per_query.png``. MLflow: a parent run and a ``logloss`` stage run with
the aggregate metrics and these files (never a per-row label).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import tempfile
import time
from fractions import Fraction
from typing import Any, Iterator

import numpy as np
import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lia_spark.engine.runtime.outputs import check_writable, copy_from_local, reported_path
from lia_spark.engine.runtime.stage import FilesResult, Input, Stage, StageRun
from lia_spark.engine.spark.session import aggregate_row, describe_jobs
from lia_spark.kernels import logloss
from lia_spark.kernels.criteo import POSITION_BITS
from lia_spark.names import DAY, LABEL, ROW_ID
from lia_spark.present import logloss_plots
from lia_spark.records.logloss_summary import LoglossSummary, OracleResult, SingleQuery
from lia_spark.run import layout
from lia_spark.run.config import Config
from lia_spark.run.json_output import strict_json
from lia_spark.run.sections import LoglossConfig

logger = logging.getLogger(__name__)

POSITION = "position"
FILES = ("results.csv", "defender.csv", "summary.json", "plots/accuracy.png", "plots/labels_per_query.png")


def oracle_table(spark: SparkSession, config: Config) -> DataFrame:
    """(position, label) of ``logloss.day`` from the data table, persisted (every query scans it).

    Raises:
        ValueError: naming logloss.day when the day has no rows or its positions are not 0..N-1.
    """
    day = config.logloss.day
    rows = (spark.read.parquet(config.parquet_path).where(F.col(DAY) == day)
            .select((F.col(ROW_ID).bitwiseAND((1 << POSITION_BITS) - 1)).alias(POSITION), F.col(LABEL).cast("int")))
    rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
    count, low, high = aggregate_row(rows, F.count("*"), F.min(POSITION), F.max(POSITION))
    if count == 0 or low != 0 or high != count - 1:
        rows.unpersist()
        raise ValueError(f"logloss.day: the oracle needs positions 0..N-1 of one day, got {count} rows with "
                         f"positions {low}..{high} for logloss.day={day}")
    return rows


def spark_log_loss(rows: DataFrame, predictions: Column) -> float:
    """-(1/N) sum_i [y_i ln u_i + (1 - y_i) ln(1 - u_i)] of ``predictions`` (a Column of the rows) in float64."""
    total, count = aggregate_row(rows, F.sum(F.when(F.col(LABEL) == 1, F.log(predictions))
                                             .otherwise(F.log1p(-predictions))), F.count("*"))
    return -float(total) / count


def block_predictions(start: int, block: np.ndarray) -> Column:
    """The submitted vector of a block query: block[position - start] inside the block, 1/2 elsewhere."""
    inside = (F.col(POSITION) >= start) & (F.col(POSITION) < start + block.size)
    values = F.array(*[F.lit(float(u)) for u in block])
    return F.when(inside, F.element_at(values, (F.col(POSITION) - start + 1).cast("int"))).otherwise(F.lit(0.5))


def exact_likelihood(rows: DataFrame, *, count: int) -> tuple[Fraction, np.ndarray]:
    """The exact oracle of Theorem 1 on positions < count with odds v = the first ``count`` primes:
    exp(-N LLOSS) = prod_{y = 1} p / prod (1 + p); the label-dependent numerator is formed per partition
    (mapInPandas) and multiplied on the driver, the denominator depends on the submitted odds only.

    Returns:
        (the exact likelihood, the odds).
    """
    odds = logloss.primes(count)

    def products(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        positives: list[int] = []
        for frame in batches:
            chosen = frame[frame[LABEL] == 1]
            positives.extend(int(p) for p in odds[chosen[POSITION].to_numpy(dtype=np.int64)])
        product = logloss.product(positives)
        yield pd.DataFrame({"product": [product.to_bytes((product.bit_length() + 7) // 8 or 1, "big")]})

    parts = rows.where(F.col(POSITION) < count).mapInPandas(products, "product binary").collect()
    numerator = logloss.product([int.from_bytes(bytes(part["product"]), "big") for part in parts])
    return Fraction(numerator, logloss.product([int(p) + 1 for p in odds])), odds


def oracle_settings(section: LoglossConfig) -> list[logloss.OracleSettings]:
    """The grid: the exact float64 oracle, then each rounding, then each noise x scale (one factor at a time)."""
    grid = [logloss.OracleSettings()]
    grid += [logloss.OracleSettings(decimals=d) for d in section.decimals]
    grid += [logloss.OracleSettings(noise=n, noise_scale=s) for n in section.noises for s in section.noise_scales]
    return grid


def _true_labels(rows: DataFrame, count: int) -> np.ndarray:
    collected: pd.DataFrame = rows.where(F.col(POSITION) < count).toPandas()
    found = collected.sort_values(POSITION)
    return found[LABEL].to_numpy(dtype=np.int64)


def attack_setting(rows: DataFrame, *, attack: str, oracle: logloss.OracleSettings, n_rows: int,
                   section: LoglossConfig, rng: np.random.Generator) -> dict[str, Any]:
    """Plan ``attack`` for the oracle's error bound, run its first ``section.queries`` blocks against the Spark
    oracle and measure the accuracy on them; status exact | partial | stopped (no decodable block)."""
    max_loss = logloss.LN2 + 2 * logloss.MAX_WEIGHT / n_rows
    tolerance = (oracle.error_bound(failure_probability=section.failure_probability)
                 + logloss.float64_tolerance(n_rows=n_rows, max_loss=max_loss))
    plan = logloss.plan(attack, n_rows=n_rows, tolerance=tolerance)
    row = {"attack": attack, "oracle": oracle.name, "decimals": oracle.decimals, "noise": oracle.noise,
           "noise_scale": oracle.noise_scale, "tolerance": tolerance, "labels_per_query": plan.block_size,
           "queries_for_all": plan.queries, "labels_checked": 0, "accuracy": math.nan,
           "expected_accuracy": math.nan, "seconds_per_query": math.nan, "status": "stopped"}
    if plan.block_size == 0:
        return row
    started = time.monotonic()
    recovered = logloss.run_block_attack(
        plan, lambda start, block: oracle.release(spark_log_loss(rows, block_predictions(start, block)), rng),
        blocks=section.queries)
    truth = _true_labels(rows, recovered.size)
    row.update(labels_checked=int(truth.size), accuracy=float((recovered == truth).mean()),
               seconds_per_query=(time.monotonic() - started) / -(-truth.size // plan.block_size))
    row["status"] = "exact" if row["accuracy"] == 1.0 else "partial"
    if attack == "binary" and (oracle.noise == "none") != (oracle.decimals is None):
        row["expected_accuracy"] = logloss.binary_attack_expected_accuracy(truth, plan, oracle)
    return row


def defender_table(results: pd.DataFrame) -> pd.DataFrame:
    """Rows = oracle settings, columns = attacks, cells = status (stopped: no block decodable at the oracle's
    error bound; partial: some checked labels wrong; exact: every checked label recovered)."""
    table = results.pivot(index="oracle", columns="attack", values="status")
    return table.reindex(results["oracle"].drop_duplicates()).reset_index()


@dataclasses.dataclass(frozen=True)
class LoglossResult(FilesResult):
    """Outcome of the log-loss attack stage: sizes, the summary and the output files."""

    output_path: str
    n_rows: int
    settings: int
    summary: LoglossSummary
    files: tuple[str, ...]
    seconds: float
    skipped: bool = False
    mlflow_run_id: str = ""

    def metrics(self) -> dict[str, float]:
        """Rows, the single-query result and, per attack, labels per query and queries for N at the exact oracle."""
        metrics = {"logloss_rows": float(self.n_rows), "logloss_seconds": self.seconds,
                   "single_query_rows": float(self.summary.single_query.rows),
                   "single_query_accuracy": self.summary.single_query.accuracy}
        for attack, result in self.summary.exact_oracle.items():
            metrics.update({f"{attack}_{key}": float(value) for key, value in dataclasses.asdict(result).items()})
        return metrics

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "summary": self.summary.to_dict()}

    @classmethod
    def decoded(cls, values: dict[str, Any]) -> dict[str, Any]:
        return {**super().decoded(values), "summary": LoglossSummary.from_dict(values["summary"])}

    def console_summary(self) -> str:
        exact = ", ".join(f"{a}: {v.labels_per_query:.0f} labels/query, {v.queries_for_all:.0f} queries"
                          for a, v in self.summary.exact_oracle.items())
        return f"logloss-attack on {self.n_rows} labels (exact float64 oracle): {exact}"


def _attack_and_write(run: StageRun) -> LoglossResult:
    """Run the attacks of docs/math.md §8 against the Spark oracle of ``logloss.day``; write ``<out>/logloss``.

    Raises:
        ValueError: naming logloss.day when its rows are missing or not positioned 0..N-1.
    """
    spark, config, started = run.spark, run.config, run.started
    section = config.logloss
    describe_jobs(spark, f"logloss: oracle table of day {section.day}")
    rows = oracle_table(spark, config)
    try:
        n_rows = rows.count()
        rng = np.random.default_rng([config.run.seed, section.day])
        grid = oracle_settings(section)
        records = []
        for oracle in grid:
            for attack in section.attacks:
                describe_jobs(spark, f"logloss: {attack} attack, oracle {oracle.name}")
                records.append(attack_setting(rows, attack=attack, oracle=oracle, n_rows=n_rows, section=section,
                                              rng=rng))
                logger.info("logloss: %s vs %s: %s", attack, oracle.name, records[-1]["status"])
        single_rows = min(section.single_query_rows, n_rows)
        describe_jobs(spark, "logloss: single query in exact arithmetic")
        likelihood, odds = exact_likelihood(rows, count=single_rows)
        single = logloss.single_query_decode(likelihood, odds)
        single_accuracy = float((single == _true_labels(rows, single_rows)).mean())
    finally:
        rows.unpersist()
    results = pd.DataFrame.from_records(records)
    exact = results[results["oracle"] == "exact"].set_index("attack")
    summary = LoglossSummary(
        day=section.day, rows=n_rows, failure_probability=section.failure_probability,
        queries_per_setting=section.queries,
        single_query=SingleQuery(rows=single_rows, accuracy=single_accuracy,
                                 likelihood_bits=likelihood.numerator.bit_length()
                                 + likelihood.denominator.bit_length()),
        exact_oracle={attack: OracleResult(labels_per_query=float(exact.loc[attack, "labels_per_query"]),
                                           queries_for_all=float(exact.loc[attack, "queries_for_all"]),
                                           accuracy=float(exact.loc[attack, "accuracy"])) for attack in exact.index},
        stopped_by={attack: tuple(results[(results["attack"] == attack) & (results["status"] == "stopped")]["oracle"])
                    for attack in section.attacks},
    )
    output_path = reported_path(logloss_path(config))
    with tempfile.TemporaryDirectory(prefix="lia-logloss-") as local:
        os.makedirs(os.path.join(local, "plots"))
        results.to_csv(os.path.join(local, FILES[0]), index=False)
        defender_table(results).to_csv(os.path.join(local, FILES[1]), index=False)
        with open(os.path.join(local, FILES[2]), "w", encoding="utf-8") as handle:
            handle.write(strict_json(summary.to_dict()))
        logloss_plots.accuracy_plot(results, path=os.path.join(local, FILES[3]))
        logloss_plots.labels_per_query_plot(results, n_rows=n_rows, path=os.path.join(local, FILES[4]))
        for name in FILES:
            copy_from_local(spark, os.path.join(local, name), run.under(name))
    return LoglossResult(output_path=output_path, n_rows=n_rows, settings=len(results), summary=summary,
                         files=tuple(os.path.join(output_path, name) for name in FILES),
                         seconds=time.monotonic() - started)


def logloss_path(config: Config) -> str:
    """``<out>/logloss``."""
    return layout.output_path(config, layout.LOGLOSS)


LOGLOSS = Stage(
    name="logloss", step="", result=LoglossResult, compute=_attack_and_write, fields=("run.seed", "logloss.*"),
    outputs=lambda config: (logloss_path(config),),
    check=lambda spark, config: check_writable(spark, config.run.output_dir),
    inputs=lambda config: (Input("data", lambda c: c.parquet_path, "data.parquet_path", lambda c: "data"),))
