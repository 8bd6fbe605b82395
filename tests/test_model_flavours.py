"""Audit the models users log (docs/usage.md, "Audit your own model"): a classifier logged the ordinary way with a
native flavour (MLflow's sklearn, xgboost's sklearn API, lightgbm, catboost; tests/own_trainer.py --flavours, a real
local MLflow store) is scored by its own predict_proba on the executors, and its bound equals that of the same fitted
classifier wrapped as a pyfunc returning predict_proba(X)[:, 1]; a pyfunc returning class labels is still refused."""
from __future__ import annotations

import subprocess
import sys

import pytest
from pipeline_support import OWN_TRAINER

from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.kernels.injected import PROBABILITY_FIX
from lia_spark.run import layout
from lia_spark.run.config import config_from_dict
from lia_spark.tracking.model_scoring import NATIVE_FLAVOURS, model_facts

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)


@pytest.fixture(scope="module")
def logged(spark, tmp_path_factory):
    """An injected export of 5,000 rows, each flavour's classifier fitted on its labels (released by randomized
    response at eps = 1) and logged natively and wrapped: (config values, {flavour: (native, wrapped)}, labels URI)."""
    root = tmp_path_factory.mktemp("flavours")
    values = {"run": {"name": "flavours", "output_dir": str(root / "out")},
              "spark": {"master": "local[2]", "driver_memory": "2g", "shuffle_partitions": 4},
              "synthetic": {"rows_per_day": 5_000, "days": 2},
              "models": {"n_estimators": 10, "early_stopping_rounds": 0, "hash_buckets": 1024},
              "tracking": {"tracking_uri": f"sqlite:///{root / 'mlflow.db'}", "experiment": "flavours"}}
    config = config_from_dict(values)
    run_stage("generate", spark, config)
    run_stage("inject", spark, config)
    done = subprocess.run([sys.executable, str(OWN_TRAINER), layout.export_path(config), "--tracking-uri",
                           config.tracking.tracking_uri, "--epsilon", "1", "--flavours", ",".join(NATIVE_FLAVOURS)],
                          capture_output=True, text=True, cwd=root, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.split() for line in done.stdout.splitlines()
             if line.split()[:1] in (["labels"], *[[f] for f in NATIVE_FLAVOURS])]
    models = {line[0]: (line[1], line[2]) for line in lines if line[0] != "labels"}
    assert sorted(models) == sorted(NATIVE_FLAVOURS)
    (labels,) = [line[1] for line in lines if line[0] == "labels"]
    return values, models, labels


def _audit(spark, values: dict, uri: str):
    return run_stage("audit", spark, config_from_dict({**values, "audit": {"model_uri": uri, "claimed_epsilon": 1.0}}))


@pytest.mark.parametrize("flavour", NATIVE_FLAVOURS)
def test_a_classifier_logged_with_its_flavour_is_audited_as_its_predict_proba(spark, logged, flavour, caplog):
    values, models, _ = logged
    native, wrapped = models[flavour]
    tracking_uri = values["tracking"]["tracking_uri"]
    assert model_facts(native, tracking_uri).flavour == flavour  # logged the ordinary way, without a signature
    assert model_facts(native, tracking_uri).inputs is None and model_facts(wrapped, tracking_uri).flavour == ""
    caplog.set_level("INFO", logger="lia_spark")
    by_flavour = _audit(spark, values, native)
    assert f"P(y = 1) of its {flavour} predict_proba" in caplog.text
    by_pyfunc = _audit(spark, values, wrapped)
    assert f"model {native}" in by_flavour.headline.text()
    assert by_flavour.summary.canaries == by_pyfunc.summary.canaries > 0
    assert by_flavour.headline.eps_lb == pytest.approx(by_pyfunc.headline.eps_lb, abs=1e-12)
    assert by_flavour.headline.eps_lb > 0  # the classifier saw the injected labels: a bound, not "no evidence"


def test_a_pyfunc_returning_class_labels_is_still_refused_with_the_fix(spark, logged):
    values, _, labels = logged
    with pytest.raises(ValueError, match=r"^audit.model_uri: every prediction is 0 or 1 \(class labels, not "
                                         r"probabilities\), got .*; " + PROBABILITY_FIX.replace("(", r"\(")
                                         .replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        _audit(spark, values, labels)
