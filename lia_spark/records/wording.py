"""How numbers read on the console and in the report: never a raw ``nan`` or ``inf``.

NaN (a value not computed) reads "n/a" (or the caller's word), an infinite value "∞", a claimed epsilon of inf
"inf (non-private)"; an epsilon lower bound of 0 is the vacuous bound, :data:`NO_EVIDENCE`.
"""
from __future__ import annotations

import math

NOT_COMPUTED = "n/a"
NO_EVIDENCE_SHORT = "no evidence at this size"
NO_EVIDENCE = (f"{NO_EVIDENCE_SHORT}: a bound of 0 means the audit certified nothing with these canaries, not "
               "that the target is private")
NOT_VALID = "paper convention, not a valid bound"


def number_text(value: float, spec: str = ".6g", *, missing: str = NOT_COMPUTED) -> str:
    """``value`` formatted by ``spec``; NaN as ``missing``, +-inf as "∞" / "-∞"."""
    if math.isnan(value):
        return missing
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return format(value, spec)


def claimed_epsilon_text(value: float) -> str:
    """A claimed epsilon for a reader: "inf (non-private)" without noise, "not stated" when unknown (NaN), else
    three significant digits."""
    if math.isnan(value):
        return "not stated"
    return "inf (non-private)" if math.isinf(value) else f"{value:.3g}"


def ceiling_text(typical: float, percentile_95: float, claimed_epsilon: float) -> str:
    """What an attacker at exactly the claim certifies (the ceiling, docs/math.md §5.12): "an attacker at exactly the
    claimed eps = X typically certifies C (95th percentile C95)", the percentile left out where it is not computed
    or equals C; for an unknown or infinite claim "an attacker with every guess right certifies C (...)"."""
    if not math.isfinite(claimed_epsilon):
        claim = "no claimed eps" if math.isnan(claimed_epsilon) else "claimed eps = inf"
        return f"an attacker with every guess right certifies {bound_text(typical)} ({claim})"
    percentile = (f" (95th percentile {bound_text(percentile_95)})"
                  if math.isfinite(percentile_95) and percentile_95 != typical else "")
    return (f"an attacker at exactly the claimed eps = {claimed_epsilon_text(claimed_epsilon)} typically certifies "
            f"{bound_text(typical)}{percentile}")


def bound_text(value: float) -> str:
    """An epsilon lower bound with 3 decimals; a positive bound below 0.0005 with one significant digit, so that
    only the vacuous bound reads 0.000."""
    return f"{value:.1g}" if 0 < value < 0.0005 else number_text(value, ".3f")
