"""The numbers of the tiny pipeline run (every stage: data, train, posteriors, utility, audit, report) and of the audit
of a model of your own (`lia-spark inject`, the team's trainer, `lia-spark audit audit.model_uri=...`, then notebook
04 on the same export) equal the committed reference values the newest stack wrote (tests/reference_support.py);
`make test-oldest` runs this file on Spark 3.5 + MLflow 2.21 + xgboost 2.x, the main tiers on the newest stack."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_support import OWN_TRAINER, conf_file, run_notebook, tiny_run, tiny_values, with_tiny_key
from reference_support import check_reference

from lia_spark.cli.main import main
from lia_spark.run.json_output import strict_json

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    return tiny_run(spark, tmp_path_factory)


def test_the_tiny_pipeline_gives_the_reference_numbers(run):
    check_reference("tiny_run", json.loads(strict_json(run.result)), minimum=300)


@pytest.fixture(scope="module")
def own(run, tmp_path_factory):
    """`lia-spark inject` on the tiny run's data (an output folder of its own), the trainer's model logged to a store
    of its own: (conf file, model URI)."""
    root = tmp_path_factory.mktemp("own-reference")
    values = with_tiny_key(tiny_values(root / "out", f"sqlite:///{root / 'mlflow.db'}"), root / "out")
    values["data"] = {"parquet_path": run.config.parquet_path}
    conf = conf_file(root / "conf.yaml", values, run={"name": "own-reference"})
    assert main(["inject", "--conf", str(conf)]) == 0
    trained = subprocess.run([sys.executable, str(OWN_TRAINER), str(root / "out" / "inject" / "export"),
                              "--tracking-uri", values["tracking"]["tracking_uri"], "--epsilon", "1"],
                             capture_output=True, text=True, cwd=root, check=False)
    assert trained.returncode == 0, trained.stderr[-3000:]
    return conf, trained.stdout.strip().splitlines()[-1]


def test_the_audit_of_your_own_model_gives_the_reference_numbers(own, capsys):
    conf, uri = own
    assert main(["audit", "--conf", str(conf), f"audit.model_uri={uri}", "audit.claimed_epsilon=1"]) == 0
    assert f"model {uri}" in capsys.readouterr().out
    document = json.loads((Path(conf).parent / "out" / "results" / "audit.json").read_text(encoding="utf-8"))
    check_reference("own_model", document, minimum=100)


def test_the_notebook_exports_trains_its_example_and_audits(own):
    conf, _ = own
    output = run_notebook("04_audit_own_model.py", {"LIA_CONF": str(conf), "LIA_CLAIMED_EPSILON": "2"},
                          Path(conf).parent).stdout
    assert "exported to" in output and "model: runs:/" in output
    assert "at claimed eps = 2" in output and "summary.json" in output
