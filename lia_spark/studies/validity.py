"""Validity and tightness of the audit against randomized response (Kalemaj, Melis, Boucher, Mironov,
Mahloujifar, "Observational Auditing of Label Privacy", 2025, arXiv:2511.14084, sec. 6.6 and App. 11).

Data: y ~ Bernoulli(1/2), x | y ~ N(e_y, I_d) with e_y the y-th unit vector of R^d, so the true posterior is
P(y = 1 | x) = sigmoid(x_1 - x_0) (the log-likelihood ratio of the two Gaussians). The mechanism attacked is
RR(eps) on the labels; the "target model" of canary i is the Bayes posterior of its label given x_i and its
released label, M(x_i) = P(y_i = 1 | x_i, z_i) (docs/math.md §3.2, RR posterior with the true prior). Counterfactual
labels come from the true posterior ("true") or from a scikit-learn logistic regression with default
hyper-parameters fitted on fresh data ("logistic"). RR(eps) is eps-label-DP, so a valid audit at 95% has
eps_lb > eps with probability at most 5%.

The probability in that statement is over the data, the release and the game together (the canaries of the
theorem are random draws from the distribution). :func:`study` therefore redraws all three for every draw:
fresh mixture rows, a fresh logistic proxy (fitted on another fresh sample), a fresh RR release per epsilon
and a fresh game (its own hash seed) per cell. Within one draw the RR cells of all epsilons and both proxies,
and the null cells, share the mixture rows (each cell's draws are still independent across draws, which is
all a per-cell share needs). One game is played per draw.

Null cells: the target is label-blind, M(x) = P(y = 1 | x) (the true posterior without the release) or M = M'.
A label-blind mechanism leaks nothing (0-DP), so any eps_lb > 0 there is a false positive. With the
logistic proxy and M = P(y = 1 | x) the null also probes the proxy's mismatch (the bounds use tau = 0).

Ceiling (:func:`ceiling`): a canary is *informative* when y1 != y0 (only then does the shown label depend on
b). For RR(eps) with M the Bayes posterior and M' the true prior, the posterior odds of b = 0 on an
informative canary given the shown label y are L(z | y) / L(z | 1 - y) = e^{+-eps} for every x (z the
released label, L the RR likelihood), so an attacker told which canaries are informative guesses right on
each of them with probability exactly q = e^eps / (1 + e^eps), the largest per-guess accuracy eps-DP allows;
on an uninformative canary the shown label and M do not depend on b, so any guess is a fair coin. Taking
fewer guesses loses sample size at the same accuracy, taking more dilutes the accuracy toward 1/2, so this
oracle's evidence (c' = I informative canaries, c ~ Bin(I, q)) is the best the game can produce. The ceiling
is the pure binomial (one-sided Clopper-Pearson) bound of lia_spark.kernels.bounds at the expected counts,
c' = round(E[I]) with E[I] = sum_i p_i (1 - p'_i) + p'_i (1 - p_i) (p = P(y=1|x), p' = M'(x)) and
c = round(q c'), at the per-test confidence of a single score's Bonferroni sweep, 1 - (1 - confidence) / k
(k sweep points). It is a reference, not a hard cap: a real attacker's bound fluctuates around its mean
and can exceed it in a draw. With the logistic proxy the same formula is used (q is then approximate: M' is
within about 1e-3 of the truth on average).
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import time

import numpy as np
import pandas as pd
from scipy.special import expit

from lia_spark.kernels import audit, audit_sweep, bounds, canary_scores, mechanisms, posteriors
from lia_spark.names import BINOMIAL, BONFERRONI, CONVENTIONS, PAPER, bound_key

PROXIES = ("true", "logistic")
EPSILONS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
COMBINED = "combined"  # every score of the study, best over scores x sweep points with the confidence split
NULL_TARGETS = ("posterior", "proxy")  # label-blind targets: M(x) = P(y=1|x), M = M'
MAX_SHARE = 0.05


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
    """RR(eps) of :func:`lia_spark.kernels.mechanisms.flip_labels` with the uniforms drawn from ``rng``."""
    return mechanisms.flip_labels(labels, rng.random(len(labels)), epsilon=epsilon)


def logistic_proxy(sample: MixtureSample, *, fresh: MixtureSample) -> np.ndarray:
    """P(y=1|x) on ``sample`` from a default scikit-learn LogisticRegression fitted on ``fresh``."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression().fit(fresh.features, fresh.labels)
    return model.predict_proba(sample.features)[:, 1]


