"""Label-free recalibration of the target onto the proxy (docs/math.md §5.11): the increasing fit against scipy's
isotonic regression, exact totals under any batching, recovery of a shifted target, extremes."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import isotonic_regression
from scipy.special import expit, logit

from lia_spark.kernels import recalibration


def _fit(target: np.ndarray, proxy: np.ndarray, batches: int = 1) -> recalibration.RecalibrationMap:
    totals: dict[int, list[int]] = {}
    for part in np.array_split(np.arange(target.size), batches):
        for b, count, total in zip(*recalibration.bin_sums(target[part], proxy[part])):
            entry = totals.setdefault(int(b), [0, 0])
            entry[0] += int(count)
            entry[1] += int(total)
    bins = np.array(list(totals))
    return recalibration.RecalibrationMap.fit(bins, np.array([v[0] for v in totals.values()]),
                                              np.array([v[1] for v in totals.values()]))


@pytest.mark.parametrize("seed", range(5))
def test_increasing_fit_equals_scipy_isotonic_regression(seed):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(300).cumsum() * 0.1 + rng.standard_normal(300)
    weights = rng.integers(1, 50, 300).astype(np.float64)
    expected = isotonic_regression(values, weights=weights, increasing=True).x
    found = recalibration.increasing_fit(values, weights)
    np.testing.assert_allclose(found, expected, rtol=1e-12, atol=1e-12)
    assert (np.diff(found) >= -1e-15).all()


def test_totals_and_map_do_not_depend_on_batching():
    rng = np.random.default_rng(1)
    proxy = expit(rng.normal(-3.4, 1.0, 100_000))
    target = expit(logit(proxy) + rng.normal(0.5, 0.4, proxy.size))
    one, many = _fit(target, proxy), _fit(target[::-1].copy(), proxy[::-1].copy(), batches=37)
    np.testing.assert_array_equal(one.centres, many.centres)
    np.testing.assert_array_equal(one.values, many.values)  # integer totals: bit-identical
    assert one.canaries == proxy.size


def test_a_target_shifted_by_three_in_logit_is_mapped_back_onto_the_proxy():
    rng = np.random.default_rng(2)
    proxy = expit(rng.normal(-3.4, 1.0, 400_000))
    target = expit(logit(proxy) + 3.0)  # the independent check of the issue: +3 in logit
    mapped = _fit(target, proxy)(target)
    # tolerance: half a bin in logit (40 / 8192 / 2 = 0.0024) times the slope p (1 - p) <= 1/4, plus float noise
    assert np.abs(mapped - proxy).max() < 0.0025 * 0.25 + 1e-9
    assert np.abs(logit(mapped) - logit(proxy)).max() < 0.01


def test_map_is_increasing_and_stays_inside_the_unit_interval_at_extremes():
    target = np.array([1e-300, 1e-12, 1e-9, 0.3, 1 - 1e-9, 1.0])
    proxy = np.array([0.0, 0.0, 1e-9, 0.5, 1.0, 1.0])
    found = _fit(target, proxy)
    mapped = found(np.concatenate([target, [0.0, 0.5, 1.0]]))
    assert np.isfinite(np.log(mapped)).all() and np.isfinite(np.log1p(-mapped)).all()
    assert (np.diff(found(np.linspace(0, 1, 1001))) >= 0).all()
    with pytest.raises(ValueError, match="no canary"):
        recalibration.RecalibrationMap.fit(np.array([3]), np.array([0]), np.array([0]))


def test_bin_totals_are_exact_integers_beyond_float_precision():
    """A bin holding 3 million predictions of 1 - 2^-30 sums to 3e6 * round((1 - 2^-30) 2^32) exactly (past 2^53)."""
    reference = np.full(3_000_000, 1.0 - 2.0**-30)
    bins, counts, sums = recalibration.bin_sums(np.full(reference.size, 0.25), reference)
    assert bins.size == 1 and counts[0] == reference.size
    assert int(sums[0]) == reference.size * (2**32 - 4) and int(sums[0]) > 2**53
