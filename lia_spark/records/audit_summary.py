"""The audit stage's summary as typed records (``<out>/audit/summary.json``, ``AuditResult.summary``): sizes, the
sweep, every best-over-the-sweep bound, the ceiling, the headline and, for the observational design, what its bound
rests on. :meth:`AuditSummary.to_dict` is the file's layout; :meth:`AuditSummary.from_dict` reads it back (a
marker of a reused output); :func:`audit_summary_schema` is its JSON Schema, generated from these records
(``lia_spark/run/json_schemas/audit-summary.schema.json`` is that output, checked by a test).

Non-finite numbers follow the JSON convention of :mod:`lia_spark.run.json_output`: NaN is null, +-inf "inf" /
"-inf"; reading turns them back into floats.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Mapping

from lia_spark.kernels.audit_designs import AUDIT_DESIGNS, audit_design
from lia_spark.kernels.audit_sweep import Ceiling
from lia_spark.names import ATTACKS, OBSERVATIONAL
from lia_spark.records.headline import Headline
from lia_spark.records.typed import COMMON, common_ref, described, plain, schema_of, typed

SCHEMA_ID = "urn:lia-spark:audit-summary"
CHECKS_FIELD = "observational"  # the summary field of the observational checks, written as top-level keys


@dataclasses.dataclass(frozen=True)
class BoundStatistics:
    """One best-over-the-sweep bound over the repetitions (:func:`lia_spark.kernels.audit_sweep.summarize`)."""

    mean: float
    std: float = described(minimum=0)
    min: float = described()
    max: float = described()
    share_positive: float = common_ref("probability")


@dataclasses.dataclass(frozen=True)
class RecalibrationMap:
    """The increasing map audit.recalibrate applied to one baseline column."""

    mapped: str = described(enum=["target", "proxy"])
    bins: float = described(minimum=0)
    canaries: float = described(minimum=0)
    min: float = common_ref("probability")
    max: float = common_ref("probability")


@dataclasses.dataclass(frozen=True)
class TauBreakEven:
    """tau* (the smallest tau at which the valid bound is 0): the first repetition's and the mean."""

    first: float = common_ref("extended_number")
    mean: float = common_ref("extended_number")
    repetitions: int = described(minimum=1)


@dataclasses.dataclass(frozen=True)
class ProxyError:
    """On the twin: the proxy's TV error |M'(x) - eta(x)| on the canaries (as the game reads the proxy) and the
    valid bound at its maximum."""

    max: float = common_ref("probability")
    p99: float = common_ref("probability")
    p95: float = common_ref("probability")
    mean: float = described(minimum=0)
    canaries: int = common_ref("count")
    eps_lb: float = described("The first repetition's valid bound at tau = max.", minimum=0)
    eps_lb_mean: float = described(minimum=0)
    eps_lb_std: float = described(minimum=0)


@dataclasses.dataclass(frozen=True)
class ReferenceBound:
    """The label-blind reference audited by the same games."""

    eps_lb: float = described("The first repetition's valid bound at tau.", minimum=0)
    mean: float = described()
    std: float = described(minimum=0)
    min: float = described()
    max: float = described()
    share_positive: float = common_ref("probability")
    tau: float = described("The tau it is audited at, the headline's: the proxy's measured worst-case error on the "
                           "twin, else audit.tau.", minimum=0)
    tau_break_even: float = common_ref("extended_number")
    canaries: int = common_ref("count")


@dataclasses.dataclass(frozen=True)
class Calibrated:
    """Not a bound: the target's bound at the reference's largest tau*."""

    tau: float = common_ref("extended_number")
    eps_lb: float = described(minimum=0)
    eps_lb_mean: float = described(minimum=0)
    note: str = described()


@dataclasses.dataclass(frozen=True)
class ObservationalChecks:
    """What the observational bound rests on (docs/math.md §5.10); top-level keys of the summary file."""

    proxy_tv: ProxyError | None = described("On the twin: the proxy's TV error on the canaries and the valid bound "
                                            "at its maximum; null where the truth is unknown.")
    tau_break_even: TauBreakEven = described()
    eps_lb_by_tau: dict[str, float] = described("The first repetition's valid bound at each tau (keys: tau as text).",
                                                minProperties=1, additionalProperties={"type": "number", "minimum": 0})
    reference: ReferenceBound | None = described("The label-blind reference audited by the same games, or null "
                                                 "without one.")
    calibrated: Calibrated | None = described("Not a bound: the target's bound at the reference's largest tau*, or "
                                              "null without a reference.")


_CEILING_SCHEMA: dict[str, Any] = {
    "description": "What an attacker at exactly the claimed epsilon certifies in an audit of this size (not a cap): "
                   "its own bound (same m, sweep, tests, confidence, delta, tau, headline family) when each guess is "
                   "right with probability q = e^eps / (e^eps + kappa), the largest rate the claim allows; q = 1 for "
                   "an infinite or unknown claim (docs/math.md §5.12).",
    "type": "object",
    "required": ["eps_lb", "eps_lb_95", "guesses", "accuracy", "claimed_epsilon"],
    "properties": {
        "eps_lb": {"type": "number", "minimum": 0,
                   "description": "Typical: the bound at the expected counts round(q c') (exceeded in about half of "
                                  "such audits)."},
        "eps_lb_95": {"type": "number", "minimum": 0,
                      "description": "The 95th percentile of the bound over simulated audits of such an attacker "
                                     "(lia_spark.kernels.audit_sweep.CEILING_DRAWS; eps_lb when q = 1)."},
        "guesses": {"$ref": COMMON + "count", "description": "c' reaching it (0 when it is 0)."},
        "accuracy": {"$ref": COMMON + "probability"},
        "claimed_epsilon": {"oneOf": [{"type": "number", "minimum": 0}, {"const": "inf"}, {"type": "null"}]},
    },
    "additionalProperties": False,
}
_BOUNDS_SCHEMA: dict[str, Any] = {
    "description": "Bound name (<statistic>_<family>_<convention>, e.g. eps_binomial_bonferroni) -> its statistics.",
    "minProperties": 1,
    "propertyNames": {"pattern": "^[a-z_]+_(bonferroni|paper)$"},
}


