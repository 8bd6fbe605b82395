"""The training mechanisms of the target, one :class:`LabelMechanism` each: the one table that both training paths,
the capability checks, the utility grid and the audit table read (docs/math.md §2.6, §4).

A mechanism states what it releases to the trainer (a label per row, a two-stage release, bag proportions, a
student's vote labels), whether it claims label DP at ``models.epsilon`` (none and plain llp do not: their
claimed epsilon is infinity), whether it reads the attacker's prior, whether its predictions are noise-corrected,
the libraries and execution paths that can train it, and its closed forms. The table imports nothing heavy: the
trainers and the per-row releases load :mod:`lia_spark.kernels.training` and
:mod:`lia_spark.kernels.label_mechanisms` when first called, so the configuration checks stay fast.

Adding a mechanism: its trainer (``(data, request) -> TargetFit``) and, for a per-row release, its release
function in their own module, then one :class:`LabelMechanism` row in :data:`MECHANISMS` (docs/usage.md, "Adding
a training mechanism").
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Callable, TypedDict

import numpy as np

from lia_spark.kernels.model_libraries import LIBRARIES
from lia_spark.names import (DISTRIBUTED, IN_MEMORY, LLP, LLP_GEOMETRIC, LLP_LAPLACE, LP_2ST, NONE, PATE, RR,
                             RR_DEBIASED, RR_WITH_PRIOR)

if TYPE_CHECKING:  # the types only: importing training at load time would slow every configuration check
    from lia_spark.kernels.training import ModelData, TargetFit, TargetRequest

LabelRelease = Callable[..., np.ndarray]  # (labels, row_ids, prior, *, epsilon, seed) -> released labels
Trainer = Callable[["ModelData", "TargetRequest"], "TargetFit"]


def release_rr(labels: np.ndarray, row_ids: np.ndarray, prior: np.ndarray | None, *, epsilon: float,
               seed: int) -> np.ndarray:
    """RR(eps) of every label (LP-1ST, docs/math.md §2.1); ``prior`` is not read."""
    from lia_spark.kernels import label_mechanisms

    return label_mechanisms.randomized_response(labels, row_ids, epsilon=epsilon, seed=seed)


def release_rr_with_prior(labels: np.ndarray, row_ids: np.ndarray, prior: np.ndarray | None, *, epsilon: float,
                          seed: int) -> np.ndarray:
    """RRWithPrior(eps) on the prior P(y=1|x) of each row (docs/math.md §2.6)."""
    from lia_spark.kernels import label_mechanisms

    if prior is None:
        raise ValueError("training_mechanism rr_with_prior needs a prior (proxy predictions), got None")
    return label_mechanisms.rr_with_prior(labels, prior, row_ids, epsilon=epsilon, seed=seed)


def train_on_labels(data: ModelData, request: TargetRequest) -> TargetFit:
    """:func:`lia_spark.kernels.training.train_on_labels`, loaded when first called."""
    from lia_spark.kernels import training

    return training.train_on_labels(data, request)


def train_two_stage(data: ModelData, request: TargetRequest) -> TargetFit:
    """:func:`lia_spark.kernels.training.train_lp2st`, loaded when first called."""
    from lia_spark.kernels import training

    return training.train_lp2st(data, request)


def train_on_bags(data: ModelData, request: TargetRequest) -> TargetFit:
    """:func:`lia_spark.kernels.training.train_on_bags`, loaded when first called."""
    from lia_spark.kernels import training

    return training.train_on_bags(data, request)


def train_pate_student(data: ModelData, request: TargetRequest) -> TargetFit:
    """:func:`lia_spark.kernels.training.train_pate` with the request's PATE settings (the defaults of
    :class:`lia_spark.kernels.pate.PateSettings` when it has none), loaded when first called."""
    from lia_spark.kernels import pate, training

    return training.train_pate(data, epsilon=request.epsilon, seed=request.seed, params=request.params,
                               settings=request.pate_settings or pate.PateSettings())


@dataclasses.dataclass(frozen=True)
class LabelMechanism:
    """One training mechanism of the target and every fact the code dispatches on.

    ``private``: claims label DP at models.epsilon (False: claimed epsilon = inf). ``train``: the in-memory trainer.
    ``release_labels``: the per-row release both training paths apply (None: the true labels, or not a per-row
    release). ``needs_prior``: the release reads the proxy's P(y=1|x). ``debiased``: predictions noise-corrected with
    RR's inverse. ``two_stage``: LP-2ST's stage-1 RR model gives the prior of the second half's release.
    ``bag_release``: trains on bag proportions of ``models.bag_size`` rows. ``true_labels_at_infinity``: at
    epsilon = inf it trains on the true labels (PATE and the bag releases do not). ``rr_closed_form``: RR's
    closed-form advantage is exact (rr) or an upper bound (the RR family) for its release. ``utility_extra``: the
    utility grid may add it (utility.extra_mechanisms). ``teachers``: the student of teachers fitted on the
    executors (PATE): its votes are found once per process and shared by its settings, the student needs at least
    its teachers' and queries' count of training rows, and a refit of the target (shadows, extra runs) would fit the
    teachers again, so it has none. ``limitation``: why the libraries and executions are
    restricted, for the error that refuses another."""

    name: str
    display_name: str
    private: bool
    train: Trainer
    release_labels: LabelRelease | None = None
    needs_prior: bool = False
    debiased: bool = False
    two_stage: bool = False
    bag_release: bool = False
    true_labels_at_infinity: bool = True
    rr_closed_form: bool = False
    utility_extra: bool = False
    teachers: bool = False
    libraries: tuple[str, ...] = tuple(LIBRARIES)
    executions: tuple[str, ...] = (IN_MEMORY, DISTRIBUTED)
    limitation: str = ""

    def claimed_epsilon(self, epsilon: float) -> float:
        """The epsilon this mechanism claims at models.epsilon = ``epsilon``: inf when it adds no noise."""
        return float(epsilon) if self.private else math.inf

    def releases_true_labels(self, epsilon: float) -> bool:
        """Whether the trainer sees the true labels at ``epsilon`` (none; label mechanisms at eps = inf)."""
        return not self.private and not self.bag_release or self.true_labels_at_infinity and math.isinf(epsilon)


class _BagFields(TypedDict):
    """What the mechanisms training on released bag proportions share."""

    bag_release: bool
    train: Trainer
    true_labels_at_infinity: bool
    libraries: tuple[str, ...]
    limitation: str


_BAGS = _BagFields(bag_release=True, train=train_on_bags, true_labels_at_infinity=False,
                   libraries=tuple(name for name, library in LIBRARIES.items() if library.bag_objective),
                   limitation="proportion matching is an xgboost objective here")

# Display names are the paper's (Ghazi et al. 2021, "Deep Learning with Label Differential Privacy", for LP-1ST /
# LP-2ST; proportion matching on label proportions, Kalemaj et al. 2025 sec. 2), the audit table's row labels.
MECHANISMS: dict[str, LabelMechanism] = {mechanism.name: mechanism for mechanism in (
    LabelMechanism(NONE, "non-private (none)", private=False, train=train_on_labels),
    LabelMechanism(RR, "LP-1ST", private=True, train=train_on_labels, release_labels=release_rr,
                   rr_closed_form=True),
    LabelMechanism(RR_WITH_PRIOR, "LP-1ST (domain prior)", private=True, train=train_on_labels,
                   release_labels=release_rr_with_prior, needs_prior=True, rr_closed_form=True),
    LabelMechanism(RR_DEBIASED, "LP-1ST (noise correction)", private=True, train=train_on_labels,
                   release_labels=release_rr, debiased=True, rr_closed_form=True, utility_extra=True),
    LabelMechanism(LP_2ST, "LP-2ST", private=True, train=train_two_stage, two_stage=True, rr_closed_form=True,
                   utility_extra=True),
    LabelMechanism(LLP, "PropMatch on LLP", private=False, **_BAGS),
    LabelMechanism(LLP_LAPLACE, "PropMatch on LLP+Lap", private=True, **_BAGS),
    LabelMechanism(LLP_GEOMETRIC, "PropMatch on LLP+Geom", private=True, **_BAGS),
    LabelMechanism(PATE, "PATE", private=True, train=train_pate_student, true_labels_at_infinity=False,
                   utility_extra=True, teachers=True, executions=(IN_MEMORY,),
                   limitation="PATE's teachers and student are in-memory models"),
)}
TRAINING_MECHANISMS = tuple(MECHANISMS)
BAG_TRAINING_MECHANISMS = tuple(name for name, mechanism in MECHANISMS.items() if mechanism.bag_release)
UTILITY_EXTRA_MECHANISMS = tuple(name for name, mechanism in MECHANISMS.items() if mechanism.utility_extra)
RR_FAMILY = tuple(name for name, mechanism in MECHANISMS.items() if mechanism.rr_closed_form)


def label_mechanism(name: Any, field: str = "models.training_mechanism") -> LabelMechanism:
    """The mechanism called ``name``.

    Raises:
        ValueError: naming ``field``, the value and the known names when no mechanism has that name.
    """
    try:
        return MECHANISMS[name]
    except (KeyError, TypeError):
        raise ValueError(f"{field} must be one of {', '.join(TRAINING_MECHANISMS)}, got {name!r}") from None


def train_target(data: ModelData, *, mechanism: str, epsilon: float, seed: int, params: Any,
                 prior: np.ndarray | None = None, bag_size: int = 1, pate_settings: Any = None) -> TargetFit:
    """Train the target on what ``mechanism`` releases of the training and validation rows' labels (test labels
    stay true for utility; docs/math.md §2.6, §4). ``prior`` (P(y=1|x) per row) is read by mechanisms that need
    one; ``bag_size`` by the bag releases; ``pate_settings`` (:class:`lia_spark.kernels.pate.PateSettings`,
    default settings when None) by pate.

    Raises:
        ValueError: naming models.training_mechanism when ``mechanism`` is unknown.
    """
    from lia_spark.kernels import training

    chosen = label_mechanism(mechanism)
    plain = chosen.releases_true_labels(epsilon)
    request = training.TargetRequest(mechanism=chosen.name, epsilon=float(epsilon), seed=seed, params=params,
                                     prior=prior, bag_size=bag_size, pate_settings=pate_settings,
                                     release_labels=None if plain else chosen.release_labels,
                                     debiased=chosen.debiased and not plain)
    return (training.train_on_labels if plain else chosen.train)(data, request)
