"""Bounds from the audit's counts over the sweep of guess counts and over scores (docs/math.md §5.4, §6).

:func:`evaluate_sweep` turns the counts c(r, c') of :func:`lia_spark.kernels.audit.count_correct` into per-point and
best epsilon lower bounds per repetition under both conventions: "paper" (each point at the full confidence, the
best point reported: not a valid joint bound) and "bonferroni" (each of the k points at 1 - (1 - confidence) / k,
so the best of them holds at the stated confidence). :func:`evaluate_scores` does the same over A scores x k points.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from lia_spark.names import BINOMIAL, BONFERRONI, BOUND_FAMILIES, CONVENTIONS, GDP, PAPER, bound_key


def convention_confidence(confidence: float, *, convention: str, points: int) -> float:
    """Per-point confidence: ``confidence`` itself ("paper") or 1 - (1 - confidence) / points ("bonferroni").

    With the Bonferroni split, the best bound over ``points`` sweep points holds at ``confidence`` jointly.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {', '.join(CONVENTIONS)}, got convention={convention!r}")
    if points < 1:
        raise ValueError(f"points must be >= 1, got points={points}")
    return confidence if convention == PAPER else 1.0 - (1.0 - confidence) / points


@dataclasses.dataclass(frozen=True)
class SweepBounds:
    """Epsilon lower bounds of every repetition over the guess sweep.

    Attributes:
        guesses: (k,) guess counts c'.
        correct: (R, k) correct guesses c.
        per_guess: "eps_<family>_<convention>" -> (R, k) bound at each c' (families in ``table_families``).
        best: "eps_<family>_<convention>" -> (R,) best bound over the sweep; "mu_gdp_<convention>" -> (R,) best
            GDP mu; "accuracy_lb_<convention>" -> (R,) best one-sided Clopper-Pearson accuracy lower limit.
        best_guesses: same keys as ``best`` -> (R,) c' reaching it (0 when nothing is rejected).
        gdp_delta: the delta at which GDP mu was converted to epsilon.
        gdp_tau_vacuous: True when tau >= c'/m at every sweep point (the f-DP tau bound rejects nothing).
    """

    guesses: np.ndarray
    correct: np.ndarray
    per_guess: dict[str, np.ndarray]
    best: dict[str, np.ndarray]
    best_guesses: dict[str, np.ndarray]
    gdp_delta: float
    gdp_tau_vacuous: bool


