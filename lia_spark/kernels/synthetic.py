"""Synthetic Criteo twin (docs/math.md §1.2): a pure, counter-based generator of Criteo-format rows with known eta.

Every draw is ``lia_spark.kernels.hashing`` keyed on (seed, purpose, row_id) with ``row_id = day << 40 | position``,
so any subset of rows is generated identically whatever the batching. Per row:

- latent ``u ~ N(0, 1)``; integer ``I_j = floor(exp(mu_j + sigma_j (rho_j u + sqrt(1 - rho_j^2) z_j)))``
  with ``mu_j = log(median_j + 1/2)`` and ``sigma_j = (log(p90_j + 1/2) - mu_j) / Phi^{-1}(0.9)``, so the
  median and 90th percentile of ``I_j`` are the targets of :data:`INT_SPECS`; ``I2 = -1`` w.p. 7.5%.
- missing blocks (:data:`MISSING_BLOCKS`): each block's columns go missing together, independently per block.
- categorical ``C_k``: Zipf rank ``r`` in ``1..K_k`` (continuous power law ``x^-s_k`` on ``[1, K_k + 1)``,
  floored), value = low 32 bits of ``hash(seed, C_k, r)`` (stable across days).
- logit of eta (a function of the observable row only, see :func:`twin_logit`):

      logit eta = b0(day) + sum_j beta_j g_j(I_j) + sum_b gamma_b 1{block b missing}
                  + sum_k s_k (cos(theta d) A_k(v_k) + sin(theta d) B_k(v_k)) + interactions,

  with ``g_j(I) = log1p(max(I, 0)) - log1p(median_j)`` (0 when missing), ``A_k, B_k`` unit-variance effects
  hashed from (seed, C_k, value) so a value's effect is stable and rotates slowly with the day
  (correlation ``cos(theta)`` between consecutive days): the day drift. The intercept ``b0(day)`` is
  calibrated per day by bisection on a fixed sample of that day, so every day's mean click rate is the
  target although the effects drift.
- ``y ~ Bernoulli(eta)``.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.special import expit, ndtri

from lia_spark.kernels import hashing
from lia_spark.kernels.criteo import CAT_COLUMNS, INT_COLUMNS, MAX_DAY, make_row_id

# name: (median, p90, rho = loading on the row latent, beta = logit effect per unit of log1p(I)).
INT_SPECS: dict[str, tuple[float, float, float, float]] = {
    "I1": (1, 12, 0.5, 0.154),
    "I2": (3, 150, 0.3, -0.078),
    "I3": (7, 60, 0.4, 0.078),
    "I4": (4, 16, 0.5, 0.154),
    "I5": (2100, 29000, 0.3, -0.131),
    "I6": (33, 400, 0.4, -0.102),
    "I7": (3, 40, 0.5, 0.154),
    "I8": (8, 35, 0.3, 0.054),
    "I9": (40, 250, 0.5, 0.102),
    "I10": (0, 1, 0.4, 0.499),
    "I11": (1, 8, 0.5, 0.28),
    "I12": (0, 2, 0.3, 0.154),
    "I13": (4, 25, 0.5, 0.078),
}
I2_NEGATIVE_SHARE = 0.075

# Blocks of columns that go missing together: (columns, probability, logit effect of the block's flag).
MISSING_BLOCKS: tuple[tuple[tuple[str, ...], float, float], ...] = (
    (("I1", "I10"), 0.45, -0.25),
    (("I12",), 0.77, -0.10),
    (("I4", "I13", "I6"), 0.22, 0.15),
    (("I7", "I9", "I11"), 0.04, -0.30),
    (("C3", "C4", "C12", "C16", "C21", "C24"), 0.035, -0.20),
    (("C19", "C20", "C25", "C26"), 0.44, -0.20),
    (("C22",), 0.76, 0.10),
)

# name: (cardinality K, Zipf exponent s, effect scale s_k) - cardinalities of the public Criteo Kaggle days.
CAT_SPECS: dict[str, tuple[int, float, float]] = {
    "C1": (1460, 1.3, 0.177),
    "C2": (583, 1.2, 0.376),
    "C3": (10_131_227, 1.05, 0.449),
    "C4": (2_202_608, 1.05, 0.321),
    "C5": (305, 1.4, 0.118),
    "C6": (24, 1.5, 0.376),
    "C7": (12_517, 1.2, 0.161),
    "C8": (633, 1.4, 0.118),
    "C9": (3, 2.0, 0.235),
    "C10": (93_145, 1.1, 0.268),
    "C11": (5_683, 1.2, 0.214),
    "C12": (8_351_593, 1.05, 0.449),
    "C13": (3_194, 1.2, 0.107),
    "C14": (27, 1.5, 0.376),
    "C15": (14_992, 1.2, 0.107),
    "C16": (5_461_306, 1.05, 0.321),
    "C17": (10, 1.5, 0.376),
    "C18": (5_652, 1.2, 0.107),
    "C19": (2_173, 1.3, 0.107),
    "C20": (4, 1.5, 0.235),
    "C21": (7_046_547, 1.05, 0.321),
    "C22": (18, 1.5, 0.118),
    "C23": (15, 1.5, 0.376),
    "C24": (286_181, 1.1, 0.321),
    "C25": (105, 1.3, 0.118),
    "C26": (142_572, 1.1, 0.268),
}

EFFECT_ROTATION = 0.10   # theta: categorical effects keep correlation cos(theta) ~ 0.995 day to day
# Interactions: (I_a, I_b, weight) on g_a * g_b, plus one pair of categoricals with a hashed joint effect.
INT_INTERACTIONS: tuple[tuple[str, str, float], ...] = (("I1", "I11", 0.05), ("I5", "I7", -0.03))
CAT_INTERACTION: tuple[str, str, float] = ("C14", "C23", 0.25)
CALIBRATION_ROWS = 100_000
_Z90 = float(ndtri(0.9))


@dataclasses.dataclass(frozen=True)
class TwinParameters:
    """A calibrated twin: master seed, target click rate and the intercepts b0(day) that reach it, day 0, 1, ..."""

    seed: int
    click_rate: float
    intercepts: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class TwinRows:
    """One batch of twin rows. ``values[c]`` is int64 (meaningless where ``missing[c]``)."""

    row_id: np.ndarray
    day: np.ndarray
    label: np.ndarray
    eta: np.ndarray
    values: dict[str, np.ndarray]
    missing: dict[str, np.ndarray]


def int_lognormal(name: str) -> tuple[float, float]:
    """(mu, sigma) of log I for column ``name``: floor(exp(mu)) = median, floor(exp(mu + z_0.9 sigma)) = p90."""
    median, p90, _, _ = INT_SPECS[name]
    mu = math.log(median + 0.5)
    return mu, (math.log(p90 + 0.5) - mu) / _Z90


def _block_missing(seed: int, row_ids: np.ndarray) -> dict[str, np.ndarray]:
    missing = {name: np.zeros(row_ids.shape, dtype=bool) for name in INT_COLUMNS + CAT_COLUMNS}
    for index, (columns, rate, _) in enumerate(MISSING_BLOCKS):
        flag = hashing.uniform(seed, f"twin:missing:{index}", row_ids) < rate
        for name in columns:
            missing[name] = flag
    return missing


def _zipf_ranks(u: np.ndarray, *, cardinality: int, exponent: float) -> np.ndarray:
    """Inverse CDF of the density ~ x^-s on [1, K + 1), floored to a rank in 1..K."""
    one_minus_s = 1.0 - exponent
    top = (cardinality + 1.0) ** one_minus_s
    x = (1.0 - u * (1.0 - top)) ** (1.0 / one_minus_s)
    return np.minimum(np.floor(x), cardinality).astype(np.int64)


def _value_effects(seed: int, purpose: str, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two unit-variance effects (A, B) per categorical value from one 64-bit hash word.

    Each is an Irwin-Hall sum of four of the word's eight bytes, ``sqrt(3) (sum_i (b_i + 1/2) / 256 - 2)``:
    mean 0, variance 1, bounded by +-2 sqrt(3), close to normal and far cheaper than inverting Phi twice.
    """
    bits = hashing.hash_bits(seed, purpose, values)
    low, high = bits & np.uint64(0xFFFFFFFF), bits >> np.uint64(32)
    sums = []
    for word in (low, high):
        pairs = (word & np.uint64(0x00FF00FF)) + ((word >> np.uint64(8)) & np.uint64(0x00FF00FF))
        sums.append(((pairs & np.uint64(0xFFFF)) + (pairs >> np.uint64(16))).astype(np.float64))
    scale = math.sqrt(3.0) / 256.0
    first, second = ((total + 2.0) * scale - 2.0 * math.sqrt(3.0) for total in sums)
    return first, second