@dataclasses.dataclass(frozen=True)
class Ceiling:
    """The oracle attacker's bound (module docstring): expected informative canaries, its counts and bound."""

    bound: float
    informative: float
    guesses: int
    correct: int


def ceiling(posterior: np.ndarray, proxy: np.ndarray, *, epsilon: float, confidence: float = 0.95,
            tests: int = 1) -> Ceiling:
    """Bound of the attacker that guesses b' = 0 iff y^b = z on exactly the informative canaries of RR(eps).

    c' = round(sum_i p_i (1 - p'_i) + p'_i (1 - p_i)), c = round(c' e^eps / (1 + e^eps)), pure binomial bound
    at 1 - (1 - confidence) / tests (see the module docstring for why this is the game's best evidence).
    """
    posterior = np.asarray(posterior, dtype=np.float64)
    proxy = np.asarray(proxy, dtype=np.float64)
    informative = float(np.sum(posterior * (1.0 - proxy) + proxy * (1.0 - posterior)))
    guesses = int(min(max(round(informative), 1), len(posterior)))
    correct = int(round(guesses * expit(epsilon)))
    level = audit_sweep.convention_confidence(confidence, convention=BONFERRONI, points=tests)
    bound = bounds.epsilon_lower_bound(canaries=len(posterior), guesses=guesses, correct=correct, confidence=level)
    return Ceiling(bound=bound, informative=informative, guesses=guesses, correct=correct)


def _stream(seed: int, draw: int, purpose: str) -> np.random.Generator:
    """Generator of one purpose in one draw: keyed on (seed, draw, purpose) only, so a cell's draws do not depend
    on which other cells or epsilons are run."""
    words = [int(b) for b in hashlib.blake2b(purpose.encode("utf-8"), digest_size=16).digest()]
    return np.random.default_rng(np.random.SeedSequence([seed, draw, *words]))


def study_cells(*, epsilons: tuple[float, ...], proxies: tuple[str, ...]) -> list[tuple[str, str, str, float]]:
    """(setting, target, proxy, epsilon) of every cell: RR cells, then the null cells (epsilon 0)."""
    cells = [("rr", "rr_posterior", proxy, float(epsilon)) for epsilon in epsilons for proxy in proxies]
    for proxy in proxies:
        for target in NULL_TARGETS:
            if not (target == "proxy" and proxy == "true"):  # M = M' = P(y=1|x): the "posterior" cell already
                cells.append(("null", target, proxy, 0.0))
    return cells


