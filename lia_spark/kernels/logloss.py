"""Label inference from log-loss scores (docs/math.md §8): the oracle and the attacks, as pure kernels.

Aggarwal, Kasiviswanathan, Xu, Feyisetan, Teissier, Label Inference Attacks from Log-loss Scores, ICML 2021,
arXiv:2105.08266. A service reports LLOSS(u; sigma) = -(1/N) sum_i [sigma_i ln u_i + (1 - sigma_i) ln(1 - u_i)]
for submitted predictions u. Writing u_i = v_i / (1 + v_i) (odds v_i),

    N LLOSS = sum_i ln(1 + v_i) - sum_{i: sigma_i = 1} ln v_i,

so a query with v_i = 1 (u_i = 1/2) outside a block of b rows reveals sum_{block, sigma = 1} ln v_r:

    X = N l - (N - b) ln 2 - sum_{block} ln(1 + v_r) = -sum_{block, sigma_r = 1} ln v_r.

- Single query, arbitrary precision (Theorem 1): v = the first N primes; the exact oracle reports
  exp(-N LLOSS) = prod_{sigma_i = 1} p_i / prod_i (1 + p_i), a rational number, and the labels are the primes
  dividing T exp(-N LLOSS), T = prod (1 + p_i). Exact integers (Python's ``fractions``/``int``).
- Limited precision (Algorithm 1): blocks of b rows with v_r = the r-th prime; q = e^{-X} rounded to an
  integer is the product of the block's primes with label 1. The rounding is right when the reported loss is
  within tau of the true one and primorial(b) (e^{N tau} - 1) < 1/2 (the paper's condition p_b <= 2^{(phi-5)/4}
  for phi-bit arithmetic, written for an oracle error tau).
- Noisy oracle (Algorithm 3, Lemma 2): ln v_r = -2^{r-1} w with w = 2 ln(3) N tau (the paper's
  v_r = 3^{2^r N tau}, inverted: u_r < 1/2 keeps u_r and 1 - u_r exact in float64; the separation of Lemma 1
  depends on |ln v| only). X = sum_r sigma_r 2^{r-1} w, any two block labelings differ by >= w > 2 N tau, and
  the paper's argmin over the 2^b block labelings is the nearest integer K = round(X / w), whose bits are the
  labels. b is limited by the largest weight 2^{b-1} w <= 700 (u_r >= 1e-304 stays a normal float64).

Unbounded noise (Laplace, Gaussian) is handled as in the paper's Theorem 9: tau is the noise's two-sided
quantile at a failure probability delta per query. The decoding error of the binary attack is then
E = round(N Z / w) for the oracle's error Z, which gives the accuracy a setting allows
(:func:`binary_attack_expected_accuracy`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterable, Sequence

import numpy as np
from scipy import stats

MAX_WEIGHT = 700.0  # largest |ln v| of a query: u = 1/(1 + e^700) ~ 1e-304 is still a normal float64
MAX_BINARY_BLOCK = 50  # K < 2^50: X / w keeps integer resolution in float64
NOISES = ("none", "laplace", "gaussian")
ATTACKS = ("primes", "binary")
LN2 = math.log(2.0)


def log_loss(labels, predictions) -> float:
    """-(1/N) sum_i [y_i ln u_i + (1 - y_i) ln(1 - u_i)] in float64 (ln(1 - u) as log1p(-u))."""
    y = np.asarray(labels)
    u = np.asarray(predictions, dtype=np.float64)
    if y.shape != u.shape or y.ndim != 1 or y.size == 0:
        raise ValueError(f"labels and predictions must be equal-length non-empty 1-D arrays, got shapes "
                         f"{y.shape} and {u.shape}")
    return float(-np.sum(np.where(y == 1, np.log(u), np.log1p(-u))) / y.size)


@dataclass(frozen=True)
class OracleSettings:
    """What the service does to the exact float64 log-loss before reporting it: add noise, then round."""

    decimals: int | None = None  # round the reported loss to this many decimals (None: full float64)
    noise: str = "none"  # none | laplace | gaussian, on the reported loss
    noise_scale: float = 0.0  # Laplace scale b or Gaussian standard deviation

    def __post_init__(self) -> None:
        if self.decimals is not None and (isinstance(self.decimals, bool) or not isinstance(self.decimals, int)
                                          or not 0 <= self.decimals <= 17):
            raise ValueError(f"decimals must be None or an integer in [0, 17], got decimals={self.decimals!r}")
        if self.noise not in NOISES:
            raise ValueError(f"noise must be one of {', '.join(NOISES)}, got noise={self.noise!r}")
        scale = float(self.noise_scale)
        if not math.isfinite(scale) or scale < 0 or (scale > 0) != (self.noise != "none"):
            raise ValueError(f"noise_scale must be finite, > 0 with noise and 0 without, got "
                             f"noise={self.noise!r}, noise_scale={self.noise_scale!r}")

    @property
    def name(self) -> str:
        """Short label: ``exact``, ``round8``, ``laplace1e-06``, ``gaussian1e-06-round8``."""
        parts = [f"{self.noise}{self.noise_scale:g}"] if self.noise != "none" else []
        parts += [f"round{self.decimals}"] if self.decimals is not None else []
        return "-".join(parts) or "exact"

    def release(self, loss: float, rng: np.random.Generator) -> float:
        """The reported value of an exact float64 ``loss`` (one draw of the noise from ``rng``)."""
        value = float(loss)
        if self.noise == "laplace":
            value += float(rng.laplace(0.0, self.noise_scale))
        elif self.noise == "gaussian":
            value += float(rng.normal(0.0, self.noise_scale))
        return round(value, self.decimals) if self.decimals is not None else value

    def error_bound(self, *, failure_probability: float) -> float:
        """tau with P(|reported - exact| > tau) <= failure_probability: half a rounding unit plus the noise's
        two-sided quantile (Laplace b ln(1/delta), Gaussian sigma Phi^-1(1 - delta/2))."""
        delta = float(failure_probability)
        if not 0.0 < delta < 1.0:
            raise ValueError(f"failure_probability must lie in (0, 1), got failure_probability={failure_probability!r}")
        bound = 0.5 * 10.0 ** -self.decimals if self.decimals is not None else 0.0
        if self.noise == "laplace":
            bound += self.noise_scale * math.log(1.0 / delta)
        elif self.noise == "gaussian":
            bound += self.noise_scale * float(stats.norm.isf(delta / 2.0))
        return bound

    def error_cdf(self, x: np.ndarray) -> np.ndarray:
        """CDF of reported - exact: the noise's, or Uniform(-h, h) for rounding alone (h = half a unit; the
        rounding error as a uniform variable is a model, exact when the losses spread over many units).

        Raises:
            ValueError: for noise and rounding together, or for an exact oracle (error 0 up to float64).
        """
        if self.noise != "none" and self.decimals is not None:
            raise ValueError(f"no error model for noise and rounding together, got oracle {self.name}")
        if self.noise == "laplace":
            return stats.laplace.cdf(x, scale=self.noise_scale)
        if self.noise == "gaussian":
            return stats.norm.cdf(x, scale=self.noise_scale)
        if self.decimals is None:
            raise ValueError("an exact oracle has no error distribution (its error is float64 rounding)")
        half = 0.5 * 10.0 ** -self.decimals
        return np.clip((np.asarray(x) + half) / (2 * half), 0.0, 1.0)


def numpy_oracle(labels, settings: OracleSettings, *, seed: int) -> Callable[[np.ndarray], float]:
    """The service on a numpy label vector: predictions -> reported loss (noise from default_rng(seed))."""
    y = np.asarray(labels)
    rng = np.random.default_rng(seed)
    return lambda predictions: settings.release(log_loss(y, predictions), rng)


def float64_tolerance(*, n_rows: int, max_loss: float) -> float:
    """Bound on the float64 error of a reported loss <= max_loss summed over n_rows terms in any order:
    (n_rows + 2) 2^-53 max_loss (recursive summation of nonnegative terms, plus the logs and the division)."""
    return (n_rows + 2) * 2.0 ** -53 * max_loss


def product(values: Sequence[int]) -> int:
    """prod(values) by a balanced tree (subquadratic with Karatsuba products; a running product is quadratic)."""
    items = list(values) or [1]
    while len(items) > 1:
        items = [items[j] * items[j + 1] if j + 1 < len(items) else items[j] for j in range(0, len(items), 2)]
    return items[0]


def primes(count: int) -> np.ndarray:
    """The first ``count`` primes (sieve of Eratosthenes up to n (ln n + ln ln n) + 10 >= p_n)."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got count={count!r}")
    n = max(count, 6)
    limit = int(n * (math.log(n) + math.log(math.log(n)))) + 10
    sieve = np.ones(limit + 1, dtype=bool)
    sieve[:2] = False
    for p in range(2, int(limit ** 0.5) + 1):
        if sieve[p]:
            sieve[p * p::p] = False
    return np.flatnonzero(sieve)[:count].astype(np.int64)


