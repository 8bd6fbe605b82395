"""The whole pipeline over Spark Connect, as on Databricks shared and serverless compute: ``lia-spark run
spark.remote=local[2]`` (a local Spark Connect server, in a child process) gives the classic run's results."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pipeline_support import OWN_TRAINER, PYTHON, REPO, python_without_package, tiny_run

from lia_spark.run.json_output import strict_json

TESTS = REPO / "tests"  # the child imports parquet_pages from here

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)

# The child, on a Connect server whose Python lacks lia_spark (a cluster's as the README describes it): the CLI's
# pipeline with spark.ship_package=false (refused before any stage, naming the key), then as the config says
# (spark.ship_package=true: the client's lia_spark sent with addArtifacts); then, on the same Connect session, the
# errors it prints for the train stage with models.execution=distributed (xgboost.spark needs a SparkContext) and
# for an output folder given as a URI (only the server could reach it), then the audit of a model of your own
# (inject, the team's trainer, audit.model_uri scored by mlflow's spark_udf over Connect).
CHILD = """
import subprocess
import sys
from lia_spark.cli.main import main
from lia_spark.run.config import load_config
from lia_spark.engine.runtime.outputs import check_writable
from lia_spark.engine.spark.session import get_spark, is_connect
from lia_spark.engine.orchestration.registry import run_stage

print("without:", main(["run", "--conf", sys.argv[1], "spark.ship_package=false"]))
code = main(["run", "--conf", sys.argv[1]])
config = load_config(sys.argv[1], ["models.execution=distributed"])
spark = get_spark(config.spark)
assert is_connect(spark), type(spark)
try:
    run_stage("train", spark, config)
except ValueError as error:
    print("distributed:", error)
try:
    check_writable(spark, "s3a://bucket/lia")
except ValueError as error:
    print("uri:", error)
own = load_config(sys.argv[1])
injected = run_stage("inject", spark, own)
trained = subprocess.run([sys.executable, sys.argv[2], injected.export_path, "--tracking-uri",
                          own.tracking.tracking_uri, "--epsilon", "1", "--flip-epsilon", "8"],
                         capture_output=True, text=True, check=True)
uri = trained.stdout.strip().splitlines()[-1]
audited = run_stage("audit", spark, load_config(sys.argv[1], [f"audit.model_uri={uri}", "audit.claimed_epsilon=1"]))
print("own model:", audited.headline.text())
sys.path.insert(0, sys.argv[3])
import pathlib, shutil
from parquet_pages import flip_in_column
from lia_spark.run.failures import failure_line
print("checksums:", spark.conf.get("parquet.page.write-checksum.enabled"),
      spark.conf.get("parquet.page.verify-checksum.enabled"))
damaged = shutil.copytree(own.parquet_path, own.run.output_dir + "/damaged")
flip_in_column(sorted(pathlib.Path(damaged).rglob("*.parquet"))[-1], "label", crc="recompute")
try:
    spark.read.parquet(damaged).collect()
except Exception as error:
    print("damaged: exit %d: %s" % failure_line(error)[::-1])
sys.exit(code)
"""


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    return tiny_run(spark, tmp_path_factory)


def _computed(value: Any) -> Any:
    """``value`` without what describes how the run went rather than what it computed: every entry whose key names
    seconds, and where the utility grid's fits ran (Spark tasks on classic sessions, the driver over Connect)."""
    if isinstance(value, dict):
        return {key: _computed(item) for key, item in value.items() if "seconds" not in key and key != "fits_where"}
    if isinstance(value, list):
        return [_computed(item) for item in value]
    return value


@pytest.mark.timeout(900)
def test_pipeline_over_spark_connect_without_lia_spark_on_the_server_matches_the_classic_run(run, tmp_path):
    """The README's Connect paragraph: spark.ship_package=true sends the client's lia_spark to a server whose Python
    lacks it, and the pipeline's results equal the classic run's; with it false the command stops before any stage,
    naming the key. (One server for both: each local Connect server costs about two minutes of start-up.)"""
    out = tmp_path / "out"
    server_python = python_without_package(tmp_path / "server-python")
    conf = run.conf_file(tmp_path / "conf.yaml", run={"output_dir": str(out), "progress_seconds": 0.5},
                         spark={"remote": "local[2]", "ship_package": True},
                         tracking={"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"})
    env = {**os.environ, "PYSPARK_PYTHON": str(server_python), "PYSPARK_DRIVER_PYTHON": PYTHON,
           "SPARK_LOCAL_IP": "127.0.0.1", "MPLBACKEND": "Agg"}
    completed = subprocess.run([PYTHON, "-c", CHILD, str(conf), str(OWN_TRAINER), str(TESTS)], env=env,
                               cwd=tmp_path, capture_output=True, text=True, timeout=840)
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert "without: 2" in completed.stdout, completed.stderr[-4000:]
    refusal = next(line for line in completed.stderr.splitlines() if line.startswith("lia-spark: "))
    assert "cannot import lia_spark" in refusal and "set spark.ship_package=true" in refusal, refusal
    assert str(server_python) in refusal
    assert "(this driver's, shipped as lia_spark-" in completed.stderr
    # the local server got the static settings at its start; pyspark's refusals to set them again are not shown
    assert "Failed to set" not in completed.stderr, completed.stderr[-4000:]
    assert "distributed: models.execution: distributed (xgboost.spark) needs a classic Spark session" in \
        completed.stdout, completed.stdout[-2000:]
    assert "uri: run.output_dir: over Spark Connect" in completed.stdout and "/Volumes/" in completed.stdout
    # the steps' own counts over Connect: train's fits (proxy, target) and the utility grid's, on the driver
    counted = {match.group(1) for match in re.finditer(r"progress: (train|utility)\b.*?: pipeline step \d/\d; "
                                                       r"\d+/\d+ model fits done", completed.stderr)}
    assert counted == {"train", "utility"}, completed.stderr[-4000:]
    own = next(line for line in completed.stdout.splitlines() if line.startswith("own model: "))
    assert "its own mechanism (model runs:/" in own and "FINDING" in own, own  # a broken RR, scored over Connect
    # Parquet's page CRCs are written and verified over Connect too: a flipped label page is refused in one line
    assert "checksums: true true" in completed.stdout, completed.stdout[-2000:]
    damaged = next(line for line in completed.stdout.splitlines() if line.startswith("damaged: "))
    assert damaged.startswith(f"damaged: exit 1: {out}/damaged/day=1/part-") and ": damaged, its bytes changed" in \
        damaged and f"in the table {out}/damaged;" in damaged and "run.force=true" in damaged, damaged

    connect = json.loads(Path(out / "results" / "pipeline.json").read_text(encoding="utf-8"))
    classic = json.loads(strict_json(run.result).replace(run.config.run.output_dir, str(out)))
    assert connect["spark_master"].startswith("spark connect")
    assert [(step["step"], step["status"]) for step in connect["steps"]] == [
        (step["step"], "ran") for step in classic["steps"]]
    assert _computed(connect["steps"]) == _computed(classic["steps"])
    fits_where = {name: next(step["result"]["fits_where"] for step in payload["steps"] if step["step"] == "utility")
                  for name, payload in (("connect", connect), ("classic", classic))}
    assert fits_where == {"connect": "driver", "classic": "spark tasks"}
    assert (out / "report" / "report.html").exists() and not list(out.glob("*._tmp-*"))
