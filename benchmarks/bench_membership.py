"""Benchmark: the membership-inference baseline beside the observational label-inference audit, for targets
trained with randomized response at each claimed eps on the synthetic twin (docs/math.md §5.8). Each eps trains
the ordinary target (audited by label inference) and the membership run's own target (the non-member candidates
left out), then audits both; the proxy and the target day's features are prepared once in the process. Writes
the "membership" section of BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_membership.py [--rows 200000] [--epsilons 1,2,4,8] [--candidates 20000]
        [--repetitions 20] [--out runs/bench_membership]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._report import write_section  # noqa: E402
from benchmarks.bench_training import _twin  # noqa: E402
from lia_spark.engine.models.preparation import Preparation  # noqa: E402
from lia_spark.engine.orchestration.registry import run_stage  # noqa: E402
from lia_spark.engine.spark.session import get_spark  # noqa: E402
from lia_spark.names import ATTACKS, LABEL_INFERENCE, MEMBERSHIP  # noqa: E402
from lia_spark.run.config import load_config  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epsilons", default="1,2,4,8")
    parser.add_argument("--candidates", type=int, default=20_000, help="2m membership candidates")
    parser.add_argument("--repetitions", type=int, default=20, help="repetitions of the label-inference audit")
    parser.add_argument("--out", default="runs/bench_membership")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    spark = get_spark(None)
    twin = _twin(spark, args.out, args.rows, [])
    rows, preparation = [], Preparation()
    for epsilon in (float(value) for value in args.epsilons.split(",")):
        cells = {}
        for attack in ATTACKS:
            config = load_config(None, [
                f"run.output_dir={args.out}/{attack}-eps{epsilon:g}", f"data.parquet_path={twin.parquet_path}",
                "run.force=true", "models.training_mechanism=rr", f"models.epsilon={epsilon}",
                f"audit.attack={attack}", f"audit.membership_candidates={args.candidates}",
                f"audit.repetitions={args.repetitions}"])
            trained = run_stage("train", spark, config, preparation=preparation)
            cells[attack] = (trained, run_stage("audit", spark, config))
        (trained, inference), (own_run, baseline) = cells[LABEL_INFERENCE], cells[MEMBERSHIP]
        rows.append(
            f"| {epsilon:g} | {inference.headline.eps_lb:.3f} ({inference.headline.eps_lb_mean:.3f}) | "
            f"{inference.canaries} | {inference.seconds:.1f} | {baseline.headline.eps_lb:.3f} | {baseline.canaries} | "
            f"{own_run.seconds['train_target']:.1f} | {baseline.seconds:.1f} | "
            f"{trained.test_metrics['auc@target']:.4f} / {own_run.test_metrics['auc@target']:.4f} |")
    write_section("membership", "\n".join([
        f"## Membership baseline vs label inference (`benchmarks/bench_membership.py --rows {args.rows} "
        f"--candidates {args.candidates} --repetitions {args.repetitions}`)",
        "",
        f"Synthetic twin, {args.rows} rows per day, targets trained with RR (XGBoost defaults); valid 95% bounds "
        "(binomial, Bonferroni over the sweep), headline = first repetition. Label inference: the observational "
        f"audit of the ordinary target's training rows, {args.repetitions} repetitions of the game (mean in "
        f"brackets), no extra training. Membership: its own target run, the non-members among {args.candidates} "
        "candidates left out; one repetition per run. Seconds: the target's fit in the membership run (the "
        "baseline's extra cost; the proxy is shared in-process) and each audit stage end to end.",
        "",
        "| claimed eps | label inference eps_lb (mean) | its canaries | its audit s | membership eps_lb | its "
        "candidates | its own target training s | its audit s | target test AUC (ordinary / membership run) |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