def exact_likelihood(labels, odds: Sequence[int]) -> Fraction:
    """exp(-N LLOSS(v/(1+v); labels)) = prod_{y_i = 1} v_i / prod_i (1 + v_i), exactly (integer odds v)."""
    y = np.asarray(labels)
    v = [int(x) for x in odds]
    if y.ndim != 1 or y.size != len(v) or not np.all((y == 0) | (y == 1)):
        raise ValueError(f"labels must be 0/1 with one entry per odds value ({len(v)}), got shape {y.shape}")
    return Fraction(product([x for x, label in zip(v, y) if label == 1]), product([x + 1 for x in v]))


def single_query_decode(likelihood: Fraction, odds: Iterable[int]) -> np.ndarray:
    """Theorem 1: labels y_i = 1 iff the prime p_i divides q = T exp(-N LLOSS), T = prod (1 + p_i).

    Raises:
        ValueError: when q is not an integer (the oracle was not exact or the odds are not these).
    """
    v = [int(x) for x in odds]
    numerator = likelihood.numerator * product([x + 1 for x in v])
    q, remainder = divmod(numerator, likelihood.denominator)
    if remainder:
        raise ValueError("T exp(-N LLOSS) is not an integer: the reported likelihood is not exact for these odds")
    return np.array([1 if q % p == 0 else 0 for p in v], dtype=np.int8)


