"""The audit's headline: the one valid lower bound a reviewer reads first, beside the claimed epsilon and what it
assumes.

Injected design (docs/math.md §5.9): one training run gives one bound, valid with no assumption on the proxy. The
observational design (§5.10): each repetition yields a bound that holds at the stated confidence (Bonferroni over
scores x sweep points) *if the proxy is within total variation tau of the truth*; the headline reports the first
repetition's bound with the mean +- std over all of them, the break-even tau* at which the bound reaches 0 and,
when a label-blind reference was audited, its bound and the target's bound calibrated on it. The paper's
convention (the best sweep point, each at the full confidence) is not a valid bound and never appears here.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from lia_spark.names import INJECTED, MEMBERSHIP, OBSERVATIONAL
from lia_spark.present.wording import NO_EVIDENCE, bound_text, claimed_epsilon_text, number_text


def _eps(value: float) -> str:
    """The claimed epsilon in tags and JSON: "inf", "not stated" or three significant digits."""
    return "inf" if math.isinf(value) else "not stated" if math.isnan(value) else f"{value:.3g}"


def _tau(value: float) -> str:
    return number_text(value, ".4g", missing="not computed")


@dataclasses.dataclass(frozen=True)
class Headline:
    """What was certified, at which confidence, about which training mechanism and claimed epsilon."""

    eps_lb: float
    eps_lb_mean: float
    eps_lb_std: float
    repetitions: int
    confidence: float
    tests: int
    delta: float
    mechanism: str
    claimed_epsilon: float
    family: str = "binomial"
    tau: float = 0.0
    design: str = OBSERVATIONAL  # observational | injected | membership (the baseline of audit.attack)
    informative_canaries: int = 0  # injected: the canaries with y1 != y0 (the m of the bound)
    tau_break_even: float = math.nan  # observational: the tau at which the bound reaches 0
    reference_eps_lb: float = math.nan  # observational: the label-blind reference's bound (NaN: none audited)
    calibrated_tau: float = math.nan  # observational: the reference's tau*
    calibrated_eps_lb: float = math.nan  # observational: the target's bound at calibrated_tau
    ceiling: float = math.nan  # the largest bound this audit can certify at the claimed eps (docs/math.md §5.12)
    canaries: int = 0  # the m of the bound (informative canaries, canaries, or membership candidates)

    @property
    def is_finding(self) -> bool:
        """True when the certified bound exceeds the claimed epsilon: the target leaks more than claimed (for the
        observational design, under its tau assumption)."""
        return self.eps_lb > self.claimed_epsilon

    def text(self) -> str:
        """One line: the bound, its confidence, what it assumes (its design) and the claimed epsilon, e.g.
        "eps >= X at 95% (injected canaries, no assumption on the proxy; binomial bound, ...)" or
        "eps >= X at 95% if the proxy is within TV tau = 0 of the truth (observational design; ...); a label-blind
        reference reaches Y"; then, for X = 0, :data:`lia_spark.present.wording.NO_EVIDENCE`, and a FINDING mark when
        X exceeds the claimed epsilon; numbers read as :mod:`lia_spark.present.wording` writes them."""
        tests = f"{self.family} bound, Bonferroni over {self.tests} tests, delta = {self.delta:g}"
        target = (f"for a target trained with {self.mechanism} at claimed eps = "
                  f"{claimed_epsilon_text(self.claimed_epsilon)}")
        bound = f"eps >= {bound_text(self.eps_lb)} at {self.confidence:.0%}"
        if self.design == INJECTED:
            line = (f"{bound} (injected canaries, no assumption on the proxy; {tests}; {self.informative_canaries} "
                    f"informative canaries, one training run) {target}")
        elif self.design == MEMBERSHIP:
            line = f"{bound} (membership canaries, one training run; {tests}) {target}"
        else:
            line = (f"{bound} if the proxy is within TV tau = {self.tau:g} of the truth (observational design; "
                    f"{tests}; the bound reaches 0 at tau* = {_tau(self.tau_break_even)}) {target}; over "
                    f"{self.repetitions} repetitions {number_text(self.eps_lb_mean, '.3f')} +- "
                    f"{number_text(self.eps_lb_std, '.3f')}")
            if math.isnan(self.reference_eps_lb):
                line += "; no label-blind reference audited"
            else:
                line += (f"; a label-blind reference reaches {bound_text(self.reference_eps_lb)} (tau* = "
                         f"{_tau(self.calibrated_tau)}), and the target's bound calibrated on it (resting on that "
                         f"reference) is {bound_text(self.calibrated_eps_lb)}")
        if self.eps_lb == 0.0:
            line += f" - {NO_EVIDENCE}{self._ceiling_text()}"
        if self.is_finding:
            line += (" - FINDING: the audit certifies more leakage than the claimed eps = "
                     f"{claimed_epsilon_text(self.claimed_epsilon)}")
        return line

    def _ceiling_text(self) -> str:
        """"; with m <canaries> this audit can certify at most C at the claimed eps = X" ("" when not computed)."""
        if math.isnan(self.ceiling):
            return ""
        kind = {INJECTED: "informative canaries", MEMBERSHIP: "membership candidates"}.get(self.design, "canaries")
        claim = ("with every guess right (no claimed eps)" if math.isnan(self.claimed_epsilon) else
                 f"at the claimed eps = {claimed_epsilon_text(self.claimed_epsilon)}")
        return f"; with {self.canaries} {kind} this audit can certify at most {bound_text(self.ceiling)} {claim}"

    def tags(self) -> dict[str, str]:
        """MLflow tags ``audit.eps_lb``, ``audit.claimed_eps``, ``audit.mechanism``, ``audit.design`` (and
        ``audit.finding``)."""
        return {"audit.eps_lb": f"{self.eps_lb:.6g}", "audit.claimed_eps": _eps(self.claimed_epsilon),
                "audit.mechanism": self.mechanism, "audit.design": self.design,
                "audit.finding": str(self.is_finding).lower(), "audit.headline": self.text()}

    def metrics(self) -> dict[str, float]:
        """``eps_lb`` (mean, std), and when finite ``claimed_eps``, ``eps_lb_ceiling``, ``tau_break_even``,
        ``reference_eps_lb``, ``calibrated_eps_lb``."""
        values = {"eps_lb": self.eps_lb, "eps_lb_mean": self.eps_lb_mean, "eps_lb_std": self.eps_lb_std,
                  "claimed_eps": self.claimed_epsilon, "eps_lb_ceiling": self.ceiling,
                  "tau_break_even": self.tau_break_even,
                  "reference_eps_lb": self.reference_eps_lb, "calibrated_eps_lb": self.calibrated_eps_lb}
        return {key: value for key, value in values.items() if math.isfinite(value)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly fields plus the text (infinite claimed epsilon as "inf", NaN as null)."""
        values = {key: None if isinstance(value, float) and math.isnan(value) else value
                  for key, value in dataclasses.asdict(self).items()}
        values["claimed_epsilon"] = _eps(self.claimed_epsilon)
        return {**values, "text": self.text(), "is_finding": self.is_finding}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Headline":
        """Inverse of :meth:`to_dict`."""
        fields = {field.name: values[field.name] for field in dataclasses.fields(cls) if field.name in values}
        fields = {key: math.nan if value is None else value for key, value in fields.items()}
        claimed = fields["claimed_epsilon"]
        fields["claimed_epsilon"] = math.nan if claimed == "not stated" else float(claimed)
        return cls(**fields)
