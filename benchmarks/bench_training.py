"""Benchmark: proxy/target AUC on the synthetic twin, training time per million rows per library and path,
and the mechanism x eps/k -> test AUC table (privacy-utility tradeoff). Writes the "training" section of
BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_training.py [--rows 1000000] [--utility-rows 200000] [--out runs/bench_training]
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._report import write_section  # noqa: E402
from lia_spark.engine.orchestration.registry import run_stage  # noqa: E402
from lia_spark.engine.spark.session import get_spark  # noqa: E402
from lia_spark.run.config import load_config  # noqa: E402

logger = logging.getLogger("bench_training")


def _twin(spark, out: str, rows: int, extra: list[str]):
    config = load_config(None, [f"run.output_dir={out}", f"synthetic.rows_per_day={rows}", "synthetic.days=2", *extra])
    if os.path.exists(os.path.join(config.parquet_path, "_LIA_COMPLETE")):
        logger.info("twin at %s exists, reused", config.parquet_path)  # local benchmark folders only
    else:
        run_stage("generate", spark, config)
    return config


def _per_million(result, model: str = "target") -> float:
    return result.seconds[f"fit_{model}"] / (result.rows["train_target"] + result.rows["valid_target"]) * 1e6


def _model_row(name: str, result, *, proxy_fallback: float) -> str:
    """Table row: proxy AUC on its own day (else ``proxy_fallback``), target test AUC and log-loss, s per 1M rows."""
    metrics = result.metrics()
    return (f"| {name} | {metrics.get('auc_test_proxy_own_day', proxy_fallback):.4f} | "
            f"{metrics['auc_test_target']:.4f} | {metrics['log_loss_test_target']:.4f} | {_per_million(result):.1f} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per day for the AUC band and timings")
    parser.add_argument("--utility-rows", type=int, default=200_000, help="rows per day for the utility table")
    parser.add_argument("--epsilons", default="inf,4,1,0.1")
    parser.add_argument("--bag-sizes", default="8,64")
    parser.add_argument("--trees", type=int, default=200)
    parser.add_argument("--skip", default="",
                        help="comma list of parts to skip: big,distributed,catboost,posteriors,utility")
    parser.add_argument("--out", default="runs/bench_training")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    skip = set(filter(None, args.skip.split(",")))
    spark = get_spark(load_config(None, ["spark.driver_memory=8g"]).spark)
    base = [f"models.n_estimators={args.trees}"]
    lines = ["## Training (issue 5)", "",
             f"Synthetic twin, {args.rows:,} rows/day (proxy day 0, target day 1; split 80/4/16), "
             f"XGBoost hist depth 6, eta 0.1, <= {args.trees} trees with early stopping (20).", "",
             "| library / path | proxy AUC (own day) | target AUC | target log-loss | fit s per 1M rows |",
             "|---|---|---|---|---|"]
    runs = [] if "big" in skip else [("xgboost / in_memory", [])]
    if not {"big", "distributed"} & skip:
        runs.append(("xgboost / distributed (xgboost.spark)", ["models.execution=distributed"]))
    big_out = os.path.join(args.out, "big")
    if runs:
        _twin(spark, big_out, args.rows, base)
    for name, extra in runs:
        config = load_config(None, [f"run.output_dir={big_out}", "run.force=true", *base, *extra])
        result = run_stage("train", spark, config)
        lines.append(_model_row(name, result, proxy_fallback=result.metrics()["auc_test_proxy"]))
        write_section("training", "\n".join(lines))
    small = _twin(spark, os.path.join(args.out, "small"), args.utility_rows, base)
    if "catboost" not in skip:
        config = load_config(None, [f"run.output_dir={small.run.output_dir}", "run.force=true", *base,
                                    "models.library=catboost"])
        result = run_stage("train", spark, config)
        lines.append(_model_row(f"catboost / in_memory ({args.utility_rows:,} rows/day)", result,
                                proxy_fallback=math.nan))
        write_section("training", "\n".join(lines))
    grid = [f"utility.epsilons=[{args.epsilons}]", f"utility.bag_sizes=[{args.bag_sizes}]"]
    if "posteriors" not in skip:
        finite = ",".join(e for e in args.epsilons.split(",") if e.strip() not in ("inf", ".inf"))
        run_stage("posteriors", spark, load_config(None, [f"run.output_dir={small.run.output_dir}", "run.force=true",
                                                 "mechanisms.write_rows=false",
                                                 f"mechanisms.epsilons=[{finite}]",
                                                 f"mechanisms.bag_sizes=[1,{args.bag_sizes}]"]))
    if "utility" not in skip:
        config = load_config(None, [f"run.output_dir={small.run.output_dir}", "run.force=true", *base, *grid])
        started = time.monotonic()
        utility = run_stage("utility", spark, config)
        lines += ["", f"Mechanism x eps/k -> target test AUC ({args.utility_rows:,} rows/day twin, target day 1; "
                  f"{utility.settings} settings in {time.monotonic() - started:.0f} s). Advantage columns come "
                  "from OUT/posteriors/summary when present, else RR's closed form (RR family) or blank.", "",
                  "| mechanism | eps | k | test AUC | log-loss | mean additive adv. | abs I p98 | fit s |",
                  "|---|---|---|---|---|---|---|---|"]
        for row in utility.table:
            lines.append(f"| {row['mechanism']} | {row['epsilon']} | {row['bag_size']} | {row['auc']:.4f} | "
                         f"{row['log_loss']:.4f} | {row['mean_additive_advantage']:.4f} | {row['abs_I_p98']:.3g} | "
                         f"{row['fit_seconds']:.1f} |")
        lines.append("")
        lines.append(f"Plots: `{utility.artifacts()[1]}`, `{utility.artifacts()[2]}`.")
        write_section("training", "\n".join(lines))
    logger.info("done: %s", dataclasses.asdict(small.run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
