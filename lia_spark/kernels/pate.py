"""PATE as a training mechanism of the target, as the Criteo setup of Wu et al. (2023) runs it (docs/math.md §4.6;
[PAE+17], [PSM+18], [WYM+23]).

Pure (numpy, xgboost, dp-accounting): every draw is a counter-based hash of (seed, purpose, row_id), so the
teacher partitions, the votes, the noise, the student rows and their labels do not depend on how the rows are
partitioned.

- Every training row belongs to teacher floor(T u) (u uniform by row id): T disjoint partitions covering all of
  them. Teacher t is a GBDT fitted on its rows' labels.
- The Q *student* queries are the Q training rows with the smallest hash (the teachers' own rows, as in Wu et al.).
- Teacher t's vote on query x is *sampled* from its predicted click probability: v_t(x) = 1{u(seed, row_id, t) <
  P_t(y=1|x)}; counts n_0, n_1 of the T votes.
- GNMax adds N(0, sigma^2) to each count, LNMax Lap(sigma); the student's label is the noisy vote share
  max(n~_1, 0) / (max(n~_0, 0) + max(n~_1, 0)) as a soft label (``share``, the default) or a Bernoulli draw from it
  (``sampled``, Wu et al.'s code); both are post-processing of the noisy counts, and at sigma = 0 both have mean
  (1/T) sum_t P_t(y=1|x), so the student is calibrated like its teachers (the soft label has less variance).
- Changing one training label changes one teacher; with the vote draws u fixed, the count vector moves by 1 in two
  classes (L2 sensitivity sqrt 2, L1 sensitivity 2). GNMax is the Gaussian mechanism with noise multiplier
  sigma / sqrt 2 ((lambda, lambda / sigma^2)-RDP, [PSM+18] Prop. 8), LNMax the Laplace mechanism with noise multiplier
  sigma / 2; the Q queries are composed and converted to (eps, delta) by dp-accounting's RDP accountant.
- The ``published`` protocol is the Criteo run of Wu et al.'s code: Q = 200 queries, LNMax, sampled labels, the noise
  scale from the data-independent bound eps = 4 Q g^2 + 2 g sqrt(2 Q ln(1/delta)), g = 1/scale, at delta = 1e-4
  (:func:`data_independent_epsilon`; dp-accounting's tighter eps for the same noise is reported beside it), and
  teachers and student of 100 trees, learning rate 0.4, depth 8, each kept at its best iteration on the validation
  split (held-out rows with their true labels, never a training row).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from lia_spark.kernels import hashing
from lia_spark.kernels.model_libraries import TeacherModel

GAUSSIAN, LAPLACE = "gaussian", "laplace"
NOISES = (GAUSSIAN, LAPLACE)
SHARE, SAMPLED = "share", "sampled"  # the student's labels: the noisy vote share itself, or a draw from it
STUDENT_LABELS = (SHARE, SAMPLED)
DELTA = 1e-5
STUDENT_PURPOSE, TEACHER_PURPOSE, NOISE_PURPOSE = "pate/student", "pate/teacher", "pate/noise"
VOTE_PURPOSE, LABEL_PURPOSE, TEACHER_HOLDOUT_PURPOSE = "pate/vote", "pate/label", "pate/teacher-holdout"
TEACHER_HOLDOUT_SHARE = 0.1  # a teacher's own rows it early-stops on
HOLDOUT_PURPOSE, PSEUDO_PURPOSE = "pate/student-holdout", "pate/pseudo-label"
STUDENT_HOLDOUT_SHARE = 0.1  # student rows the student early-stops on (noisy labels: no extra query)
_CALIBRATION_TOLERANCE = 1e-6
RDP, DATA_INDEPENDENT = "rdp", "data_independent"  # how eps is accounted: dp-accounting's RDP, the closed form
ACCOUNTINGS = (RDP, DATA_INDEPENDENT)
LIA_SPARK, PUBLISHED = "lia_spark", "published"  # pate.protocol: this project's default, Wu et al.'s Criteo run
PROTOCOLS = (LIA_SPARK, PUBLISHED)


@dataclasses.dataclass(frozen=True)
class Protocol:
    """What a pate.protocol fixes where the pate section leaves a field unset: queries, noise, student labels,
    delta, accounting, and the teachers' and student's trees (None: the models section's) kept at their best
    iteration on the validation split (``validation_split``) or early-stopped on their own held-out rows."""

    queries: int
    noise: str
    student_labels: str
    delta: float
    accounting: str
    n_estimators: int | None = None
    learning_rate: float | None = None
    max_depth: int | None = None
    validation_split: bool = False


PROTOCOL_SETTINGS = {
    LIA_SPARK: Protocol(queries=10_000, noise=GAUSSIAN, student_labels=SHARE, delta=DELTA, accounting=RDP),
    # criteo/PATE of Wu et al.: --n_samples 200 --mechanism lnmax --result_noise 20 --tally_method sample
    # --selection_method sample, eps from get_eps_data_independent at delta 1e-4, CatBoost 100 iterations, learning
    # rate 0.4, depth 8, evaluated on a 20% validation split of the test rows and cut at its best iteration
    PUBLISHED: Protocol(queries=200, noise=LAPLACE, student_labels=SAMPLED, delta=1e-4, accounting=DATA_INDEPENDENT,
                        n_estimators=100, learning_rate=0.4, max_depth=8, validation_split=True),
}


def _check_accounting(name: str, noise: float, *, queries: int, delta: float) -> None:
    """The arguments of an eps computation: noise ``name`` >= 0, queries >= 1, delta in (0, 1)."""
    if not noise >= 0:
        raise ValueError(f"{name} must be non-negative, got {name}={noise}")
    if queries < 1:
        raise ValueError(f"queries must be >= 1, got queries={queries}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got delta={delta}")


def data_independent_epsilon(*, scale: float, queries: int, delta: float) -> float:
    """eps = 4 Q g^2 + 2 g sqrt(2 Q ln(1/delta)), g = 1/scale: Q answers of Laplace(scale) noise on the vote counts,
    each (2g)-DP (L1 sensitivity 2), composed by the advanced composition theorem ([PAE+17] §3; Wu et al.'s
    ``get_eps_data_independent``). scale = 0 answers without noise: eps = inf."""
    _check_accounting("scale", scale, queries=queries, delta=delta)
    if scale == 0:
        return math.inf
    g = 1.0 / scale
    return 4.0 * queries * g * g + 2.0 * g * math.sqrt(2.0 * queries * math.log(1.0 / delta))


def data_independent_scale(*, epsilon: float, queries: int, delta: float) -> float:
    """The Laplace scale whose :func:`data_independent_epsilon` is ``epsilon``: the positive root g of
    4 Q g^2 + b g - eps = 0, b = 2 sqrt(2 Q ln(1/delta)), i.e. g = (sqrt(b^2 + 16 Q eps) - b) / (8 Q), scale = 1/g
    (written as 2 eps / (sqrt(b^2 + 16 Q eps) + b) to stay exact at small eps). eps = inf gives scale 0."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got epsilon={epsilon}")
    if math.isinf(epsilon):
        return 0.0
    _check_accounting("scale", 1.0, queries=queries, delta=delta)
    b = 2.0 * math.sqrt(2.0 * queries * math.log(1.0 / delta))
    g = 2.0 * epsilon / (math.sqrt(b * b + 16.0 * queries * epsilon) + b)
    return 1.0 / g


