"""Benchmark: Spark posteriors stage end to end vs the in-process kernel on the same cores (SPEC 8).

    .venv/bin/python benchmarks/bench_posteriors_spark.py [--rows 10000000] [--master local[2]]

Input: N rows of day 1 (row_id, day, label) plus a truth table (row_id, day, eta), eta = expit(N(-3.4, 1.2))
hashed from the row id. Settings: LLP and LLP+Geom(eps=1) at k = 8 and 64 (4 settings, one pass).
Figures:
- stage: ``run_posteriors`` wall time (read, bag, posteriors, write rows, summaries, plots);
- compute: bagging + posteriors only, into Spark's ``noop`` sink;
- kernel ceiling: the same per-bag-group function (:func:`privatize.bag_posteriors`) in-process on one core
  over pre-bagged rows, times the number of cores (ideal scaling, so the ratio is conservative).
Rates are result rows (input rows x settings) per second.
"""
from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import tempfile
import time

import numpy as np
import pandas as pd
from scipy.special import expit

from lia_spark import hashing
from lia_spark.config import SparkConfig, config_from_dict
from lia_spark.criteo import make_row_id

SEED = 11
SETTINGS_TEXT = "LLP and LLP+Geom(eps=1) at k = 8, 64"


def _twin_batches(batches, *, seed: int):
    for batch in batches:
        ids = make_row_id(1, batch["id"].to_numpy(np.int64))
        eta = expit(-3.4 + 1.2 * hashing.standard_normal(seed, "bench:eta", ids))
        label = hashing.bernoulli(seed, "bench:label", ids, eta).astype(np.int32)
        yield pd.DataFrame({"row_id": ids, "day": np.int32(1), "label": label, "eta": eta})