def study(*, n: int = 500_000, dimension: int = 5, epsilons: tuple[float, ...] = EPSILONS, draws: int = 50,
          null_draws: int | None = None, proxies: tuple[str, ...] = PROXIES,
          scores: tuple[str, ...] = canary_scores.DEFAULT_SCORES, confidence: float = 0.95, seed: int = 0,
          time_budget: float | None = None) -> pd.DataFrame:
    """Audit RR(eps) and label-blind targets on independently redrawn data, release and game per draw.

    Per cell and draw, every score alone (Bonferroni over its k sweep points, and the paper convention) and,
    with several scores, all of them together (``COMBINED``: Bonferroni over scores x sweep points, and the
    paper convention = max over everything at ``confidence`` per test); binomial (pure, Theorem 17) bounds.

    Args:
        n: canaries per draw (rows of the mixture); the logistic proxy is fitted on n fresh rows.
        draws: independent draws of the RR cells; null_draws: of the null cells (default ``draws``; either
            may be 0).
        time_budget: seconds; no new draw starts once it is spent (the first always runs).
    Returns:
        One row per (draw, cell, tau rule, score, convention): draw, setting ("rr"/"null"), target, proxy,
        epsilon (0 for null), tau_rule and tau, score, convention, eps_lb, best_guesses, best_score (the
        winning score of ``COMBINED``), ceiling, informative (E[I]), proxy_tv (mean |P(y=1|x) - M'(x)|).
        tau_rule "0": bounds with tau = 0, as the paper (and a production audit, which cannot know tau) runs
        them; "max_tv" (logistic proxy only): tau = max_i |P(y=1|x_i) - M'(x_i)|, the TV bound the theorem
        needs when M' is not the true posterior (known here because the truth is). ``attrs``: seconds,
        draws_run, null_draws_run and the parameters.
    Raises:
        ValueError: on an unknown proxy, no epsilons, draws < 1 or a bad score.
    """
    for proxy in proxies:
        if proxy not in PROXIES:
            raise ValueError(f"proxies must be among {', '.join(PROXIES)}, got {proxy!r}")
    null_draws = draws if null_draws is None else null_draws
    if draws < 0 or null_draws < 0 or max(draws, null_draws) < 1:
        raise ValueError(f"draws and null_draws must be >= 0, one of them >= 1, got draws={draws}, "
                         f"null_draws={null_draws}")
    names = tuple(score.name for score in canary_scores.resolve_scores(scores))
    cells = study_cells(epsilons=tuple(epsilons), proxies=tuple(proxies))
    row_ids = np.arange(n, dtype=np.int64)
    grid = audit.guess_grid(n)
    started = time.monotonic()
    rows, draws_run, null_run = [], 0, 0
    for draw in range(max(draws, null_draws)):
        if draw > 0 and time_budget is not None and time.monotonic() - started > time_budget:
            break
        sample = gaussian_mixture(n, dimension=dimension, rng=_stream(seed, draw, "rows"))
        predictions = {"true": sample.posterior}
        if "logistic" in proxies:
            fresh = gaussian_mixture(n, dimension=dimension, rng=_stream(seed, draw, "logistic fit rows"))
            predictions["logistic"] = logistic_proxy(sample, fresh=fresh)
        targets = {}
        if draw < draws:
            for epsilon in epsilons:
                released = randomized_response(sample.labels, epsilon=epsilon,
                                               rng=_stream(seed, draw, f"rr {float(epsilon)!r}"))
                targets[float(epsilon)] = posteriors.rr(sample.posterior, released, epsilon=epsilon).posterior
            draws_run += 1
        null_run += draw < null_draws
        for setting, target_kind, proxy, epsilon in cells:
            if (setting == "rr" and draw >= draws) or (setting == "null" and draw >= null_draws):
                continue
            target = (targets[epsilon] if target_kind == "rr_posterior" else
                      {"posterior": sample.posterior, "proxy": predictions[proxy]}[target_kind])
            game_seed = int(_stream(seed, draw, f"game {setting} {target_kind} {proxy} {epsilon!r}").integers(2**62))
            counts = audit.count_correct_scores(row_ids, sample.labels, target, predictions[proxy], seed=game_seed,
                                                 repetitions=1, guesses=grid, scores=names)
            top = (ceiling(sample.posterior, predictions[proxy], epsilon=epsilon, confidence=confidence,
                           tests=len(grid)) if setting == "rr" else None)
            gap = np.abs(sample.posterior - predictions[proxy])
            common = {"draw": draw, "setting": setting, "target": target_kind, "proxy": proxy, "epsilon": epsilon,
                      "ceiling": top.bound if top else 0.0, "informative": top.informative if top else math.nan,
                      "proxy_tv": float(gap.mean())}
            taus = {"0": 0.0} if proxy == "true" else {"0": 0.0, "max_tv": float(gap.max())}
            for rule, tau in taus.items():
                measures: dict[str, audit_sweep.SweepBounds | audit_sweep.ScoreBounds] = {
                    name: audit_sweep.evaluate_sweep(counts[name], grid, canaries=n, confidence=confidence, tau=tau,
                                                     families=(BINOMIAL,), table_families=())
                    for name in names}
                if len(names) > 1:
                    measures[COMBINED] = audit_sweep.evaluate_scores(counts, grid, canaries=n, confidence=confidence,
                                                                     tau=tau, families=(BINOMIAL,))
                for name, result in measures.items():
                    for convention in CONVENTIONS:
                        key = bound_key(BINOMIAL, convention)
                        winner = result.best_scores[key][0] if isinstance(result, audit_sweep.ScoreBounds) else name
                        rows.append({**common, "tau_rule": rule, "tau": tau, "score": name,
                                     "convention": convention, "eps_lb": float(result.best[key][0]),
                                     "best_guesses": int(result.best_guesses[key][0]), "best_score": winner})
    table = pd.DataFrame(rows)
    table.attrs.update({"seconds": time.monotonic() - started, "draws_run": draws_run, "null_draws_run": null_run,
                        "n": n, "dimension": dimension, "confidence": confidence, "sweep_points": len(grid),
                        "scores": list(names), "seed": seed})
    return table


