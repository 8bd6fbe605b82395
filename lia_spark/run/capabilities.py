"""Which library and execution path can train which training mechanism, and for which audit game, from the
mechanism registry's libraries and executions (:mod:`lia_spark.kernels.mechanism_registry`): read by the
configuration's checks (at load), the audit table (which cells exist) and the training paths.

A row is (mechanism, library, execution, game) -> the reason it cannot be trained ("" when it can); the reasons
name the configuration fields to change.
"""
from __future__ import annotations

import dataclasses

from lia_spark.kernels.audit_designs import AuditDesign
from lia_spark.kernels.mechanism_registry import label_mechanism
from lia_spark.kernels.model_libraries import LIBRARIES, model_library
from lia_spark.names import DISTRIBUTED


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why a combination cannot train: the configuration field to change, the reason and the fix."""

    field: str
    reason: str
    fix: str

    def __str__(self) -> str:
        return f"{self.reason}; {self.fix}"


def refusal(mechanism: str, *, library: str, execution: str, game: AuditDesign | None = None) -> Refusal | None:
    """Why models.library=``library`` with models.execution=``execution`` cannot train ``mechanism`` for the audit
    game ``game`` (:attr:`lia_spark.run.model_sections.AuditConfig.audit_design`; None = any label-inference game),
    or None when it can."""
    if execution == DISTRIBUTED and not model_library(library).distributed:
        distributed = " or ".join(name for name, known in LIBRARIES.items() if known.distributed)
        return Refusal("models.execution", f"models.execution=distributed trains {distributed} only (xgboost.spark)",
                       f"set models.execution=in_memory or models.library={distributed}")
    chosen = label_mechanism(mechanism)
    if library not in chosen.libraries or execution not in chosen.executions:
        settings = [f"models.{field}={' or '.join(values)}" for field, values, value in (
            ("library", chosen.libraries, library), ("execution", chosen.executions, execution)) if value not in values]
        return Refusal("models.training_mechanism", f"{mechanism} cannot train with models.library={library}, "
                       f"models.execution={execution}: {chosen.limitation}", f"set {' and '.join(settings)}")
    if execution == DISTRIBUTED and game is not None and game.draws_members:
        return Refusal("models.execution", "audit.attack=membership leaves its non-members out of an in-memory "
                       "training set", "set models.execution=in_memory")
    return None


def unsupported(mechanism: str, *, library: str, execution: str, game: AuditDesign | None = None) -> str:
    """:func:`refusal` as one line ("" when the combination can train)."""
    found = refusal(mechanism, library=library, execution=execution, game=game)
    return "" if found is None else str(found)