def _check_noise(noise: str) -> None:
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {', '.join(NOISES)}, got noise={noise!r}")


def _dp_event(*, sigma: float, queries: int, noise: str) -> Any:
    import dp_accounting

    _check_noise(noise)
    if noise == GAUSSIAN:
        query = dp_accounting.GaussianDpEvent(noise_multiplier=sigma / math.sqrt(2.0))
    else:
        query = dp_accounting.LaplaceDpEvent(noise_multiplier=sigma / 2.0)
    return dp_accounting.SelfComposedDpEvent(query, queries)


def pate_epsilon(*, sigma: float, queries: int, delta: float = DELTA, noise: str = GAUSSIAN) -> float:
    """eps(delta) of ``queries`` noisy-argmax answers with noise ``sigma`` (RDP accountant of dp-accounting).

    sigma = 0 answers without noise: eps = inf.

    Raises:
        ValueError: on sigma < 0, queries < 1, delta outside (0, 1) or an unknown noise.
    """
    _check_accounting("sigma", sigma, queries=queries, delta=delta)
    _check_noise(noise)
    if sigma == 0:
        return math.inf
    from dp_accounting import rdp

    accountant = rdp.RdpAccountant()
    accountant.compose(_dp_event(sigma=sigma, queries=queries, noise=noise))
    return float(accountant.get_epsilon(delta))