def summarize_study(records: pd.DataFrame) -> pd.DataFrame:
    """Per (setting, target, proxy, epsilon, tau_rule, score, convention): draws, eps_lb mean and std (ddof 1),
    share of draws with eps_lb > eps and with eps_lb > 0, mean eps_lb / eps, mean ceiling and mean eps_lb / mean
    ceiling (NaN where eps or the ceiling is 0)."""
    keys = ["setting", "target", "proxy", "epsilon", "tau_rule", "score", "convention"]
    out = []
    for key, group in records.groupby(keys, sort=False):
        values = group["eps_lb"].to_numpy()
        row = dict(zip(keys, key))
        epsilon, top = row["epsilon"], float(group["ceiling"].mean())
        row.update({"draws": len(values), "eps_lb_mean": float(values.mean()),
                    "eps_lb_std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                    "share_above": float(np.mean(values > epsilon)), "share_positive": float(np.mean(values > 0)),
                    "ratio_eps": float(values.mean() / epsilon) if epsilon > 0 else math.nan,
                    "ceiling_mean": top, "ratio_ceiling": float(values.mean() / top) if top > 0 else math.nan})
        out.append(row)
    return pd.DataFrame(out)


def theorem_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """Rows whose bounds meet the theorem's hypotheses: tau = 0 for the true proxy, tau = max TV for the others."""
    with_tv = set(summary.loc[summary["tau_rule"] == "max_tv", "proxy"])
    return summary[(summary["tau_rule"] == "max_tv") | ~summary["proxy"].isin(with_tv)]


@dataclasses.dataclass(frozen=True)
class DefaultChoice:
    """The tightest valid score of a study: name and the per-score evidence (Bonferroni convention).

    ``evidence`` columns: score, valid, max_share_above (RR cells), max_null_share_positive (null cells),
    mean_ratio_eps and min_ratio_eps (over RR cells), mean_ratio_ceiling.
    """

    score: str | None
    evidence: pd.DataFrame


def pick_default(summary: pd.DataFrame, *, max_share: float = MAX_SHARE) -> DefaultChoice:
    """Tightest valid measure: share of eps_lb > eps <= max_share in every RR cell and share of eps_lb > 0 <=
    max_share in every null cell (Bonferroni convention, :func:`theorem_rows`); tightest = largest mean over RR
    cells of eps_lb / eps."""
    valid_rows = theorem_rows(summary)
    valid_rows = valid_rows[valid_rows["convention"] == BONFERRONI]
    evidence = []
    for score, group in valid_rows.groupby("score", sort=False):
        rr, null = group[group["setting"] == "rr"], group[group["setting"] == "null"]
        max_above = float(rr["share_above"].max()) if len(rr) else math.nan
        max_null = float(null["share_positive"].max()) if len(null) else 0.0
        evidence.append({"score": score, "valid": bool(max_above <= max_share and max_null <= max_share),
                         "max_share_above": max_above, "max_null_share_positive": max_null,
                         "mean_ratio_eps": float(rr["ratio_eps"].mean()), "min_ratio_eps": float(rr["ratio_eps"].min()),
                         "mean_ratio_ceiling": float(rr["ratio_ceiling"].mean())})
    evidence = pd.DataFrame(evidence).sort_values("mean_ratio_eps", ascending=False, kind="stable")
    valid = evidence[evidence["valid"]]
    return DefaultChoice(score=str(valid["score"].iloc[0]) if len(valid) else None,
                         evidence=evidence.reset_index(drop=True))


