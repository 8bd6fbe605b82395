"""PATE as a training mechanism of the target (docs/math.md §4.6; [PAE+17], [PSM+18]).

Pure (numpy, xgboost, dp-accounting): every draw is a counter-based hash of (seed, purpose, row_id), so the
student rows, the teacher partitions and the vote noise do not depend on how the rows are partitioned.

- The Q *student* rows are the Q training rows with the smallest hash; their labels are never read.
- Every other training row belongs to teacher floor(T u) (u uniform by row id); teacher t is a GBDT fitted on
  its rows' true labels and votes 1{P_t(y=1|x) >= m_t} on every student row, m_t its median prediction over the
  student rows: "x is in my upper half" (at a 3% click rate a 1/2 threshold makes every vote "no click"; m_t
  depends on teacher t's rows and the unlabelled student features only, so the sensitivity below is unchanged).
- Vote counts n_0, n_1 per student row; GNMax releases argmax_c (n_c + N(0, sigma^2)), LNMax
  argmax_c (n_c + Lap(sigma)); ties (only possible without noise) go to a fair coin hashed by row id.
- Changing one training label changes one teacher's vote: the count vector moves by 1 in two classes (L2
  sensitivity sqrt 2, L1 sensitivity 2). GNMax is the Gaussian mechanism with noise multiplier sigma / sqrt 2
  ((lambda, lambda / sigma^2)-RDP, [PSM+18] Prop. 8), LNMax the Laplace mechanism with noise multiplier sigma / 2;
  the Q queries are composed and converted to (eps, delta) by dp-accounting's RDP accountant.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from lia_spark.kernels import hashing

GAUSSIAN, LAPLACE = "gaussian", "laplace"
NOISES = (GAUSSIAN, LAPLACE)
DELTA = 1e-5
STUDENT_PURPOSE, TEACHER_PURPOSE, NOISE_PURPOSE, TIE_PURPOSE = "pate/student", "pate/teacher", "pate/noise", "pate/tie"
HOLDOUT_PURPOSE, PSEUDO_PURPOSE = "pate/student-holdout", "pate/pseudo-label"
STUDENT_HOLDOUT_SHARE = 0.1  # student rows the student early-stops on (noisy labels: no extra query)
_CALIBRATION_TOLERANCE = 1e-6


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
    if not sigma >= 0:
        raise ValueError(f"sigma must be non-negative, got sigma={sigma}")
    if queries < 1:
        raise ValueError(f"queries must be >= 1, got queries={queries}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got delta={delta}")
    _check_noise(noise)
    if sigma == 0:
        return math.inf
    from dp_accounting import rdp

    accountant = rdp.RdpAccountant()
    accountant.compose(_dp_event(sigma=sigma, queries=queries, noise=noise))
    return float(accountant.get_epsilon(delta))


def calibrate_sigma(*, epsilon: float, queries: int, delta: float = DELTA, noise: str = GAUSSIAN) -> float:
    """The smallest noise sigma with pate_epsilon(sigma) <= epsilon, by bisection on log sigma (eps decreases in
    sigma); |eps(sigma) - epsilon| <= 1e-6 epsilon. epsilon = inf gives sigma = 0 (the non-private vote argmax).

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
    """True on the ``queries`` rows of ``row_ids`` with the smallest hash (seed, "pate/student", row_id).

    Raises:
        ValueError: unless 1 <= queries < len(row_ids) (teachers need the other rows).
    """
    row_ids = np.asarray(row_ids, dtype=np.int64)
    if not 1 <= queries < row_ids.size:
        raise ValueError(f"queries must be in [1, {row_ids.size}) (the training rows), got queries={queries}")
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


def noisy_argmax(counts: np.ndarray, row_ids: np.ndarray, *, sigma: float, seed: int,
                 noise: str = GAUSSIAN) -> np.ndarray:
    """argmax_c (n_c + z_c) per row as int8, z_c ~ N(0, sigma^2) (gaussian) or Lap(sigma) (laplace) drawn by
    (seed, row_id, class); an exact tie (sigma = 0) goes to a fair coin by (seed, row_id)."""
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
    coin = hashing.bernoulli(seed, TIE_PURPOSE, row_ids, 0.5)
    return np.where(noisy[:, 1] > noisy[:, 0], 1, np.where(noisy[:, 1] < noisy[:, 0], 0, coin)).astype(np.int8)


