"""Plots of per-row posteriors (PNG, matplotlib Agg): prior-vs-posterior "spindles" and CDFs per setting.

Pure: takes a pandas sample of the posteriors stage's rows (columns mechanism, epsilon, bag_size, prior,
posterior, I, additive_advantage) and writes files; no Spark. Spindle plots follow the auditing paper
([BDG+24], Fig. 2): each point is a row, x = prior
eta, y = posterior; points far from the diagonal are rows whose label the release reveals.
"""
from __future__ import annotations

import math
import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lia_spark.kernels.advantage import empirical_cdf  # noqa: E402
from lia_spark.kernels.release_mechanisms import release_mechanism  # noqa: E402

_PANEL_INCHES = 2.2
_MAX_COLUMNS = 10
# Panels of one figure share their scales by fixed limits and ticks, not matplotlib's shared axes, whose every limit
# change visits all the panels (a 50-panel spindle figure drew in 2.6 s, 1.3 s this way).
_UNIT_TICKS = (0.0, 0.5, 1.0)
_SHARE_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)


def _grid(rows: pd.DataFrame) -> tuple[list[float], list[int]]:
    epsilons = sorted(rows["epsilon"].unique(), key=lambda e: (math.isnan(e), e))
    return epsilons, sorted(int(k) for k in rows["bag_size"].unique())


def _same_epsilon(column: pd.Series, epsilon: float) -> pd.Series:
    return column.isna() if math.isnan(epsilon) else column == epsilon


def _epsilon_text(epsilon: float) -> str:
    return "no noise" if math.isnan(epsilon) else f"eps={epsilon:g}"


def spindle_plot(sample: pd.DataFrame, *, mechanism: str, path: str) -> str:
    """Scatter prior vs posterior for every (epsilon, k) of one mechanism, one panel per setting."""
    rows = sample[sample["mechanism"] == mechanism]
    if rows.empty:
        raise ValueError(f"mechanism: no sampled rows for {mechanism!r}")
    epsilons, sizes = _grid(rows)
    panels = [(e, k) for e in epsilons for k in sizes]
    columns = len(sizes) if len(sizes) > 1 else min(len(panels), _MAX_COLUMNS)
    lines = math.ceil(len(panels) / columns)
    figure, axes = plt.subplots(lines, columns,
                                figsize=(max(_PANEL_INCHES * columns, 4.5), _PANEL_INCHES * lines + 0.6), squeeze=False)
    for index, (axis, (epsilon, k)) in enumerate(zip(axes.flat, panels)):
        cell = rows[_same_epsilon(rows["epsilon"], epsilon) & (rows["bag_size"] == k)]
        axis.plot([0, 1], [0, 1], color="0.6", linewidth=0.8)
        axis.scatter(cell["prior"], cell["posterior"], s=2, alpha=0.3, color="tab:blue", rasterized=True)
        label = (f"{_epsilon_text(epsilon)}, k={k}" if release_mechanism(mechanism).bagged
                 else _epsilon_text(epsilon))
        axis.set_title(f"{label} (n={len(cell)})", fontsize=8)
        axis.set_xlim(0, 1)
        axis.set_ylim(-0.02, 1.02)
        axis.set_xticks(_UNIT_TICKS)
        axis.set_yticks(_UNIT_TICKS)
        bottom, left = index + columns >= len(panels), index % columns == 0
        axis.tick_params(labelsize=7, labelbottom=bottom, labelleft=left)
        if bottom:
            axis.set_xlabel("prior eta", fontsize=8)
        if left:
            axis.set_ylabel("posterior", fontsize=8)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    figure.suptitle(f"{mechanism}: prior vs posterior", fontsize=10)
    return save_figure(figure, path)


