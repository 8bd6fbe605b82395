"""Log-loss label inference on 1M labels against the numpy oracle (docs/math.md §8): queries and wall time.

Run: .venv/bin/python benchmarks/bench_logloss.py [--quick]. Writes the "logloss_attack" section of
BENCHMARKS.md. Labels ~ Bernoulli(0.032) (a click day). Every query is an honest oracle call: the float64
log-loss of a full N-row prediction vector, so the wall time is dominated by the oracle (N log evaluations per
query); on a shared 2-core machine each attack runs its first queries (every block is decoded independently with
the same plan) and the wall time is extrapolated to all queries (marked). The single-query attack in exact
arithmetic is timed end to end (oracle + decoding).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._report import write_section  # noqa: E402
from lia_spark.kernels import logloss  # noqa: E402

CLICK_RATE = 0.032


def block_attack(labels: np.ndarray, settings: logloss.OracleSettings, attack: str, *, max_queries: int) -> dict:
    """Run (at most max_queries of) one attack; wall time extrapolated to all queries when cut short."""
    n = labels.size
    tolerance = (settings.error_bound(failure_probability=1e-6)
                 + logloss.float64_tolerance(n_rows=n, max_loss=logloss.LN2 + 2 * logloss.MAX_WEIGHT / n))
    plan = logloss.plan(attack, n_rows=n, tolerance=tolerance)
    oracle = logloss.numpy_oracle(labels, settings, seed=1)
    run = min(plan.queries, max_queries)
    started = time.perf_counter()
    recovered = logloss.run_block_attack(plan, lambda start, block: oracle(logloss.full_predictions(n, start, block)),
                                         blocks=run)
    seconds = time.perf_counter() - started
    return {"attack": attack, "oracle": settings.name, "labels_per_query": plan.block_size, "queries": plan.queries,
            "run": run, "seconds": seconds * plan.queries / run,
            "accuracy": float((recovered == labels[:recovered.size]).mean())}


def single_query(n: int, rng: np.random.Generator) -> tuple[float, float]:
    labels = rng.binomial(1, CLICK_RATE, n)
    started = time.perf_counter()
    odds = logloss.primes(n)
    recovered = logloss.single_query_decode(logloss.exact_likelihood(labels, odds), odds)
    return time.perf_counter() - started, float((recovered == labels).mean())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100k labels, fewer queries")
    args = parser.parse_args(argv)
    n = 100_000 if args.quick else 1_000_000
    budget = 300 if args.quick else 1000
    rng = np.random.default_rng(2026)
    labels = rng.binomial(1, CLICK_RATE, n)
    rows = []
    for settings in (logloss.OracleSettings(), logloss.OracleSettings(decimals=9),
                     logloss.OracleSettings(noise="laplace", noise_scale=1e-9)):
        for attack in logloss.ATTACKS:
            rows.append(block_attack(labels, settings, attack, max_queries=budget))
            print(rows[-1], flush=True)
    lines = ["## Log-loss label inference (`benchmarks/bench_logloss.py`)", "",
             f"{n:,} labels ~ Bernoulli({CLICK_RATE}), numpy oracle (float64 log-loss of the full N-row vector per "
             "query, then the oracle's rounding or noise); tolerance = the oracle's error bound at failure "
             "probability 1e-6 per query + the float64 summation bound. Wall time on one core; rows marked * ran "
             f"their first {budget} queries and are extrapolated to all queries.", "",
             "| attack | oracle | labels/query | queries for N | wall time (s) | per query (ms) | accuracy |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        mark = "*" if row["run"] < row["queries"] else ""
        lines.append(f"| {row['attack']} | {row['oracle']} | {row['labels_per_query']} | {row['queries']:,} | "
                     f"{row['seconds']:,.0f}{mark} | {1000 * row['seconds'] / row['queries']:.1f} | "
                     f"{row['accuracy']:.6f} |")
    lines += ["", "Single query in exact arithmetic (Theorem 1: odds = the first N primes, the exact oracle's "
              "rational answer, decoding by divisibility), oracle + decoding:", "",
              "| N | seconds | accuracy |", "|---|---|---|"]
    for size in (10_000, 30_000) if not args.quick else (10_000,):
        seconds, accuracy = single_query(size, rng)
        lines.append(f"| {size:,} | {seconds:.2f} | {accuracy:.6f} |")
    markdown = "\n".join(lines)
    print(markdown)
    write_section("logloss_attack", markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