def score_label(score: str, scores: list[str]) -> str:
    return f"all {len(scores)} (split)" if score == COMBINED else score


def null_table(summary: pd.DataFrame) -> list[str]:
    """Markdown lines: share of draws with eps_lb > 0 per null cell, tau rule and score (Bonferroni / paper)."""
    null = summary[summary["setting"] == "null"]
    if null.empty:
        return []
    scores = list(dict.fromkeys(null["score"]))
    singles = [a for a in scores if a != COMBINED]
    lines = ["Null (label-blind target: any eps_lb > 0 is a false positive): share of draws with eps_lb > 0, "
             "Bonferroni / paper convention (paper = not a valid bound):", "",
             "| proxy | target | tau | draws | " + " | ".join(score_label(a, singles) for a in scores) + " |",
             "|---|---|---|---|" + "---|" * len(scores)]
    for (proxy, target, rule), group in null.groupby(["proxy", "target", "tau_rule"], sort=False):
        by = group.set_index(["score", "convention"])
        label = "M(x) = P(y=1 given x)" if target == "posterior" else "M = M'"
        cells = [f"{by.loc[(a, BONFERRONI), 'share_positive']:.1%} / {by.loc[(a, PAPER), 'share_positive']:.1%}"
                 for a in scores]
        tau = "max TV" if rule == "max_tv" else "0"
        lines.append(f"| {proxy} | {label} | {tau} | {int(group['draws'].iloc[0])} | " + " | ".join(cells) + " |")
    return lines


