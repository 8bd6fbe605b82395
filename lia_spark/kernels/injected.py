"""Injected-label canaries: the one-run audit that needs no assumption on the proxy (docs/math.md §5.9; Steinke,
Nasr and Jagielski, "Privacy Auditing with One (1) Training Run", 2023, with label canaries).

Before the target is trained, every canary i (a training row with features x_i and true label y0_i) gets a
counterfactual label y1_i and a fair coin b_i, both keyed on (K, purpose, row_id) through
:mod:`lia_spark.kernels.hashing`, K the audit's secret key (:class:`lia_spark.kernels.hashing.AuditKey`; a study of
its own may pass an integer seed):

    proxy: y1_i ~ Bernoulli(M'(x_i))        flip: y1_i = 1 - y0_i with probability ``flip_share``, else y0_i
    b_i ~ Bernoulli(1/2),                   training label y^b_i = y0_i if b_i = 0 else y1_i

and the training mechanism is applied to y^b as to any label. The attacker sees the trained model M, the proxy
M' and the pair (y0_i, y1_i); on the *informative* canaries (y0_i != y1_i, the others abstain) it scores

    s_i = A(M, M', x_i, y0_i) - A(M, M', x_i, y1_i)

with A an score score of :func:`lia_spark.kernels.canary_scores.label_scores` (the log ratio log M[y] - log M'[y]
makes s the Bayes log-likelihood ratio of b = 0 against b = 1 when M is the posterior given the training label and
M' the prior), guesses b' = 0 if s > 0 else 1 on the c' informative canaries of largest |s| (ties broken by a hash of
the row id) and abstains elsewhere. Because b_i is a fair coin independent of the data, of y1 and of every other
coin, and flipping it changes one training label, an eps-label-DP training algorithm bounds each guess's success
probability by e^eps / (1 + e^eps) given all earlier guesses, whatever the data distribution and the proxy: the
bounds of docs/math.md §6 apply with tau = 0, m = the number of informative canaries, and one training run gives
one bound (one game). With audit.runs = R the target is trained R times with independent coins and the game runs
over the R m (canary, run) pairs (docs/math.md §5.14; :func:`run_coins`, :func:`pooled_keys`). The bound needs
the coins kept from the trainer: whoever holds K recomputes every draw of this module (docs/math.md §5.9).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from lia_spark.kernels import audit, canary_scores, hashing
from lia_spark.names import COUNTERFACTUAL_LABEL, COUNTERFACTUALS, HIDDEN_BIT, PROXY_DRAW, RUN_KEY_SHIFT

COUNTERFACTUAL_PURPOSE = "audit/injected/counterfactual"
COIN_PURPOSE = "audit/injected/coin"
SHADOW_PURPOSE = "audit/injected/shadow"
RUN_PURPOSE = "audit/injected/run"


def injected_draws(row_ids: np.ndarray, label: np.ndarray, proxy: np.ndarray, *, key: hashing.Seed,
                   counterfactual: str = PROXY_DRAW, flip_share: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(y1, b) of each canary as int8 arrays, keyed on (key, purpose, row_id) (module docstring).

    Args:
        row_ids, label, proxy: the canaries' row ids, true labels y0 and proxy predictions M'(x) in [0, 1].
        counterfactual: ``proxy`` (y1 ~ Bernoulli(M'(x))) or ``flip`` (y1 = 1 - y0 with probability flip_share).

    Raises:
        ValueError: on an unknown counterfactual, a flip_share outside [0, 1] or columns of different lengths.
    """
    if counterfactual not in COUNTERFACTUALS:
        raise ValueError(f"counterfactual must be one of {', '.join(COUNTERFACTUALS)}, got {counterfactual!r}")
    if not 0.0 <= flip_share <= 1.0:
        raise ValueError(f"flip_share must be in [0, 1], got flip_share={flip_share}")
    row_ids = np.asarray(row_ids, dtype=np.int64)
    label = np.asarray(label).astype(np.int8)
    proxy = np.asarray(proxy, dtype=np.float64)
    if not len(row_ids) == len(label) == len(proxy):
        raise ValueError(f"row_ids, label and proxy must have equal lengths, got {len(row_ids)}, {len(label)}, "
                         f"{len(proxy)}")
    if counterfactual == PROXY_DRAW:
        y1 = hashing.bernoulli(key, COUNTERFACTUAL_PURPOSE, row_ids, proxy)
    else:
        y1 = np.where(hashing.bernoulli(key, COUNTERFACTUAL_PURPOSE, row_ids, flip_share) == 1, 1 - label, label)
    coin = (hashing.hash_bits(key, COIN_PURPOSE, row_ids) >> np.uint64(63)).astype(np.int8)
    return y1.astype(np.int8), coin


