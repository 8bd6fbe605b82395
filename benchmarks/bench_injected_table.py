"""Table 2 with injected canaries on the twin at 1M rows per day: the whole grid under the audit's defaults.

One training run gives one valid bound under the injected design (docs/math.md §5.9); the seeded spread of the
non-private and RR cells under every audit choice is measured by benchmarks/bench_audit_power.py. The grid of one
seed (PATE's cells are rendered by benchmarks/bench_table_conventions.py):

    lia-spark audit-table --conf conf/audit_table.yaml synthetic.rows_per_day=1000000 run.seed=S \\
        run.output_dir=<root>/seedS 'table.mechanisms=[none,rr,...,llp_geometric]' tracking.enabled=false

``--run`` trains the seed when its table is missing; the complete cells are kept in benchmarks/injected_table.json
(the section renders from it once the runs are deleted); ``--render`` writes the section.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._keys import seeded_key_file  # noqa: E402
from benchmarks._report import publish  # noqa: E402
from lia_spark.records.audit_summary import AuditSummary  # noqa: E402
from lia_spark.studies import table  # noqa: E402

SECTION = "audit_table_injected"
AFTER_SECTION = "audit_table"
REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "injected_table.json"
GRID_ORDER = ("none", "rr", "rr_with_prior", "rr_debiased", "lp_2st", "llp", "llp_laplace", "llp_geometric", "pate")
GRID_MECHANISMS = "table.mechanisms=[" + ",".join(GRID_ORDER[:-1]) + "]"
GRID_CELLS = 38  # the grid without PATE: none, 4 label mechanisms x 6 eps, llp, 2 noisy llp x 6 eps
EPSILON_COLUMNS = (math.inf, 8.0, 4.0, 2.0, 1.0, 0.1)
KEPT_FIELDS = ("cell", "mechanism", "algorithm", "claimed_epsilon", "bag_size", "eps_lb_mean", "ceiling", "canaries",
               "test_auc", "test_log_loss")


def seed_command(root: str, seed: int, rows_per_day: int) -> list[str]:
    """The audit-table command of one seed's whole grid (shell words)."""
    return [str(REPO / ".venv" / "bin" / "lia-spark"), "audit-table", "--conf", "conf/audit_table.yaml",
            f"synthetic.rows_per_day={rows_per_day}", f"run.seed={seed}", f"run.output_dir={root}/seed{seed}",
            f"audit.key_path={root}/seed{seed}.audit_key", GRID_MECHANISMS, "tracking.enabled=false"]


def shown_command(root: str, seed: int, rows_per_day: int) -> str:
    """The command as a user types it (the mechanism list quoted, the console script of the venv)."""
    words = seed_command(root, seed, rows_per_day)
    words[0] = ".venv/bin/lia-spark"
    return " ".join(f"'{word}'" if word == GRID_MECHANISMS else word for word in words)


def cells(root: str, seed: int) -> pd.DataFrame:
    """One row per cell of one seed whose train and audit outputs are complete (read from the cells' own folders,
    so a grid still running shows its finished cells)."""
    rows = []
    for folder in sorted((Path(root) / f"seed{seed}" / "table" / "cells").glob("*")):
        paths = [folder / "models" / "_LIA_COMPLETE", folder / "audit" / "_LIA_COMPLETE"]
        if not all(path.exists() for path in paths):
            continue
        trained = json.loads((folder / "models" / "metrics.json").read_text(encoding="utf-8"))
        summary = json.loads((folder / "audit" / "summary.json").read_text(encoding="utf-8"))
        cell = table.Cell(trained["mechanism"], float(trained["epsilon"]), int(trained["bag_size"]))
        record = table.cell_record(cell, status="ran", summary=AuditSummary.from_dict(summary),
                                   test_metrics=trained["test_metrics"],
                                   train_seconds=math.nan, audit_seconds=math.nan, seconds=math.nan, error="",
                                   output_dir=str(folder))
        rows.append(record)
    order = {name: index for index, name in enumerate(GRID_ORDER)}
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    return frame.assign(_order=frame["mechanism"].map(order)).sort_values(
        ["_order", "bag_size", "claimed_epsilon"], ascending=[True, True, False]).drop(columns="_order")


