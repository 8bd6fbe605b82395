"""Benchmark: validity and power of the injected-label audit (lia_spark.kernels.injected, docs/math.md §5.9) against the
observational audit, on the synthetic twin, every repetition on fresh data (in-process, no Spark).

Each repetition (data draw) redraws everything the validity statement quantifies over:

- the twin itself (``calibrate_twin`` with a new seed: new feature effects, so a new P(y|x)), day 0 and day 1;
- the proxy M': XGBoost on ``--proxy-rows`` rows of day 0 (it misses the day drift, so tau = TV(M', eta) > 0);
- the canaries: the training split of a ``--canary-rows`` sample of day 1 (validation split for early stopping,
  test split for utility with the true labels);
- label-blind null targets (never saw a canary label): XGBoost on 50k, 200k and (every ``--big-every``-th
  repetition) 1M other day-1 rows, and the true click probability eta of the canaries;
- a label-blind *reference* for the calibrated observational design: XGBoost on another 200k day-1 rows, disjoint
  from every null (so no null is its own reference);
- positive targets trained on the canaries: randomized response at eps in ``--epsilons`` and non-private, once on
  y0 (observational design) and once on y^b (injected design: RR applied to y^b);
- the games: observational (``lia_spark.kernels.audit.count_correct_scores``, ``--game-draws`` game draws per data draw:
  the targets of this design never depend on the game) and injected (one coin/counterfactual draw per trained
  target; label-blind nulls, whose predictions do not depend on the coins, are audited on ``--game-draws`` coin
  and counterfactual draws per data draw, the first being the one the positives trained on).

Designs: ``injected`` (tau = 0, m = informative canaries; the audit's default settings, the scores against the
baseline of ``--shadows`` shadow fits per training mechanism), ``observational`` (tau = 0) and ``calibrated``
(observational at tau* = ``lia_spark.kernels.bounds.tau_break_even`` of the reference's counts on the same game draw, at
the per-test Bonferroni confidence 1 - 0.05/k; then the target's best bound at that tau). Bounds: pure binomial,
95%, Bonferroni over the k sweep points of ``lia_spark.kernels.audit.guess_grid``, score ``log_ratio``.

Counterfactual choice (first ``--flip-repetitions`` repetitions): ``flip`` counterfactuals with flip_share = the
proxy draw's informative share; non-private and RR eps = 4 targets trained with them; utility (test AUC,
log-loss) of the non-private target without injection / with the proxy draw / with flips.

    nice -n 10 .venv/bin/python benchmarks/bench_injected_validity.py --repetitions 30 \
        --output runs/bench_injected_validity/draws.json --render

``--from-output`` re-renders the tables from a finished run's JSON (with ``--render``: into BENCHMARKS.md).
``--resume`` continues the run in ``--output`` up to ``--repetitions`` with its own settings (repetition r draws
from seed + 1000 r alone, so the repetitions a resumed run adds are the ones an uninterrupted run would have drawn).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import subprocess
import sys
import time

import numpy as np
import pandas as pd
from scipy.stats import beta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._report import publish  # noqa: E402
from lia_spark.kernels import (audit, audit_sweep, bounds, features, injected, mechanism_registry,  # noqa: E402
                               model_libraries, synthetic, training)
from lia_spark.kernels.criteo import FEATURE_COLUMNS  # noqa: E402
from lia_spark.names import (BASELINE_NAMES, BINOMIAL, BONFERRONI, NONE, PROXY_PREDICTION, RR,  # noqa: E402
                             SHADOW_PREDICTION, UNIFORM_FLIP, bound_key)
from lia_spark.run.model_sections import AuditConfig  # noqa: E402
from lia_spark.studies import power, table  # noqa: E402

logger = logging.getLogger("bench_injected_validity")

SECTION = "validity_injected_defaults"
TITLE = "## Validity of the injected-label audit on the twin, with the audit's current defaults"
AFTER_SECTION = "validity_injected"  # the section of the previous defaults (log_ratio against the proxy, linear sweep)
ATTACK = "log_ratio"
KEY = bound_key(BINOMIAL, BONFERRONI)
CONFIDENCE = 0.95
SPLIT = (0.8, 0.04, 0.16)
FEATURE_SPEC = features.FeatureSpec(encoding="hash")
DESIGNS = ("injected", "observational", "calibrated")
NULLS = ("null_50k", "null_200k", "null_1m", "eta")
NULL_ROWS = {"null_50k": 50_000, "null_200k": 200_000, "null_1m": 1_000_000}
REFERENCE_ROWS = 200_000
FLIP_EPSILONS = (math.inf, 4.0)
DEFAULT_AUDIT = AuditConfig()  # the injected audit as the product runs it by default
DEFAULT_AUDIT_TEXT = f"{power.choice_name(DEFAULT_AUDIT)} | {DEFAULT_AUDIT.baseline}"


@dataclasses.dataclass(frozen=True)
class Settings:
    repetitions: int
    proxy_rows: int
    canary_rows: int
    epsilons: tuple[float, ...]
    game_draws: int
    big_every: int
    flip_repetitions: int
    trees: int
    depth: int
    learning_rate: float
    early_stopping: int
    click_rate: float
    seed: int
    minutes: float | None
    shadows: int = 4
    audit: str = ""  # the injected audit's settings (scores | recalibrate | sweep | baseline): a resume must match


def twin_data(params: synthetic.TwinParameters, *, day: int, start: int, rows: int,
              split_seed: int) -> tuple[training.ModelData, np.ndarray]:
    """Rows start..start+rows-1 of ``day`` as ModelData (hash-encoded features, 80/4/16 split) and their eta."""
    twin = synthetic.generate_rows(params, day=day, positions=np.arange(start, start + rows, dtype=np.int64))
    frame = pd.DataFrame({name: pd.arrays.IntegerArray(twin.values[name], twin.missing[name])
                          for name in FEATURE_COLUMNS})
    matrix = features.encode_features(frame, FEATURE_SPEC).to_numpy(np.float32)
    split = features.split_codes(twin.row_id, seed=split_seed, shares=SPLIT).astype(np.int8)
    data = training.ModelData(matrix, twin.label.astype(np.int8), twin.row_id, split,
                              feature_names=FEATURE_SPEC.feature_columns)
    return data, twin.eta


def fit_label_blind(data: training.ModelData, params: model_libraries.BoostingParams) -> model_libraries.FittedModel:
    return training.fit_model(data, data.labels, data.split == training.SPLIT_TRAIN,
                              data.split == training.SPLIT_VALID, params=params)


def best_bound(counts: np.ndarray, guesses: np.ndarray, canaries: int, *, tau: float = 0.0) -> np.ndarray:
    """Valid (Bonferroni over the sweep) pure binomial 95% bound per game draw (row of ``counts``)."""
    return audit_sweep.evaluate_scores({ATTACK: counts}, guesses, canaries=canaries, confidence=CONFIDENCE,
                                        tau=tau, families=(BINOMIAL,), conventions=(BONFERRONI,)).best[KEY]


def observational(game: dict, target: np.ndarray, reference_counts: np.ndarray | None) -> dict:
    """Observational bounds of ``target`` on every game draw at tau = 0, and at the reference's tau* if given."""
    counts = audit.count_correct_scores(game["ids"], game["label"], target, game["proxy"], seed=game["seed"],
                                         repetitions=game["draws"], guesses=game["guesses"],
                                         scores=[ATTACK])[ATTACK]
    out = {"counts": counts, "observational": best_bound(counts, game["guesses"], game["m"]).tolist()}
    if reference_counts is not None:
        level = audit_sweep.convention_confidence(CONFIDENCE, convention=BONFERRONI, points=len(game["guesses"]))
        taus = [bounds.tau_break_even(canaries=game["m"], guesses=game["guesses"], correct=reference_counts[g],
                                      confidence=level) for g in range(game["draws"])]
        out["tau_star"] = taus
        out["calibrated"] = [float(best_bound(counts[g:g + 1], game["guesses"], game["m"], tau=taus[g])[0])
                             for g in range(game["draws"])]
    return out


