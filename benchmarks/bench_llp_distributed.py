"""Benchmark: learning from bag proportions in memory (proportion matching, docs/math.md §4.4) against
xgboost.spark (the debiased bag-proportion regression, §4.7) on the same twin days, bags and boosting settings.
Writes the "llp_distributed" section of BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_llp_distributed.py [--rows 1000000] [--bag-sizes 8,64]
        [--mechanisms llp,llp_laplace:1] [--data <existing day-partitioned twin>] [--out runs/bench_llp_distributed]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._report import process_tree_cpu_seconds, write_section  # noqa: E402
from benchmarks.bench_training import _twin  # noqa: E402
from lia_spark.engine.orchestration.registry import run_stage  # noqa: E402
from lia_spark.engine.spark.session import get_spark  # noqa: E402
from lia_spark.run.config import load_config  # noqa: E402

EXECUTIONS = ("in_memory", "distributed")


def _settings(text: str) -> list[tuple[str, str]]:
    """``llp,llp_laplace:1`` -> [(llp, inf), (llp_laplace, 1)]: mechanism and claimed eps."""
    return [(item.split(":")[0], item.split(":")[1] if ":" in item else "inf") for item in text.split(",")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per day of the generated twin")
    parser.add_argument("--bag-sizes", default="8,64")
    parser.add_argument("--mechanisms", default="llp", help="comma list of mechanism[:eps]")
    parser.add_argument("--data", default="", help="an existing day-partitioned twin instead of generating one")
    parser.add_argument("--out", default="runs/bench_llp_distributed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spark = get_spark(None)
    data = args.data or _twin(spark, args.out, args.rows, []).parquet_path
    rows = []
    for mechanism, epsilon in _settings(args.mechanisms):
        for bag_size in (int(k) for k in args.bag_sizes.split(",")):
            results = {}
            for execution in EXECUTIONS:
                config = load_config(None, [
                    f"run.output_dir={args.out}/{mechanism}-eps{epsilon}-k{bag_size}-{execution}",
                    f"data.parquet_path={data}", "run.force=true", f"models.training_mechanism={mechanism}",
                    f"models.epsilon={epsilon}", f"models.bag_size={bag_size}", f"models.execution={execution}"])
                cpu = process_tree_cpu_seconds()
                results[execution] = (run_stage("train", spark, config), process_tree_cpu_seconds() - cpu)
            (local, local_cpu), (spread, spread_cpu) = (results[execution] for execution in EXECUTIONS)
            auc = {name: result.test_metrics["auc@target"] for name, (result, _) in results.items()}
            rows.append(
                f"| {mechanism} | {epsilon} | {bag_size} | {local.rows['train_target']:,} | {auc['in_memory']:.4f} | "
                f"{auc['distributed']:.4f} | {auc['distributed'] - auc['in_memory']:+.4f} | "
                f"{local.test_metrics['log_loss@target']:.4f} / {spread.test_metrics['log_loss@target']:.4f} | "
                f"{local.seconds['total']:.0f} / {spread.seconds['total']:.0f} | "
                f"{local_cpu:.0f} / {spread_cpu:.0f} |")
            write_section("llp_distributed", "\n".join([
                f"## Proportion matching distributed (`benchmarks/bench_llp_distributed.py --bag-sizes "
                f"{args.bag_sizes} --mechanisms {args.mechanisms}`)",
                "",
                "The target day's training rows bagged and released once (the same bags and proportions on both "
                "paths); in memory: proportion matching (docs/math.md §4.4, custom objective on the driver); "
                "distributed: xgboost.spark squared-error regression of each row's released proportion, debiased "
                "to P(y=1|x) (§4.7). XGBoost defaults (<= 200 trees, depth 6, eta 0.1, early stopping 20), test "
                "rows of the target day (16%), true labels.",
                "",
                "| mechanism | eps | k | training rows | test AUC in memory | test AUC distributed | difference | "
                "log-loss (in memory / distributed) | train stage s | train stage CPU s |",
                "|---|---|---|---|---|---|---|---|---|---|",
                *rows,
            ]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
