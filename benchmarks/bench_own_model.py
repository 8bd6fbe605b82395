"""Benchmark: auditing a model trained outside lia_spark ("Audit your own model", docs/usage.md).

Validity and power (``--repetitions``): each repetition redraws the twin (run.seed), the injection (inject stage) and
the team's training (tests/own_trainer.py in a subprocess: plain xgboost, its own randomized response, never
importing lia_spark), then audits by ``audit.predictions_path``:

- ``honest``: RR at the claimed eps (``--epsilon``); the bound must stay below the claim;
- ``broken``: claims eps but flips with eps = 8's probability; the audit should report a FINDING;
- ``label_blind``: trained on the true labels instead of the export (it never saw a coin): certifies 0 in >= 95%;
- ``lia_spark``: the train stage's own RR target at the same eps with the trainer's boosting settings (depth 10, 60
  trees, eta 0.3, no early stopping) on the same day, audited against the proxy alone (no shadows, as for a model
  of your own): the bound a model of your own should match.

Throughput (``--throughput-rows``): the rows/s of the audit's scoring (``mlflow.pyfunc.spark_udf`` over the export,
Spark's noop sink) against the model's in-process predict on the same rows and cores (the export read by pandas, the
pyfunc loaded once, in a subprocess), and the peak memory of the Python driver of `lia-spark audit` in its own
process, at each size.

    nice -n 10 .venv/bin/python benchmarks/bench_own_model.py --repetitions 20 --throughput-rows 200000 1000000 \
        --render
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._keys import seeded_key_file  # noqa: E402
from benchmarks._report import publish  # noqa: E402
from lia_spark.cli.main import config_yaml  # noqa: E402
from lia_spark.engine.orchestration.registry import run_stage  # noqa: E402
from lia_spark.engine.spark.session import get_spark  # noqa: E402
from lia_spark.run import layout  # noqa: E402
from lia_spark.run.config import config_from_dict  # noqa: E402
from lia_spark.run.sections import SparkConfig  # noqa: E402

logger = logging.getLogger("bench_own_model")
TRAINER = Path(__file__).resolve().parent.parent / "tests" / "own_trainer.py"
TRAINER_BOOSTING = {"max_depth": 10, "n_estimators": 60, "learning_rate": 0.3, "early_stopping_rounds": 0}
KINDS = ("honest", "broken", "label_blind", "lia_spark")


def _config(root: Path, *, seed: int, rows: int, audit: dict | None = None, models: dict | None = None):
    """The run of ``seed`` in ``root``, its coins keyed on the seed's own audit key (benchmarks/_keys.py)."""
    key = seeded_key_file(root / f"seed{seed}.audit_key", seed)
    return config_from_dict({
        "run": {"name": "own-bench", "output_dir": str(root / "out"), "seed": seed},
        "synthetic": {"rows_per_day": rows, "days": 2},
        "models": {"sample_rows_per_day": 0, "hash_buckets": 1024, **(models or {})},
        "tracking": {"tracking_uri": f"sqlite:///{root / 'mlflow.db'}", "experiment": "own-bench"},
        "audit": {"key_path": key, **(audit or {})}})


def _train(config, root: Path, name: str, *arguments: str) -> tuple[str, Path]:
    """Run the team's trainer on the export: (model URI, its predictions table)."""
    predictions = root / f"{name}.parquet"
    done = subprocess.run([sys.executable, str(TRAINER), layout.export_path(config), "--tracking-uri",
                           config.tracking.tracking_uri, "--predictions", str(predictions), *arguments],
                          capture_output=True, text=True, check=True, cwd=root)
    return done.stdout.strip().splitlines()[-1], predictions


