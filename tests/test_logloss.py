"""Log-loss label inference: exact recovery with exact oracles, and accuracy under rounding and noise against
the paper's analysis (Aggarwal et al., ICML 2021: Theorem 1, Algorithm 1, Lemma 2 / Theorem 7, Theorem 9)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from lia_spark.kernels import logloss

N = 10_000
MAX_LOSS = math.log(2.0) + 2 * logloss.MAX_WEIGHT / N  # bound on any block query's loss (module docstring)


@pytest.fixture(scope="module")
def labels() -> np.ndarray:
    return np.random.default_rng(17).integers(0, 2, N)


def _attack(labels, settings, attack, tolerance, seed=5):
    oracle = logloss.numpy_oracle(labels, settings, seed=seed)
    plan = logloss.plan(attack, n_rows=labels.size, tolerance=tolerance)
    recovered = logloss.run_block_attack(plan, lambda start, block: oracle(
        logloss.full_predictions(labels.size, start, block)))
    return plan, recovered


def test_log_loss_is_the_textbook_formula():
    y = np.array([1, 0, 1, 1, 0])
    u = np.array([0.9, 0.2, 1e-300, 0.5, 1 - 1e-12])
    reference = -math.fsum([math.log(p) if t else math.log(1 - p) for t, p in zip(y, u)]) / 5
    assert logloss.log_loss(y, u) == pytest.approx(reference, rel=1e-12)


def test_single_query_worked_example_of_the_paper():
    # Theorem 1's example: v = [2, 3, 5, 7, 11], labels [0, 1, 1, 0, 1]: LLOSS = (1/5) ln(2304/55), q = 165
    odds = logloss.primes(5)
    assert odds.tolist() == [2, 3, 5, 7, 11]
    likelihood = logloss.exact_likelihood([0, 1, 1, 0, 1], odds)
    assert likelihood == Fraction(55, 2304)
    assert logloss.single_query_decode(likelihood, odds).tolist() == [0, 1, 1, 0, 1]


def test_single_query_recovers_10k_labels_with_an_exact_oracle(labels):
    odds = logloss.primes(N)
    assert logloss.single_query_decode(logloss.exact_likelihood(labels, odds), odds).tolist() == labels.tolist()


@pytest.mark.parametrize("attack", logloss.ATTACKS)
def test_block_attacks_recover_10k_labels_with_an_exact_float64_oracle(labels, attack):
    plan, recovered = _attack(labels, logloss.OracleSettings(), attack,
                              logloss.float64_tolerance(n_rows=N, max_loss=MAX_LOSS))
    assert plan.block_size >= (8 if attack == "primes" else 30)
    assert plan.queries == math.ceil(N / plan.block_size)
    np.testing.assert_array_equal(recovered, labels)


@pytest.mark.parametrize("decimals", [5, 9, 12])
@pytest.mark.parametrize("attack", logloss.ATTACKS)
def test_rounded_oracle_is_defeated_exactly_when_tau_covers_half_a_unit(labels, attack, decimals):
    """Lemma 2 / Theorem 7: a tau-robust vector recovers every label when |reported - exact| <= tau."""
    settings = logloss.OracleSettings(decimals=decimals)
    tau = settings.error_bound(failure_probability=0.5) + logloss.float64_tolerance(n_rows=N, max_loss=MAX_LOSS)
    plan = logloss.plan(attack, n_rows=N, tolerance=tau)
    if plan.block_size == 0:  # primes: primorial(1) (e^{N tau} - 1) >= 1/2, the attack cannot start
        assert attack == "primes" and 2 * math.expm1(N * tau) >= 0.5
        return
    np.testing.assert_array_equal(_attack(labels, settings, attack, tau)[1], labels)


def _within(measured_blocks: np.ndarray, expected: float, sigmas: float = 4.5) -> bool:
    """|mean - expected| <= sigmas standard errors of the mean of per-block outcomes."""
    se = measured_blocks.std(ddof=1) / math.sqrt(measured_blocks.size)
    return abs(measured_blocks.mean() - expected) <= sigmas * max(se, 1e-3)


@pytest.mark.parametrize("settings,tau", [
    (logloss.OracleSettings(noise="laplace", noise_scale=1e-7), 1e-7),
    (logloss.OracleSettings(noise="gaussian", noise_scale=1e-7), 1e-7),
    (logloss.OracleSettings(decimals=8), 1e-9),  # tau below half a unit (5e-9): rounding as Uniform(-h, h)
])
def test_binary_attack_accuracy_under_noise_and_rounding_matches_the_analysis(labels, settings, tau):
    """Block exact iff |N Z| < w/2 = ln(3) N tau: P(exact) = F(ln3 tau) - F(-ln3 tau) for the oracle error Z
    (Lemma 2's separation); per-label accuracy sum_e P(E = e) equal_bits(K, clip(K + e)) / b with
    E = round(N Z / w) (logloss.binary_attack_expected_accuracy)."""
    plan, recovered = _attack(labels, settings, "binary", tau)
    b = plan.block_size
    blocks = np.arange(N) // b
    correct = (recovered == labels).astype(float)
    per_block_accuracy = np.bincount(blocks, correct) / np.bincount(blocks)
    per_block_exact = (np.bincount(blocks, 1 - correct) == 0).astype(float)
    edge = math.log(3.0) * tau
    exact_probability = float(settings.error_cdf(np.array([edge]))[0] - settings.error_cdf(np.array([-edge]))[0])
    assert 0.05 < exact_probability < 0.95  # the test exercises partial recovery
    assert _within(per_block_exact, exact_probability)
    expected = logloss.binary_attack_expected_accuracy(labels, plan, settings)
    assert _within(per_block_accuracy, expected)


def test_prime_attack_fails_when_the_error_exceeds_its_tolerance(labels):
    """Algorithm 1 needs q (e^{N |Z|} - 1) < 1/2: planned for float64 error only, 6-decimal rounding breaks it."""
    tau = logloss.float64_tolerance(n_rows=N, max_loss=MAX_LOSS)
    _, recovered = _attack(labels, logloss.OracleSettings(decimals=6), "primes", tau)
    assert (recovered == labels).mean() < 0.8


def test_plans_shrink_with_the_tolerance_and_stop_when_nothing_fits():
    sizes = [logloss.binary_plan(n_rows=10**6, tolerance=t).block_size for t in (1e-12, 1e-9, 1e-6, 1e-4)]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] >= 1
    assert logloss.binary_plan(n_rows=10**6, tolerance=1e-3).block_size == 0  # w = 2 ln3 N tau > 700
    assert logloss.prime_plan(n_rows=10**6, tolerance=1e-6).block_size == 0  # 2 (e^1 - 1) >= 1/2
    with pytest.raises(ValueError, match="no binary block"):
        logloss.run_block_attack(logloss.binary_plan(n_rows=10**6, tolerance=1e-3), lambda s, b: 0.0)


def test_invalid_oracle_settings_name_the_field():
    with pytest.raises(ValueError, match="decimals"):
        logloss.OracleSettings(decimals=-1)
    with pytest.raises(ValueError, match="noise"):
        logloss.OracleSettings(noise="uniform")
    with pytest.raises(ValueError, match="noise_scale"):
        logloss.OracleSettings(noise="laplace")
    with pytest.raises(ValueError, match="tolerance"):
        logloss.plan("binary", n_rows=10, tolerance=0.0)