def cdf_steps(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A step line (``where="post"``) of the empirical CDF of the finite ``values``: F = 0 from min(0, smallest
    value - margin), the exact F at each value, held to a margin past the largest. One repeated value (RR's |I| = eps)
    thus draws a step at that value, not an empty line. Infinite values count in F but are not drawn (the line ends
    below 1 by their share); empty arrays when every value is infinite."""
    x, share = empirical_cdf(values)
    finite = np.isfinite(x)
    x, share = x[finite], share[finite]
    if x.size == 0:
        return x, share
    margin = 0.05 * max(x[-1] - x[0], abs(x[-1]), 1e-3)
    return np.concatenate([[min(0.0, x[0] - margin)], x, [x[-1] + margin]]), np.concatenate([[0.0], share, share[-1:]])


def cdf_plot(sample: pd.DataFrame, *, mechanism: str, column: str, xlabel: str, path: str) -> str:
    """Empirical CDFs of ``column`` for one mechanism: a panel per epsilon, a line per bag size.

    Infinite values are never <= x, so a curve ending below 1 shows the share of infinite values.
    """
    rows = sample[sample["mechanism"] == mechanism]
    if rows.empty:
        raise ValueError(f"mechanism: no sampled rows for {mechanism!r}")
    epsilons, sizes = _grid(rows)
    figure, axes = plt.subplots(1, len(epsilons), figsize=(max(3.4 * len(epsilons), 4.5), 3.2), squeeze=False)
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.9, len(sizes)))
    for axis, epsilon in zip(axes.flat, epsilons):
        for color, k in zip(colors, sizes):
            cell = rows[_same_epsilon(rows["epsilon"], epsilon) & (rows["bag_size"] == k)][column].to_numpy(np.float64)
            if cell.size == 0:
                continue
            x, share = cdf_steps(np.abs(cell) if column == "I" else cell)
            label = f"k={k}" if release_mechanism(mechanism).bagged else "k=1"
            if x.size:
                axis.step(x, share, where="post", color=color, linewidth=1.2, label=label)
            else:
                axis.plot([], [], color=color, label=f"{label}: all infinite")
        axis.set_title(_epsilon_text(epsilon), fontsize=9)
        axis.set_xlabel(xlabel, fontsize=8)
        axis.set_ylim(0, 1.02)
        axis.set_yticks(_SHARE_TICKS)
        axis.grid(alpha=0.3)
        axis.tick_params(labelsize=7, labelleft=axis is axes[0, 0])
    axes[0, 0].set_ylabel("share of rows <= x", fontsize=8)
    axes[0, -1].legend(fontsize=7, loc="lower right")
    figure.suptitle(f"{mechanism}: empirical CDF over sampled rows", fontsize=10)
    return save_figure(figure, path)


def plot_posteriors(sample: pd.DataFrame, *, output_dir: str) -> list[str]:
    """Spindle plot plus CDFs of |I| and of the additive advantage for every mechanism in ``sample``, and of the
    rows' maximal leakage when it was computed (``max_leakage`` not all NaN)."""
    os.makedirs(output_dir, exist_ok=True)
    written = []
    leakage = "max_leakage" in sample and sample["max_leakage"].notna().any()
    for mechanism in sorted(sample["mechanism"].unique()):
        if leakage:
            written.append(cdf_plot(sample, mechanism=mechanism, column="max_leakage", xlabel="maximal leakage (nats)",
                                    path=os.path.join(output_dir, f"cdf_max_leakage_{mechanism}.png")))
        written.append(spindle_plot(sample, mechanism=mechanism,
                                    path=os.path.join(output_dir, f"spindle_{mechanism}.png")))
        written.append(cdf_plot(sample, mechanism=mechanism, column="I", xlabel="|I| (multiplicative advantage)",
                                path=os.path.join(output_dir, f"cdf_abs_I_{mechanism}.png")))
        written.append(cdf_plot(sample, mechanism=mechanism, column="additive_advantage", xlabel="additive advantage",
                                path=os.path.join(output_dir, f"cdf_additive_{mechanism}.png")))
    return written


def save_figure(figure: plt.Figure, path: str) -> str:
    """Lay ``figure`` out, write it to ``path`` (PNG, 90 dpi), close it and return ``path``."""
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