def calibrate_sigma(*, epsilon: float, queries: int, delta: float = DELTA, noise: str = GAUSSIAN) -> float:
    """The smallest noise sigma with pate_epsilon(sigma) <= epsilon, by bisection on log sigma (eps decreases in
    sigma); |eps(sigma) - epsilon| <= 1e-6 epsilon. epsilon = inf gives sigma = 0 (no noise on the vote counts).

    Raises:
        ValueError: on epsilon <= 0.
    """
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got epsilon={epsilon}")
    if math.isinf(epsilon):
        return 0.0
    low, high = 1e-3, 1.0
    while pate_epsilon(sigma=high, queries=queries, delta=delta, noise=noise) > epsilon:
        low, high = high, 2.0 * high
    while pate_epsilon(sigma=low, queries=queries, delta=delta, noise=noise) <= epsilon:
        low /= 2.0
    while True:
        middle = math.sqrt(low * high)
        found = pate_epsilon(sigma=middle, queries=queries, delta=delta, noise=noise)
        if found > epsilon:
            low = middle
        else:
            high = middle
            if epsilon - found <= _CALIBRATION_TOLERANCE * epsilon or high / low - 1.0 < 1e-12:
                return high


def student_mask(row_ids: np.ndarray, *, queries: int, seed: int) -> np.ndarray:
    """True on the ``queries`` rows of ``row_ids`` (the training rows) with the smallest hash (seed, "pate/student",
    row_id): the student's queries, drawn from the teachers' own rows.

    Raises:
        ValueError: unless 1 <= queries <= len(row_ids).
    """
    row_ids = np.asarray(row_ids, dtype=np.int64)
    if not 1 <= queries <= row_ids.size:
        raise ValueError(f"pate.queries must be in [1, {row_ids.size}] (the training rows), got {queries}")
    return hashing.smallest_hashes(seed, STUDENT_PURPOSE, row_ids, queries)


def teacher_index(row_ids: np.ndarray, *, teachers: int, seed: int) -> np.ndarray:
    """Teacher floor(T u) of each row, u = uniform(seed, "pate/teacher", row_id): disjoint partitions."""
    if teachers < 1:
        raise ValueError(f"teachers must be >= 1, got teachers={teachers}")
    u = hashing.uniform(seed, TEACHER_PURPOSE, np.asarray(row_ids, dtype=np.int64))
    return np.minimum((u * teachers).astype(np.int64), teachers - 1)


def vote_counts(votes: np.ndarray) -> np.ndarray:
    """(Q, 2) counts n_0, n_1 of binary votes shaped (T, Q)."""
    votes = np.asarray(votes)
    if votes.ndim != 2 or not np.isin(votes, (0, 1)).all():
        raise ValueError(f"votes must be a (teachers, queries) array of 0/1, got shape {votes.shape}")
    ones = votes.sum(axis=0, dtype=np.int64)
    return np.stack([votes.shape[0] - ones, ones], axis=1)


def noisy_counts(counts: np.ndarray, row_ids: np.ndarray, *, sigma: float, seed: int,
                 noise: str = GAUSSIAN) -> np.ndarray:
    """(Q, 2) counts n_c + z_c, z_c ~ N(0, sigma^2) (gaussian) or Lap(sigma) (laplace) drawn by (seed, row_id, c)."""
    _check_noise(noise)
    if not sigma >= 0:
        raise ValueError(f"sigma must be non-negative, got sigma={sigma}")
    noisy = np.asarray(counts, dtype=np.float64).copy()
    row_ids = np.asarray(row_ids, dtype=np.int64)
    if sigma > 0:
        for label in (0, 1):
            if noise == GAUSSIAN:
                noisy[:, label] += sigma * hashing.standard_normal(seed, NOISE_PURPOSE, row_ids, label)
            else:
                centred = hashing.uniform(seed, NOISE_PURPOSE, row_ids, label) - 0.5
                noisy[:, label] -= sigma * np.sign(centred) * np.log1p(-2.0 * np.abs(centred))
    return noisy