def injected_bound(ids, label, y1, coin, target, baselines: dict[str, np.ndarray], *, seed: int) -> tuple[float, int]:
    """The injected audit with the product's default settings (:class:`AuditConfig`: its scores, recalibration and
    sweep), the scores comparing the target with each of ``baselines`` (the proxy's and the shadow fits'
    predictions, as audit.baseline auto does where the train stage fitted shadows)."""
    found = power.audit_arrays(ids, label, y1, coin, target, baselines, DEFAULT_AUDIT, seed=seed,
                               claimed_epsilon=math.inf)
    return found.eps_lb, found.informative


def repetition(r: int, s: Settings) -> dict:
    started = time.monotonic()
    seed = s.seed + 1000 * r
    boost = model_libraries.BoostingParams(n_estimators=s.trees, max_depth=s.depth, learning_rate=s.learning_rate,
                                    early_stopping_rounds=s.early_stopping, threads=1, seed=r)
    params = synthetic.calibrate_twin(seed=seed, click_rate=s.click_rate, days=2)
    out: dict = {"repetition": r, "twin_seed": seed, "seconds": {}}

    proxy_data, _ = twin_data(params, day=0, start=0, rows=s.proxy_rows, split_seed=seed)
    proxy_model = fit_label_blind(proxy_data, boost)
    del proxy_data
    data, eta = twin_data(params, day=1, start=0, rows=s.canary_rows, split_seed=seed)
    train, test = data.split == training.SPLIT_TRAIN, data.split == training.SPLIT_TEST
    ids, y0 = data.row_ids[train], data.labels[train]
    x_canary, x_test, y_test = data.features[train], data.features[test], data.labels[test]
    proxy = proxy_model.predict(x_canary)
    out["canaries"] = int(train.sum())
    out["proxy_test"] = training.binary_metrics(y_test, proxy_model.predict(x_test))
    out["eta_test"] = training.binary_metrics(y_test, eta[test])
    out["tv_proxy_eta"] = float(np.mean(np.abs(proxy - eta[train])))  # mean TV of the label laws over canaries
    out["seconds"]["data_proxy"] = time.monotonic() - started

    guesses = audit.guess_grid(len(ids))
    game = {"ids": ids, "label": y0, "proxy": proxy, "seed": seed + 1, "draws": s.game_draws,
            "guesses": guesses, "m": len(ids)}
    inj_seeds = [seed + 2 + 10 * g for g in range(s.game_draws)]
    draws = [injected.injected_draws(ids, y0, proxy, key=q) for q in inj_seeds]
    out["informative_share"] = float(np.mean(y0 != draws[0][0]))

    y1, coin = draws[0]
    rr_seed = seed + 3

    def fit_target(labels: np.ndarray, epsilon: float, mechanism_seed: int = rr_seed) -> tuple[np.ndarray, dict]:
        full = data.labels.copy()
        full[train] = labels
        fit = mechanism_registry.train_target(dataclasses.replace(data, labels=full),
                                              mechanism=NONE if math.isinf(epsilon) else RR, epsilon=epsilon,
                                              seed=mechanism_seed, params=boost)
        return fit.model.predict(x_canary), training.binary_metrics(y_test, fit.model.predict(x_test))

    # the shadow baselines of the default audit: per training mechanism, audit.shadows fits on the canaries with the
    # first draw's y1, paired fresh coins and fresh RR seeds (never the target's coins nor its RR draws)
    tic = time.monotonic()
    shadow_baselines = {}
    for epsilon in (*s.epsilons, math.inf):
        shadow_baselines[epsilon] = (None if s.shadows == 0 else injected.shadow_reference(np.asarray([
            fit_target(injected.shadow_training_labels(y0, y1, ids, key=inj_seeds[0], shadow=k), epsilon,
                       injected.shadow_seed(inj_seeds[0], k))[0] for k in range(s.shadows)])))
    out["seconds"]["shadows"] = time.monotonic() - tic

    def baselines(epsilon: float) -> dict[str, np.ndarray]:
        """The baselines audit.baseline picks of the proxy and, where fitted, the mechanism's shadows."""
        available = {PROXY_PREDICTION: proxy, **({SHADOW_PREDICTION: shadow_baselines[epsilon]} if s.shadows else {})}
        return {BASELINE_NAMES[column]: available[column]
                for column in DEFAULT_AUDIT.baseline_columns(tuple(available))}

    # label-blind reference and nulls (rows after the canary sample, disjoint from each other)
    tic = time.monotonic()
    start = s.canary_rows
    ref_data, _ = twin_data(params, day=1, start=start, rows=REFERENCE_ROWS, split_seed=seed)
    start += REFERENCE_ROWS
    reference = fit_label_blind(ref_data, boost).predict(x_canary)
    del ref_data
    ref_counts = audit.count_correct_scores(ids, y0, reference, proxy, seed=game["seed"], repetitions=s.game_draws,
                                             guesses=guesses, scores=[ATTACK])[ATTACK]
    level = audit_sweep.convention_confidence(CONFIDENCE, convention=BONFERRONI, points=len(guesses))
    out["reference"] = {"observational": best_bound(ref_counts, guesses, len(ids)).tolist(),
                        "tau_star": [bounds.tau_break_even(canaries=len(ids), guesses=guesses, correct=ref_counts[g],
                                                           confidence=level) for g in range(s.game_draws)]}
    out["nulls"] = {}
    for name in NULLS:
        if name == "eta":
            target = eta[train]
        else:
            if name == "null_1m" and r % s.big_every != s.big_every - 1:
                continue
            null_data, _ = twin_data(params, day=1, start=start, rows=NULL_ROWS[name], split_seed=seed)
            start += NULL_ROWS[name]
            target = fit_label_blind(null_data, boost).predict(x_canary)
            del null_data
        result = observational(game, target, ref_counts)
        del result["counts"]
        result["injected"] = [injected_bound(ids, y0, y1g, coin_g, target, baselines(math.inf), seed=q)[0]
                              for (y1g, coin_g), q in zip(draws, inj_seeds)]
        out["nulls"][name] = result
    out["seconds"]["nulls"] = time.monotonic() - tic

    # positives: RR(eps) / non-private on the canaries, on y0 (observational) and on y^b (injected)
    tic = time.monotonic()
    out["positives"] = {}
    for epsilon in (*s.epsilons, math.inf):
        target, utility = fit_target(y0, epsilon)
        result = observational(game, target, ref_counts)
        del result["counts"]
        result["utility_observational"] = utility
        target, utility = fit_target(injected.training_labels(y0, y1, coin), epsilon)
        result["injected"] = [injected_bound(ids, y0, y1, coin, target, baselines(epsilon), seed=inj_seeds[0])[0]]
        result["utility_injected"] = utility
        out["positives"][table.epsilon_text(epsilon)] = result
    out["seconds"]["positives"] = time.monotonic() - tic

    if r < s.flip_repetitions:
        tic = time.monotonic()
        y1f, coinf = injected.injected_draws(ids, y0, proxy, key=inj_seeds[0], counterfactual=UNIFORM_FLIP,
                                             flip_share=out["informative_share"])
        out["flip"] = {"informative_share": float(np.mean(y0 != y1f))}
        for epsilon in FLIP_EPSILONS:
            target, utility = fit_target(injected.training_labels(y0, y1f, coinf), epsilon)
            out["flip"][table.epsilon_text(epsilon)] = {
                "injected": injected_bound(ids, y0, y1f, coinf, target, {"proxy": proxy}, seed=inj_seeds[0])[0],
                "utility_injected": utility}
        out["seconds"]["flip"] = time.monotonic() - tic
    out["seconds"]["total"] = time.monotonic() - started
    return out


