"""Single-core maximal-leakage kernel throughput, as a ratio to the posterior kernel at the same k (docs/math.md §7).

Run: .venv/bin/python benchmarks/bench_leakage.py [--quick]. Writes the "leakage_kernel" section of
BENCHMARKS.md. Same bags as benchmarks/bench_posteriors.py (priors Beta(2, 30), eps = 1); rows per CPU-second
(process_time), best of a few repeats. Also priors 1/2 (the widest leave-one-out pmfs: the kernel's worst case).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._report import write_section  # noqa: E402
from benchmarks.bench_posteriors import EPSILON, best_time, kernel_call, make_bags  # noqa: E402
from lia_spark.kernels import leakage  # noqa: E402

MECHANISMS = {"llp": "llp", "laplace": "llp_laplace", "geometric": "llp_geometric"}


def leakage_call(mechanism: str, priors: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    name = MECHANISMS[mechanism]
    return leakage.per_row_bags(name, priors, sizes, epsilon=np.inf if name == "llp" else EPSILON)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rows and repeats")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else 3
    rows = 200_000 if args.quick else 1_000_000
    lines = ["## Maximal-leakage kernel (single core, `benchmarks/bench_leakage.py`)", "",
             "Per-row leakage log(1 + TV) of `lia_spark.kernels.leakage.per_row_bags`, rows per CPU-second of one "
             "core, "
             f"best of {repeats}; ratio = leakage rows/s / posterior-kernel rows/s on the same bags (eps = 1).",
             "", "| priors | mechanism | k | leakage rows/s | posterior rows/s | ratio |", "|---|---|---|---|---|---|"]
    for label, half in (("Beta(2, 30)", False), ("1/2 (no ratio)", True)):
        for k in (8, 64, 512):
            n_bags = max(rows // k, 1) if not half else max(rows // (8 * k), 1)
            priors, sizes, values = make_bags(k, n_bags, seed=k)
            if half:  # the widest leave-one-out pmfs; the releases of make_bags do not fit these priors
                priors = np.full(priors.size, 0.5)
            for mechanism in MECHANISMS:
                leakage_call(mechanism, priors[:4 * k], sizes[:4])
                t_leak = best_time(lambda: leakage_call(mechanism, priors, sizes), repeats)
                leak_rate = priors.size / t_leak
                if half:
                    lines.append(f"| {label} | {mechanism} | {k} | {leak_rate:,.0f} | - | - |")
                    continue
                kernel_call(mechanism, priors[:4 * k], sizes[:4], values[mechanism][:4])
                post_rate = priors.size / best_time(lambda: kernel_call(mechanism, priors, sizes, values[mechanism]),
                                                    repeats)
                lines.append(f"| {label} | {mechanism} | {k} | {leak_rate:,.0f} | {post_rate:,.0f} | "
                             f"{leak_rate / post_rate:.2f} |")
    markdown = "\n".join(lines)
    print(markdown)
    write_section("leakage_kernel", markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
