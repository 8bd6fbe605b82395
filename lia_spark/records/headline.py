"""The audit's headline: the one valid lower bound a reviewer reads first, beside the claimed epsilon and what it
assumes.

Injected design (docs/math.md §5.9): one training run gives one bound, valid with no assumption on the proxy. The
observational design (§5.10): each repetition yields a bound that holds at the stated confidence (Bonferroni over
scores x sweep points) *if the proxy is within total variation tau of the truth* on every canary. Its headline
leads with what holds without that assumption: the bound at the proxy's worst-case error measured against the
truth (the twin's, known), else "no bound without an assumption on the proxy"; then the repetitions' spread
(labelled a spread of bounds), the break-even tau* and the label-blind reference's bound at the same tau with its
own tau*, saying so when the reference certifies 0 there or as much as the target. The bound at hypothetical taus
(the report's table), the calibrated figure of summary.json (not a bound) and the paper's convention (the best
sweep point, each at the full confidence) are not here.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from lia_spark.kernels.audit_designs import AuditDesign, audit_design
from lia_spark.names import OBSERVATIONAL
from lia_spark.records.wording import NO_EVIDENCE, bound_text, ceiling_text, claimed_epsilon_text, number_text


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
    reference_eps_lb: float = math.nan  # observational: the label-blind reference's bound at lead_tau (NaN: none)
    reference_tau_break_even: float = math.nan  # observational: the reference's own tau*, same (first) repetition
    measured_tau: float = math.nan  # observational: the proxy's worst-case TV error on the canaries (NaN: unknown)
    ceiling: float = math.nan  # what an attacker at exactly the claimed eps typically certifies (docs/math.md §5.12)
    ceiling_95: float = math.nan  # the 95th percentile of what that attacker certifies (simulated audits)
    canaries: int = 0  # the m of the bound (informative canaries, canaries, or membership candidates)
    training_runs: int = 1  # injected: the training runs pooled into the game (audit.runs, docs/math.md §5.14)

    @property
    def game(self) -> AuditDesign:
        """The game of :attr:`design` (:mod:`lia_spark.kernels.audit_designs`)."""
        return audit_design(self.design)

    @property
    def assumption(self) -> str:
        """What the bound assumes beyond the audit's own game: "" (injected, membership, or observational at the
        measured error of the proxy), else "if the proxy is within TV tau = X of the truth"."""
        if not self.game.assumes_tau or not math.isnan(self.measured_tau):
            return ""
        return f"if the proxy is within TV tau = {self.tau:g} of the truth"

    @property
    def lead_tau(self) -> float:
        """The tau the bound (and, observational, the reference's and the ceiling's) is computed at: the measured
        error of the proxy, else tau (0 for the injected and membership designs)."""
        return self.tau if math.isnan(self.measured_tau) else self.measured_tau

    @property
    def is_finding(self) -> bool:
        """True when a bound that assumes nothing of the proxy exceeds the claimed epsilon: the target leaks more
        than claimed."""
        return self.eps_lb > self.claimed_epsilon and not self.assumption

    def text(self) -> str:
        """One line: the bound, its confidence, what it assumes (its design) and the claimed epsilon, e.g.
        "eps >= X at 95% (injected canaries, no assumption on the proxy; binomial bound, ...)" or, observational,
        "eps >= X at 95% at the proxy's worst-case TV error tau = W, measured against the truth ..." or "no bound
        without an assumption on the proxy (...): eps >= X at 95% if the proxy is within TV tau = 0 of the truth
        ..."; then, observational, the spread of the repetitions' bounds, tau* and the reference at the same tau;
        for X = 0, :data:`lia_spark.records.wording.NO_EVIDENCE`, and a FINDING mark when a bound
        without assumption exceeds the claimed epsilon; numbers read as :mod:`lia_spark.records.wording` writes
        them."""
        tests = f"{self.family} bound, Bonferroni over {self.tests} tests, delta = {self.delta:g}"
        target = (f"for a target trained with {self.mechanism} at claimed eps = "
                  f"{claimed_epsilon_text(self.claimed_epsilon)}")
        bound = f"eps >= {bound_text(self.eps_lb)} at {self.confidence:.0%}"
        if self.game.injects_labels:
            runs = "one training run" if self.training_runs == 1 else f"{self.training_runs} training runs pooled"
            line = (f"{bound} (injected canaries, no assumption on the proxy; {tests}; {self.informative_canaries} "
                    f"informative canaries, {runs}) {target}")
        elif self.game.draws_members:
            line = f"{bound} (membership canaries, one training run; {tests}) {target}"
        elif not self.assumption:
            line = (f"{bound} at the proxy's worst-case TV error tau = {_tau(self.measured_tau)} on the "
                    f"{self.canaries} canaries, measured against the twin's true P(y=1|x) (observational design; "
                    f"{tests}) {target}{self._observational_text()}")
        else:
            line = (f"no bound without an assumption on the proxy (observational design; {tests}) {target}: {bound} "
                    f"{self.assumption}{self._observational_text()}")
        if self.eps_lb == 0.0:
            line += f" - {NO_EVIDENCE}{self._ceiling_text()}"
        if self.is_finding:
            line += (" - FINDING: the audit certifies more leakage than the claimed eps = "
                     f"{claimed_epsilon_text(self.claimed_epsilon)}")
        return line

    def _observational_text(self) -> str:
        """"; the R repetitions' bounds (a spread of bounds, not a bound): mean A, std S; 0 for any tau above
        tau* = T" and the label-blind reference at the same tau (:meth:`_reference_text`)."""
        spread = ("" if self.repetitions == 1 else
                  f"; the {self.repetitions} repetitions' bounds (a spread of bounds, not a bound): mean "
                  f"{number_text(self.eps_lb_mean, '.3f')}, std {number_text(self.eps_lb_std, '.3f')}")
        return (f"{spread}; the bound is 0 for any tau above tau* = {_tau(self.tau_break_even)}"
                f"{self._reference_text()}")

    def _reference_text(self) -> str:
        """The label-blind reference's bound at the headline's tau with its own tau* (same repetition), "certifies
        0 at this tau" where it does, and what it means when it certifies as much as the target."""
        if math.isnan(self.reference_eps_lb):
            return "; no label-blind reference audited"
        at = (f"at this tau ({_tau(self.lead_tau)}; its own tau* = {_tau(self.reference_tau_break_even)}, same "
              f"repetition)")
        found = "certifies 0" if self.reference_eps_lb == 0.0 else f"reaches {bound_text(self.reference_eps_lb)}"
        line = f"; a label-blind reference {found} {at}"
        if self.reference_eps_lb >= self.eps_lb:
            line += " - the target shows no more than a model that never saw the labels"
        return line

    def _ceiling_text(self) -> str:
        """"; with m <canaries> " and :func:`lia_spark.records.wording.ceiling_text` ("" when not computed)."""
        if math.isnan(self.ceiling):
            return ""
        found = ceiling_text(self.ceiling, self.ceiling_95, self.claimed_epsilon)
        return f"; with {self.canaries} {self.game.canary_kind} {found}"

    def tags(self) -> dict[str, str]:
        """MLflow tags ``audit.eps_lb`` (the bound, or "none without an assumption on the proxy"),
        ``audit.claimed_eps``, ``audit.mechanism``, ``audit.design``, ``audit.assumption`` (observational),
        ``audit.finding``, ``audit.headline`` and, injected, ``audit.training_runs`` (the runs pooled)."""
        tags = {"audit.eps_lb": "none without an assumption on the proxy" if self.assumption else f"{self.eps_lb:.6g}",
                "audit.claimed_eps": _eps(self.claimed_epsilon), "audit.mechanism": self.mechanism,
                "audit.design": self.design, "audit.finding": str(self.is_finding).lower(),
                "audit.headline": self.text()}
        if self.game.injects_labels:
            tags["audit.training_runs"] = str(self.training_runs)
        if self.game.assumes_tau:
            tags["audit.assumption"] = self.assumption or (f"none: the proxy's measured worst-case TV error is "
                                                           f"{_tau(self.measured_tau)}")
        return tags

    def metrics(self) -> dict[str, float]:
        """``eps_lb`` (mean, std), and when finite ``claimed_eps``, ``eps_lb_ceiling`` (typical),
        ``eps_lb_ceiling_95`` (its 95th percentile), ``tau_break_even``,
        ``measured_tau``, ``reference_eps_lb``, ``reference_tau_break_even``. An observational ``eps_lb`` that
        rests on an assumed tau is logged as ``eps_lb_if_tau`` instead (the tag ``audit.assumption`` says which)."""
        bound = "eps_lb_if_tau" if self.assumption else "eps_lb"
        values = {bound: self.eps_lb, f"{bound}_mean": self.eps_lb_mean, f"{bound}_std": self.eps_lb_std,
                  "claimed_eps": self.claimed_epsilon, "eps_lb_ceiling": self.ceiling,
                  "eps_lb_ceiling_95": self.ceiling_95,
                  "tau_break_even": self.tau_break_even, "measured_tau": self.measured_tau,
                  "reference_eps_lb": self.reference_eps_lb, "reference_tau_break_even": self.reference_tau_break_even}
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