def twin_logit(seed: int, *, day: np.ndarray, values: dict[str, np.ndarray],
               missing: dict[str, np.ndarray]) -> np.ndarray:
    """logit eta without the intercept b0(day): a function of the day and the observable row only."""
    day_float = np.asarray(day, dtype=np.float64)
    logit = np.zeros(day_float.shape)
    centered = {}
    for name, (median, _, _, beta) in INT_SPECS.items():
        g = np.log1p(np.maximum(values[name], 0).astype(np.float64)) - math.log1p(median)
        centered[name] = np.where(missing[name], 0.0, g)
        logit = logit + beta * centered[name]
    for columns, _, gamma in MISSING_BLOCKS:
        logit = logit + gamma * missing[columns[0]]
    for first, second, weight in INT_INTERACTIONS:
        logit = logit + weight * centered[first] * centered[second]
    cos_day, sin_day = np.cos(EFFECT_ROTATION * day_float), np.sin(EFFECT_ROTATION * day_float)
    for name, (_, _, scale) in CAT_SPECS.items():
        a, b = _value_effects(seed, f"twin:effect:{name}", values[name])
        logit = logit + np.where(missing[name], 0.0, scale * (cos_day * a + sin_day * b))
    first, second, weight = CAT_INTERACTION
    pair = (values[first] << np.int64(32)) | values[second]
    a, _ = _value_effects(seed, f"twin:effect:{first}x{second}", pair)
    return logit + weight * a