def repetition(spark, root: Path, *, seed: int, rows: int, epsilon: float) -> dict:
    """One draw of data, injection and training per kind: the audits' headlines."""
    base = _config(root, seed=seed, rows=rows)
    run_stage("generate", spark, base)
    injected = run_stage("inject", spark, base)
    truth = root / "truth.parquet"
    pd.read_parquet(Path(base.parquet_path) / f"day={base.models.target_day}", columns=["row_id", "label"]
                    ).to_parquet(truth)
    trainings = {"honest": ("--epsilon", str(epsilon)),
                 "broken": ("--epsilon", str(epsilon), "--flip-epsilon", "8"),
                 "label_blind": ("--epsilon", "inf", "--true-labels", str(truth))}
    found = {"seed": seed, "informative": injected.informative_canaries}
    for kind, arguments in trainings.items():
        _, predictions = _train(base, root, kind, *arguments, "--seed", str(seed))
        claim = math.inf if kind == "label_blind" else epsilon
        audited = run_stage("audit", spark, _config(root, seed=seed, rows=rows, audit={
            "predictions_path": str(predictions), "claimed_epsilon": claim}), reuse=False)
        found[kind] = {"eps_lb": audited.headline.eps_lb, "finding": audited.headline.is_finding}
    own = _config(root, seed=seed, rows=rows, audit={"shadows": 0, "baseline": "proxy"},
                  models={"training_mechanism": "rr", "epsilon": epsilon, **TRAINER_BOOSTING})
    run_stage("train", spark, own)
    audited = run_stage("audit", spark, own, reuse=False)
    found["lia_spark"] = {"eps_lb": audited.headline.eps_lb, "finding": audited.headline.is_finding,
                          "informative": audited.headline.informative_canaries}
    return found


LOCAL_PREDICT = """
import sys, time
import mlflow, pandas as pd
mlflow.set_tracking_uri(sys.argv[1])
model = mlflow.pyfunc.load_model(sys.argv[2])
frame = pd.read_parquet(sys.argv[3])
frame = frame[[column for column in frame.columns if column != "label"]]
started = time.perf_counter()
model.predict(frame)
print(len(frame) / (time.perf_counter() - started))
"""


AUDIT_PEAK = """
import re, sys
from lia_spark.cli.main import main
assert main(["audit", "--conf", sys.argv[1], f"audit.model_uri={sys.argv[2]}"]) == 0
with open("/proc/self/status", encoding="ascii") as status:  # VmHWM: this program's peak (ru_maxrss would carry the
    print(int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read())[1]) / 1024)  # forking parent's over exec)
"""


def throughput(spark, root: Path, *, rows: int) -> dict:
    """Rows/s of the audit's spark_udf scoring and of the model's in-process predict on the same rows (in a
    subprocess, so the driver never holds the rows), and the peak memory of the Python driver of `lia-spark audit
    audit.model_uri=...` run in its own process (the JVM's is capped by spark.driver.memory)."""
    from pyspark.sql import functions as F

    from lia_spark.tracking.model_scoring import model_udf

    config = _config(root, seed=1, rows=rows)
    run_stage("generate", spark, config)
    run_stage("inject", spark, config)
    uri, _ = _train(config, root, "model", "--epsilon", "1")
    export = spark.read.parquet(layout.export_path(config))
    columns = [column for column in export.columns if column != "label"]
    udf = model_udf(spark, uri, config.tracking.tracking_uri)
    started = time.perf_counter()
    export.select(udf(F.struct(*columns)).alias("p")).write.format("noop").mode("overwrite").save()
    spark_seconds = time.perf_counter() - started
    conf = root / "audit.yaml"
    conf.write_text(config_yaml(config), encoding="utf-8")
    audit = subprocess.run([sys.executable, "-c", AUDIT_PEAK, str(conf), uri], capture_output=True, text=True,
                           check=True, cwd=root)
    peak = float(audit.stdout.strip().splitlines()[-1])
    audited = json.loads((root / "out" / "results" / "audit.json").read_text(encoding="utf-8"))
    local = subprocess.run([sys.executable, "-c", LOCAL_PREDICT, config.tracking.tracking_uri, uri,
                            layout.export_path(config)], capture_output=True, text=True, check=True, cwd=root)
    local_rate = float(local.stdout.strip().splitlines()[-1])
    return {"rows": rows, "spark_rows_per_s": rows / spark_seconds, "local_rows_per_s": local_rate,
            "ratio": rows / spark_seconds / local_rate, "audit_seconds": audited["seconds"],
            "driver_peak_rss_mib": peak}


