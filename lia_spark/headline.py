"""The audit's headline: the one valid lower bound a reviewer reads first, beside the claimed epsilon.

Each repetition of the observational audit yields a lower bound that holds with the stated confidence when
the confidence is split over every test made (Bonferroni over scores x sweep points, "bonferroni"
convention). The headline reports the first repetition's bound, which is such a bound for one run of the
audit, with the mean +- std over all repetitions after it. The paper's convention (the best sweep point, each
at the full confidence) is not a valid bound and never appears in the headline.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any


def _eps(value: float) -> str:
    return "inf" if math.isinf(value) else "not stated" if math.isnan(value) else f"{value:.3g}"


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

    @property
    def is_finding(self) -> bool:
        """True when the certified bound exceeds the claimed epsilon: the target leaks more than claimed."""
        return self.eps_lb > self.claimed_epsilon

    def text(self) -> str:
        """One line: "eps >= X at 95% (F bound, Bonferroni over N tests, delta = D, tau = T) for a target trained with M
        at claimed eps = Y", then the repetitions' mean +- std, and a FINDING mark when X exceeds Y. tau = 0 assumes
        the proxy's label distribution is the true one (docs/math.md §6)."""
        line = (f"eps >= {self.eps_lb:.3f} at {self.confidence:.0%} ({self.family} bound, Bonferroni over {self.tests} "
                f"tests, delta = "
                f"{self.delta:g}, tau = {self.tau:g}) for a target trained with {self.mechanism} at claimed eps = "
                f"{_eps(self.claimed_epsilon)}; over {self.repetitions} repetitions {self.eps_lb_mean:.3f} +- "
                f"{self.eps_lb_std:.3f}")
        if self.is_finding:
            line += f" - FINDING: the audit certifies more leakage than the claimed eps = {_eps(self.claimed_epsilon)}"
        return line

    def tags(self) -> dict[str, str]:
        """MLflow tags ``audit.eps_lb``, ``audit.claimed_eps``, ``audit.mechanism`` (and ``audit.finding``)."""
        return {"audit.eps_lb": f"{self.eps_lb:.6g}", "audit.claimed_eps": _eps(self.claimed_epsilon),
                "audit.mechanism": self.mechanism, "audit.finding": str(self.is_finding).lower(),
                "audit.headline": self.text()}

    def metrics(self) -> dict[str, float]:
        """``eps_lb`` and, when finite, ``claimed_eps`` (logged as ``audit.eps_lb`` / ``audit.claimed_eps``)."""
        values = {"eps_lb": self.eps_lb, "eps_lb_mean": self.eps_lb_mean, "eps_lb_std": self.eps_lb_std}
        if math.isfinite(self.claimed_epsilon):
            values["claimed_eps"] = self.claimed_epsilon
        return values

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly fields plus the text (infinite claimed epsilon as "inf")."""
        values = dataclasses.asdict(self)
        values["claimed_epsilon"] = _eps(self.claimed_epsilon)
        return {**values, "text": self.text(), "is_finding": self.is_finding}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Headline":
        """Inverse of :meth:`to_dict`."""
        fields = {field.name: values[field.name] for field in dataclasses.fields(cls) if field.name in values}
        claimed = fields["claimed_epsilon"]
        fields["claimed_epsilon"] = math.nan if claimed == "not stated" else float(claimed)
        return cls(**fields)
