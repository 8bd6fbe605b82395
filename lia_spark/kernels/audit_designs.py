"""The audit's games, one :class:`AuditDesign` each: the one table the configuration checks, the train stage, the
audit's counts and its headline read (docs/math.md §5.8-§5.14). ``audit.design`` names the label-inference game
(injected, observational); ``audit.attack=membership`` plays the membership baseline, a game of its own.

A design states what it adds to training (the coins it draws from the audit key, injected labels, a label-blind
reference fit, membership candidates left out, shadow fits and pooled runs), which canary columns it writes, how
its canaries are counted (the kernel that turns a batch into candidates), whether its bound assumes the proxy's
error tau and what the headline calls its canaries. The name becomes its object once, at the configuration's edge
(:attr:`lia_spark.run.model_sections.AuditConfig.audit_design`); no other module compares a design's name.

Adding a design: its candidates kernel (a batch of canaries -> :class:`lia_spark.kernels.audit.Candidates` per
score) and one :class:`AuditDesign` row in :data:`AUDIT_DESIGNS` (CONTRIBUTING.md, "Where things go").
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from lia_spark.names import (ATTACKS, COUNTERFACTUAL_LABEL, DESIGNS, HIDDEN_BIT, INJECTED, INJECTED_COLUMNS, LABEL,
                             MEMBERSHIP, OBSERVATIONAL, PROXY_PREDICTION, ROW_ID, TARGET_PREDICTION)

if TYPE_CHECKING:  # the types only: the counting kernels load when first called, so configuration checks stay fast
    from lia_spark.kernels import audit, canary_scores

Batch = Mapping[str, np.ndarray]  # a batch of the canary table: column -> values (a pandas frame reads as one)
CandidatesKernel = Callable[..., "dict[str, audit.Candidates]"]  # (batch, *, seed, repetitions, scores)
KeysKernel = Callable[..., "tuple[np.ndarray, np.ndarray]"]  # (batch, score, *, seed) -> (|s|, tie hash)


def _columns(batch: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(row ids, y0, the target's predictions, the baseline's) of a batch."""
    return (np.asarray(batch[ROW_ID], dtype=np.int64), np.asarray(batch[LABEL]),
            np.asarray(batch[TARGET_PREDICTION], dtype=np.float64),
            np.asarray(batch[PROXY_PREDICTION], dtype=np.float64))


def observational_candidates(batch: Batch, *, seed: int, repetitions: int,
                             scores: tuple[canary_scores.Score, ...]) -> dict[str, audit.Candidates]:
    """The observational games of every repetition on a batch (:func:`lia_spark.kernels.audit.score_candidates`:
    the audit draws each canary's label from the proxy, docs/math.md §5.10)."""
    from lia_spark.kernels import audit

    row_ids, label, target, proxy = _columns(batch)
    return audit.score_candidates(row_ids, label, target, proxy, seed=seed, repetitions=repetitions, scores=scores)


def injected_candidates(batch: Batch, *, seed: int, repetitions: int,
                        scores: tuple[canary_scores.Score, ...]) -> dict[str, audit.Candidates]:
    """The injected game on a batch of informative canaries (:func:`lia_spark.kernels.injected.score_candidates`:
    the coins b were drawn before training, docs/math.md §5.9); ``repetitions`` is 1."""
    from lia_spark.kernels import injected

    row_ids, label, target, proxy = _columns(batch)
    return injected.score_candidates(row_ids, label, np.asarray(batch[COUNTERFACTUAL_LABEL]),
                                     np.asarray(batch[HIDDEN_BIT]), target, proxy, seed=seed, scores=scores)