def audit_choice(summary: dict) -> str:
    """The audit's choice as one line: scores, baselines, recalibration, sweep tests, bound and confidence."""
    recalibrated = sorted(summary.get("recalibration") or {})
    return (f"scores {' + '.join(summary['scores'])}, baselines {' + '.join(summary['baselines'])}, "
            f"recalibrated {', '.join(recalibrated) if recalibrated else 'none'}, {summary['tests']} tests "
            f"(Bonferroni over scores x baselines x sweep points), pure binomial bound at "
            f"{summary['confidence']:.0%}")


def collect(root: str, seed: int, rows_per_day: int) -> dict:
    """The complete cells of the run at ``root`` (kept in :data:`RESULTS`), or the kept ones when the run is gone.
    Kept cells audited under another choice of the audit become the first of the ``earlier`` grids."""
    found = cells(root, seed)
    kept = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {}
    if found.empty:
        if "cells" not in kept:
            raise SystemExit(f"no complete cell under {root}/seed{seed} and none kept in {RESULTS}")
        return kept
    first = Path(found["output_dir"].iloc[0], "audit", "summary.json")
    results = {"rows_per_day": rows_per_day, "seed": seed, "command": shown_command(root, seed, rows_per_day),
               "audit": audit_choice(json.loads(first.read_text(encoding="utf-8"))),
               "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "cells": found.loc[:, list(KEPT_FIELDS)].to_dict(orient="records"),
               "earlier": kept.get("earlier", [])}
    if kept.get("cells") and kept["audit"] != results["audit"]:
        results["earlier"] = [{"audit": kept["audit"], "measured": kept["measured"], "cells": kept["cells"]},
                              *results["earlier"]]
    RESULTS.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return results


def same_targets(cells_now: list[dict], cells_then: list[dict]) -> bool:
    """Whether two grids audited the same trained targets: every cell with the same test metrics and canaries."""
    then = {cell["cell"]: cell for cell in cells_then}
    return all(cell["cell"] in then and all(then[cell["cell"]].get(name) == cell[name]
                                             for name in ("test_auc", "test_log_loss", "canaries"))
               for cell in cells_now)


def paired_line(cells_now: list[dict], cells_then: list[dict]) -> str:
    """Today's bound minus the earlier one over the cells with a finite claim or a positive bound either way."""
    then = {cell["cell"]: cell["eps_lb_mean"] for cell in cells_then}
    gains = np.array([cell["eps_lb_mean"] - then[cell["cell"]] for cell in cells_now
                      if cell["eps_lb_mean"] > 0 or then[cell["cell"]] > 0])
    return (f"Same targets, so the difference is the audit's alone: today's default is higher in "
            f"{int((gains > 1e-9).sum())} of {gains.size} cells with a positive bound either way, lower in "
            f"{int((gains < -1e-9).sum())}; mean difference {gains.mean():+.3f}, largest gain {gains.max():+.3f}, "
            f"largest loss {gains.min():+.3f}.")


def grid_table(values: dict[str, dict[str, str]], extras: dict[str, list[str]], extra_names: list[str]) -> str:
    """Rows = training algorithms, columns = the claimed eps that any row has (cells: text per eps) and then
    ``extra_names`` (cells: ``extras[algorithm]``)."""
    columns = [table.epsilon_text(e) for e in EPSILON_COLUMNS
               if any(table.epsilon_text(e) in row for row in values.values())]
    lines = ["| " + " | ".join(["algorithm", *columns, *extra_names]) + " |",
             "|" + "---|" * (1 + len(columns) + len(extra_names))]
    for algorithm, row in values.items():
        cells_text = [row.get(column, "-") for column in columns] + extras.get(algorithm, [])
        lines.append(f"| {algorithm} | " + " | ".join(cells_text) + " |")
    return "\n".join(lines)