def vote_shares(noisy: np.ndarray) -> np.ndarray:
    """Share of class 1 in the clipped noisy counts, max(n~_1, 0) / (max(n~_0, 0) + max(n~_1, 0)); a query whose
    clipped counts are both 0 gets the share over all queries (1/2 if that is 0/0 too): post-processing only."""
    clipped = np.maximum(np.asarray(noisy, dtype=np.float64), 0.0)
    totals = clipped.sum(axis=1)
    overall = clipped[:, 1].sum() / totals.sum() if totals.sum() > 0 else 0.5
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, clipped[:, 1] / totals, overall)


def sampled_votes(probabilities: np.ndarray, student_ids: np.ndarray, *, teacher: int, seed: int) -> np.ndarray:
    """Teacher ``teacher``'s votes v(x_i) = 1{u(seed, "pate/vote", row_id_i, teacher) < P(y=1|x_i)} as int8."""
    u = hashing.uniform(seed, VOTE_PURPOSE, np.asarray(student_ids, dtype=np.int64), int(teacher))
    return (u < np.asarray(probabilities, dtype=np.float64)).astype(np.int8)


def _take(features: Any, index: np.ndarray) -> Any:
    """Rows ``index`` of a feature matrix or frame."""
    if hasattr(features, "iloc"):
        return features.iloc[index].reset_index(drop=True)
    return np.asarray(features)[index]


def teacher_votes(row_ids: np.ndarray, features: Any, labels: np.ndarray, student_ids: np.ndarray,
                  student_features: Any, *, teacher: int, vote_seed: int, model: TeacherModel,
                  validation: tuple[Any, np.ndarray] | None = None) -> np.ndarray:
    """One teacher: a GBDT of ``model`` (one thread) fitted on its rows in row-id order and its votes on the student
    rows sampled from its predictions (:func:`sampled_votes`). Early stopping: on ``validation`` (features, true
    labels of held-out rows, never training rows) when given, as the published protocol does; else, with
    ``model.early_stopping_rounds``, on the log-loss of its own rows with hash (vote_seed, "pate/teacher-holdout",
    row_id) below :data:`TEACHER_HOLDOUT_SHARE`: no label outside its partition is read, and a teacher fitted on
    about 8,000 rows stays calibrated (without it 200 trees overfit and predict a 0.7% click rate where the rows
    have 3%)."""
    row_ids = np.asarray(row_ids, dtype=np.int64)
    order = np.argsort(row_ids, kind="stable")
    row_ids, features, labels = row_ids[order], _take(features, order), np.asarray(labels, np.float32)[order]
    if validation is not None:
        fit = (features, labels)
        held_out: tuple[Any, np.ndarray] | None = (validation[0], np.asarray(validation[1], np.float32))
    else:
        held = hashing.uniform(vote_seed, TEACHER_HOLDOUT_PURPOSE, row_ids) < TEACHER_HOLDOUT_SHARE
        own_holdout = bool(model.early_stopping_rounds) and 0 < held.sum() < held.size
        fit = (_take(features, np.flatnonzero(~held)), labels[~held]) if own_holdout else (features, labels)
        held_out = (_take(features, np.flatnonzero(held)), labels[held]) if own_holdout else None
    probabilities = model.library.teacher_predictions(model, fit, held_out, student_features)
    return sampled_votes(probabilities, student_ids, teacher=teacher, seed=vote_seed)


def missing_teachers(found: np.ndarray, *, teachers: int, rows: int) -> ValueError:
    """The error for teachers whose partition of the ``rows`` training rows is empty (``found``: those with rows)."""
    empty = sorted(set(range(teachers)) - {int(t) for t in found})
    return ValueError(f"pate.teachers: {len(empty)} of the {teachers} teachers have no training row (teacher "
                      f"{empty[0]}, ...) among the {rows} training rows; use fewer teachers (pate.teachers <= "
                      f"{max(1, rows // 100)} keeps about 100 rows each)")


