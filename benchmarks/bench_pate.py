"""Benchmark: PATE's T teachers on Spark vs one after another on the driver, and the PATE target's utility per
claimed eps on the synthetic twin (the votes are computed once and reused: they do not depend on eps). Writes the
"pate" section of BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_pate.py [--rows 200000] [--teachers 100] [--queries 10000] [--out runs/bench_pate]
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

from benchmarks._report import process_tree_cpu_seconds, write_section  # noqa: E402
from benchmarks.bench_training import _twin  # noqa: E402
from lia_spark.engine.models import feature_frames  # noqa: E402
from lia_spark.engine.models.preparation import (Preparation, boosting_params, pate_settings,  # noqa: E402
                                                 prepare_days, training_seed)
from lia_spark.engine.spark.session import get_spark  # noqa: E402
from lia_spark.kernels import mechanism_registry, pate, training  # noqa: E402

EPSILONS = (math.inf, 8.0, 4.0, 2.0, 1.0, 0.1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--teachers", type=int, default=100)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--out", default="runs/bench_pate")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    spark = get_spark(None)
    config = _twin(spark, args.out, args.rows, [f"pate.teachers={args.teachers}", f"pate.queries={args.queries}",
                                                    "models.training_mechanism=pate"])
    m = config.models
    prepared = prepare_days(spark, config, feature_frames.read_day(spark, config.parquet_path, m.proxy_day),
                            feature_frames.read_day(spark, config.parquet_path, m.target_day), Preparation())
    data, seed, params = prepared.target_data, training_seed(config), boosting_params(config)
    train = data.split == training.SPLIT_TRAIN
    students = training.student_rows(data, settings=pate.PateSettings(queries=config.pate.queries), seed=seed)
    settings = pate_settings(config, feature_frames.read_day(spark, config.parquet_path, m.target_day),
                             prepared.target_spec)
    sequential = pate.sequential_votes(data.row_ids[train], data.rows(train), data.labels[train],
                                       teachers=args.teachers, model=training.teacher_model(params))
    timings, cpu, votes = {}, {}, {}
    # CPU: the whole process tree for Spark; the driver alone for the sequential path (Spark's idle Python
    # workers may be stopped meanwhile and take their earlier time out of the tree)
    for name, votes_of, cpu_clock in (("spark", settings.votes, process_tree_cpu_seconds),
                                      ("sequential", sequential, time.process_time)):
        started, cpu_started = time.monotonic(), cpu_clock()
        votes[name] = votes_of(data.row_ids[students], data.rows(students), seed)
        timings[name], cpu[name] = time.monotonic() - started, cpu_clock() - cpu_started
    same = bool((votes["spark"] == votes["sequential"]).all())
    reuse = dataclasses.replace(settings, votes=lambda *_: votes["spark"])
    test = data.split == training.SPLIT_TEST
    plain = mechanism_registry.train_target(data, mechanism="none", epsilon=math.inf, seed=seed, params=params)
    reference = training.binary_metrics(data.labels[test], plain.model.predict(data.rows(test)))
    rows = []
    for labels, epsilon in ((labels, epsilon) for labels in pate.STUDENT_LABELS for epsilon in EPSILONS):
        fit = training.train_pate(data, epsilon=epsilon, seed=seed, params=params,
                                  settings=dataclasses.replace(reuse, student_labels=labels))
        scores = training.binary_metrics(data.labels[test], fit.model.predict(data.rows(test)))
        report = fit.report
        rows.append(f"| {labels} | {epsilon:g} | {report['epsilon']:.3f} | {report['sigma']:.1f} | "
                    f"{report['student_label_rate']:.4f} ({report['student_true_rate']:.4f}) | "
                    f"{report['student_label_agreement']:.4f} | {scores['auc']:.4f} | {scores['log_loss']:.4f} | "
                    f"{scores['log_loss'] / reference['log_loss']:.3f} |")
        print(rows[-1], flush=True)
    proxy = training.binary_metrics(data.labels[test], prepared.proxy_prediction[test])
    write_section("pate", "\n".join([
        f"## PATE (`benchmarks/bench_pate.py --rows {args.rows} --teachers {args.teachers}`)",
        "",
        f"Synthetic twin, {args.rows} rows per day; T = {args.teachers} teachers on all {int(train.sum())} training "
        f"rows (about {int(train.sum()) // args.teachers} each), Q = {config.pate.queries} student queries drawn from "
        f"those rows, GNMax, delta = {config.pate.settings().delta:g}; boosting defaults ({m.n_estimators} trees, "
        "depth "
        f"{m.max_depth}); each teacher's vote is drawn from its predicted click probability and each student label "
        "from the noisy vote share (Wu et al.'s Criteo protocol, docs/math.md §4.6). Student labels: `share` (the "
        "default: the clipped noisy vote share as a soft label) or `sampled` (a draw from it, as Wu et al.'s code); "
        "teachers and student early-stop on their own held-out rows.",
        "",
        "| teachers fitted | wall s | CPU s (Spark: driver, JVM and Python workers; sequential: the driver) |",
        "|---|---|---|",
        f"| Spark: teacher frame built on the executors from the day's rows (features encoded again), "
        f"groupBy(teacher).applyInPandas, one thread per teacher | {timings['spark']:.1f} | {cpu['spark']:.1f} |",
        f"| sequential on the driver (features already collected), one thread | {timings['sequential']:.1f} | "
        f"{cpu['sequential']:.1f} |",
        "",
        f"Votes identical on both paths: {same}.",
        "",
        "| student labels | claimed eps | accounted eps | sigma | student label click rate (true) | agreement with "
        "the true labels | test AUC | test log-loss | log-loss / non-private |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Non-private target (all training rows, true labels) on the same test rows: AUC {reference['auc']:.4f}, "
        f"log-loss {reference['log_loss']:.4f}. Proxy (true labels, earlier day): AUC {proxy['auc']:.4f}, log-loss "
        f"{proxy['log_loss']:.4f}.",
        "",
        "At eps = inf the student labels keep the true click rate (the votes are draws from calibrated teachers), so "
        "the student is calibrated; the soft share has the label's mean with less variance than a draw from it. "
        "With noise (sigma 90 to 4,800 against T = 100 votes) clipping the noisy counts at 0 pulls the share of a "
        "row with mostly-0 votes toward 1/2: the student labels' click rate rises to 26-49% and the student "
        "over-predicts clicks, the utility cost of the accounted noise at Q = 10,000 queries.",
    ]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
