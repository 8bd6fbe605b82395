"""Validity and tightness study of the audit on randomized response (observational paper, App. 11).

Runs in-process (no Spark): ``python jobs/validate_rr.py --output runs/validity [--n 1000000] [--repetitions 100]``
writes ``validity_rr.csv`` (eps_lb mean +- std and share of repetitions with eps_lb > eps per setting) and
``validity_rr.png`` (eps_lb against the true eps). Exit code 1 when a valid measure exceeds eps in more than
5% of the repetitions.
"""
import argparse
import logging
import os
import sys
import time

from lia_spark import validity

logger = logging.getLogger("lia_spark.validate_rr")
VALID_MEASURES = ("sweep, bonferroni", "c'=0.1%", "c'=1.0%")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/validity", help="folder for validity_rr.csv and .png")
    parser.add_argument("--n", type=int, default=1_000_000, help="canaries (rows of the Gaussian mixture)")
    parser.add_argument("--repetitions", type=int, default=100)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--seed", type=int, default=20261122)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    started = time.monotonic()
    table = validity.study(n=args.n, epsilons=tuple(args.epsilons), repetitions=args.repetitions, seed=args.seed)
    os.makedirs(args.output, exist_ok=True)
    table.to_csv(os.path.join(args.output, "validity_rr.csv"), index=False)
    validity.plot_study(table, path=os.path.join(args.output, "validity_rr.png"))
    print(validity.markdown_table(table))
    logger.info("validity study done in %.0f s", time.monotonic() - started)
    invalid = table[table["measure"].isin(VALID_MEASURES) & (table["share_above"] > 0.05)]
    if len(invalid):
        logger.error("eps_lb > eps in more than 5%% of the repetitions:\n%s", invalid.to_string(index=False))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
