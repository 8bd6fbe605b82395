"""Benchmark: the audit stage (1M canaries x 100 repetitions x 101 sweep points, both bound families, target
<= 10 s on 2 cores), the in-process audit kernel with one and with several scores, and the validity study on randomized
response (Kalemaj et al., "Observational Auditing of Label Privacy", 2025, arXiv:2511.14084, App. 11).

    .venv/bin/python benchmarks/bench_audit.py [--part audit|kernel|validity|all] [--canaries 1000000]
        [--master local[2]] [--validity-from DIR]

Audit input: m canaries with a CTR-like proxy M'(x) = expit(N(-2, 1.2)), labels y ~ Bernoulli(M'(x)) and a target
that saw RR(eps=2) labels: M(x) = P(y = 1 | x, released label) (docs/math.md §3), all hashed from the row id.
Figures:
- stage: ``run_audit`` (read Parquet, exact distributed counts, bounds on the driver, write outputs);
- counts: the distributed counting alone (:func:`lia_spark.engine.audit.stage.distributed_counts`);
- bounds: the driver's best bound per repetition, both families, both conventions;
- kernel: :func:`lia_spark.kernels.audit.count_correct` in-process with the same score (its CPU time over the cores is
  the ceiling of the distributed counts).
Kernel (``--part kernel``, no Spark): ``count_correct`` + ``evaluate_sweep`` (one score, difference t = 2) and
``count_correct_scores`` + ``evaluate_scores`` (the four scores of ``canary_scores.DEFAULT_SCORES``), binomial + GDP.
Validity: :func:`lia_spark.studies.validity.study` (n = 500,000, 50 independent draws of data,
release and game per cell;
``jobs/validate_rr.py`` runs the same study, and ``--validity-from DIR`` renders the section from its output).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import process_tree_cpu_seconds, write_section  # noqa: E402

from lia_spark.kernels import audit, audit_sweep, canary_scores, hashing, posteriors  # noqa: E402
from lia_spark.run.config import config_from_dict  # noqa: E402
from lia_spark.run.sections import SparkConfig  # noqa: E402

SEED = 13
RR_EPSILON = 2.0


def canary_table(m: int) -> pd.DataFrame:
    """Synthetic canary table (module docstring)."""
    ids = np.arange(m, dtype=np.int64)
    proxy = expit(-2.0 + 1.2 * hashing.standard_normal(SEED, "bench:proxy", ids))
    label = hashing.bernoulli(SEED, "bench:label", ids, proxy).astype(np.int32)
    released = label ^ hashing.bernoulli(SEED, "bench:rr", ids, expit(-RR_EPSILON))
    target = posteriors.rr(proxy, released, epsilon=RR_EPSILON).posterior
    return pd.DataFrame({"row_id": ids, "label": label, "released_label": released.astype(np.int32),
                         "target_prediction": target, "proxy_prediction": proxy})


def bench_audit(m: int, master: str, rounds: int = 3) -> str:
    """The stage, its distributed counts and the in-process kernel (same score), ``rounds`` times back to back."""
    from lia_spark.engine.audit.counts import distributed_counts, select_canaries
    from lia_spark.engine.orchestration.registry import run_stage
    from lia_spark.engine.spark.session import get_spark

    table = canary_table(m)
    columns = (table["row_id"].to_numpy(), table["label"].to_numpy(), table["target_prediction"].to_numpy(),
               table["proxy_prediction"].to_numpy())
    cores = os.cpu_count() or 2
    spark = get_spark(SparkConfig(master=master, driver_memory="6g", extra={"spark.ui.enabled": "false"}))
    workdir = tempfile.mkdtemp(prefix="bench_audit_")
    measured: dict[str, list[tuple[float, float]]] = {"stage": [], "stage_scores": [], "counts": [], "kernel": [],
                                                      "bounds": []}

    def timed(name, call, cpu_seconds):
        wall, cpu = time.perf_counter(), cpu_seconds()
        value = call()
        measured[name].append((time.perf_counter() - wall, cpu_seconds() - cpu))
        return value

    try:
        path = os.path.join(workdir, "canaries")
        spark.createDataFrame(table).repartition(4).write.parquet(path)
        config = config_from_dict({"run": {"output_dir": os.path.join(workdir, "out"), "seed": SEED},
                                   "audit": {"repetitions": 100, "canary_path": path}})
        settings = config.audit
        (score,) = settings.scores
        several = config_from_dict({"run": {"output_dir": os.path.join(workdir, "out_scores"), "seed": SEED},
                                    "audit": {"repetitions": 100, "canary_path": path,
                                              "scores": list(canary_scores.DEFAULT_SCORES)}})
        guesses = audit.guess_grid(m)
        df, _ = select_canaries(spark.read.parquet(path), seed=SEED, canaries=0)
        distributed_counts(df.limit(20_000), section=settings, seed=SEED)  # warm-up: Python workers, imports, jit
        audit.count_correct(*(column[:1000] for column in columns), seed=SEED, repetitions=2, guesses=[1])
        for _ in range(rounds):
            kernel_counts = timed("kernel", lambda: audit.count_correct_scores(
                *columns, seed=SEED, repetitions=100, guesses=guesses, scores=settings.scores)[score],
                time.process_time)
            sweep = timed("bounds", lambda: audit_sweep.evaluate_sweep(kernel_counts, guesses, canaries=m,
                                                                 families=("binomial", "gdp")), time.process_time)
            _, _, spark_counts = timed("counts", lambda: distributed_counts(df, section=settings, seed=SEED),
                                       process_tree_cpu_seconds)
            assert np.array_equal(spark_counts[score], kernel_counts), "Spark counts differ from the in-process kernel"
            shutil.rmtree(config.run.output_dir, ignore_errors=True)
            result = timed("stage", lambda: run_stage("audit", spark, config), process_tree_cpu_seconds)
            shutil.rmtree(several.run.output_dir, ignore_errors=True)
            timed("stage_scores", lambda: run_stage("audit", spark, several), process_tree_cpu_seconds)
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    median = {name: tuple(float(np.median([v[i] for v in values])) for i in (0, 1))
              for name, values in measured.items()}
    row_reps = m * 100
    best = result.summary["best"]
    kernel_wall, kernel_cpu = median["kernel"]

    def row(label: str, name: str) -> str:
        wall, cpu = median[name]
        rounds_text = ", ".join(f"{w:.1f}" for w, _ in measured[name])
        return f"| {label} | **{wall:.1f}** ({rounds_text}) | {cpu:.1f} | {row_reps / cpu:,.0f} |"

    lines = [
        "## Audit (benchmarks/bench_audit.py)",
        "",
        f"{m:,} canaries x 100 repetitions x {len(guesses)} sweep points, score `{score}` (the "
        f"default), binomial + GDP best bound per repetition under both conventions (GDP also at delta = "
        f"{sweep.gdp_delta:g}); target saw RR(eps={RR_EPSILON:g}) labels. Master {master}; {rounds} rounds back to "
        "back, medians (each round's wall time in brackets). CPU s: the whole process tree (driver, Spark's JVM, "
        "its Python workers) for Spark figures, the process for in-process ones; on a shared machine it is the "
        "steadier figure.",
        "",
        "| figure | wall s | CPU s | canary-repetitions per CPU-second |",
        "|---|---|---|---|",
        row("stage `run_audit` end to end (target <= 10 s)", "stage"),
        row(f"same stage with the study's {len(canary_scores.DEFAULT_SCORES)} scores (`audit.scores`, one pass, "
            "confidence split)", "stage_scores"),
        row("distributed exact counts only", "counts"),
        row("in-process kernel `count_correct`, 1 process", "kernel"),
        f"| bounds (both families, both conventions) | {median['bounds'][0]:.1f} | {median['bounds'][1]:.1f} | - |",
        "",
        f"Ratios (medians): stage wall / in-process kernel wall {median['stage'][0] / kernel_wall:.2f}; stage CPU / "
        f"kernel CPU {median['stage'][1] / kernel_cpu:.2f}; distributed counts reach "
        f"{(kernel_cpu / cores) / median['counts'][0]:.0%} of the kernel ceiling (kernel CPU time / {cores} cores "
        "over the counts' wall time). Spark counts equal the kernel's exactly in every round.",
        "",
        "Best epsilon lower bound per repetition (mean +- std over 100 repetitions):",
        "",
        "| bound | paper convention (not a valid bound) | Bonferroni (valid) |",
        "|---|---|---|",
    ]
    for family in ("binomial", "gdp"):
        paper, bonferroni = best[f"eps_{family}_paper"], best[f"eps_{family}_bonferroni"]
        lines.append(f"| {family} | {paper.mean:.3f} +- {paper.std:.3f} | "
                     f"{bonferroni.mean:.3f} +- {bonferroni.std:.3f} |")
    return "\n".join(lines)


def bench_kernel(m: int, repetitions: int = 100) -> str:
    """In-process audit kernel, one core: counts and best bounds for one score and for the four default scores."""
    table = canary_table(m)
    columns = (table["row_id"].to_numpy(), table["label"].to_numpy(), table["target_prediction"].to_numpy(),
               table["proxy_prediction"].to_numpy())
    guesses = audit.guess_grid(m)
    families = ("binomial", "gdp")
    timings, cpu = {}, {}

    def timed(name, call):
        wall, process = time.perf_counter(), time.process_time()
        value = call()
        timings[name], cpu[name] = time.perf_counter() - wall, time.process_time() - process
        return value

    counts = timed("count_one", lambda: audit.count_correct(*columns, seed=SEED, repetitions=repetitions,
                                                             guesses=guesses))
    sweep = timed("bounds_one", lambda: audit_sweep.evaluate_sweep(counts, guesses, canaries=m, families=families))
    timed("draws", lambda: audit._packed_draws(columns[0], columns[1], columns[3], seed=SEED, repetitions=repetitions))
    several = timed("count_all", lambda: audit.count_correct_scores(
        *columns, seed=SEED, repetitions=repetitions, guesses=guesses, scores=canary_scores.DEFAULT_SCORES))
    assert np.array_equal(several["difference_t2"], counts), "count_correct_scores differs from count_correct"
    combined = timed("bounds_all", lambda: audit_sweep.evaluate_scores(several, guesses, canaries=m, families=families,
                                                                   table_families=("binomial",)))
    log_ratio = audit_sweep.evaluate_sweep(several["log_ratio"], guesses, canaries=m, families=families,
                                     conventions=("bonferroni",))
    row_reps = m * repetitions
    scores = len(canary_scores.DEFAULT_SCORES)
    lines = [
        "## Audit kernel in-process (benchmarks/bench_audit.py --part kernel)",
        "",
        f"{m:,} canaries x {repetitions} repetitions x {len(guesses)} sweep points, one process; target saw "
        f"RR(eps={RR_EPSILON:g}) labels (same canaries as the Spark "
        "benchmark). Bounds: binomial + GDP best bound per repetition under both conventions.",
        "",
        "| figure | wall s | CPU s | canary-repetitions per CPU-second |",
        "|---|---|---|---|",
        f"| `count_correct` (difference_t2) | {timings['count_one']:.1f} | {cpu['count_one']:.1f} | "
        f"{row_reps / cpu['count_one']:,.0f} |",
        f"| of which the game's draws (y1 and b of every canary-repetition, branchless: "
        f"{cpu['draws'] / row_reps * 1e9:.1f} ns each) | {timings['draws']:.1f} | {cpu['draws']:.1f} | "
        f"{row_reps / cpu['draws']:,.0f} |",
        f"| `evaluate_sweep` (binomial + gdp) | {timings['bounds_one']:.1f} | {cpu['bounds_one']:.1f} | - |",
        f"| **one score: count + bounds** | **{timings['count_one'] + timings['bounds_one']:.1f}** | "
        f"**{cpu['count_one'] + cpu['bounds_one']:.1f}** | - |",
        f"| `count_correct_scores` ({scores} scores: {', '.join(canary_scores.DEFAULT_SCORES)}; one game, one sort "
        f"per score) | {timings['count_all']:.1f} | {cpu['count_all']:.1f} | {row_reps / cpu['count_all']:,.0f} |",
        f"| `evaluate_scores` (binomial + gdp, {scores} x {len(guesses)} tests) | {timings['bounds_all']:.1f} | "
        f"{cpu['bounds_all']:.1f} | - |",
        f"| **{scores} scores: count + bounds** | **{timings['count_all'] + timings['bounds_all']:.1f}** | "
        f"**{cpu['count_all'] + cpu['bounds_all']:.1f}** | - |",
        "",
        "CPU s = process CPU time (all threads); on a shared machine it is the steadier figure.",
        "",
        "Best bound per repetition (mean +- std), Bonferroni (valid) convention:",
        "",
        f"| bound | difference_t2 alone (1 - 0.05/{len(guesses)}) | log_ratio alone (1 - 0.05/{len(guesses)}) | "
        f"{scores} scores, split (1 - 0.05/{scores * len(guesses)}) | winning score (share of repetitions) |",
        "|---|---|---|---|---|",
    ]
    for family in families:
        key = f"eps_{family}_bonferroni"
        one, ratio, best = sweep.best[key], log_ratio.best[key], combined.best[key]
        names, shares = np.unique(combined.best_scores[key], return_counts=True)
        winners = ", ".join(f"{name or 'none'} {share / len(best):.0%}" for name, share in zip(names, shares))
        lines.append(f"| {family} | {one.mean():.3f} +- {one.std(ddof=1):.3f} | {ratio.mean():.3f} +- "
                     f"{ratio.std(ddof=1):.3f} | {best.mean():.3f} +- {best.std(ddof=1):.3f} | {winners} |")
    return "\n".join(lines)


def _read_draws(folder: str) -> tuple[pd.DataFrame, dict]:
    import json

    records = pd.read_csv(os.path.join(folder, "validity_rr_draws.csv"), keep_default_na=False,
                          na_values={"informative": ["nan", "NaN", ""]})
    with open(os.path.join(folder, "validity_rr.json"), encoding="utf-8") as handle:
        return records, json.load(handle)


def validity_conclusions(records: pd.DataFrame, extra_null: pd.DataFrame | None, extra_meta: dict | None) -> str:
    """The default score and why, the null pooled with ``extra_null`` (more null-only draws, another seed)."""
    from lia_spark.studies import validity

    summary = validity.summarize_study(records)
    choice = validity.pick_default(summary)
    evidence = choice.evidence.set_index("score")
    theorem = validity.theorem_rows(summary)
    rr = theorem[(theorem["setting"] == "rr") & (theorem["convention"] == "bonferroni")]
    winner = rr[rr["score"] == choice.score]
    combined_draws = records[(records["score"] == validity.COMBINED) & (records["convention"] == "bonferroni")
                             & (records["setting"] == "rr") & (records["tau_rule"] == "0")]
    winner_share = float((combined_draws["best_score"] == choice.score).mean())
    null = records[records["setting"] == "null"]
    if extra_null is not None:
        extra = extra_null[extra_null["setting"] == "null"].copy()
        extra["draw"] += 1_000_000  # another seed: independent draws
        null = pd.concat([null, extra], ignore_index=True)
    pooled = validity.summarize_study(null)
    mismatch = pooled[(pooled["proxy"] == "logistic") & (pooled["target"] == "posterior")
                      & (pooled["convention"] == "bonferroni")].set_index(["tau_rule", "score"])["share_positive"]
    draws = int(pooled.loc[(pooled["proxy"] == "logistic") & (pooled["target"] == "posterior"), "draws"].max())
    scores = list(dict.fromkeys(records["score"]))
    tv = records.loc[records["tau_rule"] == "max_tv", "tau"]
    logistic_zero = summary[(summary["proxy"] == "logistic") & (summary["setting"] == "rr")
                            & (summary["convention"] == "bonferroni") & (summary["score"] == choice.score)]
    cost = (logistic_zero.set_index(["epsilon", "tau_rule"])["eps_lb_mean"].unstack()["0"]
            - logistic_zero.set_index(["epsilon", "tau_rule"])["eps_lb_mean"].unstack()["max_tv"])
    others = ", ".join(f"{validity._attack_label(a, scores[:-1])} {evidence.loc[a, 'mean_ratio_eps']:.3f}"
                       for a in evidence.index if a != choice.score)
    lines = [
        f"**Default score: `{choice.score}`** (kernel name `{choice.score}`; with the single-score API "
        f"`score=\"{choice.score}\"`, t unused). Valid: eps_lb > eps in "
        f"{evidence.loc[choice.score, 'max_share_above']:.0%} of the draws of every RR cell (6 eps x 2 proxies, "
        f"{int(winner['draws'].min())} draws each), and eps_lb > 0 in at most "
        f"{evidence.loc[choice.score, 'max_null_share_positive']:.0%} of the draws of the null cells. Tightest: mean "
        f"eps_lb / eps over the 12 RR cells {evidence.loc[choice.score, 'mean_ratio_eps']:.3f} "
        f"({winner['ratio_eps'].min():.2f} - {winner['ratio_eps'].max():.2f} by cell; "
        f"{winner['ratio_ceiling'].min():.2f} - {winner['ratio_ceiling'].max():.2f} of the ceiling) against "
        f"{others}. Combining the four scores does not pay on this benchmark: `{choice.score}` is the combined "
        f"audit's winning score in {winner_share:.0%} of the RR draws, so the split (1 - 0.05/404 instead of "
        "1 - 0.05/101 per test) only costs about 1% of eps_lb. Why the log ratio: with M the Bayes posterior given "
        "the release and M' the prior, M(x)[y] / M'(x)[y] is exactly the posterior odds of b = 0 given what the "
        "attacker sees, so ranking by |log ratio| is the Bayes-optimal order of the canaries; the difference score "
        "(M[y] - M'[y]) (1 - M'[y])^t is bounded by 1 and ranks the most telling canaries (a shown label the prior "
        "finds unlikely) too low, worst at high eps (t = 2 and t = 8: 0.33 of eps at eps = 8, the log ratio 0.88).",
        "",
        f"**Caveat, tau = 0 with an estimated proxy** ({draws} null draws pooled"
        + (f": the {draws - len(extra_null[extra_null['setting'] == 'null']['draw'].unique())} above plus "
           f"{extra_meta['null_draws_run']} null-only draws with seed {extra_meta['seed']}, "
           f"{extra_meta['wall_seconds'] / 60.0:.1f} min" if extra_null is not None else "")
        + "): a label-blind target that knows the true posterior better than the logistic proxy, M(x) = P(y=1|x), "
        "is flagged (eps_lb > 0, Bonferroni) in "
        + ", ".join(f"{validity._attack_label(a, scores[:-1])} {mismatch.loc[('0', a)]:.1%}" for a in scores)
        + " of the draws with tau = 0, against "
        + ", ".join(f"{mismatch.loc[('max_tv', a)]:.1%}" for a in scores)
        + f" with tau = max_i |P(y=1|x_i) - M'(x_i)| (mean {tv.mean():.4f} over draws). The proxy's mismatch, not the "
        "score, makes these false positives (they hit every score, the split one too): the theorem needs "
        "tau >= TV(D|x, D'|x). The tau correction costs little: "
        f"{choice.score}'s eps_lb falls by {cost.min():.4f} - {cost.max():.4f} (about 2 tau) across eps. In "
        "production tau is not known (it is the proxy's error against the real label distribution), so a tau = 0 "
        "audit with a fitted proxy is valid only to the extent that the target knows no more about P(y|x) than "
        "the proxy does; a conservative tau (e.g. from the proxy's calibration error) in `audit.tau` removes the "
        "assumption.",
    ]
    return "\n".join(lines)


def bench_validity(output: str, source: str | None, extra_null: str | None = None) -> str:
    """Run jobs/validate_rr.py (or re-render ``source``, a finished run) and build the BENCHMARKS section."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "jobs"))
    import validate_rr  # noqa: E402

    args = ["--output", output] + (["--from-draws", source] if source else [])
    validate_rr.main(args)
    records, meta = _read_draws(output)
    extra, extra_meta = _read_draws(extra_null) if extra_null else (None, None)
    with open(os.path.join(output, "validity_rr.md"), encoding="utf-8") as handle:
        tables = handle.read()
    return "\n".join([
        "## Validity and tightness of the audit on randomized response (benchmarks/bench_audit.py --part validity)",
        "",
        VALIDITY_SETUP.format(n=meta["n"], draws=meta["draws_run"], null_draws=meta["null_draws_run"],
                              points=meta["sweep_points"], tests=meta["sweep_points"] * len(meta["scores"]),
                              seed=meta["seed"], minutes=meta["wall_seconds"] / 60.0),
        "",
        tables.strip(),
        "",
        validity_conclusions(records, extra, extra_meta),
        "",
        f"Plot `{os.path.join(output, 'validity_rr.png')}`: one panel per proxy (true posterior, logistic), eps_lb "
        "mean +- std against the true eps on log2 axes, one line per score and one for all four with the split "
        "confidence (Bonferroni, the rows of the first table), the ceiling curve (black), eps_lb = eps (dashed) "
        "and the combined score under the paper convention (grey, dotted; not a valid bound).",
    ])


