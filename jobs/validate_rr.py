"""Validity and tightness study of the audit on randomized response (Kalemaj et al., "Observational Auditing of
Label Privacy", 2025, arXiv:2511.14084, App. 11), every draw on fresh data, release and game.

Runs in-process (no Spark), one process:
``python jobs/validate_rr.py --output runs/validity [--n 500000] [--draws 50] [--null-draws 50] [--minutes 20]``
writes ``validity_rr_draws.csv`` (one row per draw, cell, score and convention), ``validity_rr.csv`` (the
summary: eps_lb mean +- std, share of draws with eps_lb > eps and > 0, eps_lb / eps, eps_lb / ceiling),
``validity_rr.json`` (parameters, draws run, wall time, default score), ``validity_rr.png`` and
``validity_rr.md`` (the tables). ``--from-draws DIR`` re-renders them from a finished run's draws. Exit code 1
when a Bonferroni measure has eps_lb > eps in more than 5% of the draws of an RR cell, or eps_lb > 0 in more than
5% of the draws of a null cell.
"""
import argparse
import json
import logging
import os
import sys
import time

import pandas as pd

from lia_spark.kernels import canary_scores
from lia_spark.present import charts
from lia_spark.studies import validity

logger = logging.getLogger("lia_spark.validate_rr")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/validity", help="folder for the outputs")
    parser.add_argument("--n", type=int, default=500_000, help="canaries (rows of the Gaussian mixture) per draw")
    parser.add_argument("--draws", type=int, default=50, help="independent draws per RR cell")
    parser.add_argument("--null-draws", type=int, default=None, help="independent draws per null cell")
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(validity.EPSILONS))
    parser.add_argument("--proxies", nargs="+", default=list(validity.PROXIES), choices=validity.PROXIES)
    parser.add_argument("--scores", nargs="+", default=list(canary_scores.DEFAULT_SCORES))
    parser.add_argument("--minutes", type=float, default=None, help="start no new draw after this wall time")
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("--from-draws", default=None, help="re-render from DIR/validity_rr_draws.csv")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.makedirs(args.output, exist_ok=True)
    if args.from_draws:
        records = pd.read_csv(os.path.join(args.from_draws, "validity_rr_draws.csv"), keep_default_na=False,
                              na_values={"informative": ["nan", "NaN", ""]})
        with open(os.path.join(args.from_draws, "validity_rr.json"), encoding="utf-8") as handle:
            meta = json.load(handle)
    else:
        started = time.monotonic()
        records = validity.study(n=args.n, epsilons=tuple(args.epsilons), draws=args.draws,
                                 null_draws=args.null_draws, proxies=tuple(args.proxies),
                                 scores=tuple(args.scores), seed=args.seed,
                                 time_budget=None if args.minutes is None else 60.0 * args.minutes)
        meta = {**records.attrs, "wall_seconds": time.monotonic() - started}
        records.to_csv(os.path.join(args.output, "validity_rr_draws.csv"), index=False)
    summary = validity.summarize_study(records)
    meta["default_score"] = validity.pick_default(summary).score
    summary.to_csv(os.path.join(args.output, "validity_rr.csv"), index=False)
    with open(os.path.join(args.output, "validity_rr.json"), "w", encoding="utf-8") as handle:
        json.dump(meta, handle, indent=2)
    if (records["setting"] == "rr").any():
        charts.plot_study(records, path=os.path.join(args.output, "validity_rr.png"))
    report = validity.markdown_report(records)
    with open(os.path.join(args.output, "validity_rr.md"), "w", encoding="utf-8") as handle:
        handle.write(report + "\n")
    print(report)
    logger.info("validity study: %s draws (null: %s) in %.0f s; default score %s", meta.get("draws_run"),
                meta.get("null_draws_run"), meta.get("wall_seconds", float("nan")), meta["default_score"])
    invalid = validity.invalid_cells(summary)
    if len(invalid):
        logger.error("valid measures exceed their error rate:\n%s", invalid.to_string(index=False))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