# Votes of the T teachers on the student rows: (student row ids, student features, seed) -> (T, Q) int8.
# The teachers are fitted on all training rows, row i with teacher teacher_index(i); the seed keys the
# partition and the vote draws.
TeacherVotes = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


def sequential_votes(row_ids: np.ndarray, features: Any, labels: np.ndarray, *, teachers: int,
                     model: TeacherModel, validation: tuple[Any, np.ndarray] | None = None) -> TeacherVotes:
    """Teachers fitted one after another in this process on the training rows (row_ids, features, labels), early
    stopping on ``validation`` when given (the reference for the Spark path).

    Raises (when called):
        ValueError: naming pate.teachers if a teacher's partition is empty.
    """
    row_ids = np.asarray(row_ids, dtype=np.int64)

    def votes(student_ids: np.ndarray, student_features: np.ndarray, seed: int) -> np.ndarray:
        teacher = teacher_index(row_ids, teachers=teachers, seed=seed)
        present = np.unique(teacher)
        if present.size < teachers:
            raise missing_teachers(present, teachers=teachers, rows=row_ids.size)
        result = np.zeros((teachers, len(student_features)), dtype=np.int8)
        for index in range(teachers):
            own = np.flatnonzero(teacher == index)
            result[index] = teacher_votes(row_ids[own], _take(features, own), np.asarray(labels)[own],
                                          student_ids, student_features, teacher=index, vote_seed=seed, model=model,
                                          validation=validation)
        return result

    return votes


class ReusedVotes:
    """A :data:`TeacherVotes` that asks ``votes`` once per (student rows, partition seed) and answers repeats
    from memory: the votes do not depend on epsilon (only the noisy aggregation does), so a sweep over epsilon
    fits the teachers once. ``fits`` counts the calls that reached ``votes``."""

    def __init__(self, votes: TeacherVotes) -> None:
        self._votes = votes
        self._found: dict[tuple[int, bytes], np.ndarray] = {}

    @property
    def fits(self) -> int:
        """How many times the teachers were fitted."""
        return len(self._found)

    def __call__(self, student_ids: np.ndarray, student_features: np.ndarray, seed: int) -> np.ndarray:
        key = (int(seed), np.asarray(student_ids, dtype=np.int64).tobytes())
        if key not in self._found:
            self._found[key] = self._votes(student_ids, student_features, seed)
        return self._found[key]

    def frozen(self) -> "ReusedVotes":
        """The votes found so far, without the way to fit more: a picklable copy for processes that cannot fit
        teachers (Spark tasks); asking it for other student rows raises."""
        copy = ReusedVotes(_no_teachers)
        copy._found = dict(self._found)
        return copy


def _no_teachers(student_ids: np.ndarray, student_features: np.ndarray, seed: int) -> np.ndarray:
    raise RuntimeError(f"PATE's teachers' votes on these {len(student_ids)} student rows (seed {seed}) were not "
                       "computed before the votes were frozen")


