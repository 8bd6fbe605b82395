"""Power of the valid audit: every score, recalibration and sweep on seeded GBDT targets (BENCHMARKS.md).

Under the injected design (docs/math.md §5.9) every choice of audit.scores, audit.recalibrate and audit.sweep is a
valid bound; this study measures which is strongest on realistic targets. Each seed is one training run per cell
(``lia-spark audit-table``: new twin, proxy, mechanism output and coins), audited afterwards under every choice
from its canary table (:func:`lia_spark.studies.power.audit_choice`, the stage's own computation, no training):

    python benchmarks/bench_audit_power.py --run --root runs/power --rows 200000 1000000 --library xgboost catboost
    python benchmarks/bench_audit_power.py --root runs/power --flip-shares 0.05 0.1 0.2 0.5 --run   # counterfactual
    python benchmarks/bench_audit_power.py --root runs/power --render

The choices are ranked on ``--seeds`` (1-5, in-sample); ``--fresh-seeds`` (6-10) re-measure them out of sample, and
each study's section shows both side by side. ``--run`` starts the seeds whose table is missing (not those already
analysed whose runs were deleted); the analysis reads whatever cells are complete. Each study is its own
BENCHMARKS.md section (one study re-run alone leaves the others as they are) and its analysed bounds are kept in
``benchmarks/audit_power.json``, so ``--render`` rewrites a study's section from there when its training runs are
gone.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._keys import seeded_key_file  # noqa: E402
from benchmarks._report import publish  # noqa: E402
from lia_spark.names import BASELINE_NAMES, PROXY_PREDICTION, SHADOW_PREDICTION  # noqa: E402
from lia_spark.run.model_sections import AuditConfig  # noqa: E402
from lia_spark.studies import power  # noqa: E402

SECTION = "audit_power"
AFTER_SECTION = "audit_table_injected"
FLIP_SECTION = "audit_power_flips"
REPO = Path(__file__).resolve().parent.parent
RESULTS_FILE = REPO / "benchmarks" / "audit_power.json"  # study -> its analysed (seed, cell, choice) rows
# the cells: none, RR at eps 1-8, noise correction and LP-2ST at eps 2 and 4 (each group one audit-table); at 1M rows
# per day only the shown cells (the training runs take 5x longer)
CELL_GROUPS = ((("none", "rr"), (8.0, 4.0, 2.0, 1.0)), (("rr_debiased", "lp_2st"), (4.0, 2.0)))
LARGE_CELL_GROUPS = ((("none", "rr"), (8.0, 4.0, 2.0, 1.0)), (("rr_debiased",), (2.0,)), (("lp_2st",), (4.0,)))
LARGE_ROWS = 1_000_000
SHOWN_CELLS = ("none", "rr-eps8", "rr-eps4", "rr-eps2", "rr-eps1", "rr_debiased-eps2", "lp_2st-eps4")
FLIP_CELLS = (("none", "rr"), (4.0, 2.0))
SCORE_SETS = (("log_ratio",), ("difference_t0",), ("difference_t2",), ("difference_t8",),
              ("log_ratio", "difference_t2"), ("difference_t0", "difference_t2", "difference_t8", "log_ratio"))
RECALIBRATIONS = ("none", "target", "proxy")
# at 1M rows per day (800k canaries a table) the choices that matter at 200k: the default's neighbours
LARGE_SCORE_SETS = (("log_ratio",), ("difference_t2",), ("log_ratio", "difference_t2"))
LARGE_RECALIBRATIONS = ("none", "proxy")
SWEEPS = ("linear", "geometric")


def default_choice() -> str:
    """The study's row that the audit's defaults compute where the train stage fitted shadows: the baselines of
    audit.baseline, each under the one map audit.recalibrate names for it (a row has one recalibration)."""
    section = AuditConfig()
    baselines = [BASELINE_NAMES[column] for column in section.baseline_columns((PROXY_PREDICTION, SHADOW_PREDICTION))]
    (mapped,) = {section.recalibration(name) for name in baselines}
    return f"{power.choice_name(dataclasses.replace(section, recalibrate=mapped))} | {'+'.join(baselines)}"


DEFAULT = default_choice()


def study_name(rows: int, library: str, flip_share: float | None = None) -> str:
    """Name of one study (its folder under the root, its key in :data:`RESULTS_FILE`)."""
    return f"{rows}-{library}" + ("" if flip_share is None else f"-flip{flip_share:g}")


def study_root(root: str, rows: int, library: str, flip_share: float | None = None) -> Path:
    """Folder of one study: <root>/<rows>-<library>[-flip<share>]."""
    return Path(root) / study_name(rows, library, flip_share)


def kept_results() -> dict[str, pd.DataFrame]:
    """The analysed rows of every study kept in :data:`RESULTS_FILE` (empty when there is none)."""
    if not RESULTS_FILE.exists():
        return {}
    stored = json.loads(RESULTS_FILE.read_text(encoding="utf-8"))
    return {name: pd.DataFrame(table["data"], columns=table["columns"]) for name, table in stored.items()}


def keep_results(name: str, frame: pd.DataFrame) -> None:
    """Store one study's analysed rows in :data:`RESULTS_FILE` (without the run folders' marker times)."""
    stored = json.loads(RESULTS_FILE.read_text(encoding="utf-8")) if RESULTS_FILE.exists() else {}
    kept = frame.drop(columns=["marker"], errors="ignore")
    stored[name] = json.loads(kept.to_json(orient="split", index=False, double_precision=6))
    RESULTS_FILE.write_text(json.dumps(dict(sorted(stored.items())), separators=(",", ":")) + "\n", encoding="utf-8")


def seed_commands(folder: Path, seed: int, rows: int, library: str, flip_share: float | None) -> list[list[str]]:
    """The audit-table commands of one seed (one per cell group; the flip study runs its own cells)."""
    groups = (FLIP_CELLS,) if flip_share is not None else LARGE_CELL_GROUPS if rows >= LARGE_ROWS else CELL_GROUPS
    flip = [] if flip_share is None else ["audit.counterfactual=flip", f"audit.flip_share={flip_share:g}"]
    return [[str(REPO / ".venv" / "bin" / "lia-spark"), "audit-table", "--conf", "conf/audit_table.yaml",
             f"synthetic.rows_per_day={rows}", f"run.seed={seed}", f"run.output_dir={folder}/seed{seed}",
             f"audit.key_path={folder}/seed{seed}.audit_key",  # the seed's own key (benchmarks/_keys.py)
             f"table.mechanisms=[{','.join(mechanisms)}]", f"table.epsilons=[{','.join(map(str, epsilons))}]",
             f"models.library={library}", "tracking.enabled=false", *flip,
             *(["utility.bag_sizes=[]"] if library == "catboost" else [])]  # no LLP in catboost; unused by the table
            for mechanisms, epsilons in groups]


def group_done(folder: Path, seed: int, command: list[str]) -> bool:
    """True when every cell of the command's table.mechanisms x table.epsilons has complete train and audit outputs
    (edited code changes every fingerprint, so a rerun would train them again for nothing)."""
    values = dict(word.split("=", 1) for word in command if word.startswith("table."))
    mechanisms = values["table.mechanisms"].strip("[]").split(",")
    epsilons = [float(e) for e in values["table.epsilons"].strip("[]").split(",")]
    names = {"none" if m == "none" else f"{m}-eps{e:g}" for m in mechanisms for e in epsilons}
    cells = folder / f"seed{seed}" / "table" / "cells"
    return all((cells / name / step / "_LIA_COMPLETE").exists() for name in names for step in ("models", "audit"))


def analysed(folder: Path, seed: int, kept: pd.DataFrame | None) -> bool:
    """True when the seed's training runs are gone (deleted after the analysis) while its cells are analysed: in
    the study's power.json, or in the rows kept in :data:`RESULTS_FILE` (``kept``; a fresh ``--root`` on another
    machine has no power.json): ``--run`` does not train them again."""
    if (folder / f"seed{seed}").exists():
        return False
    cache = folder / "power.json"
    found = [pd.read_json(cache)] if cache.exists() else []
    return any(bool((frame["seed"] == seed).any()) for frame in [*found, *([] if kept is None else [kept])])


def cell_rows(folder: Path, seed: int, choices: tuple[AuditConfig, ...], known: pd.DataFrame) -> list[dict]:
    """Every complete cell of one seed audited under every choice, with its utility and informative share; a cell
    whose rows in ``known`` (the last analysis) were computed from the same committed canary table (its marker's
    time) under the same choices is taken from there."""
    rows = []
    for cell in sorted((folder / f"seed{seed}" / "table" / "cells").glob("*")):
        marker = cell / "models" / "_LIA_COMPLETE"
        if not marker.exists():
            continue
        stamp = marker.stat().st_mtime_ns
        if not known.empty:
            done = known[(known["seed"] == seed) & (known["cell"] == cell.name) & (known["marker"] == stamp)]
            if len(done) and set(map(power.choice_name, choices)) <= {c.rsplit(" | ", 1)[0] for c in done["choice"]}:
                rows.extend(done.to_dict("records"))
                continue
        trained = json.loads((cell / "models" / "metrics.json").read_text(encoding="utf-8"))
        canaries = pd.read_parquet(cell / "models" / "canaries")
        claimed = float(trained["epsilon"])
        base = {"study": folder.name, "seed": seed, "cell": cell.name, "marker": stamp, "claimed_epsilon": claimed,
                "canaries": int(canaries["hidden_bit"].notna().sum()),
                "test_auc": trained["test_metrics"]["auc@target"],
                "test_log_loss": trained["test_metrics"]["log_loss@target"]}
        shadows = SHADOW_PREDICTION in canaries and canaries[SHADOW_PREDICTION].notna().any()
        baselines = [(PROXY_PREDICTION,)] + ([(SHADOW_PREDICTION,), (PROXY_PREDICTION, SHADOW_PREDICTION)]
                                              if shadows else [])
        for section, baseline in itertools.product(choices, baselines):
            found = power.audit_choice(canaries, section, seed=seed, claimed_epsilon=claimed, baselines=baseline)
            rows.append({**base, "choice": found.choice, "eps_lb": found.eps_lb, "score": found.score,
                         "guesses": found.guesses, "informative": found.informative, "tests": found.tests,
                         "ceiling": found.ceiling})
    return rows


def spread_text(values: pd.Series, digits: int) -> str:
    """``mean +- std`` (sample std over the seeds or groups), or the value alone for one run (no spread to show; the
    tables' seeds row says so)."""
    mean, std = power.mean_std(values)
    return f"{mean:.{digits}f} +- {std:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def bound_text(frame: pd.DataFrame) -> str:
    """eps_lb of ``frame``'s rows as :func:`spread_text`."""
    return spread_text(frame["eps_lb"], 3)


def shown_cells(frame: pd.DataFrame) -> list[str]:
    """The cells of ``frame`` in :data:`SHOWN_CELLS` order."""
    return [cell for cell in SHOWN_CELLS if cell in set(frame["cell"])]


def choice_table(frame: pd.DataFrame, cells: list[str]) -> str:
    """Rows = choices, columns = cells: eps_lb mean +- std over seeds; the ceiling and the informative canaries
    last."""
    lines = ["| choice (scores \\| recalibrate \\| sweep \\| baseline) | " + " | ".join(cells) + " |",
             "|---|" + "---|" * len(cells)]
    for choice, rows in frame.groupby("choice", sort=False):
        mark = " (default)" if choice == DEFAULT else ""
        values = [bound_text(rows[rows["cell"] == cell]) if (rows["cell"] == cell).any() else "-" for cell in cells]
        lines.append(f"| {choice.replace('|', chr(92) + '|')}{mark} | " + " | ".join(values) + " |")
    default = frame[frame["choice"] == DEFAULT]
    for label, column, spec in (("ceiling at the claimed eps (default choice)", "ceiling", ".3f"),
                                ("informative canaries", "informative", ",.0f")):
        values = [format(default.loc[default["cell"] == cell, column].mean(), spec) if (default["cell"] == cell).any()
                  else "-" for cell in cells]
        lines.append(f"| {label} | " + " | ".join(values) + " |")
    seeds = frame.groupby("cell")["seed"].nunique()
    lines.append("| seeds (training runs) | " + " | ".join(str(seeds.get(cell, 0)) for cell in cells) + " |")
    return "\n".join(lines)


def decision_lines(frame: pd.DataFrame) -> list[str]:
    """The strongest choices that are never more than one std below the best in any cell, and where the default
    stands."""
    ranked = power.ranked_choices(frame)
    lines = [f"- {choice}: mean over cells {row.mean_over_cells:.3f}, {int(row.cells_worse)} cell(s) more than one std "
             f"below the best" + (" **(default)**" if choice == DEFAULT else "")
             for choice, row in ranked.head(6).iterrows()]
    if DEFAULT not in ranked.head(6).index and DEFAULT in ranked.index:
        row = ranked.loc[DEFAULT]
        lines.append(f"- {DEFAULT} **(default)**: mean over cells {row.mean_over_cells:.3f}, "
                     f"{int(row.cells_worse)} cell(s) below")
    return lines


def utility_table(frame: pd.DataFrame, cells: list[str]) -> str:
    """Per cell: informative share of the canaries, test AUC and log-loss (true labels) over seeds."""
    default = frame[frame["choice"] == DEFAULT]
    lines = ["| cell | informative share | test AUC | test log-loss |", "|---|---|---|---|"]
    for cell in cells:
        rows = default[default["cell"] == cell]
        if rows.empty:
            continue
        share = rows["informative"] / rows["canaries"]
        lines.append(f"| {cell} | {share.mean():.4f} | {spread_text(rows['test_auc'], 4)} "
                     f"| {spread_text(rows['test_log_loss'], 4)} |")
    return "\n".join(lines)


def out_of_sample_table(frame: pd.DataFrame, cells: list[str], chosen_on: list[int], fresh: list[int]) -> str:
    """The choices ranked best on the seeds ``chosen_on`` (and the default), each cell "in-sample / out-of-sample"
    (eps_lb mean +- std on each seed set), the ranks on both, and the default's ceiling from the same runs."""
    compared = power.out_of_sample(frame[frame["cell"].isin(cells)], chosen_on, fresh, also=(DEFAULT,))
    lines = ["| choice | rank in / out | " + " | ".join(cells) + " |", "|---|---|" + "---|" * len(cells)]
    for choice, rows in compared.groupby("choice", sort=False):
        by_cell = rows.set_index("cell")
        values = [f"{by_cell.at[cell, 'in_sample_mean']:.3f} +- {by_cell.at[cell, 'in_sample_std']:.3f} / "
                  f"{by_cell.at[cell, 'out_of_sample_mean']:.3f} +- {by_cell.at[cell, 'out_of_sample_std']:.3f}"
                  if cell in by_cell.index else "-" for cell in cells]
        mark = " (default)" if choice == DEFAULT else ""
        ranks = f"{rows['rank_in_sample'].iat[0]} / {rows['rank_out_of_sample'].iat[0]}"
        lines.append(f"| {choice.replace('|', chr(92) + '|')}{mark} | {ranks} | " + " | ".join(values) + " |")
    default = frame[frame["choice"] == DEFAULT]
    ceilings = [" / ".join(format(default.loc[(default["cell"] == cell) & default["seed"].isin(seeds), "ceiling"]
                                  .mean(), ".3f") for seeds in (chosen_on, fresh)) for cell in cells]
    lines.append("| ceiling at the claimed eps (default choice) | | " + " | ".join(ceilings) + " |")
    return "\n".join(lines)


def flip_table(frames: dict[str, pd.DataFrame]) -> str:
    """Counterfactual: proxy draw vs flips at each share, default choice: informative share, eps_lb, utility."""
    lines = ["| counterfactual | cell | seeds | informative canaries | eps_lb (default choice) | ceiling | test AUC | "
             "test log-loss |", "|---|---|---|---|---|---|---|---|"]
    for label, frame in frames.items():
        default = frame[frame["choice"] == DEFAULT]
        for cell, rows in default.groupby("cell", sort=False):
            if cell not in ("none", "rr-eps4", "rr-eps2"):
                continue
            lines.append(f"| {label} | {cell} | {rows['seed'].nunique()} | {rows['informative'].mean():,.0f} | "
                         f"{bound_text(rows)} | {rows['ceiling'].mean():.3f} | {rows['test_auc'].mean():.4f} | "
                         f"{rows['test_log_loss'].mean():.4f} |")
    return "\n".join(lines)


def analyse(folder: Path, seeds: list[int], choices: tuple[AuditConfig, ...]) -> pd.DataFrame:
    """The bounds of every complete cell of every seed of one study (kept in <folder>/power.json; a cell analysed
    before under the same choices and canary table is not audited again, and one whose training run was deleted
    since is kept as analysed)."""
    cache = folder / "power.json"
    known = pd.read_json(cache) if cache.exists() else pd.DataFrame()
    if not known.empty and ("marker" not in known or not set(map(power.choice_name, choices)) <= {
            name.rsplit(" | ", 1)[0] for name in known["choice"]}):
        known = pd.DataFrame()  # another grid of choices: analyse again
    rows = [row for seed in seeds for row in cell_rows(folder, seed, choices, known)]
    if not known.empty:  # cells analysed before whose training runs were deleted since (they take gigabytes), and
        # the seeds this call did not ask for (a run of one seed must not drop the others' analysed rows)
        deleted = np.array([not (folder / f"seed{seed}" / "table" / "cells" / cell / "models").is_dir()
                            for seed, cell in zip(known["seed"], known["cell"])])
        requested = known["seed"].isin(seeds).to_numpy()
        rows += known[(deleted & requested) | ~requested].to_dict("records")
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame.to_json(folder / "power.json", orient="records", indent=0)
    return frame


def header() -> str:
    """The section's title and method; each study follows in its own section (:func:`study_section`)."""
    return "\n\n".join([
        "## Power of the valid audit (`benchmarks/bench_audit_power.py`)",
        "Injected design (docs/math.md §5.9), twin, `conf/audit_table.yaml` (<= 200 trees, depth 6), one training run "
        "per cell and seed (`run.seed` = 1, 2, ...; each table's last row counts a cell's seeds), each cell's canary "
        "table then audited under every choice of `audit.scores`, `audit.recalibrate` and `audit.sweep` with the "
        "stage's own computation (`lia_spark.studies.power.audit_choice`): pure binomial bound, 95%, Bonferroni "
        "over scores x sweep points, "
        "m = the informative canaries. Every choice is a valid bound; a cell is the mean +- std of eps_lb over the "
        "seeds. Linear sweep: c' = 1%, ..., 100% of m plus 0.1% (101 tests per score); geometric: c' = m 10^(-j/4) "
        "down to 10 (12-15 tests per score). The ceiling is what an attacker at exactly the claimed eps typically "
        "certifies "
        "(docs/math.md §5.12). Each study below is its own section, with the time it was measured."])


def seeds_text(seeds: list[int]) -> str:
    return ", ".join(map(str, sorted(seeds)))


def study_section(label: str, frame: pd.DataFrame, chosen_on: list[int], fresh: list[int]) -> str:
    """One study: eps_lb per choice and cell and the strongest choices on the seeds ``chosen_on`` (in-sample), the
    ranked choices re-measured on the ``fresh`` seeds beside it (when the study has them), utility, and bounds
    above the claimed eps."""
    cells = shown_cells(frame)
    finite = frame[np.isfinite(frame["claimed_epsilon"])]
    above = finite[finite["eps_lb"] > finite["claimed_epsilon"]]
    selection = frame[frame["seed"].isin(chosen_on)]
    held_out = sorted(set(frame["seed"]) & set(fresh))
    spread = (":" if selection["seed"].nunique() > 1 else ". With one training run per cell so far there is no "
              "spread: any value below the best counts as worse, and the ranking is one draw, not a finding.")
    parts = [f"### {label}",
             f"In-sample: the seeds the choices are ranked on ({seeds_text(selection['seed'].unique())}).",
             choice_table(selection, cells),
             "Strongest choices that are never meaningfully worse (a cell's mean more than one std of the best "
             f"choice below the best counts as worse){spread}",
             "\n".join(decision_lines(selection[selection["cell"].isin(cells)]))]
    if held_out:
        parts += [f"Out-of-sample: the ranked choices and the default re-measured on fresh seeds "
                  f"({seeds_text(held_out)}), which played no part in the ranking; each cell in-sample / "
                  "out-of-sample (eps_lb mean +- std over the seeds), ranks by the rule above on each seed set:",
                  out_of_sample_table(frame, cells, chosen_on, held_out)]
    parts += ["Utility and informative share per cell, every seed (default counterfactual: y1 ~ M'(x)):",
              utility_table(frame, cells),
              f"Bounds above their claimed eps: {len(above)} of {len(finite)} (cell, seed, choice) audits."]
    return "\n\n".join(parts)


def flip_section(flips: dict[str, pd.DataFrame]) -> str:
    """The counterfactual study: the proxy draw against flips at each share."""
    return "\n\n".join([
        "### Counterfactual: proxy draw against flips (200k rows per day, XGBoost)",
        "`audit.counterfactual=flip audit.flip_share=f`: y1 = 1 - y0 on a share f of the canaries (all of them "
        "informative) against the default y1 ~ M'(x); eps_lb under the default choice.",
        flip_table(flips),
        "Every flipped canary is informative, so flips raise m and the ceiling, but each is label noise for the target "
        "(a 0 turned into a 1 at this click rate): read the bound beside the test AUC and log-loss it costs, against "
        "the proxy draw's row (the seeds column says how many runs each row averages)."])


def study_results(root: str, rows: int, library: str, share: float | None, seeds: list[int],
                  grid: tuple[AuditConfig, ...], kept: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One study's rows: analysed from its run folder (and then kept in :data:`RESULTS_FILE`) when it exists, else
    the kept rows of its seeds (empty when neither exists)."""
    name, folder = study_name(rows, library, share), study_root(root, rows, library, share)
    stored = kept.get(name, pd.DataFrame())
    if folder.is_dir():
        frame = analyse(folder, seeds, grid)
        if not frame.empty:
            if not stored.empty and set(stored["choice"]) == set(frame["choice"]):  # seeds analysed elsewhere
                frame = pd.concat([frame, stored[~stored["seed"].isin(frame["seed"])]], ignore_index=True)
            keep_results(name, frame)
        return frame
    return stored[stored["seed"].isin(seeds)] if not stored.empty else stored


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="runs/power")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5],
                        help="the seeds the choices are ranked on (in-sample)")
    parser.add_argument("--fresh-seeds", type=int, nargs="*", default=[6, 7, 8, 9, 10],
                        help="seeds that re-measure the ranked choices (out-of-sample)")
    parser.add_argument("--rows", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--library", nargs="+", default=["xgboost", "catboost"])
    parser.add_argument("--flip-shares", type=float, nargs="*", default=[])
    parser.add_argument("--flip-seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--run", action="store_true", help="run the audit-table of every seed without a table")
    parser.add_argument("--render", action="store_true", help="write the BENCHMARKS.md sections")
    args = parser.parse_args(argv)
    plan = [(rows, library, None, args.seeds + args.fresh_seeds) for library in args.library for rows in args.rows]
    plan += [(200_000, "xgboost", share, args.flip_seeds) for share in args.flip_shares]
    if args.run:
        stored = kept_results()
        for rows, library, share, seeds in plan:
            folder = study_root(args.root, rows, library, share)
            for seed in seeds:
                if analysed(folder, seed, stored.get(study_name(rows, library, share))):
                    continue
                seeded_key_file(folder / f"seed{seed}.audit_key", seed)
                for command in seed_commands(folder, seed, rows, library, share):
                    if not group_done(folder, seed, command):
                        subprocess.run(command, cwd=REPO, check=True)
    kept = kept_results()
    full_grid = power.choice_grid(SCORE_SETS, RECALIBRATIONS, SWEEPS)
    publish(SECTION, header(), render=args.render, after=AFTER_SECTION)
    previous, frames = SECTION, {}
    for rows, library, share, seeds in plan:
        grid = ((AuditConfig(),) if share is not None else full_grid if rows < LARGE_ROWS
                else power.choice_grid(LARGE_SCORE_SETS, LARGE_RECALIBRATIONS, SWEEPS))
        frame = frames[study_name(rows, library, share)] = study_results(args.root, rows, library, share, seeds,
                                                                          grid, kept)
        if frame.empty or share is not None:
            continue
        section = f"{SECTION}_{study_name(rows, library)}"
        publish(section, study_section(f"{library}, {rows:,} rows per day", frame, args.seeds, args.fresh_seeds),
                render=args.render, after=previous)
        previous = section
    flips = {f"flip {share:g}": frames[study_name(200_000, "xgboost", share)] for share in args.flip_shares
             if not frames[study_name(200_000, "xgboost", share)].empty}
    if flips:
        proxy_name = study_name(200_000, "xgboost")
        proxy_draw = frames[proxy_name] if proxy_name in frames else study_results(
            args.root, 200_000, "xgboost", None, args.seeds, full_grid, kept)
        shown = {} if proxy_draw.empty else {"proxy draw (default)": proxy_draw}
        publish(FLIP_SECTION, flip_section({**shown, **flips}), render=args.render, after=previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