def evaluate_sweep(correct: np.ndarray, guesses: np.ndarray, *, canaries: int, confidence: float = 0.95,
                   delta: float = 0.0, tau: float = 0.0, families: tuple[str, ...] = BOUND_FAMILIES,
                   table_families: tuple[str, ...] = (BINOMIAL,),
                   conventions: tuple[str, ...] = CONVENTIONS, tests: int | None = None) -> SweepBounds:
    """Bounds of docs/math.md §6 for each repetition's counts (lia_spark.kernels.bounds), under both conventions of
    docs/math.md §5.4.

    The best bound per repetition uses bounds.best_* (same value as the max of the per-point bounds, far cheaper
    for GDP); per-point bounds are evaluated only for ``table_families``. ``tests`` is the number of tests the
    Bonferroni convention splits ``1 - confidence`` over (default: the sweep points; :func:`evaluate_scores`
    passes scores x sweep points).

    Raises:
        ValueError: on a family outside bounds.METHODS, mismatched shapes or tests < the number of sweep points.
    """
    from lia_spark.kernels import bounds, gdp

    correct = np.atleast_2d(np.asarray(correct, dtype=np.int64))
    guesses = np.asarray(guesses, dtype=np.int64)
    if correct.shape[1] != len(guesses):
        raise ValueError(f"correct must have one column per guess count ({len(guesses)}), got {correct.shape}")
    for family in (*families, *table_families):
        if family not in bounds.METHODS:
            raise ValueError(f"families must be among {', '.join(bounds.METHODS)}, got {family!r}")
    if tests is None:
        tests = len(guesses)
    elif tests < len(guesses):
        raise ValueError(f"tests must be >= the number of sweep points ({len(guesses)}), got tests={tests}")
    gdp_delta = gdp.effective_gdp_delta(delta)
    per_guess: dict[str, np.ndarray] = {}
    best: dict[str, np.ndarray] = {}
    best_guesses: dict[str, np.ndarray] = {}
    repetitions = len(correct)
    grid = np.broadcast_to(guesses, correct.shape)

    def record(key: str, values: list[float], indices: list[int]) -> None:
        best[key] = np.asarray(values, dtype=np.float64)
        best_guesses[key] = np.where(np.asarray(indices) >= 0, guesses[np.asarray(indices)], 0)

    for convention in conventions:
        level = convention_confidence(confidence, convention=convention, points=tests)
        for family in table_families:
            per_guess[bound_key(family, convention)] = bounds.epsilon_lower_bound_sweep(
                canaries=canaries, guesses=grid, correct=correct, confidence=level, delta=delta, tau=tau,
                method=family)
        accuracy = bounds.clopper_pearson_lower(correct, grid, confidence=level)
        record(f"accuracy_lb_{convention}", list(accuracy.max(axis=1)), list(accuracy.argmax(axis=1)))
        if BINOMIAL in families:
            found = [bounds.best_epsilon_lower_bound(canaries=canaries, guesses=guesses, correct=correct[r],
                                                     confidence=level, delta=delta, tau=tau, method=BINOMIAL)
                     for r in range(repetitions)]
            record(bound_key(BINOMIAL, convention), [f.value for f in found], [f.index for f in found])
        if GDP in families:
            found = [gdp.best_gdp_mu_lower_bound(canaries=canaries, guesses=guesses, correct=correct[r],
                                                    confidence=level, tau=tau) for r in range(repetitions)]
            indices = [f.index for f in found]
            record(f"mu_gdp_{convention}", [f.value for f in found], indices)
            record(bound_key(GDP, convention), [gdp.gdp_epsilon(f.value, delta=gdp_delta) for f in found], indices)
    vacuous = bool(np.all(gdp.gdp_tau_vacuous(canaries=canaries, guesses=guesses, tau=tau)))
    return SweepBounds(guesses=guesses, correct=correct, per_guess=per_guess, best=best, best_guesses=best_guesses,
                       gdp_delta=gdp_delta, gdp_tau_vacuous=vacuous)


def score_confidence(confidence: float, *, convention: str, scores: int, points: int) -> float:
    """Per-test confidence of an audit taking the best of ``scores`` x ``points`` tests.

    "bonferroni": 1 - (1 - confidence) / (scores * points), so that the best bound over every (score, c') pair
    holds at ``confidence`` (union bound); "paper": ``confidence`` at every test (not a valid joint bound).
    """
    if scores < 1:
        raise ValueError(f"scores must be >= 1, got scores={scores}")
    if points < 1:
        raise ValueError(f"points must be >= 1, got points={points}")
    return convention_confidence(confidence, convention=convention, points=scores * points)


@dataclasses.dataclass(frozen=True)
class ScoreBounds:
    """Best epsilon lower bounds of every repetition over several scores x the guess sweep.

    Attributes:
        scores: score names, in the order given.
        guesses: (k,) guess counts c'.
        tests: scores x sweep points, the Bonferroni denominator.
        levels: convention -> per-test confidence (see :func:`score_confidence`).
        per_score: score name -> its :class:`SweepBounds`, every test at ``levels`` (so each score's best is
            itself a valid bound at ``confidence``, if a looser one than auditing that score alone).
        best: same keys as :attr:`SweepBounds.best` -> (R,) max over scores.
        best_guesses: same keys -> (R,) c' reaching it (0 when nothing is rejected).
        best_scores: same keys -> (R,) name of the score reaching it (the first in order on ties; "" when
            nothing is rejected).
        gdp_delta, gdp_tau_vacuous: as in :class:`SweepBounds`.
    """

    scores: tuple[str, ...]
    guesses: np.ndarray
    tests: int
    levels: dict[str, float]
    per_score: dict[str, SweepBounds]
    best: dict[str, np.ndarray]
    best_guesses: dict[str, np.ndarray]
    best_scores: dict[str, np.ndarray]
    gdp_delta: float
    gdp_tau_vacuous: bool