def observational_keys(batch: Batch, score: canary_scores.Score, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(|s|, tie hash) of the candidate a batch's canaries may show first: two per canary (label 0 and 1), the
    first label's tie hash."""
    from lia_spark.kernels import audit, canary_scores

    row_ids, _, target, proxy = _columns(batch)
    values = canary_scores.candidate_scores(target, proxy, kind=score.kind, t=score.t)
    return np.abs(values), audit.candidate_ties_labels(row_ids, seed=seed)[0]


def injected_keys(batch: Batch, score: canary_scores.Score, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(|s|, tie hash) of every candidate of a batch: one per informative canary."""
    from lia_spark.kernels import audit, injected

    row_ids, label, target, proxy = _columns(batch)
    return np.abs(injected.injected_scores(target, proxy, label, score=score)), audit.tie_hashes(row_ids, seed=seed)


@dataclasses.dataclass(frozen=True)
class AuditDesign:
    """One game of the audit: what training adds for it, what the canary table holds, how it is counted and what
    its bound assumes."""

    name: str
    keyed: bool  # the train stage draws this game's coins from the audit key before training
    injects_labels: bool  # the target trains on y^b on its canaries; the canary table holds y1 and b
    fits_reference: bool  # a label-blind reference is fitted beside the target (its own audited line)
    draws_members: bool  # membership candidates: half left out of the target's training rows
    assumes_tau: bool  # the bound assumes the proxy within TV tau of the truth (or measures that error)
    canary_kind: str  # what the headline calls the m of the bound
    candidates_kernel: CandidatesKernel | None = None  # label inference: a batch of canaries -> its candidates
    keys_kernel: KeysKernel | None = None  # label inference: a batch -> (|s|, tie hash) for the count's ranges

    @property
    def canary_columns(self) -> tuple[str, ...]:
        """The columns this game adds to the canary table (the injected y1 and b; none for the others)."""
        return INJECTED_COLUMNS if self.injects_labels else ()

    @property
    def refits_target(self) -> bool:
        """True when the target can be fitted again with fresh coins of its own: shadows and pooled runs
        (audit.shadows, audit.runs; docs/math.md §5.13, §5.14) are fits of the injected game."""
        return self.injects_labels

    @property
    def plays_once(self) -> bool:
        """True when the coins were drawn once before training (one game); the observational audit draws its own
        labels in each of audit.repetitions games."""
        return not self.assumes_tau

    def tau(self, tau: float) -> float:
        """The proxy error the bound is computed at: audit.tau when the game assumes one, else 0 (the injected and
        membership coins assume nothing of the proxy)."""
        return tau if self.assumes_tau else 0.0

    def repetitions(self, repetitions: int) -> int:
        """The games counted: audit.repetitions for a game the audit draws, 1 for one drawn before training."""
        return 1 if self.plays_once else repetitions

    def batch_candidates(self, batch: Batch, *, seed: int, repetitions: int,
                         scores: tuple[canary_scores.Score, ...]) -> dict[str, audit.Candidates]:
        """The candidates of one batch of the canary table per score (:attr:`candidates_kernel`).

        Raises:
            ValueError: for a game not counted over a canary table (the membership baseline counts its
                candidates on the driver, :func:`lia_spark.kernels.membership.sweep_counts`).
        """
        return self._kernel(self.candidates_kernel)(batch, seed=seed, repetitions=repetitions, scores=scores)

    def batch_keys(self, batch: Batch, score: canary_scores.Score, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(|s|, tie hash) of the candidates of one batch (:attr:`keys_kernel`; raises as :meth:`batch_candidates`)."""
        return self._kernel(self.keys_kernel)(batch, score, seed=seed)

    def _kernel(self, kernel: Callable | None) -> Callable:
        if kernel is None:
            raise ValueError(f"audit: the {self.name} game is not counted over a canary table")
        return kernel

    def informative(self, canaries: int) -> int:
        """The informative canaries (y1 != y0) among the ``canaries`` counted: all of them in the injected game
        (the others abstain before counting), none elsewhere."""
        return canaries if self.injects_labels else 0


INJECTED_DESIGN = AuditDesign(INJECTED, keyed=True, injects_labels=True, fits_reference=False, draws_members=False,
                              assumes_tau=False, canary_kind="informative canaries",
                              candidates_kernel=injected_candidates, keys_kernel=injected_keys)
OBSERVATIONAL_DESIGN = AuditDesign(OBSERVATIONAL, keyed=False, injects_labels=False, fits_reference=True,
                                   draws_members=False, assumes_tau=True, canary_kind="canaries",
                                   candidates_kernel=observational_candidates, keys_kernel=observational_keys)
MEMBERSHIP_DESIGN = AuditDesign(MEMBERSHIP, keyed=True, injects_labels=False, fits_reference=False,
                                draws_members=True, assumes_tau=False, canary_kind="membership candidates")
AUDIT_DESIGNS: dict[str, AuditDesign] = {design.name: design
                                         for design in (INJECTED_DESIGN, OBSERVATIONAL_DESIGN, MEMBERSHIP_DESIGN)}


def audit_design(name: str) -> AuditDesign:
    """The game called ``name`` (a summary's or headline's ``design``: injected, observational or membership).

    Raises:
        ValueError: naming the game and the known ones.
    """
    try:
        return AUDIT_DESIGNS[name]
    except KeyError:
        raise ValueError(f"audit game: must be one of {', '.join(AUDIT_DESIGNS)}, got {name!r}") from None


def played_game(attack: str, design: str) -> AuditDesign:
    """The game an audit plays: ``design`` (audit.design) under label inference, the membership baseline under
    audit.attack=membership (which draws its own membership coins, so neither label-inference design applies).

    Raises:
        ValueError: naming the attack or design when it is not known.
    """
    if attack not in ATTACKS:
        raise ValueError(f"audit.attack: must be one of {', '.join(ATTACKS)}, got {attack!r}")
    if design not in DESIGNS:
        raise ValueError(f"audit.design: must be one of {', '.join(DESIGNS)}, got {design!r}")
    return MEMBERSHIP_DESIGN if attack == MEMBERSHIP else AUDIT_DESIGNS[design]
