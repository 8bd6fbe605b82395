"""Two levers of issue 38 on the power study's canary tables: choosing the audited canaries, pooling training runs.

Both re-audit the canary tables of bench_audit_power's seeded runs with the default audit (no training)::

    python benchmarks/bench_audit_levers.py --root runs/power/1000000-xgboost [--render]

*Choosing the audited canaries.* Every training row of the target is a canary (``audit.canaries: 0``); the audit
here plays only a share q of the informative canaries, those a criterion that reads no coin and no target
prediction ranks first, against all of them. The selection keeps the bound valid (docs/math.md §5.9: the guessing
rule may abstain anywhere, as long as what decides it is independent of the coins given the data, y0 and y1), but it
shrinks m, so it pays only where the criterion finds the canaries the target remembers better than the score's own
ranking does. Criteria:

- ``rare categories``: the smallest count, over the 26 categorical columns, of the canary's value in its day
  (features only; rare values make small leaves, where one label moves the model most);
- ``proxy p``: the proxy's P(y = 1 | x), largest first (leaves of likely clicks fill their hessian with few rows);
- ``shadows vs proxy``: |logit B - logit M'| (the label-blind shadows' baseline against the proxy);
- ``random``: a seeded uniform draw (what shrinking m alone costs).

*Pooling training runs.* The canaries of R training runs (each with its own coins and mechanism draws) in one game:
m grows R times. Valid because flipping one coin b_{i,r} changes one training label of one run, so the R runs
together are eps-label-DP with respect to each coin, and the coins are independent: the one-run analysis applies to
the pooled (canary, run) pairs, keyed as ``audit.runs`` keys them (:func:`lia_spark.kernels.injected.pooled_keys`) and
audited as the audit stage audits them (one recalibration map over every pair). Here the runs are the study's seeds,
each on its own twin (the argument covers that too); ``audit.runs`` trains them on one.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._report import publish  # noqa: E402
from benchmarks.bench_audit_power import bound_text, shown_cells  # noqa: E402
from lia_spark.kernels import criteo, injected  # noqa: E402
from lia_spark.names import (BASELINE_NAMES, COUNTERFACTUAL_LABEL, HIDDEN_BIT, LABEL, PROXY_PREDICTION,  # noqa: E402
                             ROW_ID, SHADOW_PREDICTION, TARGET_PREDICTION)
from lia_spark.run.model_sections import AuditConfig  # noqa: E402
from lia_spark.studies import power  # noqa: E402

SELECTION_SECTION, POOLING_SECTION = "canary_selection", "pooled_runs"
AFTER_SECTION = "audit_power_flips"
POOLED_RUNS = (2, 5)  # R; the seeds are pooled in consecutive disjoint groups of R
SHARES = (0.1, 0.25, 0.5)
CRITERIA = ("rare categories", "proxy p", "shadows vs proxy", "random")
# the default audit.baseline's columns where the train stage fitted shadows
BASELINES = AuditConfig().baseline_columns((PROXY_PREDICTION, SHADOW_PREDICTION))


def category_rarity(data_folder: Path) -> pd.Series:
    """row_id -> the smallest count, over the categorical columns, of the row's value within its day (a missing
    value counts as common)."""
    parts = []
    for day in sorted(data_folder.glob("day=*")):
        frame = pd.read_parquet(day, columns=[ROW_ID, *criteo.CAT_COLUMNS])
        counts = np.full(len(frame), np.inf)
        for column in criteo.CAT_COLUMNS:
            values = frame[column]
            counts = np.fmin(counts, values.map(values.value_counts()).to_numpy(dtype=np.float64, na_value=np.inf))
        parts.append(pd.Series(counts, index=frame[ROW_ID].to_numpy()))
    return pd.concat(parts)


def logit(p: np.ndarray) -> np.ndarray:
    clipped = np.clip(p, 1e-12, 1 - 1e-12)
    return np.log(clipped) - np.log1p(-clipped)


def criterion_values(canaries: pd.DataFrame, rarity: pd.Series, name: str, seed: int) -> np.ndarray:
    """Higher = audited first; reads the features, the proxy, the shadows' baseline or a seeded draw, never the
    coins or the target."""
    if name == "rare categories":
        return -rarity.reindex(canaries[ROW_ID].to_numpy()).to_numpy(dtype=np.float64)
    if name == "proxy p":
        return canaries[PROXY_PREDICTION].to_numpy(np.float64)
    if name == "shadows vs proxy":
        return np.abs(logit(canaries[SHADOW_PREDICTION].to_numpy(np.float64))
                      - logit(canaries[PROXY_PREDICTION].to_numpy(np.float64)))
    return np.random.default_rng([seed, 38]).random(len(canaries))


def selected(canaries: pd.DataFrame, values: np.ndarray, share: float) -> pd.DataFrame:
    """The uninformative canaries (they fit the recalibration maps as before) and the share ``share`` of the
    informative ones ranked first by ``values`` (ties by position)."""
    informative = (canaries[LABEL] != canaries[COUNTERFACTUAL_LABEL]).to_numpy()
    positions = np.flatnonzero(informative)
    keep = positions[np.argsort(-values[positions], kind="stable")[:max(1, round(share * positions.size))]]
    mask = ~informative
    mask[keep] = True
    return canaries[mask]


def cell_tables(root: Path) -> dict[str, dict[int, tuple[pd.DataFrame, float]]]:
    """cell -> seed -> (its canaries with a coin and a counterfactual, the claimed eps), complete cells only."""
    tables: dict[str, dict[int, tuple[pd.DataFrame, float]]] = {}
    for seed_folder in sorted(root.glob("seed*")):
        for cell in sorted((seed_folder / "table" / "cells").glob("*")):
            if not (cell / "models" / "_LIA_COMPLETE").exists():
                continue
            canaries = pd.read_parquet(cell / "models" / "canaries", columns=[
                ROW_ID, LABEL, COUNTERFACTUAL_LABEL, HIDDEN_BIT, TARGET_PREDICTION, *BASELINES])
            canaries = canaries[canaries[HIDDEN_BIT].notna() & canaries[COUNTERFACTUAL_LABEL].notna()]
            claimed = float(json.loads((cell / "models" / "metrics.json").read_text(encoding="utf-8"))["epsilon"])
            seed = int(seed_folder.name.removeprefix("seed"))
            tables.setdefault(cell.name, {})[seed] = (canaries.reset_index(drop=True), claimed)
    return tables


def selection_rows(tables: dict[str, dict[int, tuple[pd.DataFrame, float]]], root: Path) -> list[dict]:
    """Every cell and seed: the default audit on all informative canaries and on each criterion's shares."""
    rows = []
    for seed in sorted({seed for by_seed in tables.values() for seed in by_seed}):
        rarity = category_rarity(root / f"seed{seed}" / "data")
        for cell, by_seed in tables.items():
            if seed not in by_seed:
                continue
            canaries, claimed = by_seed[seed]
            audits = [("all", 1.0, canaries)] + [
                (name, share, selected(canaries, criterion_values(canaries, rarity, name, seed), share))
                for name in CRITERIA for share in SHARES]
            for name, share, subset in audits:
                found = power.audit_choice(subset, AuditConfig(), seed=seed, claimed_epsilon=claimed,
                                           baselines=BASELINES)
                rows.append({"seed": seed, "cell": cell, "criterion": name, "share": share, "eps_lb": found.eps_lb,
                             "informative": found.informative, "ceiling": found.ceiling, "claimed": claimed})
    return rows