# ---------------------------------------------------------------------------------------------------------
# Tables


def _upper(failures: int, trials: int) -> float:
    """One-sided 95% Clopper-Pearson upper limit of a rate."""
    return 1.0 if failures >= trials else float(beta.ppf(0.95, failures + 1, trials - failures))


def _stats(values: list[float]) -> str:
    values = np.asarray(values, dtype=np.float64)
    std = values.std(ddof=1) if len(values) > 1 else 0.0
    return f"{values.mean():.3f} +- {std:.3f}"


def _null_values(reps: list[dict], model: str, design: str, *, first_only: bool = False) -> list[float]:
    found = []
    for rep in reps:
        if model in rep["nulls"]:
            values = rep["nulls"][model][design]
            found.extend(values[:1] if first_only else values)
    return found


def paired_lines(payload: dict, previous: dict) -> list[str]:
    """The injected audit of this run against ``previous`` (a run of the same settings but its audit's, so the same
    data draws, nulls and positives): per positive the mean eps_lb of each, their paired difference (mean +- standard
    error over the draws) and how many draws each wins; per null the false-positive counts."""
    settings = {key: value for key, value in payload["meta"]["settings"].items() if key not in ("audit", "minutes")}
    earlier = {key: value for key, value in previous["meta"]["settings"].items() if key not in ("audit", "minutes")}
    if settings != earlier or len(previous["repetitions"]) != len(payload["repetitions"]):
        raise SystemExit("--previous: the runs differ in more than their audit settings; a paired comparison needs "
                         "the same data draws")
    reps, old = payload["repetitions"], previous["repetitions"]
    lines = [f"Paired against the previous defaults' run of the same draws (`{previous['meta']['settings']['audit']}`"
             f"; raw values in `{previous['meta']['output']}`): the same twins, proxies, targets and coins, only the "
             f"audit differs. Positives, mean eps_lb over the draws:", "",
             "| eps | previous | now | now - previous (mean +- s.e.) | draws now higher | draws now lower |",
             "|---|---|---|---|---|---|"]
    for name in (*[table.epsilon_text(e) for e in payload["meta"]["settings"]["epsilons"]], "inf"):
        now = np.array([rep["positives"][name]["injected"][0] for rep in reps])
        before = np.array([rep["positives"][name]["injected"][0] for rep in old])
        gain = now - before
        lines.append(f"| {'non-private' if name == 'inf' else name} | {before.mean():.3f} | {now.mean():.3f} | "
                     f"{gain.mean():+.3f} +- {gain.std(ddof=1) / math.sqrt(gain.size):.3f} | {int((gain > 0).sum())} | "
                     f"{int((gain < 0).sum())} |")
    positives = ", ".join(
        f"{name} {sum(sum(v > 0 for v in rep['nulls'][name]['injected']) for rep in old if name in rep['nulls'])} -> "
        f"{sum(sum(v > 0 for v in rep['nulls'][name]['injected']) for rep in reps if name in rep['nulls'])}"
        for name in NULLS)
    lines += ["", f"Nulls, audits with eps_lb > 0 (previous -> now): {positives}."]
    return lines