def training_labels(label: np.ndarray, counterfactual_label: np.ndarray, hidden_bit: np.ndarray) -> np.ndarray:
    """The labels the target trains on: y^b = y0 where b = 0, y1 where b = 1 (int8)."""
    return np.where(np.asarray(hidden_bit) == 1, counterfactual_label, label).astype(np.int8)


@dataclasses.dataclass(frozen=True)
class InjectedLabels:
    """The injection of one target's training rows: per row the label it trains on, y1 and b (-1 off the
    canaries, whose labels stay true)."""

    training: np.ndarray
    counterfactual_label: np.ndarray
    hidden_bit: np.ndarray


def inject(row_ids: np.ndarray, label: np.ndarray, proxy: np.ndarray, canary: np.ndarray, *, key: hashing.Seed,
           counterfactual: str = PROXY_DRAW, flip_share: float = 0.0) -> InjectedLabels:
    """Draw (y1, b) on the rows where ``canary`` is true (:func:`injected_draws`) and return the labels to train on
    (y^b there, the true label elsewhere) with y1 and b (-1 off the canaries)."""
    canary = np.asarray(canary, dtype=bool)
    label = np.asarray(label).astype(np.int8)
    y1, coin = injected_draws(row_ids, label, proxy, key=key, counterfactual=counterfactual, flip_share=flip_share)
    return InjectedLabels(training=np.where(canary, training_labels(label, y1, coin), label).astype(np.int8),
                          counterfactual_label=np.where(canary, y1, -1).astype(np.int8),
                          hidden_bit=np.where(canary, coin, -1).astype(np.int8))


def injected_scores(target: np.ndarray, proxy: np.ndarray, label: np.ndarray, *,
                    score: "str | canary_scores.Score" = "log_ratio") -> np.ndarray:
    """s = A(y0) - A(1 - y0) per canary for the score score A (module docstring); on an informative canary
    1 - y0 = y1, so s > 0 favours b = 0 (the model agrees with the true label more than the proxy does)."""
    parsed = canary_scores.parse_score(score)
    label = np.asarray(label)
    return (canary_scores.label_scores(target, proxy, label, kind=parsed.kind, t=parsed.t)
            - canary_scores.label_scores(target, proxy, 1 - label, kind=parsed.kind, t=parsed.t))


def score_candidates(row_ids: np.ndarray, label: np.ndarray, counterfactual_label: np.ndarray,
                      hidden_bit: np.ndarray, target: np.ndarray, proxy: np.ndarray, *, seed: int,
                      scores=canary_scores.DEFAULT_SCORES) -> dict[str, audit.Candidates]:
    """The injected game as :class:`lia_spark.kernels.audit.Candidates` of one repetition: one candidate per informative
    canary (y0 != y1), always active, correct iff the guess (0 if s > 0 else 1) equals b; score name ->
    candidates. The counting machinery of the observational audit (one sort, exact distributed top-c') then
    applies unchanged with R = 1.

    Raises:
        ValueError: on a bad or repeated score, invalid canary columns, or labels / coins outside {0, 1}.
    """
    parsed = canary_scores.resolve_scores(scores)
    row_ids = np.asarray(row_ids, dtype=np.int64)
    label, counterfactual_label, hidden_bit = (np.asarray(column) for column in (label, counterfactual_label,
                                                                                  hidden_bit))
    target = np.asarray(target, dtype=np.float64)
    proxy = np.asarray(proxy, dtype=np.float64)
    audit.validate_canaries(row_ids, label, target, proxy)
    for name, column in ((COUNTERFACTUAL_LABEL, counterfactual_label), (HIDDEN_BIT, hidden_bit)):
        if len(column) != len(row_ids):
            raise ValueError(f"{name} must have one value per row_id ({len(row_ids)}), got {len(column)} values")
        bad = ~np.isin(column, (0, 1))
        if bad.any():
            raise ValueError(f"{name} must be 0 or 1, got {name}={column[bad][0]!r}")
    informative = label != counterfactual_label
    tie = audit.tie_hashes(row_ids[informative], seed=seed)
    shown = label[informative].astype(np.int8)
    coin = hidden_bit[informative] == 1
    active = np.ones((int(informative.sum()), 1), dtype=np.uint64)
    found = {}
    for score in parsed:
        values = injected_scores(target[informative], proxy[informative], shown, score=score)
        correct = ((values <= 0.0) == coin).astype(np.uint64)[:, None]  # guess b' = 1 iff s <= 0
        found[score.name] = audit.Candidates(abs_score=np.abs(values), tie=tie, label=shown, active=active,
                                              correct=correct)
    return found