def markdown_report(records: pd.DataFrame, *, max_share: float = MAX_SHARE) -> str:
    """The study as Markdown: valid (Bonferroni, :func:`theorem_rows`) tables, the null, the default score, the
    logistic proxy at tau = 0, then the paper convention."""
    everything = summarize_study(records)
    summary = theorem_rows(everything)
    scores = list(dict.fromkeys(records["score"]))
    singles = [a for a in scores if a != COMBINED]
    heads = " | ".join(score_label(a, singles) for a in scores)
    bonf = summary[summary["convention"] == BONFERRONI]
    rr = bonf[bonf["setting"] == "rr"]
    if rr.empty:
        return "\n".join(null_table(everything))
    lines = ["eps_lb / eps (share of draws with eps_lb > eps), Bonferroni, binomial bound, mean over draws; "
             "logistic proxy with tau = max TV:", "",
             f"| proxy | eps | ceiling / eps | {heads} |", "|---|---|---|" + "---|" * len(scores)]
    for (proxy, epsilon), group in rr.groupby(["proxy", "epsilon"], sort=False):
        by = group.set_index("score")
        cells = [f"{by.loc[a, 'ratio_eps']:.2f} ({by.loc[a, 'share_above']:.0%})" for a in scores]
        lines.append(f"| {proxy} | {epsilon:g} | {by['ceiling_mean'].iloc[0] / epsilon:.2f} | " + " | ".join(cells)
                     + " |")
    lines += ["", "eps_lb / ceiling (mean eps_lb over mean ceiling), same rows:", "",
              f"| proxy | eps | ceiling | {heads} |", "|---|---|---|" + "---|" * len(scores)]
    for (proxy, epsilon), group in rr.groupby(["proxy", "epsilon"], sort=False):
        by = group.set_index("score")
        lines.append(f"| {proxy} | {epsilon:g} | {by['ceiling_mean'].iloc[0]:.3f} | "
                     + " | ".join(f"{by.loc[a, 'ratio_ceiling']:.2f}" for a in scores) + " |")
    lines += ["", "Full valid table: eps_lb mean +- std over draws, share of draws with eps_lb > eps, "
              "mean eps_lb / eps and mean eps_lb / mean ceiling:", "",
              "| proxy | eps | score | eps_lb mean +- std | share > eps | eps_lb / eps | eps_lb / ceiling | draws |",
              "|---|---|---|---|---|---|---|---|"]
    for row in rr.itertuples(index=False):
        lines.append(f"| {row.proxy} | {row.epsilon:g} | {score_label(row.score, singles)} | "
                     f"{row.eps_lb_mean:.3f} +- {row.eps_lb_std:.3f} | {row.share_above:.0%} | {row.ratio_eps:.3f} | "
                     f"{row.ratio_ceiling:.3f} | {row.draws} |")
    lines += ["", *null_table(everything)]
    choice = pick_default(everything, max_share=max_share)
    lines += ["", f"Default score: the tightest valid measure (share of draws with eps_lb > eps <= {max_share:.0%} "
              f"in every RR cell and share with eps_lb > 0 <= {max_share:.0%} in every null cell, rows as in the "
              "first table; tightest = largest mean eps_lb / eps over the RR cells):", "",
              "| score | valid | max share > eps | max null share > 0 | mean eps_lb / eps | min eps_lb / eps | "
              "mean eps_lb / ceiling |", "|---|---|---|---|---|---|---|"]
    for row in choice.evidence.itertuples(index=False):
        lines.append(f"| {score_label(row.score, singles)} | {'yes' if row.valid else 'no'} | "
                     f"{row.max_share_above:.0%} | {row.max_null_share_positive:.1%} | {row.mean_ratio_eps:.3f} | "
                     f"{row.min_ratio_eps:.3f} | {row.mean_ratio_ceiling:.3f} |")
    lines += ["", f"Winner: **{choice.score}**." if choice.score else "Winner: none is valid.", ""]
    zero = everything[(everything["tau_rule"] == "0") & (everything["setting"] == "rr")
                      & (everything["convention"] == BONFERRONI) & (everything["proxy"] != "true")]
    if len(zero):
        lines += ["Logistic proxy with tau = 0 (as the paper and a production audit run it), Bonferroni: "
                  "eps_lb / eps (share of draws with eps_lb > eps):", "",
                  f"| proxy | eps | {heads} |", "|---|---|" + "---|" * len(scores)]
        for (proxy, epsilon), group in zero.groupby(["proxy", "epsilon"], sort=False):
            by = group.set_index("score")
            lines.append(f"| {proxy} | {epsilon:g} | " + " | ".join(
                f"{by.loc[a, 'ratio_eps']:.3f} ({by.loc[a, 'share_above']:.0%})" for a in scores) + " |")
        lines.append("")
    paper = summary[(summary["convention"] == PAPER) & (summary["setting"] == "rr")]
    lines += ["Paper convention, not a valid bound (max over the sweep, every point at 95%): eps_lb mean +- std and "
              "share of draws with eps_lb > eps:", "",
              f"| proxy | eps | {heads} |", "|---|---|" + "---|" * len(scores)]
    for (proxy, epsilon), group in paper.groupby(["proxy", "epsilon"], sort=False):
        by = group.set_index("score")
        cells = [f"{by.loc[a, 'eps_lb_mean']:.3f} +- {by.loc[a, 'eps_lb_std']:.3f} ({by.loc[a, 'share_above']:.0%})"
                 for a in scores]
        lines.append(f"| {proxy} | {epsilon:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def invalid_cells(summary: pd.DataFrame, *, max_share: float = MAX_SHARE) -> pd.DataFrame:
    """Bonferroni rows (:func:`theorem_rows`) breaking validity: RR cells with share eps_lb > eps, null cells with
    share eps_lb > 0, above ``max_share``."""
    bonf = theorem_rows(summary)
    bonf = bonf[bonf["convention"] == BONFERRONI]
    bad = ((bonf["setting"] == "rr") & (bonf["share_above"] > max_share)) | (
        (bonf["setting"] == "null") & (bonf["share_positive"] > max_share))
    return bonf[bad]