def pooled_bound(runs: list[tuple[pd.DataFrame, int]], claimed: float) -> power.ChoiceBound:
    """The default audit of R runs' canaries in one game, as the audit stage plays ``audit.runs``: run r's canaries
    keyed by :func:`lia_spark.kernels.injected.pooled_keys`, every pair audited together."""
    pooled = pd.concat([canaries.assign(**{ROW_ID: injected.pooled_keys(canaries[ROW_ID].to_numpy(np.int64), index)})
                        for index, (canaries, _) in enumerate(runs)], ignore_index=True)
    return power.audit_choice(pooled, AuditConfig(), seed=runs[0][1], claimed_epsilon=claimed, baselines=BASELINES)


def pooling_rows(tables: dict[str, dict[int, tuple[pd.DataFrame, float]]]) -> list[dict]:
    """Every cell: each run alone (R = 1) and the seeds pooled in consecutive disjoint groups of R."""
    rows = []
    for cell, by_seed in tables.items():
        seeds = sorted(by_seed)
        groups = [[seed] for seed in seeds] + [seeds[start:start + runs] for runs in POOLED_RUNS
                                               for start in range(0, len(seeds) - runs + 1, runs)]
        for group in groups:
            claimed = by_seed[group[0]][1]
            found = pooled_bound([(by_seed[seed][0], seed) for seed in group], claimed)
            rows.append({"cell": cell, "runs": len(group), "seeds": ",".join(map(str, group)),
                         "eps_lb": found.eps_lb, "informative": found.informative, "ceiling": found.ceiling,
                         "claimed": claimed})
    return rows


def seeds_text(frame: pd.DataFrame) -> str:
    return ", ".join(map(str, sorted(frame["seed"].unique())))


def above_claims(frame: pd.DataFrame) -> str:
    finite = frame[np.isfinite(frame["claimed"])]
    return f"Bounds above their claimed eps: {int((finite['eps_lb'] > finite['claimed']).sum())} of {len(finite)}."


def table_start(frame: pd.DataFrame, title: str, text: str, keys: list[str]) -> tuple[list[str], list[str]]:
    """A section's title, its paragraph and the head of its table (the key columns, then one column per cell of
    ``frame``, :func:`shown_cells`); and those cells."""
    cells = shown_cells(frame)
    return [title, "", text, "", "| " + " | ".join(keys + cells) + " |", "|" + "---|" * (len(keys) + len(cells))], cells