@dataclass(frozen=True)
class BlockPlan:
    """A block attack: b labels per query, one query per block of consecutive row positions."""

    attack: str  # primes (Algorithm 1) | binary (Algorithm 3)
    n_rows: int
    tolerance: float  # the oracle error tau the plan is robust to
    log_odds: np.ndarray  # ln v_r of the b block positions

    @property
    def block_size(self) -> int:
        return int(self.log_odds.size)

    @property
    def queries(self) -> int:
        """Queries to recover all n_rows labels (0 when no block fits the tolerance)."""
        return -(-self.n_rows // self.block_size) if self.block_size else 0

    def block_predictions(self, length: int) -> np.ndarray:
        """u_r = v_r / (1 + v_r) = sigmoid(ln v_r) of the first ``length`` block positions (1/2 elsewhere)."""
        z = self.log_odds[:length]
        return np.where(z >= 0, 1.0 / (1.0 + np.exp(-z)), np.exp(z) / (1.0 + np.exp(z)))

    def decode(self, loss: float, *, length: int) -> np.ndarray:
        """Labels of a block of ``length`` positions from the reported loss of its query."""
        u = self.block_predictions(length)
        label_free = math.fsum((-np.log1p(-u)).tolist()) + (self.n_rows - length) * LN2
        x = self.n_rows * float(loss) - label_free  # = -sum_{sigma_r = 1} ln v_r (+ oracle error)
        if self.attack == "primes":
            odds = primes(length)
            q = round(math.exp(-x)) if -x < 709.0 else 0
            return np.array([1 if q and q % int(p) == 0 else 0 for p in odds], dtype=np.int8)
        unit = -float(self.log_odds[0])
        k = min(max(round(x / unit), 0), (1 << length) - 1)
        return np.array([(k >> r) & 1 for r in range(length)], dtype=np.int8)


def prime_plan(*, n_rows: int, tolerance: float) -> BlockPlan:
    """Algorithm 1: the largest b with primorial(b) (e^{N tau} - 1) < 1/2 (b = 0: no block is decodable)."""
    n, tau = _check_plan(n_rows, tolerance)
    spread = math.expm1(n * tau)
    size = 0
    primorial = 1
    for p in primes(15):  # primorial(15) > 2^53: beyond float64 integers in any case
        if size == n or primorial * int(p) * spread >= 0.5 or primorial * int(p) >= 2 ** 53:
            break
        primorial *= int(p)
        size += 1
    return BlockPlan("primes", n, tau, np.log(primes(15)[:size].astype(np.float64)))


def binary_plan(*, n_rows: int, tolerance: float) -> BlockPlan:
    """Algorithm 3: w = 2 ln(3) N tau, ln v_r = -2^{r-1} w, b the largest with 2^{b-1} w <= MAX_WEIGHT."""
    n, tau = _check_plan(n_rows, tolerance)
    unit = 2.0 * math.log(3.0) * n * tau
    size = 0 if unit > MAX_WEIGHT or unit == 0 else 1 + int(math.floor(math.log2(MAX_WEIGHT / unit)))
    size = min(size, n, MAX_BINARY_BLOCK)
    return BlockPlan("binary", n, tau, -unit * 2.0 ** np.arange(size))


def _check_plan(n_rows: int, tolerance: float) -> tuple[int, float]:
    if isinstance(n_rows, bool) or not isinstance(n_rows, (int, np.integer)) or n_rows < 1:
        raise ValueError(f"n_rows must be a positive integer, got n_rows={n_rows!r}")
    tau = float(tolerance)
    if not math.isfinite(tau) or tau <= 0.0:
        raise ValueError(f"tolerance must be a finite positive number, got tolerance={tolerance!r}")
    return int(n_rows), tau


def plan(attack: str, *, n_rows: int, tolerance: float) -> BlockPlan:
    """The block plan of ``attack`` (primes | binary) for an oracle error tau."""
    if attack not in ATTACKS:
        raise ValueError(f"attack must be one of {', '.join(ATTACKS)}, got attack={attack!r}")
    return (prime_plan if attack == "primes" else binary_plan)(n_rows=n_rows, tolerance=tolerance)


def run_block_attack(block_plan: BlockPlan, oracle: Callable[[int, np.ndarray], float], *,
                     blocks: int | None = None) -> np.ndarray:
    """Query ``oracle(start, block_predictions)`` (the loss of predictions equal to block_predictions at
    positions start.. and 1/2 elsewhere) block by block; returns the recovered labels of the first
    ``blocks`` blocks (all by default)."""
    if block_plan.block_size == 0:
        raise ValueError(f"no {block_plan.attack} block is decodable at tolerance {block_plan.tolerance:g} "
                         f"for {block_plan.n_rows} rows")
    count = block_plan.queries if blocks is None else min(blocks, block_plan.queries)
    recovered = []
    for index in range(count):
        start = index * block_plan.block_size
        length = min(block_plan.block_size, block_plan.n_rows - start)
        loss = oracle(start, block_plan.block_predictions(length))
        recovered.append(block_plan.decode(loss, length=length))
    return np.concatenate(recovered)


def full_predictions(n_rows: int, start: int, block: np.ndarray) -> np.ndarray:
    """The submitted vector of one block query: ``block`` at positions start.., 1/2 elsewhere."""
    u = np.full(n_rows, 0.5)
    u[start:start + block.size] = block
    return u


def binary_attack_expected_accuracy(labels, block_plan: BlockPlan, settings: OracleSettings) -> float:
    """Expected share of labels the binary attack recovers against an oracle with error Z ~ settings.

    With X = K w + N Z, the decoder returns K' = clip(K + E, 0, 2^b - 1), E = round(N Z / w), so
    P(E = e) = F((e + 1/2) w / N) - F((e - 1/2) w / N) (F = settings.error_cdf), and the accuracy of a block
    is sum_e P(E = e) (number of equal bits of K and K') / b, averaged over the blocks of ``labels``.
    """
    y = np.asarray(labels, dtype=np.int64)
    b = block_plan.block_size
    unit = -float(block_plan.log_odds[0])
    step = unit / block_plan.n_rows
    reach = 1
    while reach < 1 << b and float(settings.error_cdf(np.array([-(reach + 0.5) * step]))[0]) > 1e-15:
        reach *= 2
    errors = np.arange(-reach, reach + 1)
    pmf = settings.error_cdf((errors + 0.5) * step) - settings.error_cdf((errors - 0.5) * step)
    total = 0.0
    for start in range(0, y.size, b):
        bits = y[start:start + b]
        length = bits.size
        k = int(np.dot(bits, 1 << np.arange(length, dtype=np.int64)))
        decoded = np.clip(k + errors, 0, (1 << length) - 1)
        equal = np.array([length - bin(k ^ int(d)).count("1") for d in decoded])
        total += float(np.dot(pmf, equal))
    return total / y.size
