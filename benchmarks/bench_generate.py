"""Benchmark the synthetic twin's generation: twin rows to Parquet vs Spark writing random columns.

Floor: ``spark.range(n)`` plus 40 ``rand``-derived long columns written to Parquet in the same session.
Also times the Criteo TSV writer (text parts plus per-day concatenation) and the pure numpy generator.

    .venv/bin/python benchmarks/bench_generate.py [--rows 2000000] [--master local[2]]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import write_section  # noqa: E402
from lia_spark.engine.generate.stage import (concatenate_parts_by_day, generated_lines, generated_rows,  # noqa: E402
                                             partition_count)
from lia_spark.engine.spark.session import get_spark  # noqa: E402
from lia_spark.kernels import synthetic  # noqa: E402
from lia_spark.run.config import config_from_dict  # noqa: E402
from lia_spark.run.sections import SparkConfig  # noqa: E402

DAYS = 2


def _timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main(rows: int, master: str) -> None:
    spark = get_spark(SparkConfig(master=master, app_name="bench-generate", driver_memory="4g",
                                  extra={"spark.ui.enabled": "false"}))
    cores = spark.sparkContext.defaultParallelism
    folder = tempfile.mkdtemp(prefix="bench-generate-")
    config = config_from_dict({"synthetic": {"rows_per_day": rows // DAYS, "days": DAYS}})
    partitions = partition_count(config, cores)
    params = synthetic.calibrate_twin(seed=config.run.seed, click_rate=config.synthetic.click_rate, days=DAYS)
    kernel_rows = 200_000
    kernel = _timed(lambda: synthetic.generate_rows(params, day=0, positions=np.arange(kernel_rows)))

    def floor() -> None:
        columns = [F.col("id").alias("row_id")] + [
            (F.rand(seed) * 4e9).cast("long").alias(f"c{seed}") for seed in range(40)]
        spark.range(0, rows, 1, numPartitions=partitions).select(*columns).write.parquet(f"{folder}/floor")

    def twin() -> None:
        generated_rows(spark, params, rows_per_day=rows // DAYS, days=DAYS, partitions=partitions) \
            .write.partitionBy("day").parquet(f"{folder}/twin")

    def tsv() -> None:
        generated_lines(spark, params, rows_per_day=rows // DAYS, days=DAYS, partitions=partitions) \
            .write.text(f"{folder}/parts")
        concatenate_parts_by_day(spark, f"{folder}/parts", f"{folder}/criteo", days=DAYS, partitions=partitions,
                                 suffix="")

    twin()  # warm-up: Python workers, JIT of the Parquet writer
    shutil.rmtree(f"{folder}/twin")
    seconds = {"floor": _timed(floor), "twin": _timed(twin), "tsv": _timed(tsv)}
    tsv_bytes = sum(os.path.getsize(f"{folder}/criteo/day_{day}") for day in range(DAYS))
    shutil.rmtree(folder, ignore_errors=True)
    rate = {name: rows / value for name, value in seconds.items()}
    lines = [
        f"Synthetic twin, {rows:,} rows ({DAYS} days, {partitions} partitions, local Spark with {cores} cores; "
        "see the load average below).",
        "",
        "| step | seconds | rows/s | rows/s per core | vs floor |",
        "|---|---|---|---|---|",
        f"| floor: `spark.range` + 40 `rand` long columns -> Parquet | {seconds['floor']:.1f} | {rate['floor']:,.0f} "
        f"| {rate['floor'] / cores:,.0f} | 1.00 |",
        f"| twin rows (`mapInPandas` generator) -> Parquet | {seconds['twin']:.1f} | {rate['twin']:,.0f} "
        f"| {rate['twin'] / cores:,.0f} | {rate['twin'] / rate['floor']:.2f} |",
        f"| twin Criteo TSV (text parts + per-day concatenation, {tsv_bytes / rows:.0f} bytes/row) "
        f"| {seconds['tsv']:.1f} | {rate['tsv']:,.0f} | {rate['tsv'] / cores:,.0f} "
        f"| {rate['tsv'] / rate['floor']:.2f} |",
        "",
        f"Pure numpy generator (`synthetic.generate_rows`, one thread): {kernel_rows / kernel:,.0f} rows/s. "
        "Target: twin -> Parquet >= 0.50 of the floor.",
    ]
    write_section("generate", "## Synthetic twin generation\n\n" + "\n".join(lines))
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--master", default="local[2]")
    arguments = parser.parse_args()
    main(arguments.rows, arguments.master)
