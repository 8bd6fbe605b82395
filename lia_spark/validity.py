"""Validity and tightness of the audit against randomized response (observational-auditing-of-label-privacy.txt,
sec. 6.6 and App. 11).

Data: y ~ Bernoulli(1/2), x | y ~ N(e_y, I_d) with e_y the y-th unit vector of R^d, so the true posterior is
P(y = 1 | x) = sigmoid(x_1 - x_0) (the log-likelihood ratio of the two Gaussians). The mechanism attacked is
RR(eps) on the labels; the "target model" of canary i is the Bayes posterior of its label given x_i and its
released label, M(x_i) = P(y_i = 1 | x_i, z_i) (SPEC 3, RR posterior with the true prior). Counterfactual
labels come from the true posterior ("true") or from a scikit-learn logistic regression with default
hyper-parameters fitted on fresh data ("logistic"). RR(eps) is eps-label-DP, so a valid audit at 95% has
eps_lb > eps in at most 5% of repetitions.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pandas as pd
from scipy.special import expit

from lia_spark import audit, bounds, posteriors

PROXIES = ("true", "logistic")


@dataclasses.dataclass(frozen=True)
class MixtureSample:
    """Rows of the two-Gaussian mixture: features (n, d), labels (n,) and the true posterior P(y=1|x) (n,)."""

    features: np.ndarray
    labels: np.ndarray
    posterior: np.ndarray


def gaussian_mixture(n: int, *, dimension: int = 5, rng: np.random.Generator) -> MixtureSample:
    """n rows of y ~ Bernoulli(1/2), x | y ~ N(e_y, I_d); posterior sigmoid(x_1 - x_0).

    Raises:
        ValueError: if n < 1 or dimension < 2.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got n={n}")
    if dimension < 2:
        raise ValueError(f"dimension must be >= 2 (one axis per class), got dimension={dimension}")
    labels = rng.integers(0, 2, size=n).astype(np.int8)
    features = rng.standard_normal((n, dimension))
    features[np.arange(n), labels] += 1.0
    return MixtureSample(features=features, labels=labels, posterior=expit(features[:, 1] - features[:, 0]))


def randomized_response(labels: np.ndarray, *, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """RR(eps): flip each binary label independently with probability 1 / (1 + e^eps)."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got epsilon={epsilon}")
    flips = rng.random(len(labels)) < expit(-epsilon)
    return (np.asarray(labels) ^ flips).astype(np.int8)


def logistic_proxy(sample: MixtureSample, *, fresh: MixtureSample) -> np.ndarray:
    """P(y=1|x) on ``sample`` from a default scikit-learn LogisticRegression fitted on ``fresh``."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression().fit(fresh.features, fresh.labels)
    return model.predict_proba(sample.features)[:, 1]


def _single_point(correct: np.ndarray, guesses: int, *, canaries: int, confidence: float) -> np.ndarray:
    return bounds.epsilon_lower_bound_sweep(canaries=canaries, guesses=np.full(len(correct), guesses),
                                            correct=correct, confidence=confidence)


def study(*, n: int = 1_000_000, dimension: int = 5, epsilons: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0),
          repetitions: int = 100, guess_shares: tuple[float, ...] = (0.001, 0.01),
          proxies: tuple[str, ...] = PROXIES, confidence: float = 0.95, t: float = 2.0,
          seed: int = 0) -> pd.DataFrame:
    """Audit RR(eps) for each eps and counterfactual source; binomial (Theorem 17) bounds per repetition.

    Measures: the bound at a fixed c' = share * n for each share in ``guess_shares`` (confidence as given),
    and the best over the sweep c' = 1%, ..., 100% plus 0.1% in the "paper" (max at ``confidence``) and
    "bonferroni" (confidence split over the sweep) conventions.

    Returns:
        One row per (proxy, epsilon, measure): eps_lb_mean, eps_lb_std (ddof 1), share_above (eps_lb > eps),
        repetitions.
    """
    for proxy in proxies:
        if proxy not in PROXIES:
            raise ValueError(f"proxies must be among {', '.join(PROXIES)}, got {proxy!r}")
    rng = np.random.default_rng(seed)
    sample = gaussian_mixture(n, dimension=dimension, rng=rng)
    predictions = {"true": sample.posterior}
    if "logistic" in proxies:
        predictions["logistic"] = logistic_proxy(sample, fresh=gaussian_mixture(n, dimension=dimension, rng=rng))
    row_ids = np.arange(n, dtype=np.int64)
    sweep = audit.guess_grid(n)
    fixed = {share: int(np.clip(np.floor(share * n + 0.5), 1, n)) for share in guess_shares}
    guesses = np.union1d(sweep, list(fixed.values()))
    rows = []
    for epsilon in epsilons:
        released = randomized_response(sample.labels, epsilon=epsilon, rng=rng)
        target = posteriors.rr(sample.posterior, released, epsilon=epsilon).posterior
        for proxy in proxies:
            correct = audit.count_correct(row_ids, sample.labels, target, predictions[proxy], seed=seed,
                                          repetitions=repetitions, guesses=guesses, t=t)
            measures = {}
            for share, count in fixed.items():
                column = int(np.searchsorted(guesses, count))
                measures[f"c'={share:.1%}"] = _single_point(correct[:, column], count, canaries=n,
                                                            confidence=confidence)
            in_sweep = np.isin(guesses, sweep)
            swept = audit.evaluate_sweep(correct[:, in_sweep], guesses[in_sweep], canaries=n, confidence=confidence,
                                         families=("binomial",), table_families=())
            for convention in audit.CONVENTIONS:
                measures[f"sweep, {convention}"] = swept.best[f"eps_binomial_{convention}"]
            for measure, values in measures.items():
                rows.append({"proxy": proxy, "epsilon": epsilon, "measure": measure,
                             "eps_lb_mean": float(values.mean()),
                             "eps_lb_std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                             "share_above": float(np.mean(values > epsilon)), "repetitions": repetitions})
    return pd.DataFrame(rows)


def markdown_table(table: pd.DataFrame) -> str:
    """The study as a Markdown table: eps_lb mean +- std and the share of repetitions with eps_lb > eps."""
    lines = ["| proxy | eps | measure | eps_lb mean +- std | share eps_lb > eps |", "|---|---|---|---|---|"]
    for row in table.itertuples(index=False):
        lines.append(f"| {row.proxy} | {row.epsilon:g} | {row.measure} | {row.eps_lb_mean:.3f} +- "
                     f"{row.eps_lb_std:.3f} | {row.share_above:.0%} |")
    return "\n".join(lines)


def plot_study(table: pd.DataFrame, *, path: str) -> str:
    """PNG: eps_lb mean +- std against the true eps, one panel per proxy, one line per measure, with y = x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    proxies = list(dict.fromkeys(table["proxy"]))
    figure, axes = plt.subplots(1, len(proxies), figsize=(5.0 * len(proxies), 4.0), squeeze=False)
    for axis, proxy in zip(axes[0], proxies):
        rows = table[table["proxy"] == proxy]
        for measure, group in rows.groupby("measure", sort=False):
            axis.errorbar(group["epsilon"], group["eps_lb_mean"], yerr=group["eps_lb_std"], marker="o", capsize=3,
                          label=measure)
        top = float(rows["epsilon"].max())
        axis.plot([0, top], [0, top], color="black", linestyle="--", linewidth=1, label="eps_lb = eps")
        axis.set_xlabel("true epsilon of RR")
        axis.set_ylabel("epsilon lower bound (95%)")
        axis.set_title(f"counterfactuals: {proxy} posterior")
        axis.legend(fontsize=8)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
