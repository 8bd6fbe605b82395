"""Benchmark the epsilon lower bounds (docs/math.md §6): single calls, a 101-point sweep, and 100 audit repetitions.

Floor: one scipy.stats.binom.sf call at the same c' (the unit of work of any binomial bound), measured in
the same run; every figure is quoted as time and as a ratio to that floor. Writes section "bounds" of
BENCHMARKS.md. Run: .venv/bin/python benchmarks/bench_bounds.py
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import time

import numpy as np
from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._report import write_section  # noqa: E402
from lia_spark.kernels import bounds  # noqa: E402

M = 1_000_000
DELTA = 1e-5
RR_ACCURACY = math.e / (1 + math.e)  # RR(eps=1): a realistic accuracy on the guessed rows
FAMILIES = (("binomial", 0.0), ("binomial", DELTA), ("gdp", DELTA))


def timed(fn, repeat: int = 5) -> float:
    """Median wall time of fn() in seconds over `repeat` runs."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def label(method: str, delta: float) -> str:
    return {"binomial": "binomial pure" if delta == 0 else "binomial delta=1e-5", "gdp": "gdp (mu + eps(1e-5))"}[method]


def single_calls() -> list[str]:
    rows = ["| c' | c | bound | value | time | x floor |", "|---|---|---|---|---|---|"]
    for g in (1_000, 100_000, 1_000_000):
        floor = timed(lambda: stats.binom.sf(int(0.9 * g) - 1, g, 0.9), repeat=20)
        for c in (int(0.9 * g), round(RR_ACCURACY * g)):
            for method, delta in FAMILIES:
                kw = {"canaries": M, "guesses": g, "correct": c, "method": method, "delta": delta}
                value = bounds.epsilon_lower_bound(**kw)
                t = timed(lambda: bounds.epsilon_lower_bound(**kw))
                rows.append(f"| {g:,} | {c:,} | {label(method, delta)} | {value:.4f} | {t * 1e3:.2f} ms "
                            f"| {t / floor:.0f} |")
        rows.append(f"| {g:,} | | floor: one binom.sf | | {floor * 1e6:.1f} us | 1 |")
    return rows


def sweep_counts(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """c' = 0.1%, 1%, ..., 100% of m; accuracy falling from ~0.88 (top guesses) to ~0.5, binomial noise."""
    g = np.concatenate([[M // 1000], np.arange(1, 101) * M // 100])
    acc = 0.5 + 0.38 * (1 - g / M) ** 2
    return g, rng.binomial(g, acc)


def sweeps() -> list[str]:
    rng = np.random.default_rng(0)
    g, c = sweep_counts(rng)
    rows = ["| convention | bound | per-point sweep (101 values) | best over sweep (pruned) | best eps |",
            "|---|---|---|---|---|"]
    for name, confidence in (("paper (95%)", 0.95), ("Bonferroni", 1 - 0.05 / g.size)):
        for method, delta in FAMILIES:
            kw = {"canaries": M, "guesses": g, "correct": c, "confidence": confidence, "method": method, "delta": delta}
            t_sweep = timed(lambda: bounds.epsilon_lower_bound_sweep(**kw), repeat=1)
            t_best = timed(lambda: bounds.best_epsilon_lower_bound(**kw), repeat=3)
            best = bounds.best_epsilon_lower_bound(**kw)
            rows.append(f"| {name} | {label(method, delta)} | {t_sweep * 1e3:.0f} ms | {t_best * 1e3:.1f} ms | "
                        f"{best.value:.4f} (c'={g[best.index]:,}) |")
    return rows


def audit_repetitions(repetitions: int = 100) -> list[str]:
    """Both default families (binomial pure, gdp), both conventions, best over the sweep, 100 fresh sweeps."""
    rng = np.random.default_rng(1)
    sweeps_ = [sweep_counts(rng) for _ in range(repetitions)]
    start = time.perf_counter()
    for g, c in sweeps_:
        for confidence in (0.95, 1 - 0.05 / g.size):
            for method in ("binomial", "gdp"):
                bounds.best_epsilon_lower_bound(canaries=M, guesses=g, correct=c, confidence=confidence, method=method)
    total = time.perf_counter() - start
    return [f"Audit bound stage: {repetitions} repetitions x 101 sweep points x 2 families (binomial pure, gdp) "
            f"x 2 conventions, best over the sweep: **{total:.2f} s** total ({total / repetitions * 1e3:.1f} ms "
            f"per repetition), against the 60 s budget of the whole audit."]


def main() -> None:
    bounds.epsilon_lower_bound(canaries=10, guesses=10, correct=9, method="gdp", delta=DELTA)  # load the numba cache
    text = "\n".join([
        "## Epsilon lower bounds (`benchmarks/bench_bounds.py`)", "",
        f"m = {M:,} canaries, gamma = 0.05, median of 5 runs (sweeps: 1 run).", "",
        "### Single calls", "", *single_calls(), "",
        "### One 101-point sweep (c' = 0.1%, 1%, ..., 100% of m)", "", *sweeps(), "",
        "### Audit", "", *audit_repetitions(),
    ])
    write_section("bounds", text)


if __name__ == "__main__":
    main()
