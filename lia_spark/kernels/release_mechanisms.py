"""The release mechanisms of the posteriors stage (docs/math.md §2, §3, §7), one :class:`ReleaseMechanism` each: the
one table that the settings grid, the posterior and leakage kernels and the stage's summary read.

A release mechanism states whether it releases one value per bag of k rows (``bagged``; RR releases one label per
row, k = 1), whether it adds noise at a claimed epsilon (``noisy``; plain LLP releases the exact proportion: no
epsilon, written NaN in the grid and inf to the kernels) and its code in the forward-backward kernels
(:mod:`lia_spark.kernels._forward_backward`, which take it from here). The functions that release, invert and bound
each mechanism sit in their kernels, in tables keyed by the mechanism's name (:data:`lia_spark.kernels.mechanisms.
BAG_RELEASES`, :data:`lia_spark.kernels.posteriors.BAG_POSTERIORS`, :data:`lia_spark.kernels.leakage.WORST_CASES`).

Imports nothing but the vocabulary, so the configuration checks can read it without loading numba.

Adding a release mechanism: its name in :mod:`lia_spark.names`, one row in :data:`RELEASE_MECHANISMS`, its release,
posterior and worst case in those three tables, and for a bag mechanism its branch of the forward-backward kernels
(docs/usage.md, "Extending lia_spark").
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from lia_spark.names import LLP, LLP_GEOMETRIC, LLP_LAPLACE, RR


@dataclasses.dataclass(frozen=True)
class ReleaseMechanism:
    """One release mechanism of the posteriors stage."""

    name: str
    bagged: bool  # one value per bag of k rows (False: one label per row, k = 1)
    noisy: bool  # noise at a finite epsilon > 0 (False: exact, its epsilon inf)
    kernel_code: int | None  # its code in the forward-backward kernels (None: not computed there)

    def epsilons(self, grid: Sequence[float]) -> tuple[float, ...]:
        """The epsilons of its grid settings: the grid's, or NaN alone (no epsilon) for an exact release."""
        return tuple(float(eps) for eps in grid) if self.noisy else (math.nan,)

    def bag_sizes(self, grid: Sequence[int]) -> tuple[int, ...]:
        """The bag sizes of its grid settings: the grid's, or 1 for a release per row."""
        return tuple(int(k) for k in grid) if self.bagged else (1,)

    def checked_epsilon(self, epsilon: float) -> float:
        """``epsilon`` as a float: finite and > 0 for a noisy release, inf for an exact one (ValueError naming the
        value otherwise)."""
        eps = float(epsilon)
        if not self.noisy:
            if eps != math.inf:
                raise ValueError(f"{self.name} adds no noise: epsilon must be inf, got epsilon={epsilon!r}")
            return eps
        if not math.isfinite(eps) or eps <= 0.0:
            raise ValueError(f"epsilon must be a finite positive number for {self.name}, got epsilon={epsilon!r}")
        return eps


RELEASE_MECHANISMS: dict[str, ReleaseMechanism] = {mechanism.name: mechanism for mechanism in (
    ReleaseMechanism(RR, bagged=False, noisy=True, kernel_code=None),
    ReleaseMechanism(LLP, bagged=True, noisy=False, kernel_code=0),
    ReleaseMechanism(LLP_LAPLACE, bagged=True, noisy=True, kernel_code=1),
    ReleaseMechanism(LLP_GEOMETRIC, bagged=True, noisy=True, kernel_code=2),
)}


def release_mechanism(name: str) -> ReleaseMechanism:
    """The release mechanism called ``name`` (ValueError naming the known ones otherwise)."""
    try:
        return RELEASE_MECHANISMS[name]
    except (KeyError, TypeError):
        raise ValueError(f"mechanism must be one of {', '.join(RELEASE_MECHANISMS)}, got mechanism={name!r}"
                         ) from None


def kernel_code(name: str) -> int:
    """The forward-backward kernels' code of the bag mechanism ``name``."""
    code = release_mechanism(name).kernel_code
    if code is None:
        raise ValueError(f"mechanism {name!r} is not computed by the forward-backward kernels")
    return code
