"""The mechanism registry: one table of facts that every dispatch on a training mechanism reads."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from lia_spark.kernels import label_mechanisms, mechanism_registry, model_libraries
from lia_spark.kernels.mechanism_registry import MECHANISMS, TRAINING_MECHANISMS, label_mechanism
from lia_spark.names import BAG_MECHANISMS, LLP, NONE, PATE, RR, RR_WITH_PRIOR
from lia_spark.run.capabilities import refusal
from lia_spark.studies.table import Cell


def test_every_mechanism_has_one_name_and_one_display_name():
    assert TRAINING_MECHANISMS == tuple(MECHANISMS)
    assert all(name == mechanism.name for name, mechanism in MECHANISMS.items())
    assert len({mechanism.display_name for mechanism in MECHANISMS.values()}) == len(MECHANISMS)
    assert mechanism_registry.BAG_TRAINING_MECHANISMS == BAG_MECHANISMS  # the posteriors' bag releases, trained


@pytest.mark.parametrize("name", ["no_such_mechanism", "", None, "RR"])
def test_an_unknown_name_fails_naming_the_field_and_the_known_names(name):
    with pytest.raises(ValueError, match=rf"^table\.mechanisms must be one of none, rr, .*, got {name!r}$"):
        label_mechanism(name, "table.mechanisms")
    with pytest.raises(ValueError, match=r"^models\.training_mechanism must be one of"):
        mechanism_registry.train_target(None, mechanism=name, epsilon=1.0, seed=0,
                                        params=model_libraries.BoostingParams())


@pytest.mark.parametrize("name", TRAINING_MECHANISMS)
@pytest.mark.parametrize("epsilon", [0.5, math.inf])
def test_the_claim_the_table_cell_and_the_training_labels_follow_the_facts(name, epsilon):
    """No noise, no claim: none and plain llp claim eps = inf at any models.epsilon; the audit table gives them one
    cell per bag size (llp) or one cell (none) named without an epsilon."""
    mechanism = MECHANISMS[name]
    claimed = mechanism.claimed_epsilon(epsilon)
    assert claimed == (epsilon if name not in (NONE, LLP) else math.inf)
    cell = Cell(name, epsilon, 8 if mechanism.bag_release else 1)
    assert ("-eps" in cell.name) == mechanism.private
    assert ("(k=8)" in cell.algorithm) == mechanism.bag_release
    true_labels = mechanism.releases_true_labels(epsilon)
    assert true_labels == (name == NONE or (math.isinf(epsilon) and name not in (PATE, *BAG_MECHANISMS)))


def test_the_per_row_releases_are_the_label_mechanisms_kernels():
    """Both training paths apply the registry's release: RR for rr / rr_debiased, RRWithPrior on the prior for
    rr_with_prior; nothing for none."""
    rng = np.random.default_rng(3)
    labels, ids, prior = rng.integers(0, 2, 5000).astype(np.int8), np.arange(5000, dtype=np.int64), rng.random(5000)
    rr = MECHANISMS[RR].release_labels(labels, ids, None, epsilon=1.0, seed=9)
    np.testing.assert_array_equal(rr, label_mechanisms.randomized_response(labels, ids, epsilon=1.0, seed=9))
    np.testing.assert_array_equal(MECHANISMS["rr_debiased"].release_labels(labels, ids, None, epsilon=1.0, seed=9), rr)
    with_prior = MECHANISMS[RR_WITH_PRIOR].release_labels(labels, ids, prior, epsilon=1.0, seed=9)
    np.testing.assert_array_equal(with_prior, label_mechanisms.rr_with_prior(labels, prior, ids, epsilon=1.0, seed=9))
    with pytest.raises(ValueError, match="rr_with_prior needs a prior"):
        MECHANISMS[RR_WITH_PRIOR].release_labels(labels, ids, None, epsilon=1.0, seed=9)
    assert MECHANISMS[NONE].release_labels is None
    assert {name for name, m in MECHANISMS.items() if m.release_labels is not None} == {
        RR, RR_WITH_PRIOR, "rr_debiased"}


@pytest.mark.parametrize("name", TRAINING_MECHANISMS)
def test_capabilities_are_the_registry_libraries_and_executions(name):
    mechanism = MECHANISMS[name]
    for library in ("xgboost", "catboost"):
        for execution in ("in_memory", "distributed"):
            found = refusal(name, library=library, execution=execution)
            if execution == "distributed" and library != "xgboost":
                assert found is not None and found.field == "models.execution"
                continue
            allowed = library in mechanism.libraries and execution in mechanism.executions
            assert (found is None) == allowed, (library, execution, found)
            if found is not None:
                assert found.field == "models.training_mechanism" and mechanism.limitation in found.reason
                assert "set models." in found.fix


def test_the_registry_loads_without_the_training_kernels():
    """The configuration checks read the registry; importing it must not import the trainers (seconds of numba,
    sklearn and xgboost at every command's start)."""
    code = ("import sys; import lia_spark.run.config, lia_spark.kernels.mechanism_registry; "
            "print(sorted(m for m in ('lia_spark.kernels.training', 'lia_spark.kernels.label_mechanisms', 'sklearn',"
            " 'xgboost', 'numba') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"



def test_only_the_registry_compares_a_training_mechanism_that_dispatches_on_its_teachers():
    """A student of teachers (PATE) is the registry's ``teachers``: the config, the row limits, the target's refits
    and the utility grid ask it, and no module outside the registry compares PATE's name."""
    from pathlib import Path

    from source_scan import name_comparisons

    assert [name for name, mechanism in MECHANISMS.items() if mechanism.teachers] == [PATE]
    root = Path(mechanism_registry.__file__).resolve().parent.parent
    found = [site for path in sorted(root.rglob("*.py")) if path.name != "mechanism_registry.py"
             for site in name_comparisons(path, {PATE}, {"PATE"}, root)]
    assert found == []
