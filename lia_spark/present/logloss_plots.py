"""Plots of the log-loss attack report (PNG, matplotlib Agg): accuracy against the oracle's precision and noise,
and labels recovered per query against the oracle error the attack must tolerate. Pure: pandas in, files out."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lia_spark.kernels import logloss  # noqa: E402
from lia_spark.present.plots import save_figure  # noqa: E402


def accuracy_plot(results: pd.DataFrame, *, path: str) -> str:
    """Two panels: accuracy on the attacked blocks vs decimals of the rounded oracle, and vs noise scale per noise
    (a stopped attack is drawn at 0.5, chance for balanced labels, with an open marker)."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for attack, rows in results.groupby("attack", sort=False):
        rounded = rows[rows["decimals"].notna() & (rows["noise"] == "none")].sort_values("decimals")
        _accuracy_line(left, rounded["decimals"], rounded, label=attack)
        for noise, noisy in rows[rows["noise"] != "none"].groupby("noise", sort=False):
            noisy = noisy.sort_values("noise_scale")
            _accuracy_line(right, noisy["noise_scale"], noisy, label=f"{attack}, {noise}")
    left.set(xlabel="decimals of the reported loss", ylabel="accuracy on the attacked blocks",
             title="rounded oracle")
    right.set(xscale="log", xlabel="noise scale on the reported loss", title="noisy oracle")
    for axis in (left, right):
        axis.set_ylim(0.4, 1.05)
        axis.legend(fontsize=8)
    return save_figure(figure, path)


def _accuracy_line(axis: plt.Axes, x: pd.Series, rows: pd.DataFrame, *, label: str) -> None:
    accuracy = rows["accuracy"].fillna(0.5).to_numpy()
    line, = axis.plot(x, accuracy, "-", label=label)
    stopped = (rows["status"] == "stopped").to_numpy()
    axis.plot(x[~stopped], accuracy[~stopped], "o", color=line.get_color())
    axis.plot(x[stopped], accuracy[stopped], "o", mfc="none", color=line.get_color())


def labels_per_query_plot(results: pd.DataFrame, *, n_rows: int, path: str) -> str:
    """Labels per query of each attack's plan against the tolerated oracle error tau (curves from
    lia_spark.kernels.logloss.plan; the settings of ``results`` as points)."""
    figure, axis = plt.subplots(figsize=(6, 4))
    taus = np.logspace(math.log10(max(results["tolerance"].min() / 10, 1e-18)), -1, 200)
    for attack, rows in results.groupby("attack", sort=False):
        sizes = [logloss.plan(attack, n_rows=n_rows, tolerance=t).block_size for t in taus]
        line, = axis.plot(taus, sizes, "-", label=attack)
        axis.plot(rows["tolerance"], rows["labels_per_query"], "o", color=line.get_color())
    axis.set(xscale="log", xlabel="oracle error tolerated (tau, loss units)", ylabel="labels per query",
             title=f"log-loss attacks on {n_rows} labels")
    axis.legend()
    return save_figure(figure, path)


