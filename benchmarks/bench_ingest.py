"""Ingest throughput vs Spark's own CSV reader on the same Criteo TSV (target: >= 3x the CSV reader into Parquet).

    .venv/bin/python benchmarks/bench_ingest.py [--rows 1000000 | --quick] [--repeats 1] [--workdir /tmp/bench_ingest]
    .venv/bin/python benchmarks/bench_ingest.py --part gzip [--rows 2000000]

Ingest runs both ways: ``data.task_io: true`` (the default on local files: each task reads its byte range and
writes its Parquet) and ``false`` (Spark's text reader and Parquet writer, what any other file system gets).

``--part gzip``: one day as a single .gz file against the same rows as plain TSV: ingest with
``data.split_gzip`` (decode once in one task, then scan the copy in parallel blocks, both ``data.task_io`` ways)
and without it (one task scans the whole .gz: gzip is not splittable), written to the ``ingest_gzip`` section.

The TSV is the synthetic twin's (``run_generate`` with ``synthetic.write_tsv``, 2 days x 100k rows, each
day file copied to make ``--rows / 100k`` days: generating 1M twin rows takes minutes on a loaded
2-core machine). The floor reads it with
``spark.read.csv(sep="\\t", schema=...)`` (I* long, C* string: the CSV reader cannot parse hex) and
writes Parquet, like ingest does; a read-only floor (``noop`` sink) is reported as well. Each figure is
the best of ``--repeats`` runs; the machine is shared, so treat the numbers as noisy.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import logging
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import process_tree_cpu_seconds, write_section  # noqa: E402
from lia_spark import names  # noqa: E402
from lia_spark.engine.runtime.outputs import MARKER  # noqa: E402
from lia_spark.engine.spark.session import get_spark  # noqa: E402
from lia_spark.engine.runtime.registry import run_stage  # noqa: E402
from lia_spark.kernels import criteo  # noqa: E402
from lia_spark.run.config import config_from_dict  # noqa: E402
from lia_spark.run.sections import SparkConfig  # noqa: E402

TWIN_ROWS_PER_DAY = 100_000
ISAL, SPARK_CODEC = "ISA-L in one task (now)", "Spark's codec, decode + copy in one task (before)"
CSV_DDL = ", ".join([f"{names.LABEL} int"] + [f"{name} long" for name in criteo.INT_COLUMNS]
                    + [f"{name} string" for name in criteo.CAT_COLUMNS])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="TSV rows (split over 2 days)")
    parser.add_argument("--repeats", type=int, default=2, help="best of; the first run also warms up Spark")
    parser.add_argument("--workdir", default="/tmp/bench_ingest")
    parser.add_argument("--quick", action="store_true", help="200k rows (a smoke run, below the benchmark's 1M rows)")
    parser.add_argument("--part", choices=("csv", "gzip"), default="csv")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.quick:
        args.rows = 200_000
    work = Path(args.workdir)
    spark = get_spark(SparkConfig(master="local[2]", app_name="bench-ingest", driver_memory="4g",
                                  extra={"spark.ui.enabled": "false"}))
    cores = spark.sparkContext.defaultParallelism
    twin = config_from_dict({"run": {"output_dir": str(work / "twin")},
                             "synthetic": {"rows_per_day": TWIN_ROWS_PER_DAY, "days": 2, "write_tsv": True}})
    twin_tsv = work / "twin" / "criteo"
    if not (twin_tsv / MARKER).exists():  # the twin's TSV is reused across benchmark runs
        run_stage("generate", spark, twin)
    if args.part == "gzip":
        return _gzip_part(spark, work, twin_tsv / "day_0", rows=args.rows, repeats=args.repeats)
    days = args.rows // TWIN_ROWS_PER_DAY
    if not 1 <= days <= criteo.MAX_DAY + 1:
        raise ValueError(f"--rows must be a multiple of {TWIN_ROWS_PER_DAY} up to 25 days, got {args.rows}")
    tsv = work / f"tsv_{args.rows}"
    tsv.mkdir(parents=True, exist_ok=True)
    for day in range(days):  # day k is a copy of twin day k mod 2
        if not (tsv / f"day_{day}").exists():
            shutil.copyfile(twin_tsv / f"day_{day % 2}", tsv / f"day_{day}")
    day_files = [str(tsv / f"day_{day}") for day in range(days)]
    megabytes = sum(os.path.getsize(p) for p in day_files) / 1e6

    def csv_frame():
        return spark.read.csv(day_files, sep="\t", schema=CSV_DDL)

    def csv_to_parquet():
        shutil.rmtree(work / "csv_out", ignore_errors=True)
        csv_frame().write.parquet(str(work / "csv_out"))

    def csv_read_only():
        csv_frame().write.format("noop").mode("overwrite").save()

    results = {}

    def ingest(task_io: bool):
        config = config_from_dict({"run": {"output_dir": str(work / f"ingested_{task_io}"), "force": True},
                                   "data": {"source": "criteo", "criteo_paths": [str(tsv)], "task_io": task_io}})
        results[task_io] = run_stage("ingest", spark, config)

    runs = {"csv_noop": csv_read_only, "csv_parquet": csv_to_parquet, "ingest": lambda: ingest(True),
            "ingest_spark_io": lambda: ingest(False)}
    seconds = {name: float("inf") for name in runs}
    cpu = {name: float("inf") for name in runs}
    for _ in range(args.repeats):  # interleaved, so every candidate sees the same (shared) machine
        for name, run in runs.items():
            started, cpu_started = time.perf_counter(), process_tree_cpu_seconds()
            run()
            seconds[name] = min(seconds[name], time.perf_counter() - started)
            cpu[name] = min(cpu[name], process_tree_cpu_seconds() - cpu_started)
    assert results[True].rows_per_day == results[False].rows_per_day
    same = _table(spark, work / "ingested_True" / "data").exceptAll(_table(spark, work / "ingested_False" / "data"))
    assert same.count() == 0, "the two ingest paths wrote different rows"
    rows = results[True].input_lines
    rate = {name: rows / value for name, value in seconds.items()}
    lines = [
        "## Ingest (TSV -> validated, day-partitioned Parquet)",
        "",
        f"{rows:,} twin rows, {megabytes:.0f} MB of plain TSV in {days} day files, local[{cores}], "
        f"best of {args.repeats}.",
        "",
        "| what | seconds | CPU s | rows/s | rows/s per core | rows/s / Spark CSV -> Parquet's |",
        "|---|---|---|---|---|---|",
    ]
    labels = {"ingest": "run_ingest, `data.task_io: true` (tasks read their byte ranges and write their Parquet)",
              "ingest_spark_io": "run_ingest, `data.task_io: false` (Spark's text reader and Parquet writer)",
              "csv_parquet": "floor: Spark CSV reader, explicit schema -> Parquet",
              "csv_noop": "floor: Spark CSV reader, explicit schema -> noop sink"}
    for name, label in labels.items():
        lines.append(f"| {label} | {seconds[name]:.1f} | {cpu[name]:.1f} | {rate[name]:,.0f} | "
                     f"{rate[name] / cores:,.0f} | {rate[name] / rate['csv_parquet']:.2f} |")
    lines += ["", f"Target: ingest >= 3 x Spark's CSV reader into Parquet (rows/s per core, same session): "
              f"{rate['ingest'] / rate['csv_parquet']:.2f} with task I/O, "
              f"{rate['ingest_spark_io'] / rate['csv_parquet']:.2f} through Spark's reader and writer; CPU seconds "
              f"(driver, JVM and Python workers) {cpu['csv_parquet'] / cpu['ingest']:.2f}x fewer than the CSV "
              "reader's. The two ingest paths wrote the same rows (checked)."]
    write_section("ingest", "\n".join(lines))
    print("\n".join(lines))
    print(dataclasses.asdict(results[True])["rows_per_day"])
    spark.stop()
    return 0


def _table(spark, path: Path):
    """An ingest output as Spark reads it (the storage schema, day from the folders)."""
    return spark.read.schema(criteo.STORAGE_DDL).parquet(str(path))


def _gzip_part(spark, work: Path, twin_day: Path, *, rows: int, repeats: int) -> int:
    """One day of ``rows`` lines (copies of a twin day) as day_0.gz and as plain day_0; ingest each way."""
    copies = rows // TWIN_ROWS_PER_DAY
    folders = {"gz": work / f"gz_{rows}", "plain": work / f"plain_{rows}"}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    text = twin_day.read_bytes()
    if not (folders["plain"] / "day_0").exists():
        (folders["plain"] / "day_0").write_bytes(text * copies)
    if not (folders["gz"] / "day_0.gz").exists():
        with gzip.open(folders["gz"] / "day_0.gz", "wb", compresslevel=6) as handle:
            for _ in range(copies):
                handle.write(text)
    runs = {"split": ("gz", True, True), "split_spark_io": ("gz", True, False), "direct": ("gz", False, False),
            "plain": ("plain", True, True)}
    seconds = {name: float("inf") for name in runs}
    results = {}
    for _ in range(repeats):
        for name, (source, split, task_io) in runs.items():
            config = config_from_dict({"run": {"output_dir": str(work / f"ingested_{name}"), "force": True},
                                       "data": {"source": "criteo", "criteo_paths": [str(folders[source])],
                                                "split_gzip": split, "task_io": task_io}})
            started = time.perf_counter()
            results[name] = run_stage("ingest", spark, config)
            seconds[name] = min(seconds[name], time.perf_counter() - started)
    floors = {}
    for source in ("gz", "plain"):  # Spark's CSV reader into Parquet on the same day, each form
        target = work / "csv_out"
        for _ in range(repeats):
            shutil.rmtree(target, ignore_errors=True)
            started = time.perf_counter()
            spark.read.csv(str(folders[source]), sep="\t", schema=CSV_DDL).write.parquet(str(target))
            floors[source] = min(floors.get(source, float("inf")), time.perf_counter() - started)
    started = time.perf_counter()
    spark.read.text(str(folders["gz"] / "day_0.gz")).write.format("noop").mode("overwrite").save()
    decode_only = time.perf_counter() - started
    step0 = _decode_step(spark, work, folders["gz"], repeats=repeats)
    decode = step0[ISAL]
    lines = results["split"].input_lines
    assert len({str(result.rows_per_day) for result in results.values()}) == 1
    cores = spark.sparkContext.defaultParallelism
    labels = {"split": "day_0.gz, `data.split_gzip: true` (decode once, then parallel chunks read and written by the "
                       "tasks, `data.task_io: true`)",
              "split_spark_io": "day_0.gz, `data.split_gzip: true`, `data.task_io: false` (decode once, then Spark's "
                                "reader and writer in parallel blocks)",
              "direct": "day_0.gz, `data.split_gzip: false` (one task scans and parses the file)",
              "plain": "day_0 plain TSV, `data.task_io: true` (splittable from the start)"}
    table = [
        "## Ingest of gzip days (benchmarks/bench_ingest.py --part gzip)",
        "",
        f"One day of {lines:,} twin lines ({os.path.getsize(folders['gz'] / 'day_0.gz') / 1e6:.0f} MB gzip, "
        f"{os.path.getsize(folders['plain'] / 'day_0') / 1e6:.0f} MB plain), local[{cores}], best of {repeats}. "
        "Identical rows per day in all four.",
        "",
        "| input | seconds | rows/s | rows/s per core | vs direct gzip | rows/s / Spark CSV -> Parquet's on the "
        "plain day |",
        "|---|---|---|---|---|---|",
    ]
    for name, label in labels.items():
        table.append(f"| {label} | {seconds[name]:.1f} | {lines / seconds[name]:,.0f} | "
                     f"{lines / seconds[name] / cores:,.0f} | {seconds['direct'] / seconds[name]:.2f}x | "
                     f"{floors['plain'] / seconds[name]:.2f} |")
    for source, label in (("plain", "floor: Spark CSV reader -> Parquet, the plain day"),
                          ("gz", "floor: Spark CSV reader -> Parquet, day_0.gz (one task)")):
        table.append(f"| {label} | {floors[source]:.1f} | {lines / floors[source]:,.0f} | "
                     f"{lines / floors[source] / cores:,.0f} | {seconds['direct'] / floors[source]:.2f}x | "
                     f"{floors['plain'] / floors[source]:.2f} |")
    parallel = max(0.0, seconds["split"] - decode)
    table += ["", "Serial part of the split path, step 0 (decode the file into its plain copy, one task), best of "
              f"{repeats} in the same session:", "", "| decoder | seconds | lines/s |", "|---|---|---|"]
    table += [f"| {name} | {value:.2f} | {lines / value:,.0f} |" for name, value in step0.items()]
    table += [f"| Spark's codec, decode only (noop sink, no copy written) | {decode_only:.2f} | "
              f"{lines / decode_only:,.0f} |",
              "", "ISA-L decodes local files (local runs, /dbfs or /Volumes mounts); Spark's codec every other file "
              f"system. Everything after step 0 runs in parallel blocks, so on C cores one such day takes about "
              f"{decode:.1f} + {parallel:.1f} x {cores} / C s, while the direct path stays at "
              f"{seconds['direct']:.1f} s whatever C (one task per file)."]
    write_section("ingest_gzip", "\n".join(table))
    print("\n".join(table))
    spark.stop()
    return 0


def _decode_step(spark, work: Path, gz_folder: Path, *, repeats: int) -> dict[str, float]:
    """Best seconds of ingest's step 0 on ``gz_folder``'s day_0.gz with each decoder."""
    from lia_spark.engine.ingest import criteo_files

    sources = criteo_files.list_sources(spark, [str(gz_folder)])
    decoders = {ISAL: criteo_files._decoded_by_isal, SPARK_CODEC: criteo_files._decoded_by_spark}
    best = {name: float("inf") for name in decoders}
    for _ in range(repeats):
        for name, decode in decoders.items():
            target = work / "decoded"
            shutil.rmtree(target, ignore_errors=True)
            started = time.perf_counter()
            decode(spark, list(enumerate(sources)), str(target))
            best[name] = min(best[name], time.perf_counter() - started)
    return best


if __name__ == "__main__":
    sys.exit(main())