def cell_bounds(rows: pd.DataFrame, cells: list[str]) -> str:
    """eps_lb mean +- std of ``rows`` per cell, as table cells."""
    return " | ".join(bound_text(rows[rows["cell"] == cell]) for cell in cells)


def render_selection(frame: pd.DataFrame, root: Path) -> str:
    lines, cells = table_start(
        frame, f"## Choosing the audited canaries (`benchmarks/bench_audit_levers.py`, {root.name})",
        f"Issue 38's lever: the default audit (docs/math.md §5.9; scores | recalibrate | sweep: "
        f"{power.choice_name(AuditConfig())}; baselines {' + '.join(BASELINE_NAMES[c] for c in BASELINES)}) on a "
        "share q of the informative canaries, those a coin-free "
        "criterion ranks first (the script's docstring defines them; validity: docs/math.md §5.14), against all of "
        f"them; the canary tables of the power study's seeded runs (`run.seed` = {seeds_text(frame)}), no training. "
        "eps_lb mean +- std over the seeds; every row is a valid bound.", ["criterion", "q"])
    for (name, share), rows in frame.groupby(["criterion", "share"], sort=False):
        lines.append(f"| {name} | {share:g} | {cell_bounds(rows, cells)} |")
    full = frame[frame["criterion"] == "all"]
    lines.append("| informative canaries (all) | | " + " | ".join(
        f"{full.loc[full['cell'] == cell, 'informative'].mean():,.0f}" for cell in cells) + " |")
    means = frame.groupby(["criterion", "share", "cell"], sort=False)["eps_lb"].agg(["mean", "std"]).reset_index()
    reference = means[means["criterion"] == "all"].set_index("cell")
    better = means[(means["criterion"] != "all") & means.apply(
        lambda row: row["mean"] > reference.loc[row["cell"], "mean"] + np.nan_to_num(reference.loc[row["cell"], "std"]),
        axis=1)]
    lines += ["", "Selections whose mean is more than one std (of all canaries' bound) above the bound on all "
              "canaries: " + (", ".join(f"{row.criterion} q={row.share:g} in {row.cell} ({row.mean:.3f})"
                                        for row in better.itertuples()) or "none") + ". " + above_claims(frame)]
    return "\n".join(lines)


def render_pooling(frame: pd.DataFrame, root: Path) -> str:
    lines, cells = table_start(
        frame, f"## Pooling training runs in one game (`benchmarks/bench_audit_levers.py`, {root.name})",
        "Issue 38's lever `audit.runs`: the canaries of R independent training runs audited as one game with the "
        "default audit (as `audit.runs` plays them; docs/math.md §5.14 for why the pooled bound is valid), R = 1 "
        "being each run alone. Runs = the power study's seeds, pooled in consecutive disjoint "
        "groups; eps_lb mean +- std over the groups (one group: std 0).", ["runs pooled (R)", "groups"])
    for runs, rows in frame.groupby("runs"):
        lines.append(f"| {runs} | {rows.groupby('cell')['seeds'].nunique().max()} | {cell_bounds(rows, cells)} |")
    for runs, rows in frame.groupby("runs"):
        lines.append(f"| ceiling at the claimed eps, R = {runs} | | " + " | ".join(
            f"{rows.loc[rows['cell'] == cell, 'ceiling'].mean():.3f}" for cell in cells) + " |")
    lines.append("| informative canaries per run | | " + " | ".join(
        f"{frame.loc[(frame['cell'] == cell) & (frame['runs'] == 1), 'informative'].mean():,.0f}" for cell in cells)
        + " |")
    seeds = sorted(frame.loc[frame["runs"] == 1, "seeds"].astype(int).unique())
    lines += ["", f"Runs: `run.seed` = {', '.join(map(str, seeds))}. " + above_claims(frame)]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="runs/power/1000000-xgboost", help="one study of bench_audit_power")
    parser.add_argument("--render", action="store_true", help="write the BENCHMARKS.md sections")
    args = parser.parse_args(argv)
    root = Path(args.root)
    tables = cell_tables(root)
    if not tables:
        raise SystemExit(f"--root: no complete cell under {root}")
    selection = pd.DataFrame(selection_rows(tables, root))
    pooling = pd.DataFrame(pooling_rows(tables))
    single = pooling[pooling["runs"] == 1].set_index(["cell", "seeds"])["eps_lb"]
    alone = selection[selection["criterion"] == "all"].assign(seeds=lambda f: f["seed"].astype(str))
    if not np.allclose(alone.set_index(["cell", "seeds"])["eps_lb"].reindex(single.index), single, atol=1e-12):
        raise RuntimeError("a run pooled alone differs from its own default audit: the pooling is wrong")
    selection.to_json(root / "canary_selection.json", orient="records", indent=0)
    pooling.to_json(root / "pooled_runs.json", orient="records", indent=0)
    publish(SELECTION_SECTION, render_selection(selection, root), render=args.render, after=AFTER_SECTION)
    publish(POOLING_SECTION, render_pooling(pooling, root), render=args.render, after=SELECTION_SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
