"""The stages' and studies' figures besides the posterior plots (PNG, matplotlib Agg): the privacy-utility
tradeoff, the audit's sweep, the audit table's eps_lb against the claimed epsilon and the validity study.

Pure: each takes a pandas table and writes one file; no Spark.
"""
from __future__ import annotations

import math
import os
from typing import Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lia_spark import names  # noqa: E402
from lia_spark.kernels.mechanism_registry import RR_FAMILY  # noqa: E402
from lia_spark.kernels.utility import ADVANTAGES, hidden_settings_text, point_label  # noqa: E402
from lia_spark.names import BONFERRONI, LLP, LLP_LAPLACE, PAPER  # noqa: E402
from lia_spark.present.point_labels import label_points, note_left_out  # noqa: E402
from lia_spark.studies.table import PUBLISHED_EPS_LB, PUBLISHED_EPSILONS, PUBLISHED_LABEL, inf_position  # noqa: E402
from lia_spark.studies.validity import COMBINED, score_label, summarize_study, theorem_rows  # noqa: E402


def plot_tradeoff(table: pd.DataFrame, *, advantage: str, path: str, title: str = "") -> None:
    """AUC vs advantage: one curve for rr (over eps), llp (over k), noisy llp per k (over eps), extras per name; every
    point labelled with its eps (or k on plain LLP's curve) where the label overlaps nothing
    (:func:`lia_spark.present.point_labels.label_points`; the figure counts the labels left out)."""
    if advantage not in ADVANTAGES:
        raise ValueError(f"advantage must be one of {list(ADVANTAGES)}, got {advantage!r}")
    figure, axis = plt.subplots(figsize=(7.5, 5))
    shown = table[np.isfinite(table[advantage].astype(float))]
    for (mechanism, bag_size), group in shown.groupby(["mechanism", "bag_size"], sort=True):
        if mechanism == LLP:
            continue
        group = group.sort_values(advantage)
        label = mechanism if mechanism in RR_FAMILY else f"{mechanism} k={bag_size}"
        style = "-o" if mechanism in RR_FAMILY else ("--s" if mechanism == LLP_LAPLACE else ":^")
        axis.plot(group[advantage], group["auc"], style, label=label, markersize=4, linewidth=1)
    llp = shown[shown["mechanism"] == LLP].sort_values(advantage)
    if len(llp):
        axis.plot(llp[advantage], llp["auc"], "-D", color="black", label="llp (over k)", markersize=4)
    axis.set_xlabel(ADVANTAGES[advantage] + hidden_settings_text(table[advantage]))
    axis.set_ylabel("target test AUC")
    axis.set_title(title or f"Privacy-utility tradeoff: AUC vs {ADVANTAGES[advantage]}")
    axis.grid(alpha=0.3)
    if len(shown):  # every setting hidden (the x label says why): no curve to name
        axis.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    labelled = shown[np.isfinite(shown["auc"].astype(float))]  # a failed fit has no point
    points = list(zip(labelled[advantage].astype(float), labelled["auc"].astype(float)))
    texts = [point_label(row.mechanism, row.epsilon, row.bag_size) for row in labelled.itertuples(index=False)]
    note_left_out(figure, label_points(axis, points, texts))
    figure.savefig(path, dpi=110, bbox_inches="tight")  # the x label can be wider than the axes
    plt.close(figure)


