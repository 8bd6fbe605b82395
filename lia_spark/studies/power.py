"""The power of the valid audit: one injected canary table audited under every choice of score, recalibration and
sweep (docs/math.md §5.3, §5.9, §5.11; BENCHMARKS.md "Power of the valid audit").

Pure (numpy, pandas): a *choice* is an audit config section (audit.scores, audit.recalibrate, audit.sweep and its
parameters); :func:`audit_choice` computes the bound the audit stage computes for it (same map, same counts, same
sweep, same Bonferroni split), so the study re-audits the canary tables of seeded training runs without training
again. Every choice is a valid bound; the study measures which is strongest on realistic targets.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pandas as pd

from lia_spark.kernels import audit, audit_sweep, injected, recalibration
from lia_spark.names import (BASELINE_NAMES, BINOMIAL, BONFERRONI, COUNTERFACTUAL_LABEL, HIDDEN_BIT, LABEL,
                             PROXY_PREDICTION, RECALIBRATE_NONE, RECALIBRATE_TARGET, REFERENCE_PREDICTION,
                             RELEASED_LABEL, ROW_ID, RUN_COLUMNS, RUN_HIDDEN_BITS, RUN_TARGET_PREDICTIONS,
                             TARGET_PREDICTION, bound_key)
from lia_spark.run.model_sections import AuditConfig


def choice_name(section: AuditConfig) -> str:
    """e.g. ``log_ratio | proxy | geometric``: the scores joined by +, the recalibration and the sweep."""
    return f"{'+'.join(section.scores)} | {section.recalibrate} | {section.sweep}"


def recalibrated(target: np.ndarray, proxy: np.ndarray, *, mapped: str) -> tuple[np.ndarray, np.ndarray]:
    """(target, proxy) with one column replaced by its increasing map onto the other's scale, fitted on every row
    from the integer bin totals the Spark stage sums (so the same map); ``mapped`` none returns both unchanged."""
    if mapped == RECALIBRATE_NONE:
        return target, proxy
    source, reference = (target, proxy) if mapped == RECALIBRATE_TARGET else (proxy, target)
    mapping = recalibration.RecalibrationMap.fit(*recalibration.bin_sums(source, reference))
    return (mapping(target), proxy) if mapped == RECALIBRATE_TARGET else (target, mapping(proxy))


@dataclasses.dataclass(frozen=True)
class ChoiceBound:
    """One choice's valid bound on one canary table, what reached it, and what an attacker at exactly the claim
    certifies in an audit of its size (the ceiling: typical, and its 95th percentile)."""

    choice: str
    eps_lb: float
    score: str
    guesses: int
    informative: int
    tests: int
    ceiling: float
    ceiling_95: float


def pooled_canaries(canaries: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """``canaries`` with the extra training runs' (canary, run) pairs appended as canaries of their own, as the audit
    stage pools them (audit.runs, docs/math.md §5.14; :func:`lia_spark.engine.audit.counts.pooled_runs`): run r's
    pair keyed by :func:`lia_spark.kernels.injected.pooled_keys`, its coin and prediction the run's (released label
    and reference null); and the number of runs R (1 and the table without the run columns when it holds none).

    Raises:
        ValueError: naming the predictions when the run lists differ in length or a row id is out of range.
    """
    if RUN_TARGET_PREDICTIONS not in canaries or canaries[RUN_TARGET_PREDICTIONS].isna().all():
        return canaries.drop(columns=[c for c in RUN_COLUMNS if c in canaries]), 1
    base = canaries.drop(columns=list(RUN_COLUMNS))
    with_runs = canaries[canaries[RUN_TARGET_PREDICTIONS].notna()]
    sizes = pd.concat([with_runs[RUN_TARGET_PREDICTIONS].map(len),
                       with_runs[RUN_HIDDEN_BITS].map(lambda bits: -1 if bits is None else len(bits))])
    problem = injected.pooling_problem(shortest=int(sizes.min()), longest=int(sizes.max()),
                                       lowest_row_id=int(with_runs[ROW_ID].min()),
                                       highest_row_id=int(with_runs[ROW_ID].max()))
    if problem is not None:
        raise ValueError(f"predictions: {problem}")
    runs = int(sizes.max())
    coins = np.stack(with_runs[RUN_HIDDEN_BITS].to_numpy())
    predictions = np.stack(with_runs[RUN_TARGET_PREDICTIONS].to_numpy())
    run_only = {column: None for column in (RELEASED_LABEL, REFERENCE_PREDICTION) if column in base}
    extra = [with_runs.drop(columns=list(RUN_COLUMNS)).assign(
        **{ROW_ID: injected.pooled_keys(with_runs[ROW_ID].to_numpy(np.int64), run),
           HIDDEN_BIT: coins[:, run - 1], TARGET_PREDICTION: predictions[:, run - 1], **run_only})
        for run in range(1, runs + 1)]
    return pd.concat([base, *extra], ignore_index=True), runs + 1


def audit_choice(canaries: pd.DataFrame, section: AuditConfig, *, seed: int, claimed_epsilon: float,
                 baselines: tuple[str, ...] = (PROXY_PREDICTION,)) -> ChoiceBound:
    """The injected audit of ``canaries`` (row_id, label, counterfactual_label, hidden_bit, target_prediction and the
    ``baselines`` columns: proxy_prediction and / or shadow_prediction; rows without a coin are not canaries) as the
    audit stage runs it under ``section`` (:func:`audit_arrays`)."""
    rows = canaries[canaries[HIDDEN_BIT].notna() & canaries[COUNTERFACTUAL_LABEL].notna()]
    bound = audit_arrays(rows[ROW_ID].to_numpy(np.int64), rows[LABEL].to_numpy(), rows[COUNTERFACTUAL_LABEL].to_numpy(),
                         rows[HIDDEN_BIT].to_numpy(), rows[TARGET_PREDICTION].to_numpy(np.float64),
                         {BASELINE_NAMES[column]: rows[column].to_numpy(np.float64) for column in baselines},
                         section, seed=seed, claimed_epsilon=claimed_epsilon)
    return bound


def audit_arrays(row_ids: np.ndarray, label: np.ndarray, counterfactual_label: np.ndarray, hidden_bit: np.ndarray,
                 target: np.ndarray, baselines: dict[str, np.ndarray], section: AuditConfig, *, seed: int,
                 claimed_epsilon: float) -> ChoiceBound:
    """The injected audit of the canaries' columns under ``section``, the scores comparing the target's predictions
    with each of ``baselines`` (name -> predictions: the proxy's, the shadows'): per baseline the map
    audit.recalibrate names for it fitted on every canary; m = the informative canaries; the best pure binomial bound
    (delta = 0) over scores x baselines x the sweep, Bonferroni at ``section.confidence`` over all of them; and the
    ceiling at the claim."""
    label = np.asarray(label).astype(np.int8)
    counterfactual = np.asarray(counterfactual_label).astype(np.int8)
    informative = int(np.sum(label != counterfactual))
    guesses = audit.sweep_grid(informative, section)
    correct = {}
    for name, baseline in baselines.items():
        mapped_target, mapped_baseline = recalibrated(np.asarray(target, dtype=np.float64),
                                                      np.asarray(baseline, dtype=np.float64),
                                                      mapped=section.recalibration(name))
        counts = injected.count_correct(np.asarray(row_ids, dtype=np.int64), label, counterfactual,
                                        np.asarray(hidden_bit).astype(np.int8), mapped_target, mapped_baseline,
                                        seed=seed, guesses=guesses, scores=section.scores)
        correct.update({(score if len(baselines) == 1 else f"{score}@{name}"): values
                        for score, values in counts.items()})
    return counts_bound(correct, guesses, informative, section, claimed_epsilon=claimed_epsilon,
                        choice=f"{choice_name(section)} | {'+'.join(baselines)}")


def counts_bound(correct: dict[str, np.ndarray], guesses: np.ndarray, informative: int, section: AuditConfig, *,
                 claimed_epsilon: float, choice: str) -> ChoiceBound:
    """The injected audit's headline bound from its counts (score -> correct guesses (1, k) at each of ``guesses``):
    the best pure binomial bound (delta = 0) over scores x the sweep, Bonferroni at ``section.confidence``, with m =
    ``informative``, and the ceiling at ``claimed_epsilon``."""
    bounds = audit_sweep.evaluate_scores(correct, guesses, canaries=informative, confidence=section.confidence,
                                          families=(BINOMIAL,), conventions=(BONFERRONI,))
    key = bound_key(BINOMIAL, BONFERRONI)
    top = audit_sweep.ceiling(canaries=informative, guesses=guesses, claimed_epsilon=claimed_epsilon,
                              tests=bounds.tests, confidence=section.confidence)
    return ChoiceBound(choice=choice, eps_lb=float(bounds.best[key][0]), score=str(bounds.best_scores[key][0]),
                       guesses=int(bounds.best_guesses[key][0]), informative=informative, tests=bounds.tests,
                       ceiling=top.eps_lb, ceiling_95=top.eps_lb_95)


def choice_grid(score_sets, recalibrations, sweeps) -> tuple[AuditConfig, ...]:
    """Every score set under every recalibration and sweep (the other audit settings at their defaults)."""
    return tuple(AuditConfig(scores=tuple(scores), recalibrate=mapped, sweep=sweep)
                 for sweep, mapped, scores in itertools.product(sweeps, recalibrations, score_sets))


def mean_std(values) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1; 0 for one value; NaN for none)."""
    values = np.asarray(list(values), dtype=np.float64)
    if values.size == 0:
        return math.nan, math.nan
    return float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else 0.0


