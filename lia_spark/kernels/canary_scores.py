"""The audit's scores: how the attacker ranks the canaries (docs/math.md §5.2). A score is named by its kind and
exponent t (:class:`Score`): ``difference_t<t>``, s = (M(x)[y] - M'(x)[y]) (1 - M'(x)[y])^t, or ``log_ratio``,
s = log M(x)[y] - log M'(x)[y], with M(x)[1] = M(x), M(x)[0] = 1 - M(x). The log ratio is the Bayes-optimal ranking
when M is the Bayes posterior given the release and M' the true prior.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from lia_spark.names import DIFFERENCE, DIFFERENCE_PREFIX, LOG_RATIO, SCORES, score_parts

DEFAULT_SCORES = ("difference_t0", "difference_t2", "difference_t8", LOG_RATIO)

_TINY = np.finfo(np.float64).tiny

def label_scores(target: np.ndarray, proxy: np.ndarray, shown: np.ndarray | int, *, kind: str = DIFFERENCE,
                 t: float = 2.0) -> np.ndarray:
    """Score s of the kind ``kind`` of showing label ``shown`` (array or 0/1), elementwise; see the module docstring.

    The log ratio clips probabilities at the smallest positive double, so M(x)[y] = 0 gives a large finite |s|.

    Raises:
        ValueError: on an unknown score kind or a negative t.
    """
    if kind not in SCORES:
        raise ValueError(f"score kind must be one of {', '.join(SCORES)}, got kind={kind!r}")
    if not t >= 0:
        raise ValueError(f"t must be >= 0, got t={t}")
    target = np.asarray(target, dtype=np.float64)
    proxy = np.asarray(proxy, dtype=np.float64)
    shown_one = np.asarray(shown) == 1
    target_shown = np.where(shown_one, target, 1.0 - target)
    proxy_shown = np.where(shown_one, proxy, 1.0 - proxy)
    if kind == LOG_RATIO:
        return np.log(np.maximum(target_shown, _TINY)) - np.log(np.maximum(proxy_shown, _TINY))
    return (target_shown - proxy_shown) * (1.0 - proxy_shown) ** t


@dataclasses.dataclass(frozen=True)
class Score:
    """One score: its kind (:data:`SCORES`) and the exponent t of the difference score (0 for the log ratio)."""

    kind: str
    t: float = 2.0

    @property
    def name(self) -> str:
        """``log_ratio`` or ``difference_t<t>`` (t printed exactly: ``difference_t2``, ``difference_t0.5``)."""
        if self.kind == LOG_RATIO:
            return LOG_RATIO
        short = f"{self.t:g}"
        return DIFFERENCE_PREFIX + (short if float(short) == self.t else repr(float(self.t)))


def parse_score(score: "str | Score") -> Score:
    """The :class:`Score` named ``log_ratio`` or ``difference_t<t>`` (t a number >= 0), or ``score`` itself.

    Raises:
        ValueError: naming the score when it is neither form, or t is negative or not finite.
    """
    if isinstance(score, Score):
        kind, t = score.kind, score.t
        if kind not in SCORES:
            raise ValueError(f"score kind must be one of {', '.join(SCORES)}, got kind={kind!r}")
        if not (math.isfinite(t) and t >= 0.0):
            raise ValueError(f"score {score.name!r}: t must be a finite number >= 0, got t={t}")
    else:
        kind, t = score_parts(score)
    return Score(kind=kind, t=0.0 if kind == LOG_RATIO else float(t))


def resolve_scores(scores) -> tuple[Score, ...]:
    """Parse a non-empty sequence of scores (names or :class:`Score`); names must be distinct.

    Raises:
        ValueError: on an empty sequence, a bad score (see :func:`parse_score`) or a repeated name.
    """
    if isinstance(scores, (str, Score)):
        scores = (scores,)
    parsed = tuple(parse_score(score) for score in scores)
    if not parsed:
        raise ValueError("scores must name at least one score, got scores=()")
    names = [score.name for score in parsed]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"scores must be distinct, got {', '.join(repeated)} more than once")
    return parsed


def score_name(kind: str = DIFFERENCE, t: float = 2.0) -> str:
    """Name of the score of the ``kind=`` / ``t=`` API: ``score_name("difference", 2.0) == "difference_t2"``."""
    return parse_score(Score(kind=kind, t=t)).name


def candidate_scores(target: np.ndarray, proxy: np.ndarray, *, kind: str, t: float) -> np.ndarray:
    """Signed scores of all 2m candidates: showing label 0 for every row, then showing label 1."""
    return np.concatenate([label_scores(target, proxy, 0, kind=kind, t=t),
                           label_scores(target, proxy, 1, kind=kind, t=t)])