VALIDITY_SETUP = """\
Question: does the audit's 95% lower bound stay below the true epsilon in at least 95% of *independent* audits
(the theorem's probability space: data, release and game all random), and how close to the truth does each score
get? Every draw redraws the Gaussian mixture of App. 11 (n = {n:,} canaries, y ~ Bern(1/2), x | y ~ N(e_y, I_5)),
the logistic proxy (refitted on n fresh rows), the RR(eps) release (target M = P(y = 1 | x, released label)) and
the game (its own hash seed; one game per draw). {draws} draws per RR cell, {null_draws} per null cell (the first
{draws} draws share their mixture rows between cells). Binomial (pure, Theorem 17) bounds, 95%. Scores: the
difference score with t = 0, 2, 8, the log ratio, each alone with 1 - 0.05/{points} per sweep point (Bonferroni
over the {points} points), and "all 4 (split)": the best over the four scores x {points} points with
1 - 0.05/{tests} per test (`lia_spark.kernels.audit_sweep.evaluate_scores`). With the logistic proxy the valid rows use
tau = max_i |P(y=1|x_i) - M'(x_i)| (the TV bound Theorem 17 needs when M' is not the truth, known here); the same
draws at tau = 0 are in a separate table. Seed {seed}; wall time {minutes:.1f} min in one process (shared
2-core machine).

Ceiling: the bound of an oracle attacker that guesses only on the *informative* canaries (y1 != y0: only there
does the shown label depend on b) and guesses b' = 0 iff the shown label equals the released one. For RR(eps) with
the true prior, its posterior odds on an informative canary are L(z | y) / L(z | 1 - y) = e^(+-eps) for every x,
so each guess is right with probability exactly q = e^eps / (1 + e^eps), the most eps-DP allows; uninformative
canaries carry no information about b (a fair coin whatever the attacker does). Fewer guesses lose sample size,
more dilute the accuracy toward 1/2, so c' = I informative canaries with c ~ Bin(I, q) is the best evidence the
game yields. The ceiling is the pure binomial (Clopper-Pearson) bound at the expected counts, c' = round(E[I]) with
E[I] = sum_i p_i (1 - p'_i) + p'_i (1 - p_i) (p = P(y=1|x), p' = M'(x)) and c = round(q c'), at the per-test
confidence of one score's Bonferroni sweep (1 - 0.05/{points}); `lia_spark.studies.validity.ceiling`. It is a reference
for the ranking quality of an score, not a hard cap (a draw can exceed it by chance)."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="audit benchmark and validity study")
    parser.add_argument("--part", choices=("audit", "kernel", "validity", "all"), default="all")
    parser.add_argument("--canaries", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--validity-output", default="runs/validity")
    parser.add_argument("--validity-from", default=None, help="render the validity section from a finished run")
    parser.add_argument("--validity-null-from", default=None,
                        help="a finished null-only run (another seed) whose null draws are pooled with the study's")
    args = parser.parse_args(argv)
    if args.part in ("audit", "all"):
        section = bench_audit(args.canaries, args.master)
        print(section)
        write_section("audit", section)
    if args.part in ("kernel", "all"):
        section = bench_kernel(args.canaries)
        print(section)
        write_section("audit_kernel", section)
    if args.part in ("validity", "all"):
        section = bench_validity(args.validity_output, args.validity_from, args.validity_null_from)
        print(section)
        write_section("validity_rr", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
