"""What the epsilon lower bounds share (:mod:`lia_spark.kernels.bounds`, :mod:`lia_spark.kernels.gdp`): validation
of confidence, tau, delta and counts m >= 1, 0 <= c <= c' <= m (each failing with a ValueError naming the value),
and the best point of a sweep."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class SweepBest:
    """Largest bound over a sweep and the index of the sweep point reaching it (-1: nothing rejected)."""

    value: float
    index: int

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------------------------- validation
def gamma_of(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got confidence={confidence}")
    return 1.0 - float(confidence)


def checked_tau(tau: float) -> float:
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got tau={tau}")
    return float(tau)


def checked_delta(delta: float) -> float:
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got delta={delta}")
    return float(delta)


def integer_counts(name: str, value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"{name} must be integer counts, got {name}={value}")
    return arr.astype(np.int64)


def checked_counts(canaries, guesses, correct) -> tuple[int, np.ndarray, np.ndarray]:
    """Validate m >= 1 and 0 <= c <= c' <= m elementwise; returns (m, c', c) with c', c broadcast int64."""
    m = int(integer_counts("canaries", canaries))
    if m < 1:
        raise ValueError(f"canaries must be >= 1, got canaries={canaries}")
    g, c = np.broadcast_arrays(integer_counts("guesses", guesses), integer_counts("correct", correct))
    if np.any((g < 0) | (g > m)):
        raise ValueError(f"guesses must be in [0, canaries={m}], got guesses={guesses}")
    if np.any((c < 0) | (c > g)):
        raise ValueError(f"correct must be in [0, guesses], got correct={correct} with guesses={guesses}")
    return m, g, c
