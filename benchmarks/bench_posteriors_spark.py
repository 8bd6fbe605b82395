"""Benchmark: Spark posteriors stage end to end vs the in-process kernel on the same cores.

    .venv/bin/python benchmarks/bench_posteriors_spark.py [--rows 2000000 10000000] [--master local[2]]

Each size in ``--rows`` is measured on its own (its warm-up, then its rounds) and gets its rows in one table.
Input: N rows of day 1 (row_id, day, label) plus a truth table (row_id, day, eta), eta = expit(N(-3.4, 1.2))
hashed from the row id. Settings: LLP and LLP+Geom(eps=1) at k = 8 and 64 (4 settings, one pass).
Figures (Spark after one run of the whole stage on 2% of the rows, so Python workers, numba kernels,
matplotlib and the JVM's generated code are loaded, as the in-process ceilings are):
- in-process compute ceiling: one process, one core, arrays in memory: bagging keys, the random permutation
  (sort), unit chunks and :func:`lia_spark.engine.posteriors.writing.setting_batches` (the kernel
  :func:`lia_spark.kernels.posterior_grid.chunk_posteriors` to Arrow batches) — the work of the Spark
  compute step without Spark; times the number of cores (ideal scaling, so the ratio is conservative);
- in-process stage ceiling: the same plus reading the Parquet input (pyarrow), the prior join (numpy),
  writing the per-row results as zstd Parquet with the stage's writer
  (:class:`lia_spark.engine.posteriors.writing.RowGroupWriter`)
  and the stage's per-setting summaries (means, share infinite, exact percentiles of |I| by one
  ``np.partition``) — the numpy single-process version of the stage's work (plots aside); times the number
  of cores;
- Spark compute: :func:`lia_spark.engine.posteriors.writing.posterior_rows` of the stage's input
  (pyarrow reading tasks, keys, blob
  shuffle, per-unit sort and posteriors, result rows handed back to Spark) into Spark's ``noop`` sink: the path
  of non-local inputs;
- Spark stage: ``run_posteriors`` end to end (counts, the input spilled by unit into the staging folder, the pass
  over units with worker-written rows, summaries, bag counts, plots);
- for reference, ceiling B's work in as many concurrent processes as cores: what the cores deliver together.
Each round measures all of them back to back (the machine's speed drifts); the table holds medians.
Rates are result rows (input rows x settings) per second.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time

import numpy as np
import pandas as pd
import pyarrow as pa
from scipy.special import expit

from lia_spark.kernels import advantage, hashing, mechanisms, posteriors
from lia_spark.kernels.criteo import make_row_id
from lia_spark.run.config import Config, config_from_dict
from lia_spark.run.sections import SparkConfig

SEED = 11
SETTINGS_TEXT = "LLP and LLP+Geom(eps=1) at k = 8, 64"


def twin_eta_labels(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(eta, label) of the benchmark rows: eta = expit(N(-3.4, 1.2)), label ~ Bernoulli(eta), hashed from the ids."""
    eta = expit(-3.4 + 1.2 * hashing.standard_normal(SEED, "bench:eta", ids))
    return eta, hashing.bernoulli(SEED, "bench:label", ids, eta).astype(np.int32)


def bench_config(root: str) -> Config:
    """The benchmark's stage config: day 1 under ``root``, the 4 settings of SETTINGS_TEXT, recomputed."""
    return config_from_dict({
        "run": {"output_dir": root, "seed": SEED, "force": True},
        "mechanisms": {"days": [1], "names": ["llp", "llp_geometric"], "epsilons": [1.0], "bag_sizes": [8, 64]},
    })


def _twin_batches(batches):
    for batch in batches:
        ids = make_row_id(1, batch["id"].to_numpy(np.int64))
        eta, label = twin_eta_labels(ids)
        yield pd.DataFrame({"row_id": ids, "day": np.int32(1), "label": label, "eta": eta})


def write_input(spark, root: str, rows: int) -> None:
    """Day-1 data and truth tables with ``rows`` rows (skipped when already there)."""
    if os.path.exists(os.path.join(root, "truth", "_SUCCESS")):
        return
    frame = spark.range(rows, numPartitions=max(2, rows // 1_000_000)).mapInPandas(
        _twin_batches, "row_id long, day int, label int, eta double")
    frame.select("row_id", "day", "label").write.mode("overwrite").partitionBy("day").parquet(
        os.path.join(root, "data"))
    frame.select("row_id", "day", "eta").write.mode("overwrite").parquet(os.path.join(root, "truth"))


def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, CPU clock ticks used incl. exited children) of every process (Linux /proc)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(entry)] = (int(fields[1]), sum(int(v) for v in fields[11:15]))
    return table


