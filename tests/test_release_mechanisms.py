"""The release mechanisms' registry (lia_spark/kernels/release_mechanisms.py): its facts, the grid and kernels that read
it, and the scan that keeps a release mechanism's name from being compared outside it."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from source_scan import name_comparisons

from lia_spark import names
from lia_spark.kernels import _forward_backward as fb
from lia_spark.kernels import leakage, mechanisms, posteriors
from lia_spark.kernels.posterior_grid import Setting, settings_grid
from lia_spark.kernels.release_mechanisms import RELEASE_MECHANISMS, kernel_code, release_mechanism

PACKAGE = Path(__file__).resolve().parents[1] / "lia_spark"
RELEASE_NAMES = {names.RR, names.LLP, names.LLP_LAPLACE, names.LLP_GEOMETRIC}
RELEASE_IDENTIFIERS = {"RR", "LLP", "LLP_LAPLACE", "LLP_GEOMETRIC", "BAG_MECHANISMS", "POSTERIOR_MECHANISMS"}
# Where those names mean something else: a training mechanism (rr, llp are training mechanisms too: their registry is
# kernels/mechanism_registry.py, whose RR family the utility table and charts read), the validity study's "rr" / "null"
# settings, and the forward-backward kernels, whose numba code compares the registry's integer codes.
OTHER_VOCABULARIES = {"kernels/_forward_backward.py", "kernels/leakage.py", "kernels/utility.py",
                      "engine/utility/stage.py", "kernels/label_mechanisms.py", "studies/validity.py",
                      "present/charts.py"}


def test_the_registry_is_the_vocabulary_of_the_posteriors_stage():
    assert tuple(RELEASE_MECHANISMS) == names.POSTERIOR_MECHANISMS
    assert tuple(name for name, m in RELEASE_MECHANISMS.items() if m.bagged) == names.BAG_MECHANISMS
    assert set(mechanisms.BAG_RELEASES) == set(posteriors.BAG_POSTERIORS) == set(names.BAG_MECHANISMS)
    assert set(leakage.WORST_CASES) == set(RELEASE_MECHANISMS) and leakage.MECHANISMS == names.POSTERIOR_MECHANISMS
    assert (fb.LLP, fb.LAPLACE, fb.GEOMETRIC) == tuple(kernel_code(name) for name in names.BAG_MECHANISMS)
    assert len({kernel_code(name) for name in names.BAG_MECHANISMS}) == 3
    with pytest.raises(ValueError, match="not computed by the forward-backward kernels"):
        kernel_code(names.RR)


@pytest.mark.parametrize("name", [names.RR, names.LLP_LAPLACE, names.LLP_GEOMETRIC])
def test_a_noisy_release_takes_a_finite_positive_epsilon(name):
    release = release_mechanism(name)
    assert release.noisy and release.checked_epsilon(2) == 2.0 and release.epsilons([0.5, 1]) == (0.5, 1.0)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match=f"finite positive number for {name}, got epsilon={bad!r}"):
            release.checked_epsilon(bad)


def test_plain_llp_takes_no_epsilon_and_rr_no_bag():
    llp, rr = release_mechanism(names.LLP), release_mechanism(names.RR)
    assert llp.checked_epsilon(math.inf) == math.inf and math.isnan(llp.epsilons([1.0, 2.0])[0])
    with pytest.raises(ValueError, match="llp adds no noise: epsilon must be inf, got epsilon=1.0"):
        llp.checked_epsilon(1.0)
    assert rr.bag_sizes([4, 8]) == (1,) and llp.bag_sizes([4, 8]) == (4, 8)
    with pytest.raises(ValueError, match="mechanism must be one of rr, llp, llp_laplace, llp_geometric, got "
                                         "mechanism='llp_gauss'"):
        release_mechanism("llp_gauss")


class _Grid:
    names = names.POSTERIOR_MECHANISMS
    epsilons = (1.0, 4.0)
    bag_sizes = (2, 8)


def test_the_grid_is_each_release_mechanisms_axes():
    grid = settings_grid(_Grid())
    assert [setting.name for setting in grid] == [
        "rr.eps1.k1", "rr.eps4.k1", "llp.epsinf.k2", "llp.epsinf.k8", "llp_laplace.eps1.k2", "llp_laplace.eps4.k2",
        "llp_laplace.eps1.k8", "llp_laplace.eps4.k8", "llp_geometric.eps1.k2", "llp_geometric.eps4.k2",
        "llp_geometric.eps1.k8", "llp_geometric.eps4.k8"]
    assert [s.stream_label for s in grid[:3]] == ["rr_eps1", "rr_eps4", "llp_k2"]  # the seeds' labels never move


def test_the_worst_case_per_mechanism_is_its_closed_form():
    """Closed forms (docs/math.md §7) to 1e-15; the geometric one equals RR's for every k (tolerance 1e-12)."""
    eps = 1.3
    rr = math.log(2 * math.exp(eps) / (1 + math.exp(eps)))
    assert leakage.worst_case(names.RR, epsilon=eps) == pytest.approx(rr, abs=1e-15)
    assert leakage.worst_case(names.LLP, bag_size=8) == pytest.approx(math.log(2), abs=1e-15)
    assert leakage.worst_case(names.LLP_LAPLACE, epsilon=eps, bag_size=8) == pytest.approx(
        math.log(2 - math.exp(-eps / 2)), abs=1e-15)
    for k in (1, 2, 9, 64):
        assert leakage.worst_case(names.LLP_GEOMETRIC, epsilon=eps, bag_size=k) == pytest.approx(rr, abs=1e-12)
    assert np.all(leakage.per_row_bags(names.RR, [0.2, 0.7], [2], epsilon=eps) == leakage.worst_case(
        names.RR, epsilon=eps))
    assert Setting(names.RR, eps, 1).release is release_mechanism(names.RR)


def test_no_release_mechanism_name_is_compared_outside_its_registry():
    found = [site for path in sorted(PACKAGE.rglob("*.py")) if path.name != "release_mechanisms.py"
             for site in name_comparisons(path, RELEASE_NAMES, RELEASE_IDENTIFIERS, PACKAGE)
             if site.split(":")[0] not in OTHER_VOCABULARIES]
    assert found == []


def test_the_scan_finds_a_release_mechanism_compared_by_name(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f(m, s):\n    return m == 'llp' or s.mechanism in BAG_MECHANISMS\n", encoding="utf-8")
    assert name_comparisons(sample, RELEASE_NAMES, RELEASE_IDENTIFIERS, tmp_path) == ["sample.py:2", "sample.py:2"]