def write_input(spark, root: str, rows: int) -> None:
    """Day-1 data and truth tables with ``rows`` rows (skipped when already there)."""
    if os.path.exists(os.path.join(root, "truth", "_SUCCESS")):
        return
    frame = spark.range(rows, numPartitions=max(2, rows // 1_000_000)).mapInPandas(
        functools.partial(_twin_batches, seed=SEED), "row_id long, day int, label int, eta double")
    frame.select("row_id", "day", "label").write.mode("overwrite").partitionBy("day").parquet(os.path.join(root, "data"))
    frame.select("row_id", "day", "eta").write.mode("overwrite").parquet(os.path.join(root, "truth"))


def spark_cpu_seconds(spark) -> float:
    """CPU seconds used so far by this driver, the Spark JVM and all its descendants (Python workers;
    exited ones count through their parent's cutime). Linux /proc, local masters only."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = (int(fields[1]), sum(int(v) for v in fields[11:15]))
    pending, total = [spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()], 0
    while pending:
        pid = pending.pop()
        total += stats.get(pid, (0, 0))[1]
        pending.extend(child for child, (parent, _) in stats.items() if parent == pid)
    return total / ticks + time.process_time()


def kernel_rate(settings, rows: int) -> tuple[float, float]:
    """Result rows per wall-second and per CPU-second of privatize.bag_posteriors on one core, in-process,
    over rows taken in order (bag = rank div k; the kernel's cost does not depend on which rows share a bag)."""
    from lia_spark.engine import privatize

    ids = make_row_id(1, np.arange(rows))
    eta = expit(-3.4 + 1.2 * hashing.standard_normal(SEED, "bench:eta", ids))
    label = hashing.bernoulli(SEED, "bench:label", ids, eta).astype(np.int32)
    frame = pd.DataFrame({"row_id": ids, "label": label, "prior": eta, "bag_rank": np.arange(rows)})
    group_rows = privatize.rows_per_group([s.bag_size for s in settings], settings=len(settings))
    privatize.bag_posteriors(frame.iloc[:group_rows], settings, SEED)  # warm-up (numba, imports)
    wall, cpu = time.perf_counter(), time.process_time()
    produced = sum(len(privatize.bag_posteriors(frame.iloc[start:start + group_rows], settings, SEED))
                   for start in range(0, rows, group_rows))
    return produced / (time.perf_counter() - wall), produced / (time.process_time() - cpu)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--kernel-rows", type=int, default=1_000_000)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "lia_bench_posteriors"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    from lia_spark.engine import privatize
    from lia_spark.engine.session import get_spark

    spark = get_spark(SparkConfig(master=args.master, driver_memory="4g", extra={"spark.ui.enabled": "false"}))
    cores = spark.sparkContext.defaultParallelism
    root = os.path.join(args.workdir, f"n{args.rows}")
    write_input(spark, root, args.rows)
    config = config_from_dict({
        "run": {"output_dir": root, "seed": SEED, "force": True},
        "mechanisms": {"day": 1, "names": ["llp", "llp_geometric"], "epsilons": [1.0], "bag_sizes": [8, 64]},
    })
    settings = privatize.settings_grid(config.mechanisms)
    results = len(settings) * args.rows

    source = privatize.load_input(spark, config)
    started, cpu = time.perf_counter(), spark_cpu_seconds(spark)
    privatize.compute_posteriors(source, settings=settings, seed=SEED).write.format("noop").mode("overwrite").save()
    compute_seconds, compute_cpu = time.perf_counter() - started, spark_cpu_seconds(spark) - cpu
    logging.info("compute: %.1f s wall, %.1f CPU-s", compute_seconds, compute_cpu)

    started, cpu = time.perf_counter(), spark_cpu_seconds(spark)
    privatize.run_posteriors(spark, config)
    stage_seconds, stage_cpu = time.perf_counter() - started, spark_cpu_seconds(spark) - cpu
    logging.info("stage: %.1f s wall, %.1f CPU-s", stage_seconds, stage_cpu)
    shutil.rmtree(os.path.join(root, "posteriors"), ignore_errors=True)

    per_core, per_cpu_second = kernel_rate(settings, args.kernel_rows)
    ceiling = per_core * cores
    lines = [
        "## Posteriors stage on Spark (`benchmarks/bench_posteriors_spark.py`)",
        "",
        f"{args.rows:,} input rows on `{args.master}` ({cores} cores), {SETTINGS_TEXT} = {len(settings)} settings "
        f"= {results:,} result rows. Rates in result rows/s.",
        "",
        "| what | wall s | CPU s | result rows/s (wall) | rows/s per core | rows per CPU-s | vs kernel (wall) | vs kernel (CPU) |",
        "|---|---|---|---|---|---|---|---|",
        f"| in-process kernel (`bag_posteriors`, 1 core; ceiling = x{cores}) | - | - | {ceiling:,.0f} | {per_core:,.0f} "
        f"| {per_cpu_second:,.0f} | 100% | 100% |",
    ]
    for name, seconds, cpu_seconds in (("Spark bag + posteriors (noop sink)", compute_seconds, compute_cpu),
                                       ("Spark stage end to end (+ write rows, summaries, plots)", stage_seconds, stage_cpu)):
        lines.append(f"| {name} | {seconds:.1f} | {cpu_seconds:.1f} | {results / seconds:,.0f} | "
                     f"{results / seconds / cores:,.0f} | {results / cpu_seconds:,.0f} | {results / seconds / ceiling:.0%} | "
                     f"{results / cpu_seconds / per_cpu_second:.0%} |")
    lines += [
        "",
        f"CPU s = CPU time of the driver, the Spark JVM and its Python workers (from /proc), so the CPU ratio is "
        f"meaningful on a shared machine; the wall ratio compares with the kernel's wall rate ({args.kernel_rows:,} "
        f"rows, same load) x {cores} cores.",
        "SPEC 8 target: Spark stages >= 50% of the in-process kernel ceiling on the same cores.",
    ]
    from _report import write_section

    write_section("posteriors_spark", "\n".join(lines))
    print("\n".join(lines))
    spark.stop()


if __name__ == "__main__":
    main()