def spark_processes(spark) -> tuple[int, list[int], dict[int, tuple[int, int]]]:
    """(Spark JVM pid, pids of its descendants (Python daemon and workers), the process table)."""
    table = _process_table()
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    pending, descendants = [jvm], []
    while pending:
        pid = pending.pop()
        children = [child for child, (parent, _) in table.items() if parent == pid]
        descendants.extend(children)
        pending.extend(children)
    return jvm, descendants, table


def spark_cpu_seconds(spark) -> float:
    """CPU seconds used so far by this driver, the Spark JVM and all its descendants (Python workers;
    exited ones count through their parent's cutime). Linux /proc, local masters only."""
    jvm, descendants, table = spark_processes(spark)
    ticks = sum(table.get(pid, (0, 0))[1] for pid in (jvm, *descendants))
    return ticks / os.sysconf("SC_CLK_TCK") + time.process_time()


def in_process_batches(ids: np.ndarray, labels: np.ndarray, priors: np.ndarray, settings):
    """The Spark compute step's work in one process: keys, the random permutation, unit chunks, kernels."""
    from lia_spark.engine.posteriors.writing import setting_batches
    from lia_spark.kernels.posterior_grid import rows_per_call, unit_chunks

    chunk_rows = rows_per_call([s.bag_size for s in settings], settings=len(settings))
    keys = mechanisms.bagging_keys(ids, seed=SEED)
    order = np.argsort(keys)  # one sort of everything: no partitioning, no pairing of sides
    units = mechanisms.bagging_units(keys[order], unit_bits=mechanisms.bagging_unit_bits(ids.size))
    starts = np.flatnonzero(np.r_[True, units[1:] != units[:-1]])
    whole_units = ((int(units[start]), {"row_id": ids[order[start:end]], "label": labels[order[start:end]],
                                        "prior": priors[order[start:end]]})
                   for start, end in zip(starts, np.r_[starts[1:], ids.size]))
    for chunk in unit_chunks(whole_units, chunk_rows=chunk_rows):
        yield from setting_batches(chunk, settings, SEED)


def kernel_rate(settings, rows: int) -> tuple[float, float]:
    """Result rows per wall-second and per CPU-second of :func:`in_process_batches` on one core."""
    ids = make_row_id(1, np.arange(rows))
    eta, label = twin_eta_labels(ids)
    sum(b.num_rows for b in in_process_batches(ids[:100_000], label[:100_000], eta[:100_000], settings))  # warm-up
    wall, cpu = time.perf_counter(), time.process_time()
    produced = sum(batch.num_rows for batch in in_process_batches(ids, label, eta, settings))
    return produced / (time.perf_counter() - wall), produced / (time.process_time() - cpu)


def in_process_stage_rate(root: str, settings, output: str) -> tuple[float, float]:
    """Result rows per wall- and CPU-second on one core of: read day 1 and its priors from Parquet (pyarrow),
    join on row_id (numpy), :func:`in_process_batches`, write the rows as zstd Parquet (pyarrow)."""
    import pyarrow.dataset as ds

    from lia_spark.engine.posteriors.writing import ARROW_ROW_SCHEMA, RowGroupWriter

    wall, cpu = time.perf_counter(), time.process_time()
    data = ds.dataset(os.path.join(root, "data"), partitioning="hive").to_table(
        columns=["row_id", "label"], filter=ds.field("day") == 1)
    truth = ds.dataset(os.path.join(root, "truth")).to_table(columns=["row_id", "eta"], filter=ds.field("day") == 1)
    data_ids, truth_ids = data.column("row_id").to_numpy(), truth.column("row_id").to_numpy()
    by_id = np.argsort(truth_ids, kind="stable")
    at = np.minimum(np.searchsorted(truth_ids[by_id], data_ids), truth_ids.size - 1)
    found = truth_ids[by_id][at] == data_ids
    priors = truth.column("eta").to_numpy()[by_id][at][found]
    produced, per_setting = 0, {}
    writer = RowGroupWriter(output, ARROW_ROW_SCHEMA, "zstd")  # the stage's file writer
    for batch in in_process_batches(data_ids[found], data.column("label").to_numpy()[found], priors, settings):
        writer.add(batch)
        produced += batch.num_rows
        key = tuple(batch.column(name)[0].as_py() for name in ("mechanism", "epsilon", "bag_size"))
        per_setting.setdefault(key, []).append(batch.select(["posterior", "I", "prior", "label"]))
    writer.close()
    for parts in per_setting.values():  # the stage's summaries: means, share infinite, exact percentiles of |I|
        table = pa.Table.from_batches(parts)
        result = posteriors.Posteriors(table.column("posterior").to_numpy(), table.column("I").to_numpy())
        advantage.PartialSums.of(result, table.column("prior").to_numpy(), table.column("label").to_numpy()).means()
        abs_i = np.abs(result.multiplicative_advantage)
        ranks = [advantage.percentile_rank(abs_i.size, q) for q in advantage.PERCENTILES]
        np.partition(abs_i, ranks)[ranks]
    return produced / (time.perf_counter() - wall), produced / (time.process_time() - cpu)


