"""The report's findings, computed from the stage results (pure pandas/numpy/matplotlib, no Spark).

- :func:`settings_table`: one row per mechanism setting joining the posteriors summary (mean additive advantage,
  98th percentile of |I|, share of rows with infinite |I|) and the utility table (target test AUC).
- :func:`bounds_table`: every best-over-the-sweep epsilon bound of the audit with its confidence and delta (the
  binomial bound at ``audit.delta``, GDP at the delta its mu was converted at): the valid bounds first, then the
  paper's convention, labelled as not valid; a valid bound of 0 is flagged as no evidence at this size.
- :func:`matched_utility_plot`: mechanisms side by side at matched utility (as in the LIA paper's Figure 2): each
  mechanism's advantage-vs-AUC curve, and its advantage interpolated at the highest AUC every mechanism reaches.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from lia_spark.names import BAG_SIZE, BONFERRONI, EPSILON, MECHANISM, setting_key
from lia_spark.present.point_labels import label_points, note_left_out
from lia_spark.records.audit_summary import AuditSummary
from lia_spark.records.wording import NO_EVIDENCE, NOT_VALID

SETTING_COLUMNS = ("setting", MECHANISM, EPSILON, BAG_SIZE, "mean_additive_advantage", "abs_I_p98", "share_infinite",
                   "auc", "advantage_source")
ADVANTAGE_SOURCES = {  # where a settings row's advantages come from (the report's legend)
    "posteriors": "the posteriors stage's summary of this release",
    "posteriors_rr": "the posteriors stage's summary of RR at the same eps (this mechanism trains on RR's release)",
    "rr_closed_form": "RR's closed form over the non-private target's predictions as prior (no posteriors summary "
                      "of RR at this eps)",
    "none": "no advantage (no posteriors summary and no closed form)",
}
ADVANTAGE = "mean_additive_advantage"
BOUND_COLUMNS = ("bound", "family", "convention", "valid", "mean", "std", "confidence", "delta", "note")
VALID = "valid lower bound"


def settings_table(summary: Sequence[Mapping[str, Any]], utility: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows of :data:`SETTING_COLUMNS`, one per setting key, sorted by mechanism, epsilon, k.

    Advantages come from the posteriors ``summary`` (the utility table's own values where the summary has no such
    setting: RR's summary at the same eps or RR's closed form, :data:`ADVANTAGE_SOURCES`, named in
    ``advantage_source``); ``auc`` from the ``utility`` table (NaN when the setting was not trained)."""
    rows: dict[str, dict[str, Any]] = {}
    for source, row in [*(("utility", r) for r in utility), *(("summary", r) for r in summary)]:
        key = setting_key(row[MECHANISM], row[EPSILON], row[BAG_SIZE])
        merged = rows.setdefault(key, {"setting": key, MECHANISM: row[MECHANISM], EPSILON: float(row[EPSILON]),
                                       BAG_SIZE: int(row[BAG_SIZE]), "advantage_source": "none"})
        for column in SETTING_COLUMNS[4:-1]:
            if column in row and (source == "summary" or column not in merged):
                merged[column] = float(row[column])
        if source == "summary":
            merged["advantage_source"] = "posteriors"
        elif "advantage_source" in row:
            merged["advantage_source"] = str(row["advantage_source"])
    table = pd.DataFrame(list(rows.values()), columns=list(SETTING_COLUMNS))
    order = table[EPSILON].fillna(math.inf)
    return table.assign(_order=order).sort_values([MECHANISM, "_order", BAG_SIZE]).drop(columns="_order").reset_index(
        drop=True)


