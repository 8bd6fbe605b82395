"""Single-core throughput of the label-free recalibration kernel (docs/math.md §5.11) against the numpy ceiling.

Run: .venv/bin/python benchmarks/bench_recalibration.py [--rows 10000000]. Writes the "recalibration_kernel"
section of BENCHMARKS.md. Predictions like the twin's (proxy logit ~ N(-3.4, 1), target = proxy + 0.5 + N(0, 0.4) in
logit); rows per CPU-second (process_time), best of 3. The ceiling: one numpy pass that reads the two columns and
writes one (``np.add``), the least any map of one column onto the other's scale must do.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._report import write_section  # noqa: E402
from benchmarks.bench_posteriors import best_time  # noqa: E402
from lia_spark.kernels import recalibration  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    proxy_logit = rng.normal(-3.4, 1.0, args.rows)
    proxy = 1.0 / (1.0 + np.exp(-proxy_logit))
    target = 1.0 / (1.0 + np.exp(-(proxy_logit + 0.5 + rng.normal(0.0, 0.4, args.rows))))
    totals = recalibration.bin_sums(target, proxy)
    mapping = recalibration.RecalibrationMap.fit(*totals)
    out = np.empty_like(proxy)
    seconds = {
        "bin totals (one batch: bins, counts, fixed-point sums)": best_time(
            lambda: recalibration.bin_sums(target, proxy), 3),
        "fit (pool adjacent violators on the bins)": best_time(lambda: recalibration.RecalibrationMap.fit(*totals), 3),
        "apply (interpolation in logit)": best_time(lambda: mapping(target), 3),
    }
    ceiling = best_time(lambda: np.add(target, proxy, out=out), 3)
    lines = ["## Recalibration kernel (single core, `benchmarks/bench_recalibration.py`)", "",
             f"{args.rows:,} canaries; `lia_spark.kernels.recalibration` ({recalibration.BINS} logit bins, "
             f"{mapping.centres.size} non-empty here); rows per CPU-second of one core, best of 3; ratio = the numpy "
             f"ceiling (one pass reading both columns, writing one: {args.rows / ceiling:,.0f} rows/s) / the step.",
             "", "| step | rows/s | ceiling / step |", "|---|---|---|"]
    for step, spent in seconds.items():
        rate = args.rows / spent if step.startswith(("bin", "apply")) else float("nan")
        ratio = f"{ceiling and spent / ceiling:.1f}" if rate == rate else "-"
        shown = f"{rate:,.0f}" if rate == rate else f"{spent * 1e3:.2f} ms per fit"
        lines.append(f"| {step} | {shown} | {ratio} |")
    lines += ["", "On Spark the map costs two passes over the canaries (totals, then the mapped column) and at most "
              f"{recalibration.BINS} rows to the driver; measured end to end per audit in "
              "benchmarks/table_conventions.json (`recalibrated_seconds`: 3-13 s per 1M-row-day cell, the audit "
              "included)."]
    write_section("recalibration_kernel", "\n".join(lines), after="table_conventions")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