def count_correct(row_ids: np.ndarray, label: np.ndarray, counterfactual_label: np.ndarray, hidden_bit: np.ndarray,
                  target: np.ndarray, proxy: np.ndarray, *, seed: int, guesses: np.ndarray,
                  scores=canary_scores.DEFAULT_SCORES) -> dict[str, np.ndarray]:
    """In-process injected audit: score name -> (1, k) correct guesses c at each guess count c' of ``guesses``
    (counted among the informative canaries, from one sort per score).

    Raises:
        ValueError: if a guess count is outside [1, informative canaries], or as :func:`score_candidates`.
    """
    found = score_candidates(row_ids, label, counterfactual_label, hidden_bit, target, proxy, seed=seed,
                              scores=scores)
    informative = len(next(iter(found.values())))
    guesses = np.asarray(guesses, dtype=np.int64)
    if guesses.size and (guesses.min() < 1 or guesses.max() > informative):
        raise ValueError(f"guesses must lie in [1, {informative}] (the informative canaries), got "
                         f"guesses={guesses.min()}..{guesses.max()}")
    return {name: audit.sorted_counts(candidates, guesses[None, :], repetitions=1)
            for name, candidates in found.items()}


def shadow_coins(row_ids: np.ndarray, *, key: hashing.Seed, shadow: int) -> np.ndarray:
    """The coins of shadow fit ``shadow`` (int8): fresh fair coins keyed on (key, audit/injected/shadow/<pair>/coin,
    row_id), pair = shadow // 2, the odd shadow of a pair taking the complement, so every canary trains on y0 in
    exactly half of an even number of shadows. Independent of the target's coins (another purpose)."""
    pair = shadow // 2
    coin = (hashing.hash_bits(key, f"{SHADOW_PURPOSE}/{pair}/coin", np.asarray(row_ids, dtype=np.int64))
            >> np.uint64(63)).astype(np.int8)
    return coin if shadow % 2 == 0 else (1 - coin).astype(np.int8)


def shadow_seed(key: hashing.Seed, shadow: int) -> int:
    """The training mechanism's seed of shadow fit ``shadow`` (63 bits): fresh mechanism randomness (its RR flips,
    bags, noise), independent of the target's, which the attacker must not know."""
    return int(hashing.stream_key(key, f"{SHADOW_PURPOSE}/{shadow}/mechanism")) >> 1


def canary_training_labels(true_label: np.ndarray, counterfactual_label: np.ndarray, coin: np.ndarray) -> np.ndarray:
    """The labels a fit with coins ``coin`` trains on: y^c on each canary (``counterfactual_label`` >= 0), the true
    label elsewhere."""
    counterfactual_label = np.asarray(counterfactual_label)
    return np.where(counterfactual_label >= 0, training_labels(true_label, counterfactual_label, coin),
                    true_label).astype(np.int8)


def shadow_training_labels(true_label: np.ndarray, counterfactual_label: np.ndarray, row_ids: np.ndarray, *,
                           key: hashing.Seed, shadow: int) -> np.ndarray:
    """The labels shadow fit ``shadow`` trains on (:func:`canary_training_labels` with the shadow's own coins,
    :func:`shadow_coins`). Takes no coin of the target's."""
    return canary_training_labels(true_label, counterfactual_label, shadow_coins(row_ids, key=key, shadow=shadow))


def run_coins(row_ids: np.ndarray, *, key: hashing.Seed, run: int) -> np.ndarray:
    """The coins b of extra training run ``run`` >= 1 of a pooled game (audit.runs, docs/math.md §5.14; run 0 is the
    target with the coins of :func:`injected_draws`): fresh fair coins keyed on (key, audit/injected/run/<run>/coin,
    row_id), independent of every other run's and of the shadows' (other purposes)."""
    if run < 1:
        raise ValueError(f"run: the extra runs are numbered from 1 (run 0 is the target), got {run}")
    return (hashing.hash_bits(key, f"{RUN_PURPOSE}/{run}/coin", np.asarray(row_ids, dtype=np.int64))
            >> np.uint64(63)).astype(np.int8)


def run_seed(key: hashing.Seed, run: int) -> int:
    """The training mechanism's seed of extra run ``run`` (63 bits): its own randomness (RR flips, bags, noise)."""
    return int(hashing.stream_key(key, f"{RUN_PURPOSE}/{run}/mechanism")) >> 1