def bounds_table(summary: AuditSummary) -> pd.DataFrame:
    """One row per epsilon bound of the audit's ``summary`` (its ``best`` statistics), in :data:`BOUND_COLUMNS`:
    family, convention, whether it is a valid bound (Bonferroni) or not (:data:`lia_spark.records.wording.NOT_VALID`),
    mean and std over repetitions, confidence, delta and a note (:data:`lia_spark.records.wording.NO_EVIDENCE` for a
    valid bound that is 0 in every repetition). The valid bounds come first."""
    rows = []
    for key, stats in summary.best.items():
        if not key.startswith("eps_"):
            continue
        family, convention = key[len("eps_"):].rsplit("_", 1)
        delta = summary.gdp_delta if family == "gdp" else summary.delta
        valid = convention == BONFERRONI
        rows.append({"bound": key, "family": family, "convention": convention, "valid": VALID if valid else NOT_VALID,
                     "mean": stats.mean, "std": stats.std, "confidence": summary.confidence, "delta": delta,
                     "note": NO_EVIDENCE if valid and stats.max == 0.0 else ""})
    rows.sort(key=lambda row: row["valid"] != VALID)  # stable: the summary's order within each group
    return pd.DataFrame(rows, columns=list(BOUND_COLUMNS))


def matched_auc(table: pd.DataFrame) -> tuple[float, dict[str, float]]:
    """The highest AUC every mechanism reaches (min over mechanisms of their max AUC) and each mechanism's mean
    additive advantage linearly interpolated along its advantage-vs-AUC points at that AUC (held at the end point
    when its AUCs lie above it). Only settings with a finite AUC and advantage count; NaN and {} without any."""
    usable = table[np.isfinite(table["auc"].astype(float)) & np.isfinite(table[ADVANTAGE].astype(float))]
    if usable.empty:
        return math.nan, {}
    target = float(usable.groupby(MECHANISM)["auc"].max().min())
    at_target = {}
    for mechanism, group in usable.groupby(MECHANISM, sort=True):
        group = group.sort_values("auc")
        at_target[str(mechanism)] = float(np.interp(target, group["auc"], group[ADVANTAGE]))
    return target, at_target


def matched_utility_plot(table: pd.DataFrame, *, path: str) -> str | None:
    """PNG at ``path``: left, every mechanism's mean additive advantage against target test AUC (points labelled by
    setting key where the label overlaps nothing, :func:`lia_spark.present.point_labels.label_points`) with the
    matched AUC marked; right, each mechanism's advantage at that AUC (:func:`matched_auc`). None when fewer than two
    mechanisms have points."""
    target, at_target = matched_auc(table)
    if len(at_target) < 2:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    usable = table[np.isfinite(table["auc"].astype(float)) & np.isfinite(table[ADVANTAGE].astype(float))]
    figure, (curves, bars) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    colors = dict(zip(at_target, plt.get_cmap("tab10")(np.arange(len(at_target)) % 10)))
    for mechanism, group in usable.groupby(MECHANISM, sort=True):
        group = group.sort_values("auc")
        curves.plot(group["auc"], group[ADVANTAGE], "-o", color=colors[mechanism], label=mechanism, markersize=4)
    curves.axvline(target, color="0.4", linestyle="--", linewidth=1, label=f"matched AUC {target:.4f}")
    curves.set_xlabel("target test AUC (utility)")
    curves.set_ylabel("mean additive advantage (leakage)")
    curves.set_title("Advantage against utility, per mechanism", fontsize=10)
    curves.grid(alpha=0.3)
    curves.legend(fontsize=7)
    names = list(at_target)
    bars.bar(range(len(names)), [at_target[n] for n in names], color=[colors[n] for n in names])
    bars.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    for index, name in enumerate(names):
        bars.annotate(f"{at_target[name]:.4f}", (index, at_target[name]), ha="center", va="bottom", fontsize=7)
    bars.set_ylabel("mean additive advantage")
    bars.set_title(f"At matched utility (AUC = {target:.4f})", fontsize=10)
    figure.tight_layout()
    left_out = label_points(curves, list(zip(usable["auc"].astype(float), usable[ADVANTAGE].astype(float))),
                            list(usable["setting"]))
    note_left_out(figure, left_out)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