def render(found: dict, epsilon: float) -> str:
    reps = found["repetitions"]
    lines = ["## Auditing a model trained outside lia_spark (`lia-spark inject`, `audit.model_uri`)", ""]
    if reps:
        lines += [f"`benchmarks/bench_own_model.py`: {len(reps)} repetitions, each on a fresh twin of "
                  f"{found['rows']:,} rows per day (seed = repetition), injected by `lia-spark inject`, trained by "
                  "`tests/own_trainer.py` (plain xgboost, depth 10, 60 trees, its own randomized response; never "
                  "imports lia_spark) and audited by `audit.predictions_path` (95%, binomial, the default scores and "
                  f"sweep, the proxy as baseline). Claimed eps = {epsilon:g}.", "",
                  "| target | mean eps_lb | std | min | max | share > 0 | FINDINGs |", "|---|---|---|---|---|---|---|"]
        for kind in KINDS:
            values = np.array([rep[kind]["eps_lb"] for rep in reps])
            findings = sum(rep[kind]["finding"] for rep in reps)
            spread = values.std(ddof=1) if len(values) > 1 else 0.0
            lines.append(f"| {kind} | {values.mean():.3f} | {spread:.3f} | {values.min():.3f} | {values.max():.3f} | "
                         f"{np.mean(values > 0):.0%} | {findings}/{len(reps)} |")
        informative = np.array([rep["informative"] for rep in reps])
        own_informative = np.mean([rep["lia_spark"]["informative"] for rep in reps])
        lines += ["", f"Informative canaries (y1 != y0) per export: mean {informative.mean():,.0f} of "
                  f"{found['rows']:,} rows. `lia_spark` is the train stage's own RR target with the trainer's boosting "
                  "settings (its proxy too, so its y1 draws differ), audited against the proxy alone; its canaries "
                  f"are the 80% training split: mean m = {own_informative:,.0f} informative canaries."]
    if found.get("throughput"):
        lines += ["", "Scoring: `mlflow.pyfunc.spark_udf` over the export (2 Spark tasks, the model loaded once per "
                  "Python worker) against the pyfunc's own predict on the same rows in one process (xgboost on every "
                  "core); the driver's peak RSS is that of the Python process running `lia-spark audit "
                  "audit.model_uri=...` (nothing proportional to the canaries reaches it).", "",
                  "| canaries | spark_udf rows/s | in-process predict rows/s | ratio (Spark / in-process) | "
                  "audit seconds | driver peak RSS MiB |", "|---|---|---|---|---|---|"]
        for item in found["throughput"]:
            lines.append(f"| {item['rows']:,} | {item['spark_rows_per_s']:,.0f} | {item['local_rows_per_s']:,.0f} | "
                         f"{item['ratio']:.2f} | {item['audit_seconds']:.1f} | {item['driver_peak_rss_mib']:,.0f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=20)
    parser.add_argument("--rows", type=int, default=20_000, help="twin rows per day of each repetition")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--throughput-rows", type=int, nargs="*", default=[])
    parser.add_argument("--output", default="runs/bench_own_model/found.json")
    parser.add_argument("--render", action="store_true", help="write the section into BENCHMARKS.md")
    parser.add_argument("--from-output", help="re-render the tables of a finished run's JSON (no Spark)")
    args = parser.parse_args()
    if args.from_output:
        found = json.loads(Path(args.from_output).read_text(encoding="utf-8"))
        publish("own_model", render(found, found["epsilon"]), render=args.render)
        return 0
    logging.basicConfig(level=logging.WARNING)
    spark = get_spark(SparkConfig(master="local[2]", driver_memory="4g", shuffle_partitions=4,
                                  extra={"spark.ui.enabled": "false"}))
    found = {"rows": args.rows, "epsilon": args.epsilon, "repetitions": [], "throughput": []}
    for index in range(args.repetitions):
        root = Path(tempfile.mkdtemp(prefix="bench-own-"))
        try:
            found["repetitions"].append(repetition(spark, root, seed=index + 1, rows=args.rows, epsilon=args.epsilon))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(json.dumps(found["repetitions"][-1]), flush=True)
    for rows in args.throughput_rows:
        root = Path(tempfile.mkdtemp(prefix="bench-own-"))
        try:
            found["throughput"].append(throughput(spark, root, rows=rows))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(json.dumps(found["throughput"][-1]), flush=True)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(found, indent=1), encoding="utf-8")
    publish("own_model", render(found, args.epsilon), render=args.render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