def ranked_choices(frame: pd.DataFrame) -> pd.DataFrame:
    """Per choice of ``frame`` (columns choice, cell, eps_lb; one row per seed): ``mean_over_cells`` (the mean of
    its per-cell mean eps_lb) and ``cells_worse`` (the cells where its mean falls more than one std of the best
    choice there below the best mean: a loss beyond noise), best first (fewest cells worse, then the larger
    mean)."""
    means = frame.groupby(["choice", "cell"], sort=False)["eps_lb"].agg(["mean", "std"]).reset_index()
    best = means.loc[means.groupby("cell")["mean"].idxmax()].set_index("cell")
    means["worse"] = means["mean"].to_numpy() < (best.loc[means["cell"], "mean"].to_numpy()
                                                 - np.nan_to_num(best.loc[means["cell"], "std"].to_numpy()))
    summary = means.groupby("choice", sort=False).agg(mean_over_cells=("mean", "mean"), cells_worse=("worse", "sum"))
    return summary.sort_values(["cells_worse", "mean_over_cells"], ascending=[True, False])


def out_of_sample(frame: pd.DataFrame, chosen_on: list[int], fresh: list[int], *, top: int = 6,
                  also: tuple[str, ...] = ()) -> pd.DataFrame:
    """The choice ranking made on the seeds ``chosen_on`` only, re-measured on the ``fresh`` seeds: per choice of
    the ``top`` ranked and of ``also`` (e.g. the default), and per cell, the mean and std of eps_lb on each set of
    seeds, and the choice's rank on each (:func:`ranked_choices`; 0 where it has no rows). A rule chosen from seeds
    is judged on the fresh ones: they played no part in the ranking."""
    selection = frame[frame["seed"].isin(chosen_on)]
    held_out = frame[frame["seed"].isin(fresh)]
    if selection.empty or held_out.empty:
        raise ValueError(f"out_of_sample: needs rows on both seed sets, got seeds {sorted(set(frame['seed']))} "
                         f"for chosen_on={chosen_on}, fresh={fresh}")
    ranks = [{choice: rank for rank, choice in enumerate(ranked_choices(part).index, start=1)}
             for part in (selection, held_out)]
    shown = list(dict.fromkeys([*ranked_choices(selection).index[:top], *also]))
    statistics = [part.groupby(["choice", "cell"], sort=False)["eps_lb"].apply(mean_std)
                  for part in (selection, held_out)]
    rows = []
    for choice in shown:
        for cell in dict.fromkeys(frame.loc[frame["choice"] == choice, "cell"]):
            (in_mean, in_std), (out_mean, out_std) = (found.get((choice, cell), (math.nan, math.nan))
                                                      for found in statistics)
            rows.append({"choice": choice, "rank_in_sample": ranks[0].get(choice, 0),
                         "rank_out_of_sample": ranks[1].get(choice, 0), "cell": cell, "in_sample_mean": in_mean,
                         "in_sample_std": in_std, "out_of_sample_mean": out_mean, "out_of_sample_std": out_std})
    return pd.DataFrame(rows)