def _stage_rate_in_file(job: tuple[str, list, str]) -> float:
    root, settings, output = job
    try:
        return in_process_stage_rate(root, settings, output)[0]
    finally:
        os.remove(output)


def concurrent_stage_rate(root: str, settings, processes: int) -> float:
    """Result rows per wall-second of ``processes`` concurrent :func:`in_process_stage_rate` runs (each on all
    rows): what the cores deliver together, unlike one core's rate x cores."""
    import multiprocessing

    jobs = [(root, settings, os.path.join(root, f"in_process_rows_{i}.parquet")) for i in range(processes)]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        return sum(pool.map(_stage_rate_in_file, jobs))


def _timed(spark, action) -> tuple[float, float]:
    started, cpu = time.perf_counter(), spark_cpu_seconds(spark)
    action()
    return time.perf_counter() - started, spark_cpu_seconds(spark) - cpu


def measure(spark, args, rows: int, cores: int) -> dict:
    """Medians over ``args.rounds`` rounds, each measuring back to back on ``rows`` input rows: Spark compute into
    a noop sink, the Spark stage, ceiling A, ceiling B and B's work as ``cores`` concurrent processes; the
    per-round stage ratios; the warm-up's seconds and the bagging units."""
    from lia_spark.engine.orchestration.registry import run_stage
    from lia_spark.engine.posteriors.units import posterior_input
    from lia_spark.engine.posteriors.writing import posterior_rows
    from lia_spark.kernels.posterior_grid import settings_grid

    root = os.path.join(args.workdir, f"n{rows}")
    write_input(spark, root, rows)
    config = bench_config(root)
    settings = settings_grid(config.mechanisms)
    results = len(settings) * rows
    warm_up_root = os.path.join(args.workdir, f"n{rows // 50}")  # the stage on 2% of the rows, first run
    write_input(spark, warm_up_root, rows // 50)
    warm_up_seconds, _ = _timed(spark, lambda: run_stage("posteriors", spark, bench_config(warm_up_root)))
    shutil.rmtree(os.path.join(warm_up_root, "posteriors"), ignore_errors=True)
    source = posterior_input(spark, config, config.mechanisms.days)  # counts run here, outside the timing
    computed = posterior_rows(source.blobs, settings=settings, seed=SEED, unit_bits=source.unit_bits)
    stage_file = os.path.join(root, "in_process_rows.parquet")
    rounds = []  # the machine's speed drifts: each round measures all of them, back to back
    for _ in range(args.rounds):
        compute_seconds, compute_cpu = _timed(spark, lambda: computed.write.format("noop").mode("overwrite").save())
        stage_seconds, stage_cpu = _timed(spark, lambda: run_stage("posteriors", spark, config))
        shutil.rmtree(os.path.join(root, "posteriors"), ignore_errors=True)
        rounds.append((compute_seconds, compute_cpu, stage_seconds, stage_cpu, *kernel_rate(settings, args.kernel_rows),
                       *in_process_stage_rate(root, settings, stage_file),
                       concurrent_stage_rate(root, settings, cores)))
        os.remove(stage_file)
        logging.info("%d rows, round: compute %.1f s (%.1f CPU-s), stage %.1f s (%.1f CPU-s), stage vs B %.0f%%",
                     rows, compute_seconds, compute_cpu, stage_seconds, stage_cpu,
                     100 * results / stage_seconds / (rounds[-1][6] * cores))
    names = ("compute_seconds", "compute_cpu", "stage_seconds", "stage_cpu", "per_core", "per_cpu_second",
             "stage_per_core", "stage_per_cpu_second", "concurrent_ceiling")
    ratios = ", ".join(f"{results / r[2] / (r[6] * cores):.0%} / {results / r[3] / r[7]:.0%}" for r in rounds)
    return {**dict(zip(names, np.median(np.array(rounds), axis=0))), "rows": rows, "results": results,
            "settings": len(settings), "units": 1 << source.unit_bits, "warm_up_seconds": warm_up_seconds,
            "round_ratios": ratios}


def table_lines(m: dict, cores: int, kernel_rows: int) -> list[str]:
    """The rows of one input size in the section's table (rates in result rows/s, ratios against the ceilings)."""
    ceiling, stage_ceiling = m["per_core"] * cores, m["stage_per_core"] * cores
    size = f"{m['rows']:,}"
    lines = [
        f"| {size} | A. in-process compute ceiling (keys, sort, kernels -> Arrow; {kernel_rows:,} rows) | - | - "
        f"| {ceiling:,.0f} | {m['per_core']:,.0f} | {m['per_cpu_second']:,.0f} | - | - |",
        f"| {size} | B. in-process stage ceiling (A + Parquet read, join, zstd Parquet write, summaries; all rows) "
        f"| - | - | {stage_ceiling:,.0f} | {m['stage_per_core']:,.0f} | {m['stage_per_cpu_second']:,.0f} | - | - |",
        f"| {size} | B measured on {cores} cores: {cores} concurrent processes of B's work (for reference) | - | - "
        f"| {m['concurrent_ceiling']:,.0f} | {m['concurrent_ceiling'] / cores:,.0f} | - | - | - |",
    ]
    results = m["results"]
    for name, seconds, cpu_seconds, wall_ceiling, cpu_ceiling in (
            ("Spark compute through the blob shuffle (non-local inputs), noop sink (vs A)", m["compute_seconds"],
             m["compute_cpu"], ceiling, m["per_cpu_second"]),
            ("Spark stage end to end: input spilled by unit, pass, rows written, summaries, plots (vs B)",
             m["stage_seconds"], m["stage_cpu"],
             stage_ceiling, m["stage_per_cpu_second"])):
        lines.append(f"| {size} | {name} | {seconds:.1f} | {cpu_seconds:.1f} | {results / seconds:,.0f} | "
                     f"{results / seconds / cores:,.0f} | {results / cpu_seconds:,.0f} | "
                     f"{results / seconds / wall_ceiling:.0%} | {results / cpu_seconds / cpu_ceiling:.0%} |")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[2_000_000, 10_000_000])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--kernel-rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of all measurements (medians reported)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "lia_bench_posteriors"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    from lia_spark.engine.spark.session import get_spark

    spark = get_spark(SparkConfig(master=args.master, driver_memory="4g", extra={"spark.ui.enabled": "false"}))
    cores = spark.sparkContext.defaultParallelism
    measured = [measure(spark, args, rows, cores) for rows in args.rows]
    lines = [
        "## Posteriors stage on Spark (`benchmarks/bench_posteriors_spark.py`)",
        "",
        f"{' and '.join(format(m['rows'], ',') for m in measured)} input rows on "
        f"`{args.master}` ({cores} cores), {SETTINGS_TEXT} = {measured[0]['settings']} settings (result rows = input "
        f"rows x {measured[0]['settings']}; {', '.join(str(m['units']) for m in measured)} bagging units). Rates in "
        f"result rows/s; in-process ceilings are one core's rate x {cores}.",
        "",
        "| input rows | what | wall s | CPU s | result rows/s (wall) | rows/s per core | rows per CPU-s | vs its "
        "ceiling (wall) | vs its ceiling (CPU) |",
        "|---|---|---|---|---|---|---|---|---|",
        *(line for m in measured for line in table_lines(m, cores, args.kernel_rows)),
    ]
    lines += [
        "",
        f"Medians of {args.rounds} rounds, each measuring all of them back to back (this machine's speed drifts by "
        "up to 1.5x within minutes). " + " ".join(
            f"{m['rows']:,} rows: stage vs B (wall / CPU) per round {m['round_ratios']}; B's work as {cores} "
            f"concurrent processes delivers {m['concurrent_ceiling'] / (m['stage_per_core'] * cores):.0%} of one "
            f"core's rate x {cores} (shared caches and memory bandwidth), against which the stage is at "
            f"{m['results'] / m['stage_seconds'] / m['concurrent_ceiling']:.0%} (wall)." for m in measured)
        + f" The ratios in the table stay against the ideal x {cores}.",
        "CPU s = CPU time of the driver, the Spark JVM and its Python workers (from /proc), so the CPU ratio is "
        "meaningful on a shared machine. Spark figures are warm, like the ceilings: before each size the session "
        "ran the whole stage once on 2% of its rows ("
        + ", ".join(f"{m['warm_up_seconds']:.1f} s before {m['rows']:,}" for m in measured)
        + "), loading the Python workers, numba kernels, matplotlib and the JVM's generated code; a first run in a "
        "fresh session pays that once (about 7-9 s more at 10M rows, measured 2026-11-22).",
        "Target: Spark stages >= 50% of the in-process kernel ceiling on the same cores.",
        "Ceiling B does the stage's own work: its summaries are the stage's (means, share infinite, exact "
        "percentiles; no empirical CDFs) and it writes with the stage's writer (dictionary encoding only on the "
        "setting columns). Figures before 2026-11-22 08:00 UTC had B computing CDFs with pyarrow's default "
        "encoding, half as fast, so their ratios are not comparable.",
        "",
        "Where the stage's time goes (10M rows, warm, job times from the Spark UI, 2026-11-22 15:47 UTC, a 21.9 s "
        "run): listing and counting 0.2 s (file footers and day statistics, no Spark job); the pass 19.2 s = map "
        "side (pyarrow tasks read both tables, keys, one Arrow blob per unit, shuffle write) 3.7 s + reduce side "
        "(fetch, blobs to the Python workers, per-unit sort, all kernels, pyarrow Parquet write, digest) 15.3 s; "
        "exact percentiles inside the histogram bins 2.1 s, with the plots drawn meanwhile on the driver; summary "
        "files 0.2 s. Data movement alone on the same 20M data + prior rows (warm): pyarrow tasks reading and "
        "packing them 2.6 s (1.6 JVM + 3.6 Python CPU-s); with the blob shuffle to the unit tasks 5.6 s (4.9 + 6.0 "
        "CPU-s); the same through Spark's reader (the fallback for non-local inputs) 13.2 s (22.1 JVM CPU-s); "
        "before this design, narrow rows through Spark's reader and shuffle, 16.2-16.7 s. The Python side of the "
        "reduce needs 2.6 CPU-s per 5M result rows (Parquet write about half), about 21 CPU-s for the 40M rows, "
        "about ceiling B's whole work: the stage's margin is what Spark adds on top. Again on 2026-11-29 (10M rows, "
        "warm, CPU from /proc per process, two runs): the map side alone 2.9-3.5 s (1.1-2.2 JVM + 4.5-4.7 Python "
        "CPU-s), with the blob shuffle 4.4-4.9 s (3.6-4.7 + 4.9-5.0), the whole stage 22.3-23.3 s with 10.0-14.9 "
        "JVM, 28.6-31.7 Python-worker and 1.6-1.7 driver CPU-s: on the reduce side the JVM (fetching the blobs, "
        "handing them to Python, the percentile pass) spends 6-10 CPU-s. Since 2026-11-29 15:40 UTC local inputs "
        "with a local output folder skip Spark's shuffle: the reading tasks write their rows grouped by unit to one "
        "file each and the unit tasks read their bytes (docs/usage.md, posteriors). At 10M rows (warm, plot sample "
        "1%, two runs): the spill 2.4-2.9 s (4.5-5.6 CPU-s), the pass 10.4-10.9 s with 2.1-2.7 JVM and 18.1-18.6 "
        "Python-worker CPU-s; both 12.8-13.5 s against the blob shuffle's 13.8-14.6 s (5.6-6.7 JVM, 21.1-21.3 Python "
        "CPU-s). The unit tasks' own work, timed in one process, runs at 2.26M result rows per CPU-s, ceiling B's "
        "rate: the pass keeps both cores busy with the kernels and the Parquet writer, and the stage's remaining "
        "margin is the spill, the percentile pass, the plots and Spark's cost per job and task.",
    ]
    from _report import write_section

    write_section("posteriors_spark", "\n".join(lines))
    print("\n".join(lines))
    spark.stop()


if __name__ == "__main__":
    main()