def teacher_votes(row_ids: np.ndarray, features: np.ndarray, labels: np.ndarray, student_features: np.ndarray, *,
                  n_estimators: int, max_depth: int, learning_rate: float, seed: int) -> np.ndarray:
    """One teacher: XGBoost (hist, one thread, no early stopping: the day's other labels stay unread) fitted on
    its rows in row-id order, and its votes 1{P(y=1|x) >= m} on the student rows as int8, m = its median
    prediction over the student rows (a function of this teacher's rows and the student features only)."""
    import xgboost as xgb

    order = np.argsort(np.asarray(row_ids, dtype=np.int64), kind="stable")
    labels = np.asarray(labels, dtype=np.float32)[order]
    base = float(np.clip(labels.mean() if labels.size else 0.5, 1e-4, 1 - 1e-4))
    booster = xgb.train({"tree_method": "hist", "max_depth": max_depth, "eta": learning_rate, "nthread": 1,
                         "seed": seed % 2**31, "verbosity": 0, "objective": "binary:logistic", "base_score": base},
                        xgb.DMatrix(np.asarray(features)[order], label=labels), n_estimators)
    predictions = booster.predict(xgb.DMatrix(student_features))
    return (predictions >= np.median(predictions)).astype(np.int8)


# Votes of the T teachers on the student rows: (student row ids, student features, partition seed) -> (T, Q) int8.
# The teachers are fitted on the training rows outside the student rows, row i with teacher teacher_index(i).
TeacherVotes = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


@dataclasses.dataclass(frozen=True)
class TeacherModel:
    """The teachers' boosting settings (:func:`teacher_votes`)."""

    n_estimators: int
    max_depth: int
    learning_rate: float
    seed: int


def sequential_votes(row_ids: np.ndarray, features: np.ndarray, labels: np.ndarray, *, teachers: int,
                     model: TeacherModel) -> TeacherVotes:
    """Teachers fitted one after another in this process on the training rows (row_ids, features, labels)
    outside the student rows (the reference for the Spark path)."""
    row_ids = np.asarray(row_ids, dtype=np.int64)

    def votes(student_ids: np.ndarray, student_features: np.ndarray, seed: int) -> np.ndarray:
        labelled = ~np.isin(row_ids, student_ids)
        teacher = teacher_index(row_ids[labelled], teachers=teachers, seed=seed)
        ids, rows, answers = row_ids[labelled], np.asarray(features)[labelled], np.asarray(labels)[labelled]
        result = np.zeros((teachers, len(student_features)), dtype=np.int8)
        for index in range(teachers):
            own = teacher == index
            if not own.any():  # an empty partition votes 0, as a missing group of the Spark path
                continue
            result[index] = teacher_votes(ids[own], rows[own], answers[own], student_features,
                                          **dataclasses.asdict(model))
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
    """T teachers, Q student queries, the noise kind, pseudo-labels, the target delta and how votes are computed
    (None: :func:`sequential_votes` on the training rows)."""

    teachers: int = 100
    queries: int = 10_000
    noise: str = GAUSSIAN
    pseudo_labels: bool = False
    delta: float = DELTA
    votes: TeacherVotes | None = None


@dataclasses.dataclass(frozen=True)
class StudentLabels:
    """The student rows' noisy-argmax labels and the privacy report of their release."""

    labels: np.ndarray
    counts: np.ndarray
    epsilon: float
    delta: float
    sigma: float
    agreement: float  # share of student labels equal to the true labels

    def report(self, settings: PateSettings) -> dict[str, float]:
        """eps, delta, T, Q, sigma, noise (1 gaussian / 0 laplace) and the agreement with the true labels."""
        return {"epsilon": self.epsilon, "delta": self.delta, "teachers": float(settings.teachers),
                "queries": float(settings.queries), "sigma": self.sigma,
                "gaussian_noise": float(settings.noise == GAUSSIAN), "student_label_agreement": self.agreement}


def student_labels(votes: np.ndarray, student_ids: np.ndarray, true_labels: np.ndarray, *, epsilon: float,
                   seed: int, settings: PateSettings) -> StudentLabels:
    """Noisy-argmax labels of the student rows with sigma calibrated to (epsilon, settings.delta) over Q queries."""
    sigma = calibrate_sigma(epsilon=epsilon, queries=len(student_ids), delta=settings.delta, noise=settings.noise)
    counts = vote_counts(votes)
    labels = noisy_argmax(counts, student_ids, sigma=sigma, seed=seed, noise=settings.noise)
    spent = pate_epsilon(sigma=sigma, queries=len(student_ids), delta=settings.delta, noise=settings.noise)
    return StudentLabels(labels=labels, counts=counts, epsilon=spent, delta=settings.delta, sigma=sigma,
                         agreement=float(np.mean(labels == np.asarray(true_labels))))