def _findings_line(frame: pd.DataFrame) -> str:
    """How many cells' bounds exceed their claimed eps (a valid audit of an honest mechanism: rarely, <= 5%)."""
    finite = frame[np.isfinite(frame["claimed_epsilon"])]
    above = finite[finite["eps_lb_mean"] > finite["claimed_epsilon"]]
    return (f"Bounds above the claimed eps: {len(above)} of {len(finite)} cells with a finite claim"
            + ("" if above.empty else ": " + ", ".join(above["cell"])) + ".")


def _span(values: pd.Series, style: str) -> str:
    """``min - max`` of a column in ``style``, one value when they are equal."""
    low, high = style.format(values.min()), style.format(values.max())
    return low if low == high else f"{low} - {high}"


def render(results: dict) -> str:
    """The grid under today's defaults (bound / ceiling per cell), then the same grid under earlier defaults."""
    frame = pd.DataFrame(results["cells"])
    bounds: dict[str, dict[str, str]] = {}
    utility: dict[str, list[str]] = {}
    for algorithm, rows in frame.groupby("algorithm", sort=False):
        bounds[algorithm] = {table.epsilon_text(row.claimed_epsilon): f"{row.eps_lb_mean:.3f} / {row.ceiling:.2f}"
                             for row in rows.itertuples()}
        utility[algorithm] = [_span(rows["test_auc"], "{:.3f}"), _span(rows["canaries"], "{:,.0f}")]
    parts = [
        "## Table 2 with injected canaries (`benchmarks/bench_injected_table.py`)",
        f"Twin at {results['rows_per_day']:,} rows per day, XGBoost in memory (the paper's 1M-row day sample, <= 200 "
        "trees), `audit.design: injected` (y1 ~ M'(x) and a fair coin b per canary drawn before training, the "
        "target trained on y^b; docs/math.md §5.9), the audit's defaults: " + results["audit"] + ". One training "
        f"run per cell (`run.seed` = {results['seed']}), so each value is one valid bound. Each cell: valid eps_lb "
        "/ its ceiling, what an attacker at exactly the claimed eps typically certifies with the cell's informative "
        "canaries (docs/math.md §5.12). Seeded spreads (5 training runs) of the non-private and RR cells under this "
        "and every other audit choice: \"Power of the valid audit\" below. PATE's cells: \"Table 2: valid, "
        f"recalibrated, the paper's way, published\". Command: `{results['command']}`.",
        grid_table(bounds, utility, ["test AUC", "informative canaries"]),
        _findings_line(frame) + (f" {GRID_CELLS - len(frame)} of the {GRID_CELLS} cells had not finished when this "
                                 "was written (a re-run of the command reuses the finished ones)."
                                 if len(frame) < GRID_CELLS else "")]
    for earlier in results.get("earlier", []):
        values: dict[str, dict[str, str]] = {}
        for cell in earlier["cells"]:
            values.setdefault(cell["algorithm"], {})[table.epsilon_text(cell["claimed_epsilon"])] = (
                f"{cell['eps_lb_mean']:.3f}")
        same = same_targets(results["cells"], earlier["cells"])
        parts += [f"### The same grid under the audit's defaults of {earlier['measured']}",
                  f"{earlier['audit']}; " + ("the same trained targets as above, audited then (valid bounds):"
                                             if same else "the same command and seed on the code of that day "
                                             "(other trained targets; valid bounds):"),
                  grid_table(values, {}, [])]
        if same:
            parts.append(paired_line(results["cells"], earlier["cells"]))
    parts.append(f"The grid's cells were read from its run on {results['measured']}.")
    return "\n\n".join(parts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="runs/table-injected-1m")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rows-per-day", type=int, default=1_000_000)
    parser.add_argument("--run", action="store_true", help="run the seed's audit-table when its table is missing")
    parser.add_argument("--render", action="store_true", help="write the BENCHMARKS.md section")
    args = parser.parse_args(argv)
    if args.run and not (Path(args.root) / f"seed{args.seed}" / "table" / "cells.csv").exists():
        seeded_key_file(Path(args.root) / f"seed{args.seed}.audit_key", args.seed)  # the seed's own coins
        subprocess.run(seed_command(args.root, args.seed, args.rows_per_day), cwd=REPO, check=True)
    publish(SECTION, render(collect(args.root, args.seed, args.rows_per_day)), render=args.render,
            after=AFTER_SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