def render(payload: dict, previous: dict | None = None) -> str:
    meta, reps = payload["meta"], payload["repetitions"]
    s = meta["settings"]
    n = len(reps)
    big = sum("null_1m" in rep["nulls"] for rep in reps)
    flips = [rep for rep in reps if "flip" in rep]
    g = s["game_draws"]
    lines = [TITLE, ""]
    lines.append(
        f"`nice -n 10 .venv/bin/python benchmarks/bench_injected_validity.py {meta['arguments']}`"
        + "".join(f", continued with `--resume` from repetition {entry['repetition']} (commit {entry['commit'][:7]})"
                  for entry in meta.get("resumed_at", []))
        + f" (section rendered from its JSON by the same command with `--from-output --render`; raw per-repetition "
        f"values in `{meta['output']}`).")
    lines.append("")
    lines.append(
        f"Question: does the injected-label audit (`lia_spark.kernels.injected`: coin b and counterfactual y1 drawn "
        f"*before* "
        f"training, the target trains on y^b) keep its promise of eps_lb > 0 in at most 5% of audits of a model that "
        f"never saw the canaries' labels, with a *fitted* proxy, where the observational audit (tau = 0) fails; and "
        f"what does it cost in power? Every repetition redraws the twin (`calibrate_twin` with a new seed, click rate "
        f"{s['click_rate']}), refits the proxy (XGBoost on {s['proxy_rows']:,} day-0 rows; it misses the day drift), "
        f"samples {s['canary_rows']:,} day-1 rows whose training split (80%, mean "
        f"{np.mean([r['canaries'] for r in reps]):,.0f}"
        f" rows) are the canaries (4% validation for early stopping, 16% test for utility), redraws the RR release "
        f"and the games. XGBoost hist, depth {s['depth']}, <= {s['trees']} trees, learning rate {s['learning_rate']}, "
        f"early stopping {s['early_stopping']} rounds, hash-encoded categoricals, nthread = 1. Targets: label-blind "
        f"nulls on 50k / 200k / 1M (one repetition in {s['big_every']}: {big} of {n}) other day-1 rows (80% train "
        f"split of each) and the true eta; positives trained on the canaries with RR(eps) or non-private, on y0 "
        f"(observational designs) or on y^b (injected; RR applied to y^b). Bounds: pure binomial, 95%. Injected: the "
        f"audit's default settings of the run (scores | recalibrate | sweep | baseline: `{s['audit']}`; "
        f"{s.get('shadows', 0)} label-blind shadow fits per training mechanism: the target's fit repeated on the "
        f"canaries with paired fresh coins and fresh RR seeds; the nulls against the non-private shadows, the flip "
        f"rows against the proxy alone), m = informative canaries (y0 != y1), one "
        f"training run = one bound. Observational: Bonferroni over the linear guess sweep (`guess_grid`), score "
        f"`log_ratio`. Calibrated observational: tau* = `bounds.tau_break_even` of an independent "
        f"label-blind reference (XGBoost on another 200k day-1 rows, disjoint from every null) on the same game "
        f"draw at the per-test confidence 1 - 0.05/k, then the target's best bound at tau*.")
    lines.append("")
    resumed_text = f", resumed {meta['resumed']} time(s)" if meta.get("resumed") else ""
    where = f"as parallel Spark tasks on {meta['spark']}" if meta.get("spark") else "in one process"
    lines.append(
        f"{n} data draws (repetitions). Game draws: the observational designs play {g} games per data draw on every "
        f"target (their targets never depend on the game); the injected design plays one per trained positive "
        f"target, and {g} coin/counterfactual draws per data draw on the label-blind nulls (their predictions do "
        f"not depend on the coins; the first draw is the one the positives trained on). Wall time "
        f"{meta['wall_seconds'] / 60:.1f} min {where}{resumed_text} (seed {s['seed']}; mean per repetition "
        f"{np.mean([r['seconds']['total'] for r in reps]):.0f} s). Proxy test AUC "
        f"{np.mean([r['proxy_test']['auc'] for r in reps]):.3f} against eta's "
        f"{np.mean([r['eta_test']['auc'] for r in reps]):.3f}; mean |M' - eta| over canaries "
        f"{np.mean([r['tv_proxy_eta'] for r in reps]):.4f}; informative share (proxy draw) "
        f"{np.mean([r['informative_share'] for r in reps]):.3f}; reference tau* "
        f"{_stats([t for r in reps for t in r['reference']['tau_star']])}.")
    lines.append("")
    lines.append("Nulls (label-blind: any eps_lb > 0 is a false positive). Share of audits with eps_lb > 0 "
                 "(count / audits, one-sided 95% upper limit of the rate), eps_lb mean +- std, data draws:")
    lines.append("")
    lines.append("| target | design | eps_lb > 0 | upper 95% | eps_lb mean +- std | audits | data draws |")
    lines.append("|---|---|---|---|---|---|---|")
    names = {"null_50k": "XGBoost, 50k rows", "null_200k": "XGBoost, 200k rows", "null_1m": "XGBoost, 1M rows",
             "eta": "true eta"}
    invalid = []
    for model in NULLS:
        draws = sum(model in rep["nulls"] for rep in reps)
        if not draws:
            continue
        for design in DESIGNS:
            values = _null_values(reps, model, design)
            hits = int(np.sum(np.asarray(values) > 0))
            if design == "injected" and hits > 0.05 * len(values):
                invalid.append((model, hits, len(values)))
            lines.append(f"| {names[model]} | {design} | {hits / len(values):.1%} ({hits}/{len(values)}) | "
                         f"{_upper(hits, len(values)):.1%} | {_stats(values)} | {len(values)} | {draws} |")
            if design == "injected":
                first = _null_values(reps, model, design, first_only=True)
                hits1 = int(np.sum(np.asarray(first) > 0))
                lines.append(f"| {names[model]} | injected, first coin draw only | {hits1 / len(first):.1%} "
                             f"({hits1}/{len(first)}) | {_upper(hits1, len(first)):.1%} | {_stats(first)} | "
                             f"{len(first)} | {draws} |")
    lines.append("")
    lines.append("Positives (trained on the canaries). Share of audits with eps_lb > eps (a valid bound: <= 5%), "
                 "mean eps_lb / eps, eps_lb mean +- std (audits: injected one per data draw, observational "
                 f"{g} per data draw):")
    lines.append("")
    lines.append("| eps | injected: > eps | eps_lb / eps | eps_lb | observational: > eps | eps_lb / eps | eps_lb | "
                 "calibrated: > eps | eps_lb / eps | eps_lb |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for name in (*[table.epsilon_text(e) for e in s["epsilons"]], "inf"):
        cells = []
        for design in DESIGNS:
            values = np.asarray([v for rep in reps for v in rep["positives"][name][design]])
            if name == "inf":
                cells += ["-", "-", _stats(values)]
            else:
                epsilon = float(name)
                cells += [f"{np.mean(values > epsilon):.0%} ({len(values)})", f"{np.mean(values) / epsilon:.3f}",
                          _stats(values)]
        lines.append(f"| {'non-private' if name == 'inf' else name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Utility of the positive targets (test rows, true labels; mean over data draws): trained on y0 "
                 "(observational) vs on y^b with the proxy-draw counterfactual (injected):")
    lines.append("")
    lines.append("| eps | AUC on y0 | AUC on y^b | log-loss on y0 | log-loss on y^b |")
    lines.append("|---|---|---|---|---|")
    for name in (*[table.epsilon_text(e) for e in s["epsilons"]], "inf"):
        pos = [rep["positives"][name] for rep in reps]
        lines.append(f"| {'non-private' if name == 'inf' else name} | "
                     f"{np.mean([p['utility_observational']['auc'] for p in pos]):.4f} | "
                     f"{np.mean([p['utility_injected']['auc'] for p in pos]):.4f} | "
                     f"{np.mean([p['utility_observational']['log_loss'] for p in pos]):.4f} | "
                     f"{np.mean([p['utility_injected']['log_loss'] for p in pos]):.4f} |")
    if flips:
        lines.append("")
        lines.append(f"Counterfactual: proxy draw (y1 ~ M'(x), default) vs flip (y1 = 1 - y0 with flip_share = the "
                     f"proxy draw's informative share of the same repetition), first {len(flips)} repetitions, same "
                     f"coins; mean +- std over repetitions (utility: non-private target, test rows, true labels; "
                     f"no injection = the observational target):")
        lines.append("")
        lines.append("| counterfactual | informative share | test AUC (non-private) | test log-loss (non-private) | "
                     "eps_lb non-private | eps_lb RR eps=4 |")
        lines.append("|---|---|---|---|---|---|")
        lines.append(f"| none (trained on y0) | - | "
                     f"{_stats([r['positives']['inf']['utility_observational']['auc'] for r in flips])} | "
                     f"{_stats([r['positives']['inf']['utility_observational']['log_loss'] for r in flips])} | - | - |")
        lines.append(f"| proxy draw | {_stats([r['informative_share'] for r in flips])} | "
                     f"{_stats([r['positives']['inf']['utility_injected']['auc'] for r in flips])} | "
                     f"{_stats([r['positives']['inf']['utility_injected']['log_loss'] for r in flips])} | "
                     f"{_stats([r['positives']['inf']['injected'][0] for r in flips])} | "
                     f"{_stats([r['positives']['4']['injected'][0] for r in flips])} |")
        lines.append(f"| flip | {_stats([r['flip']['informative_share'] for r in flips])} | "
                     f"{_stats([r['flip']['inf']['utility_injected']['auc'] for r in flips])} | "
                     f"{_stats([r['flip']['inf']['utility_injected']['log_loss'] for r in flips])} | "
                     f"{_stats([r['flip']['inf']['injected'] for r in flips])} | "
                     f"{_stats([r['flip']['4']['injected'] for r in flips])} |")
    if previous is not None:
        lines.append("")
        lines.extend(paired_lines(payload, previous))
    lines.append("")
    lines.extend(findings(reps, s))
    if invalid:
        lines.append("")
        lines.append("**Injected design above 5% under a null:** " + ", ".join(
            f"{model} {hits}/{total}" for model, hits, total in invalid))
    return "\n".join(lines)


def _share(values) -> tuple[int, int]:
    values = np.asarray(values)
    return int(np.sum(values > 0)), len(values)


def findings(reps: list[dict], s: dict) -> list[str]:
    """The reading of the tables, every number computed from the draws."""
    out = []
    hits = [(_share(_null_values(reps, model, "injected")), model) for model in NULLS
            if _null_values(reps, model, "injected")]
    total = (sum(h for (h, _), _ in hits), sum(n for (_, n), _ in hits))
    worst = max(hits, key=lambda item: item[0][0] / item[0][1])
    obs = {model: _share(_null_values(reps, model, "observational")) for model in NULLS
           if _null_values(reps, model, "observational")}
    cal = {model: _share(_null_values(reps, model, "calibrated")) for model in NULLS
           if _null_values(reps, model, "calibrated")}
    out.append(
        f"- **Validity.** The injected design certifies eps > 0 on a label-blind target in {total[0]} of "
        f"{total[1]} audits ({total[0] / total[1]:.1%}) over all nulls, at most {worst[0][0] / worst[0][1]:.1%} "
        f"for one null ({worst[1]}), within the 5% the bound promises, although the proxy is fitted on another day. "
        f"The observational design at tau = 0 certifies eps > 0 in "
        + ", ".join(f"{model} {h / n:.0%}" for model, (h, n) in obs.items())
        + " of the audits of the same nulls: its bound measures how much better the target knows P(y|x) than the "
          "proxy, not what it learnt from the canaries' labels.")
    out.append(
        "- **Calibration by a label-blind reference is not a fix.** At tau* of an independent same-size (200k) "
        "reference, the nulls still certify eps > 0 in "
        + ", ".join(f"{model} {h / n:.0%}" for model, (h, n) in cal.items())
        + " of the audits: a null of the reference's own trainer and size is exchangeable with it, so it beats the "
          "reference about half the time, and any stronger label-blind model (more rows, the true eta) beats it "
          "almost always; the calibration also costs the positives power (table above).")
    ratios = []
    for epsilon in (4.0, 8.0):
        name = table.epsilon_text(epsilon)
        if name in reps[0]["positives"]:
            inj = np.mean([v for rep in reps for v in rep["positives"][name]["injected"]])
            obsv = np.mean([v for rep in reps for v in rep["positives"][name]["observational"]])
            ratios.append(f"eps = {name}: {inj:.2f} vs {obsv:.2f}")
    low = [e for e in s["epsilons"] if e <= 2.0]
    low_max = max((np.mean([v for rep in reps for v in rep["positives"][table.epsilon_text(e)]["injected"]])
                   for e in low),
                  default=float("nan"))
    low_text = (f"at eps <= 2 the injected audit certifies at most {low_max:.3f} on average (the target, fitted on "
                f"RR(eps) labels of 80k rows, reflects single labels weakly, and the informative canaries are few)"
                if low_max < 0.1 else f"at eps <= 2 it still certifies up to {low_max:.3f} on average")
    out.append(
        "- **Power.** Mean eps_lb, injected (the audit's defaults) vs observational (tau = 0, not valid here): "
        + "; ".join(ratios)
        + f". Guessing only on the informative canaries (about {np.mean([r['informative_share'] for r in reps]):.1%}"
        f" of the ~{np.mean([r['canaries'] for r in reps]) / 1000:.0f}k canaries at click rate {s['click_rate']}, "
        f"i.e. ~{np.mean([r['informative_share'] * r['canaries'] for r in reps]):,.0f}) pays off at eps >= 4; "
        f"{low_text}. One training run gives one bound, so the injected std is across data draws.")
    flips = [rep for rep in reps if "flip" in rep]
    if flips:
        def mean(get):
            return float(np.mean([get(rep) for rep in flips]))
        def paired(get_a, get_b):
            return _stats([get_a(rep) - get_b(rep) for rep in flips])

        base_auc = lambda r: r["positives"]["inf"]["utility_observational"]["auc"]  # noqa: E731
        base_ll = lambda r: r["positives"]["inf"]["utility_observational"]["log_loss"]  # noqa: E731
        proxy_auc = lambda r: r["positives"]["inf"]["utility_injected"]["auc"]  # noqa: E731
        proxy_ll = lambda r: r["positives"]["inf"]["utility_injected"]["log_loss"]  # noqa: E731
        flip_auc = lambda r: r["flip"]["inf"]["utility_injected"]["auc"]  # noqa: E731
        flip_ll = lambda r: r["flip"]["inf"]["utility_injected"]["log_loss"]  # noqa: E731
        out.append(
            f"- **Counterfactual: proxy draw (default).** At the same informative share, injecting proxy draws costs "
            f"the non-private target {paired(base_auc, proxy_auc)} AUC and {paired(proxy_ll, base_ll)} log-loss "
            f"against training on y0 (paired over {len(flips)} repetitions), flips {paired(base_auc, flip_auc)} AUC "
            f"and {paired(flip_ll, base_ll)} log-loss (a proxy "
            f"draw is a plausible label for its x, a flip is label noise: mostly a 0 turned into a 1 at this click "
            f"rate); power (mean eps_lb, {len(flips)} repetitions): non-private "
            f"{mean(lambda r: r['positives']['inf']['injected'][0]):.2f} (proxy draw) vs "
            f"{mean(lambda r: r['flip']['inf']['injected']):.2f} (flip), RR eps = 4 "
            f"{mean(lambda r: r['positives']['4']['injected'][0]):.2f} vs "
            f"{mean(lambda r: r['flip']['4']['injected']):.2f}.")
    return out


def repetition_task(settings: dict, r: int, threads: int) -> dict:
    """:func:`repetition` as a parallel fit on the :class:`Settings` fields ``settings`` (a broadcast holds plain data:
    this script's classes do not unpickle in a Spark worker); its models use one thread, whatever ``threads``."""
    return repetition(r, Settings(**settings))


def repetitions_in_tasks(master: str, settings: Settings) -> list[dict]:
    """Every repetition as one Spark task on ``master``
    (:func:`lia_spark.engine.models.parallel_fits.run_fits`); a failed
    repetition is logged and left out."""
    from lia_spark.engine.models.parallel_fits import run_fits
    from lia_spark.engine.spark.session import get_spark
    from lia_spark.run.sections import SparkConfig

    spark = get_spark(SparkConfig(master=master, app_name="bench-injected-validity"))
    try:
        outcomes = run_fits(spark, dataclasses.asdict(settings),
                            [(f"repetition {r}", r) for r in range(settings.repetitions)],
                            repetition_task, purpose="validity repetitions")
    finally:
        spark.stop()
    for outcome in outcomes:
        if outcome.failed:
            logger.error("%s failed: %s", outcome.name, outcome.error)
    return [outcome.value for outcome in outcomes if not outcome.failed]


def _commit() -> str:
    """The repository's HEAD commit (what drew the repetitions that follow)."""
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()


def resumed(output: str, requested: Settings) -> tuple[dict, Settings]:
    """The run saved in ``output`` and its settings with ``requested``'s repetitions and time budget; a run whose
    settings differ otherwise (the repetitions would not be draws of one study) is refused."""
    with open(output, encoding="utf-8") as handle:
        payload = json.load(handle)
    saved = {**payload["meta"]["settings"], "epsilons": tuple(payload["meta"]["settings"]["epsilons"])}
    wanted = dataclasses.asdict(requested)
    budget = ("repetitions", "minutes")
    differing = {key: (saved.get(key), wanted[key]) for key in wanted
                 if key not in budget and saved.get(key) != wanted[key]}
    if differing:
        raise SystemExit(f"--resume: {output} was run with other settings (saved, asked): {differing}")
    payload["meta"]["settings"] = dataclasses.asdict(requested)
    payload["meta"]["resumed"] = payload["meta"].get("resumed", 0) + 1
    payload["meta"]["resumed_at"] = [*payload["meta"].get("resumed_at", []),
                                     {"repetition": len(payload["repetitions"]), "commit": _commit()}]
    logger.info("resuming %s at repetition %d of %d", output, len(payload["repetitions"]), requested.repetitions)
    return payload, requested


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=30, help="data draws")
    parser.add_argument("--output", default="runs/bench_injected_validity/draws.json")
    parser.add_argument("--render", action="store_true", help="write the BENCHMARKS.md section")
    parser.add_argument("--from-output", action="store_true", help="only re-render from --output")
    parser.add_argument("--previous", metavar="JSON", default="",
                        help="a run of the same settings under other audit settings: render the paired comparison")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --output (its settings; --repetitions and --minutes from here)")
    parser.add_argument("--proxy-rows", type=int, default=200_000)
    parser.add_argument("--canary-rows", type=int, default=100_000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--game-draws", type=int, default=10)
    parser.add_argument("--big-every", type=int, default=3, help="1M-row null every k-th repetition")
    parser.add_argument("--flip-repetitions", type=int, default=5)
    parser.add_argument("--trees", type=int, default=150)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--early-stopping", type=int, default=20)
    parser.add_argument("--click-rate", type=float, default=0.032)
    parser.add_argument("--seed", type=int, default=20261124)
    parser.add_argument("--shadows", type=int, default=AuditConfig().shadows,
                        help="label-blind shadow fits per positive target (the audit's default baseline)")
    parser.add_argument("--minutes", type=float, default=None, help="start no new repetition after this wall time")
    parser.add_argument("--spark", metavar="MASTER", default="",
                        help="run the repetitions as parallel Spark tasks on this master (e.g. local[2] or a "
                             "cluster's), one per repetition, saved when all are done; default: one after another "
                             "in this process, each saved as it ends")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.from_output:
        with open(args.output, encoding="utf-8") as handle:
            payload = json.load(handle)
    else:
        settings = Settings(repetitions=args.repetitions, proxy_rows=args.proxy_rows, canary_rows=args.canary_rows,
                            epsilons=tuple(args.epsilons), game_draws=args.game_draws, big_every=args.big_every,
                            flip_repetitions=args.flip_repetitions, trees=args.trees, depth=args.depth,
                            learning_rate=args.learning_rate, early_stopping=args.early_stopping,
                            click_rate=args.click_rate, seed=args.seed, minutes=args.minutes, shadows=args.shadows,
                            audit=DEFAULT_AUDIT_TEXT)
        shown = " ".join(arg for arg in (argv if argv is not None else sys.argv[1:]))
        payload = {"meta": {"settings": dataclasses.asdict(settings), "arguments": shown, "output": args.output,
                            **({"spark": args.spark} if args.spark else {})}, "repetitions": []}
        if args.resume:
            payload, settings = resumed(args.output, settings)
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        started = time.monotonic() - payload["meta"].get("wall_seconds", 0.0)
        if args.spark:
            payload["repetitions"] = repetitions_in_tasks(args.spark, settings)
            payload["meta"]["wall_seconds"] = time.monotonic() - started
            with open(args.output, "w", encoding="utf-8") as handle:
                json.dump(payload, handle)
        session_started = time.monotonic()
        for r in range(len(payload["repetitions"]) if not args.spark else 0,
                       0 if args.spark else args.repetitions):
            if args.minutes is not None and time.monotonic() - session_started > 60.0 * args.minutes:
                logger.warning("time budget reached: %d repetitions run", r)
                break
            rep = repetition(r, settings)
            payload["repetitions"].append(rep)
            payload["meta"]["wall_seconds"] = time.monotonic() - started
            with open(args.output, "w", encoding="utf-8") as handle:
                json.dump(payload, handle)
            nulls = {name: (np.mean(np.asarray(v["injected"]) > 0), np.mean(np.asarray(v["observational"]) > 0))
                     for name, v in rep["nulls"].items()}
            logger.info("repetition %d in %.0f s (%s); null share>0 injected/observational: %s; inj eps_lb %s", r,
                        rep["seconds"]["total"], {k: round(v) for k, v in rep["seconds"].items()},
                        {k: (round(a, 2), round(b, 2)) for k, (a, b) in nulls.items()},
                        {k: round(v["injected"][0], 2) for k, v in rep["positives"].items()})
    previous = None
    if args.previous:
        with open(args.previous, encoding="utf-8") as handle:
            previous = json.load(handle)
    markdown = render(payload, previous)
    publish(SECTION, markdown, render=args.render, after=AFTER_SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