def pooling_problem(*, shortest: int, longest: int, lowest_row_id: int, highest_row_id: int) -> str | None:
    """What forbids pooling a canary table's extra runs (None when nothing does): run lists of different lengths (the
    coins' and predictions' of every canary, ``shortest``..``longest`` entries), or row ids outside [0, 2^48) whose
    pooled keys (:func:`pooled_keys`) could collide."""
    if shortest != longest:
        return (f"run_hidden_bits and run_target_predictions must list the same number of runs on every canary, got "
                f"{shortest} to {longest}")
    if lowest_row_id < 0 or highest_row_id >= 1 << RUN_KEY_SHIFT:
        return (f"row_id must lie in [0, 2^{RUN_KEY_SHIFT}) for the runs' pooled keys, got {lowest_row_id} to "
                f"{highest_row_id}")
    return None


def pooled_keys(row_ids: np.ndarray, run: int) -> np.ndarray:
    """The canary keys of run ``run`` in a pooled game: run << 48 | row_id, distinct over (canary, run) pairs (run 0
    keeps the row ids)."""
    return np.asarray(row_ids, dtype=np.int64) | np.int64(run << RUN_KEY_SHIFT)


def shadow_reference(predictions: np.ndarray) -> np.ndarray:
    """The label-blind baseline of the shadow fits: sigmoid of the mean logit over the K shadows ((K, n) -> (n,)).
    With paired coins each canary's own label enters half the fits as y0 and half as y1, so the baseline carries the
    row's features, the other rows' labels and the mechanism's typical effect, but not which label the target saw."""
    p = np.clip(np.asarray(predictions, dtype=np.float64), 1e-15, 1.0 - 1e-15)
    mean_logit = np.mean(np.log(p) - np.log1p(-p), axis=0)
    return 1.0 / (1.0 + np.exp(-mean_logit))


AGAINST_THE_PROXY = -0.1  # predictions correlated below this with the proxy's P(y = 1) are refused as P(y = 0)
PROBABILITY_FIX = ("a model's predictions must be P(y = 1), one number in [0, 1] per row: log a classifier with its "
                   "own flavour (mlflow.sklearn, mlflow.xgboost, mlflow.lightgbm, mlflow.catboost), whose "
                   "predict_proba the audit reads, or a pyfunc returning predict_proba(X)[:, 1]")


@dataclasses.dataclass(frozen=True)
class PredictionSummary:
    """One pass over the canaries' predictions: rows, the canaries expected (one prediction each), predictions that are
    missing (null or NaN), their range, how many lie strictly inside (0, 1), and their correlation with the proxy's."""

    rows: int
    expected: int
    missing: int
    low: float
    high: float
    soft: int
    agreement: float | None


def prediction_problem(found: PredictionSummary) -> str | None:
    """Why a model's predictions of the canaries cannot be audited, or None: a canary predicted twice or not at all
    (a subset chosen after seeing the labels would void the bound), a value outside [0, 1], only 0s and 1s (class
    labels), or values that fall as the proxy's P(y = 1) rises (correlation below :data:`AGAINST_THE_PROXY`: P(y = 0),
    the first column of predict_proba, whose bound would be a valid but meaningless 0)."""
    if found.rows > found.expected:
        return f"{found.rows - found.expected} predictions repeat a canary's row_id (one per canary expected)"
    if found.missing:
        return (f"no prediction (a missing row, null or NaN) for {found.missing} of {found.expected} canaries; every "
                "canary needs one: a subset chosen after seeing the labels would void the bound")
    if found.low < 0 or found.high > 1:
        return f"predictions range over [{found.low:.6g}, {found.high:.6g}]"
    if not found.soft:
        return "every prediction is 0 or 1 (class labels, not probabilities)"
    if found.agreement is not None and found.agreement < AGAINST_THE_PROXY:
        return (f"the predictions fall as the proxy's P(y = 1) rises (correlation {found.agreement:.2f} over the "
                "canaries): P(y = 0), the first column of predict_proba?")
    return None


def summarize_predictions(prediction: np.ndarray, proxy: np.ndarray, *, expected: int) -> PredictionSummary:
    """:class:`PredictionSummary` of the canaries' predictions (NaN = missing) beside the proxy's, in process."""
    prediction = np.asarray(prediction, dtype=np.float64)
    number = ~np.isnan(prediction)
    known = prediction[number]
    spread = number.sum() > 1 and np.std(known) > 0 and np.std(np.asarray(proxy, dtype=np.float64)[number]) > 0
    agreement = float(np.corrcoef(known, np.asarray(proxy, dtype=np.float64)[number])[0, 1]) if spread else None
    return PredictionSummary(rows=len(prediction), expected=expected, missing=int((~number).sum()),
                             low=float(known.min()) if known.size else 0.0,
                             high=float(known.max()) if known.size else 0.0,
                             soft=int(((known > 0) & (known < 1)).sum()), agreement=agreement)