@dataclasses.dataclass(frozen=True)
class PateSettings:
    """T teachers, Q student queries, the noise kind, the student's labels (share | sampled), pseudo-labels, the
    target delta, the accounting (rdp | data_independent), the protocol whose trees and early stopping the teachers
    and student use (:data:`PROTOCOL_SETTINGS`) and how votes are computed (None: :func:`sequential_votes` on the
    training rows)."""

    teachers: int = 100
    queries: int = 10_000
    noise: str = GAUSSIAN
    student_labels: str = SHARE
    pseudo_labels: bool = False
    delta: float = DELTA
    votes: TeacherVotes | None = None
    accounting: str = RDP
    protocol: str = LIA_SPARK

    @classmethod
    def of_protocol(cls, protocol: str, **fields: Any) -> "PateSettings":
        """The settings of ``protocol`` (:data:`PROTOCOL_SETTINGS`), ``fields`` that are not None in their place."""
        if protocol not in PROTOCOLS:
            raise ValueError(f"pate.protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        fixed = PROTOCOL_SETTINGS[protocol]
        chosen = {name: getattr(fixed, name) for name in ("queries", "noise", "student_labels", "delta", "accounting")}
        chosen.update({name: value for name, value in fields.items() if value is not None})
        return cls(protocol=protocol, **chosen)


@dataclasses.dataclass(frozen=True)
class StudentLabels:
    """The student rows' labels (noisy vote shares, or draws from them) and the privacy report of their release."""

    labels: np.ndarray
    counts: np.ndarray
    epsilon: float
    delta: float
    sigma: float
    rdp_epsilon: float  # dp-accounting's eps(delta) for the same noise (equal to epsilon under rdp accounting)
    agreement: float  # mean agreement with the true labels: label if y = 1, 1 - label if y = 0
    label_rate: float  # mean student label (its click rate)
    true_rate: float  # share of the student rows' true labels that are 1

    def report(self, settings: PateSettings) -> dict[str, float]:
        """eps (the settings' accounting), dp-accounting's eps for the same noise, delta, T, Q, sigma, noise
        (1 gaussian / 0 laplace), labels (1 share / 0 sampled), the agreement with the true labels and the click
        rates of the student labels and of the true labels."""
        return {"epsilon": self.epsilon, "rdp_epsilon": self.rdp_epsilon, "delta": self.delta,
                "teachers": float(settings.teachers),
                "queries": float(settings.queries), "sigma": self.sigma,
                "gaussian_noise": float(settings.noise == GAUSSIAN),
                "share_labels": float(settings.student_labels == SHARE), "student_label_agreement": self.agreement,
                "student_label_rate": self.label_rate, "student_true_rate": self.true_rate}


def student_labels(votes: np.ndarray, student_ids: np.ndarray, true_labels: np.ndarray, *, epsilon: float,
                   seed: int, settings: PateSettings) -> StudentLabels:
    """Labels of the student rows from the counts noised with sigma calibrated to (epsilon, settings.delta) over the
    Q queries by the settings' accounting (:func:`calibrate_sigma`, or :func:`data_independent_scale` for Laplace
    noise): the :func:`vote_shares` (settings.student_labels = share, float) or Bernoulli draws from them by
    (seed, "pate/label", row_id) (sampled, int8)."""
    if settings.student_labels not in STUDENT_LABELS:
        raise ValueError(f"pate.student_labels must be one of {', '.join(STUDENT_LABELS)}, got "
                         f"{settings.student_labels!r}")
    queries = len(student_ids)
    if settings.accounting == DATA_INDEPENDENT:
        if settings.noise != LAPLACE:
            raise ValueError(f"pate.noise: the data-independent bound accounts Laplace noise, got {settings.noise!r}")
        sigma = data_independent_scale(epsilon=epsilon, queries=queries, delta=settings.delta)
    elif settings.accounting == RDP:
        sigma = calibrate_sigma(epsilon=epsilon, queries=queries, delta=settings.delta, noise=settings.noise)
    else:
        raise ValueError(f"accounting must be one of {', '.join(ACCOUNTINGS)}, got {settings.accounting!r}")
    counts = vote_counts(votes)
    shares = vote_shares(noisy_counts(counts, student_ids, sigma=sigma, seed=seed, noise=settings.noise))
    labels = shares if settings.student_labels == SHARE else hashing.bernoulli(
        seed, LABEL_PURPOSE, np.asarray(student_ids, dtype=np.int64), shares)
    rdp = pate_epsilon(sigma=sigma, queries=queries, delta=settings.delta, noise=settings.noise)
    spent = (data_independent_epsilon(scale=sigma, queries=queries, delta=settings.delta)
             if settings.accounting == DATA_INDEPENDENT else rdp)
    true_labels = np.asarray(true_labels)
    return StudentLabels(labels=labels, counts=counts, epsilon=spent, rdp_epsilon=rdp, delta=settings.delta,
                         sigma=sigma,
                         agreement=float(np.mean(np.where(true_labels == 1, labels, 1.0 - labels))),
                         label_rate=float(labels.mean()), true_rate=float(true_labels.mean()))