def evaluate_scores(correct: dict[str, np.ndarray], guesses: np.ndarray, *, canaries: int,
                     confidence: float = 0.95, delta: float = 0.0, tau: float = 0.0,
                     families: tuple[str, ...] = BOUND_FAMILIES, table_families: tuple[str, ...] = (),
                     conventions: tuple[str, ...] = CONVENTIONS) -> ScoreBounds:
    """Best bound per repetition over every score and sweep point, the confidence split over all of them.

    Args:
        correct: score name -> (R, k) counts of :func:`lia_spark.kernels.audit.count_correct_scores` on the same
            games (same R, k).
        guesses: (k,) guess counts c' of the columns.
        canaries, confidence, delta, tau, families, table_families, conventions: as in :func:`evaluate_sweep`.
    Returns:
        :class:`ScoreBounds`; under "bonferroni" every one of the A x k tests runs at
        1 - (1 - confidence) / (A k), so P[best bound > true epsilon] <= 1 - confidence (union bound).
    Raises:
        ValueError: on no scores, counts of different shapes, or the errors of :func:`evaluate_sweep`.
    """
    if not correct:
        raise ValueError("correct must hold the counts of at least one score, got none")
    names = tuple(correct)
    arrays = {name: np.atleast_2d(np.asarray(correct[name], dtype=np.int64)) for name in names}
    shapes = {array.shape for array in arrays.values()}
    if len(shapes) != 1:
        raise ValueError(f"every score's counts must have the same (repetitions, guesses) shape, got "
                         f"{', '.join(f'{name}: {arrays[name].shape}' for name in names)}")
    guesses = np.asarray(guesses, dtype=np.int64)
    tests = len(names) * len(guesses)
    per_score = {name: evaluate_sweep(arrays[name], guesses, canaries=canaries, confidence=confidence,
                                       delta=delta, tau=tau, families=families, table_families=table_families,
                                       conventions=conventions, tests=tests) for name in names}
    first = per_score[names[0]]
    best, best_guesses, best_scores = {}, {}, {}
    for key in first.best:
        values = np.stack([per_score[name].best[key] for name in names])  # (A, R)
        winner = np.argmax(values, axis=0)  # first maximum: ties go to the earlier score
        columns = np.arange(values.shape[1])
        best[key] = values[winner, columns]
        best_guesses[key] = np.stack([per_score[name].best_guesses[key] for name in names])[winner, columns]
        best_scores[key] = np.where(best_guesses[key] > 0, np.asarray(names, dtype=object)[winner], "")
    levels = {convention: convention_confidence(confidence, convention=convention, points=tests)
              for convention in conventions}
    return ScoreBounds(scores=names, guesses=guesses, tests=tests, levels=levels, per_score=per_score,
                        best=best, best_guesses=best_guesses, best_scores=best_scores,
                        gdp_delta=first.gdp_delta, gdp_tau_vacuous=first.gdp_tau_vacuous)