@dataclasses.dataclass(frozen=True)
class AuditSummary:
    """Sizes, the sweep, every best-over-the-sweep bound over the repetitions (keys
    ``<statistic>_<family>_<convention>``: bonferroni = valid, paper = the paper's convention, not a valid bound),
    the ceiling and the headline; ``observational`` holds what the observational design's bound rests on (None for
    the other designs)."""

    attack: str = described(enum=list(ATTACKS))
    design: str = described(enum=list(AUDIT_DESIGNS))
    canaries: int = common_ref("count", "m: the canaries audited.")
    repetitions: int = described(minimum=1)
    guesses: tuple[int, ...] = described("The sweep: numbers of guesses c'.", minItems=1,
                                         items={"$ref": COMMON + "count"})
    confidence: float = described(exclusiveMinimum=0, exclusiveMaximum=1)
    delta: float = described(minimum=0)
    tau: float = described(minimum=0)
    gdp_delta: float = common_ref("number_or_null", "The delta GDP's mu was converted at.")
    gdp_tau_vacuous: bool = described()
    scores: tuple[str, ...] = described(minItems=1)
    tests: int = described(minimum=1)
    default_convention: str = described(enum=["bonferroni", "paper"])
    recalibration: dict[str, RecalibrationMap] = described(
        "audit.recalibrate: per baseline column, the increasing map applied ({} when none).",
        propertyNames={"enum": ["proxy_prediction", "shadow_prediction"]})
    baselines: tuple[str, ...] = described(
        "audit.baseline resolved: the columns the scores compared the target's prediction with (docs/math.md "
        "§5.13); with two, every score is named <score>@proxy and <score>@shadows and the confidence is split over "
        "both.", minItems=1, uniqueItems=True, items={"enum": ["proxy_prediction", "shadow_prediction"]})
    best: dict[str, BoundStatistics] = described(**_BOUNDS_SCHEMA)
    best_guesses_median: dict[str, float] = described(additionalProperties={"type": "number", "minimum": 0})
    best_score_share: dict[str, dict[str, float]] = described(
        "Per bound: the share of repetitions each score won.",
        additionalProperties={"type": "object", "additionalProperties": {"$ref": COMMON + "probability"}})
    per_score: dict[str, dict[str, BoundStatistics]] = described(
        additionalProperties={"type": "object", **_BOUNDS_SCHEMA,
                              "additionalProperties": {"$ref": COMMON + "bound_statistics"}})
    ceiling: Ceiling = described(**_CEILING_SCHEMA)
    headline: Headline = described(**{"$ref": "urn:lia-spark:headline"})
    observational: ObservationalChecks | None = None

    @property
    def headline_bound(self) -> BoundStatistics:
        """The headline family's valid (Bonferroni) best bound."""
        return self.best[f"eps_{self.headline.family}_bonferroni"]

    def to_dict(self) -> dict[str, Any]:
        """The file's layout: every field but ``observational``, whose fields are top-level keys when present."""
        payload = {field.name: plain(getattr(self, field.name)) for field in dataclasses.fields(self)
                   if field.name != CHECKS_FIELD}
        if self.observational is not None:
            payload.update(plain(self.observational))
        return payload

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> "AuditSummary":
        """Read :meth:`to_dict`'s layout (the file, or a marker's result)."""
        hints = typing.get_type_hints(cls)
        values = {field.name: typed(hints[field.name], payload[field.name]) for field in dataclasses.fields(cls)
                  if field.name != CHECKS_FIELD}
        observational = None
        if audit_design(payload["design"]).assumes_tau:
            observational = typed(ObservationalChecks, payload)
        return cls(**values, observational=observational)


def audit_summary_schema() -> dict[str, Any]:
    """The JSON Schema of :meth:`AuditSummary.to_dict` (draft 2020-12): the summary's fields, and the observational
    checks' fields, required with the observational design and absent otherwise."""
    hints, checks = typing.get_type_hints(AuditSummary), typing.get_type_hints(ObservationalChecks)
    fields = [field for field in dataclasses.fields(AuditSummary) if field.name != CHECKS_FIELD]
    observational = dataclasses.fields(ObservationalChecks)
    properties = {field.name: schema_of(hints[field.name], field.metadata.get("schema")) for field in fields}
    properties.update({field.name: schema_of(checks[field.name], field.metadata.get("schema"))
                       for field in observational})
    names = [field.name for field in observational]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "<out>/audit/summary.json: the audit stage's summary",
        "description": ("Generated from lia_spark.records.audit_summary.AuditSummary (do not edit by hand). "
                        + " ".join((AuditSummary.__doc__ or "").split())),
        "type": "object",
        "required": [field.name for field in fields],
        "properties": properties,
        "additionalProperties": False,
        "if": {"properties": {"design": {"const": OBSERVATIONAL}}},
        "then": {"required": names},
        "else": {"not": {"anyOf": [{"required": [name]} for name in names]}},
    }
