"""Benchmark: memory of the posteriors compute as the input grows (target: flat per executor).

    .venv/bin/python benchmarks/bench_posteriors_memory.py [--rows 2000000 20000000] [--master local[2]]

Each size runs in a fresh process with its own local Spark (driver memory 1g by default, so the JVM cannot
grow into a big heap at the larger size): the same input and settings as
bench_posteriors_spark.py, the stage's pass (bagging, posteriors, the workers writing the per-row results as
Parquet and returning their digest), then the peak resident memory (VmHWM) of every Python worker and of the
Spark JVM is read from /proc. A reading task holds one input batch
(lia_spark.engine.posteriors.reading.INPUT_BATCH_ROWS rows) and its
blobs; a unit task holds one bagging unit, one Parquet row group being written and the digests (settings x
bins of |I|), so a Python worker's peak should not depend on the number of rows; the JVM's peak is
bounded by its heap setting and grows lazily up to it, so it is reported, not judged.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench_posteriors_spark import SETTINGS_TEXT, bench_config, spark_processes, write_input


def peak_rss_mib(pid: int) -> float:
    """Peak resident set size (VmHWM) of a process in MiB, 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            line = next(line for line in handle if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return 0.0
    return int(line.split()[1]) / 1024.0


def measure(rows: int, master: str, workdir: str, driver_memory: str) -> dict:
    """Write the input (if missing), run the stage's pass once (rows written, then removed), report seconds and
    peak memory."""
    from lia_spark.engine.posteriors.units import posterior_input
    from lia_spark.engine.posteriors.writing import write_posteriors
    from lia_spark.engine.spark.session import get_spark
    from lia_spark.kernels.posterior_grid import settings_grid
    from lia_spark.run.sections import SparkConfig

    spark = get_spark(SparkConfig(master=master, driver_memory=driver_memory, extra={"spark.ui.enabled": "false"}))
    root = os.path.join(workdir, f"n{rows}")
    write_input(spark, root, rows)
    config = bench_config(root)
    source = posterior_input(spark, config, config.mechanisms.days)
    unit_bits, output_dir = source.unit_bits, os.path.join(root, "memory_pass")
    started = time.perf_counter()
    write_posteriors(source.blobs, output_dir=output_dir, settings=settings_grid(config.mechanisms),
                     seed=config.run.seed, unit_bits=unit_bits, sample_fraction=2000 / rows)
    seconds = time.perf_counter() - started
    shutil.rmtree(output_dir)
    jvm, descendants, _ = spark_processes(spark)
    workers = [peak_rss_mib(pid) for pid in descendants]
    result = {"rows": rows, "units": 1 << unit_bits, "seconds": seconds, "jvm_mib": peak_rss_mib(jvm),
              "python_max_mib": max(workers, default=0.0), "python_processes": len(workers)}
    spark.stop()
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[2_000_000, 20_000_000])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "lia_bench_posteriors"))
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # child mode: one size, JSON out
    args = parser.parse_args(argv)
    if args.one:
        print("RESULT " + json.dumps(measure(args.rows[0], args.master, args.workdir, args.driver_memory)), flush=True)
        return
    results = []
    for rows in args.rows:
        child = subprocess.run([sys.executable, __file__, "--one", "--rows", str(rows), "--master", args.master,
                                "--workdir", args.workdir, "--driver-memory", args.driver_memory],
                               capture_output=True, text=True, check=True)
        results.append(json.loads(next(line for line in child.stdout.splitlines() if line.startswith("RESULT "))[7:]))
    lines = [
        "## Posteriors pass memory as rows grow (`benchmarks/bench_posteriors_memory.py`)",
        "",
        f"`{args.master}`, driver memory {args.driver_memory}, {SETTINGS_TEXT}; the stage's pass (bagging, posteriors, "
        "worker-written Parquet rows, digest), one fresh Spark per size. Peak resident memory (VmHWM) from /proc.",
        "",
        "| input rows | bagging units | seconds | peak of the largest Python worker (MiB) | Python processes "
        "| Spark JVM peak (MiB) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {r['rows']:,} | {r['units']} | {r['seconds']:.1f} | {r['python_max_mib']:.0f} "
              f"| {r['python_processes']} "
              f"| {r['jvm_mib']:.0f} |" for r in results]
    lines += ["", "Target: memory per executor flat as rows grow. A reading task holds one input batch "
              "(1M rows) and its blobs; a unit task holds one bagging unit (about mechanisms.rows_per_bagging_unit "
              "data rows and their priors), one Parquet row group being written and the digests, so its peak should "
              "not move with 10x the rows; the JVM heap is capped by its setting and only streams shuffle blocks to "
              "Python (no Spark sort), so 10x the rows run in the same heap (its resident size adds off-heap Arrow and "
              "shuffle buffers)."]
    from _report import write_section

    write_section("posteriors_memory", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