def plot_eps_lb(cells: pd.DataFrame, *, path: str, published: bool = True, title: str = "") -> str:
    """PNG (local ``path``): eps_lb mean +- std against the claimed epsilon per table row, the identity line
    eps_lb = eps, and inf at a labelled position right of the largest finite epsilon; with ``published`` the
    paper's values (dashed, labelled :data:`PUBLISHED_LABEL`)."""
    done = cells[cells["status"] != "failed"]
    epsilons = sorted({*cells["claimed_epsilon"].astype(float), *(PUBLISHED_EPSILONS if published else ())})
    at_inf = inf_position(epsilons)

    def x(values: Sequence[float]) -> list[float]:
        return [at_inf if math.isinf(v) else v for v in values]

    figure, axis = plt.subplots(figsize=(10.5, 4.8))
    top = 0.0
    for algorithm, group in done.groupby("algorithm", sort=False):
        group = group.sort_values("claimed_epsilon")
        means, stds = group["eps_lb_mean"].to_numpy(float), group["eps_lb_std"].to_numpy(float)
        axis.errorbar(x(group["claimed_epsilon"]), means, yerr=stds, marker="o", capsize=3, label=algorithm)
        top = max(top, float((means + stds).max()))
    if published:
        for algorithm, values in PUBLISHED_EPS_LB.items():
            points = [(e, v) for e, v in zip(PUBLISHED_EPSILONS, values) if v is not None]
            points.sort()
            axis.errorbar(x([e for e, _ in points]), [v[0] for _, v in points], yerr=[v[1] for _, v in points],
                          linestyle="--", marker="s", markerfacecolor="none", capsize=2, alpha=0.6,
                          label=f"{algorithm}: {PUBLISHED_LABEL}")
            top = max(top, max(v[0] + v[1] for _, v in points))
    finite = [e for e in epsilons if math.isfinite(e)]
    if finite:
        line = [min(finite), max(finite)]
        axis.plot(line, line, color="black", linewidth=0.8, label="eps_lb = claimed eps")
    axis.set_xscale("log")
    ticks = [*finite, at_inf]
    axis.set_xticks(ticks)
    axis.set_xticklabels([*(f"{e:g}" for e in finite), "inf"])
    axis.minorticks_off()
    if finite:
        axis.axvline(math.sqrt(max(finite) * at_inf), color="grey", linewidth=0.5, linestyle=":")
    axis.set_ylim(bottom=0.0, top=max(top * 1.15, 0.1))
    axis.set_xlabel("claimed epsilon of the training mechanism")
    axis.set_ylabel("epsilon lower bound (mean +- std over repetitions)")
    axis.set_title(title or "observational audit: valid (Bonferroni) eps_lb vs claimed eps")
    axis.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_study(records: pd.DataFrame, *, path: str) -> str:
    """PNG: eps_lb mean +- std against the true eps (log2 axes), one panel per proxy; one line per valid measure
    (Bonferroni), the ceiling, eps_lb = eps, and the combined score under the paper convention (grey, dotted)."""
    summary = theorem_rows(summarize_study(records))
    rr = summary[summary["setting"] == "rr"]
    scores = list(dict.fromkeys(rr["score"]))
    singles = [a for a in scores if a != COMBINED]
    proxies = list(dict.fromkeys(rr["proxy"]))
    figure, axes = plt.subplots(1, len(proxies), figsize=(6.0 * len(proxies), 4.5), squeeze=False, sharey=True)
    for axis, proxy in zip(axes[0], proxies):
        rows = rr[rr["proxy"] == proxy]
        valid = rows[rows["convention"] == BONFERRONI]
        for score in scores:
            group = valid[valid["score"] == score]
            axis.errorbar(group["epsilon"], group["eps_lb_mean"], yerr=group["eps_lb_std"], marker="o", capsize=3,
                          linewidth=2.0 if score == COMBINED else 1.2, label=f"{score_label(score, singles)}")
        ceiling_rows = valid.drop_duplicates("epsilon")
        axis.plot(ceiling_rows["epsilon"], ceiling_rows["ceiling_mean"], color="black", linewidth=1.5,
                  label="ceiling (oracle on informative canaries)")
        paper = rows[(rows["convention"] == PAPER) & (rows["score"] == scores[-1])]
        axis.plot(paper["epsilon"], paper["eps_lb_mean"], color="grey", linestyle=":", marker=".",
                  label=f"{score_label(scores[-1], singles)}, paper convention (not a valid bound)")
        epsilons = np.sort(rows["epsilon"].unique())
        axis.plot(epsilons, epsilons, color="black", linestyle="--", linewidth=1, label="eps_lb = eps")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log", base=2)
        axis.set_xlabel("true epsilon of RR")
        axis.set_ylabel("epsilon lower bound (95%, Bonferroni)")
        axis.set_title(f"counterfactuals: {proxy} posterior ({int(valid['draws'].max())} draws per point)")
        axis.legend(fontsize=7)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_sweep(frame: pd.DataFrame, *, path: str, title: str, confidence: float, deltas: dict[str, float]) -> str:
    """PNG (the local file ``path``) of the mean (+- std band over repetitions) per-point epsilon lower bound
    against c', one line per score and bound; each line names its family, convention, confidence and delta
    (``deltas``: family -> delta), the bands are labelled."""
    columns = [c for c in frame.columns if c.startswith("eps_")]
    figure, axis = plt.subplots(figsize=(6.4, 4.0))
    several = frame["score"].nunique() > 1
    band_label: str | None = f"bands: +-1 std over {frame['repetition'].nunique()} repetitions"
    for score, rows in frame.groupby("score", sort=False):
        stats = rows.groupby("guesses")[columns].agg(["mean", "std"])
        for column in columns:
            family, convention = column[len("eps_"):].rsplit("_", 1)
            mean, std = stats[(column, "mean")], stats[(column, "std")].fillna(0.0)
            valid = "" if convention == names.BONFERRONI else ", not a valid bound"
            label = f"{family}, {convention}{valid} ({confidence:.0%}, delta = {deltas.get(family, math.nan):g})"
            axis.plot(stats.index, mean, label=f"{score}: {label}" if several else label)
            axis.fill_between(stats.index, mean - std, mean + std, alpha=0.2, label=band_label)
            band_label = None
    axis.set_xscale("log")
    axis.set_xlabel("number of guesses c'")
    axis.set_ylabel("epsilon lower bound")
    axis.set_title(title)
    axis.legend(fontsize=8)
    figure.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