def twin_eta(params: TwinParameters, *, day: np.ndarray, values: dict[str, np.ndarray],
             missing: dict[str, np.ndarray]) -> np.ndarray:
    """Ground-truth click probability eta = expit(b0(day) + twin_logit(day, row)) of observed rows."""
    day = np.asarray(day)
    if day.size and (day.min() < 0 or day.max() >= len(params.intercepts)):
        raise ValueError(f"day must be in [0, {len(params.intercepts)}) for these parameters, got range "
                         f"[{day.min()}, {day.max()}]")
    intercept = np.asarray(params.intercepts, dtype=np.float64)[day]
    return expit(intercept + twin_logit(params.seed, day=day, values=values, missing=missing))


def _features(seed: int, row_ids: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    missing = _block_missing(seed, row_ids)
    latent = hashing.standard_normal(seed, "twin:latent", row_ids)
    values: dict[str, np.ndarray] = {}
    for name, (_, _, rho, _) in INT_SPECS.items():
        mu, sigma = int_lognormal(name)
        z = hashing.standard_normal(seed, f"twin:int:{name}", row_ids)
        log_value = mu + sigma * (rho * latent + math.sqrt(1.0 - rho * rho) * z)
        values[name] = np.floor(np.exp(np.minimum(log_value, 40.0))).astype(np.int64)
    negative = hashing.uniform(seed, "twin:I2:negative", row_ids) < I2_NEGATIVE_SHARE
    values["I2"] = np.where(negative, -1, values["I2"])
    for name, (cardinality, exponent, _) in CAT_SPECS.items():
        ranks = _zipf_ranks(hashing.uniform(seed, f"twin:rank:{name}", row_ids),
                            cardinality=cardinality, exponent=exponent)
        hashed = hashing.hash_bits(seed, f"twin:value:{name}", ranks) & np.uint64(0xFFFFFFFF)
        values[name] = hashed.astype(np.int64)
    for name in INT_COLUMNS + CAT_COLUMNS:
        values[name] = np.where(missing[name], 0, values[name])
    return values, missing


def generate_rows(params: TwinParameters, *, day: int, positions: np.ndarray) -> TwinRows:
    """Rows ``positions`` (0-based line indices) of one day of the twin, eta and the drawn click label."""
    positions = np.asarray(positions, dtype=np.int64)
    row_ids = make_row_id(day, positions)
    days = np.full(row_ids.shape, day, dtype=np.int32)
    values, missing = _features(params.seed, row_ids)
    eta = twin_eta(params, day=days, values=values, missing=missing)
    label = hashing.bernoulli(params.seed, "twin:label", row_ids, eta).astype(np.int32)
    return TwinRows(row_id=row_ids, day=days, label=label, eta=eta, values=values, missing=missing)


def calibrate_twin(*, seed: int, click_rate: float, days: int = 1,
                   sample_rows: int = CALIBRATION_ROWS) -> TwinParameters:
    """b0(d) with mean(expit(b0(d) + logit)) = click_rate on rows 0..sample_rows-1 of each day d < days.

    Bisection to 1e-12 on the fixed sample, so the intercepts are a deterministic function of the arguments.
    """
    if not 0.0 < click_rate < 1.0:
        raise ValueError(f"click_rate must be in (0, 1), got click_rate={click_rate}")
    if not 1 <= days <= MAX_DAY + 1:
        raise ValueError(f"days must be in [1, {MAX_DAY + 1}], got days={days}")
    if sample_rows < 1:
        raise ValueError(f"sample_rows must be >= 1, got sample_rows={sample_rows}")
    positions = np.arange(sample_rows, dtype=np.int64)
    intercepts = []
    for day in range(days):
        values, missing = _features(seed, make_row_id(day, positions))
        logit = twin_logit(seed, day=np.full(sample_rows, day, dtype=np.int32), values=values, missing=missing)
        low, high = -30.0, 30.0
        while high - low > 1e-12:
            middle = 0.5 * (low + high)
            if expit(middle + logit).mean() < click_rate:
                low = middle
            else:
                high = middle
        intercepts.append(0.5 * (low + high))
    return TwinParameters(seed=int(seed), click_rate=float(click_rate), intercepts=tuple(intercepts))