def summarize(best: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Mean, sample standard deviation (ddof = 1; 0 for one repetition), min and max of each best-bound array."""
    out = {}
    for key, values in best.items():
        values = np.asarray(values, dtype=np.float64)
        out[key] = {"mean": float(values.mean()), "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                    "min": float(values.min()), "max": float(values.max()),
                    "share_positive": float(np.mean(values > 0.0))}
    return out


TAU_GRID = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)  # the sensitivity table's tau values


@dataclasses.dataclass(frozen=True)
class TauSensitivity:
    """How the observational bound of one family depends on tau (docs/math.md §6.6), every test at ``level``.

    Attributes:
        break_even: (R',) tau* per repetition: the smallest tau at which the best bound over scores x sweep points
            is 0 (R' = R for the closed form of the pure binomial bound, else the first repetition only).
        taus: the tau values of ``eps_lb``.
        eps_lb: (len(taus),) the first repetition's best bound at each tau.
    """

    break_even: np.ndarray
    taus: tuple[float, ...]
    eps_lb: np.ndarray


def tau_sensitivity(correct: dict[str, np.ndarray], guesses: np.ndarray, *, canaries: int, level: float,
                    delta: float, family: str, taus: tuple[float, ...] = TAU_GRID) -> TauSensitivity:
    """:class:`TauSensitivity` of the counts of several scores (score name -> (R, k)), each test at the per-test
    confidence ``level`` (e.g. the Bonferroni split). The best bound over scores is positive iff one score's is,
    so tau* is the largest of the scores' :func:`lia_spark.kernels.bounds.tau_break_even`."""
    from lia_spark.kernels import bounds

    arrays = [np.atleast_2d(np.asarray(counts, dtype=np.int64)) for counts in correct.values()]
    closed_form = family == BINOMIAL and delta == 0.0
    repetitions = len(arrays[0]) if closed_form else 1
    break_even = np.array([max(bounds.tau_break_even(canaries=canaries, guesses=guesses, correct=counts[r],
                                                     confidence=level, delta=delta, method=family)
                               for counts in arrays) for r in range(repetitions)])
    eps_lb = np.array([max(bounds.best_epsilon_lower_bound(canaries=canaries, guesses=guesses, correct=counts[0],
                                                           confidence=level, delta=delta, tau=tau,
                                                           method=family).value
                           for counts in arrays) for tau in taus])
    return TauSensitivity(break_even=break_even, taus=tuple(taus), eps_lb=eps_lb)


CEILING_DRAWS = 1000  # simulated audits behind the ceiling's 95th percentile (its noise: about +-0.005 in eps)
CEILING_PURPOSE = "audit/ceiling/exact-claim-attacker"
CEILING_SEED = 0  # public: the simulated attacker guesses on no one's data, and its draws are the same on every run


@dataclasses.dataclass(frozen=True)
class Ceiling:
    """What an attacker whose guesses are right with probability exactly q(eps_claimed) certifies in an audit of this
    size (docs/math.md §5.12): not a cap, a typical value and a high percentile.

    Attributes:
        eps_lb: the typical bound: the audit's best bound over the sweep at the expected counts round(q c') (about
            the median: such an attacker exceeds it in about half of audits; 0 when even that rejects nothing).
        eps_lb_95: the 95th percentile of that attacker's best bound over ``CEILING_DRAWS`` simulated audits
            (:func:`exact_claim_counts`); equal to ``eps_lb`` when every guess is right (q = 1).
        guesses: c' reaching ``eps_lb`` (0 when it is 0).
        accuracy: the per-guess accuracy q(eps_claimed) used (1 for an infinite or unknown claim).
        claimed_epsilon: the claim it was computed at (NaN: unknown claim, computed at accuracy 1).
    """

    eps_lb: float
    eps_lb_95: float
    guesses: int
    accuracy: float
    claimed_epsilon: float

    def to_dict(self) -> dict[str, float | str | None]:
        """JSON-friendly fields (claimed epsilon "inf" / None when infinite / unknown)."""
        claimed = self.claimed_epsilon
        return {"eps_lb": self.eps_lb, "eps_lb_95": self.eps_lb_95, "guesses": self.guesses,
                "accuracy": self.accuracy,
                "claimed_epsilon": None if math.isnan(claimed) else "inf" if math.isinf(claimed) else claimed}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Ceiling":
        """Inverse of :meth:`to_dict` (claimed epsilon None -> NaN, "inf" -> inf)."""
        claimed = values["claimed_epsilon"]
        return cls(eps_lb=float(values["eps_lb"]), eps_lb_95=float(values["eps_lb_95"]),
                   guesses=int(values["guesses"]), accuracy=float(values["accuracy"]),
                   claimed_epsilon=math.nan if claimed is None else float(claimed))


def exact_claim_counts(guesses: np.ndarray, accuracy: float, *, draws: int = CEILING_DRAWS) -> np.ndarray:
    """(draws, k) correct counts of an attacker right on each guess independently with probability ``accuracy``,
    its guesses nested as the sweep's are (the c'_j top-scored canaries hold the c'_i < c'_j before them): per draw,
    the cumulative sums of Binomial(c'_j - c'_{j-1}, q) over the sorted guess counts, drawn by inverting
    counter-hashed uniforms keyed on (CEILING_SEED, CEILING_PURPOSE, draw x k + j), so equal on every stack."""
    from scipy import stats

    from lia_spark.kernels import hashing

    guesses = np.asarray(guesses, dtype=np.int64)
    order = np.argsort(guesses, kind="stable")
    steps = np.diff(np.concatenate(([0], guesses[order])))
    if accuracy >= 1.0:
        return np.broadcast_to(guesses, (draws, guesses.size)).copy()
    uniforms = hashing.uniform(CEILING_SEED, CEILING_PURPOSE, np.arange(draws * guesses.size)).reshape(
        draws, guesses.size)
    increments = np.where(steps > 0, stats.binom.ppf(uniforms, steps, accuracy), 0).astype(np.int64)
    counts = np.empty_like(increments)
    counts[:, order] = np.cumsum(increments, axis=1)
    return counts


def ceiling(*, canaries: int, guesses: np.ndarray, claimed_epsilon: float, tests: int, confidence: float = 0.95,
            delta: float = 0.0, tau: float = 0.0, family: str = BINOMIAL) -> Ceiling:
    """What an attacker at exactly the claimed eps certifies: the audit's own bound (same m, sweep, Bonferroni split
    over ``tests``, delta, tau and family) on the expected counts c = round(q c') at every sweep point (typical), and
    the 95th percentile of that bound over :func:`exact_claim_counts` (simulated audits), q = e^eps / (e^eps +
    kappa) the largest per-guess accuracy an eps-DP target allows at the claimed eps (docs/math.md §6.1; q = 1 for
    an infinite or unknown claim). A bound of 0 with a ceiling of 0 means the audit was too small to find anything
    at this claim.

    Raises:
        ValueError: on a negative claim, or as :func:`evaluate_sweep`.
    """
    from lia_spark.kernels import bounds

    if claimed_epsilon < 0:
        raise ValueError(f"claimed_epsilon must be >= 0, inf or NaN (unknown), got claimed_epsilon={claimed_epsilon}")
    guesses = np.asarray(guesses, dtype=np.int64)
    finite = math.isfinite(claimed_epsilon)
    accuracy = bounds.accuracy_of_epsilon(claimed_epsilon, tau=tau) if finite else 1.0
    expected = np.floor(accuracy * guesses + 0.5).astype(np.int64)[None, :]
    settings: dict[str, Any] = dict(canaries=canaries, confidence=confidence, delta=delta, tau=tau,
                                    conventions=(BONFERRONI,), tests=tests)
    key = bound_key(family, BONFERRONI)
    typical = evaluate_sweep(expected, guesses, families=(family,), table_families=(), **settings)
    if accuracy >= 1.0:
        simulated = typical.best[key]
    elif family == BINOMIAL:  # the best over the sweep is the largest per-point bound: one vectorized evaluation
        simulated = evaluate_sweep(exact_claim_counts(guesses, accuracy), guesses, families=(),
                                   table_families=(family,), **settings).per_guess[key].max(axis=1)
    else:
        simulated = evaluate_sweep(exact_claim_counts(guesses, accuracy), guesses, families=(family,),
                                   table_families=(), **settings).best[key]
    return Ceiling(eps_lb=float(typical.best[key][0]), eps_lb_95=float(np.quantile(simulated, 0.95, method="higher")),
                   guesses=int(typical.best_guesses[key][0]), accuracy=accuracy, claimed_epsilon=claimed_epsilon)
