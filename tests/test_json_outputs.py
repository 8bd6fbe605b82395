"""The JSON lia-spark writes: the shipped JSON Schemas (draft 2020-12, lia_spark/run/json_schemas) are valid, cover
every command and are documented; a real ``lia-spark audit`` folder matches them and holds no NaN / Infinity
literal, and a corrupted document fails; MLflow params follow the same convention (inf -> "inf", NaN -> null).
Whole runs: tests/test_run_outputs.py; each stage's own files: its test (json_support.check_file)."""
from __future__ import annotations

import contextlib
import io
import json
import math
import re

import jsonschema
import numpy as np
import pandas as pd
import pytest
import yaml
from json_support import check_file, strict_load
from pipeline_support import REPO

from lia_spark.cli.main import COMMAND_NAMES, main
from lia_spark.records.wording import NO_EVIDENCE
from lia_spark.run import schemas


@pytest.fixture(scope="module")
def audited(spark, tmp_path_factory) -> dict:
    """``lia-spark audit`` (observational, 3 repetitions) of 2,000 canaries whose target is the proxy itself: a
    model that learned nothing from their labels, so the bound is 0."""
    root = tmp_path_factory.mktemp("json-outputs")
    rng = np.random.default_rng(3)
    proxy = rng.uniform(0.05, 0.95, 2000)
    spark.createDataFrame(pd.DataFrame({
        "row_id": np.arange(2000, dtype=np.int64), "label": (rng.random(2000) < proxy).astype(np.int32),
        "target_prediction": proxy, "proxy_prediction": proxy})).write.parquet(str(root / "canaries"))
    conf = root / "conf.yaml"
    conf.write_text(yaml.safe_dump({"run": {"output_dir": str(root / "out")}, "tracking": {"enabled": False},
                                    "audit": {"canary_path": str(root / "canaries"), "design": "observational",
                                              "repetitions": 3}}), encoding="utf-8")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["audit", "--conf", str(conf)]) == 0
    return {"out": root / "out", "stdout": stdout.getvalue()}


def test_the_audit_command_writes_standard_json_that_matches_its_schemas(audited):
    files = sorted(audited["out"].rglob("*.json"))
    assert [str(path.relative_to(audited["out"])) for path in files] == ["audit/summary.json", "results/audit.json"]
    summary, result = (check_file(path) for path in files)  # each strictly parsed: no NaN / Infinity literal
    assert result["summary"] == summary and summary["design"] == "observational"
    assert summary["headline"]["claimed_epsilon"] == "not stated" and summary["headline"]["measured_tau"] is None


def test_a_bound_of_zero_reads_as_no_evidence_on_the_console(audited):
    headline = strict_load(audited["out"] / "results" / "audit.json")["summary"]["headline"]
    last = audited["stdout"].strip().splitlines()[-1]
    assert headline["eps_lb"] == 0.0 and last == f"audit: {headline['text']}" and NO_EVIDENCE in last
    assert last.endswith(f"; with 2000 canaries an attacker with every guess right certifies {headline['ceiling']:.3f} "
                         "(no claimed eps)")  # what the audit could have found
    assert headline["ceiling_95"] == headline["ceiling"]  # every guess right: nothing random
    assert "claimed eps = not stated" in last and not re.search(r"\b(nan|NaN|inf)\b", last)


def test_a_corrupted_document_fails_its_schema(audited):
    result = strict_load(audited["out"] / "results" / "audit.json")
    summary = result["summary"]
    broken = [
        ("audit", {**result, "canaries": "2000"}),  # wrong type
        ("audit", {key: value for key, value in result.items() if key != "files"}),  # missing key
        ("audit", {**result, "summary": {**summary, "headline": {**summary["headline"], "eps_lb": -1.0}}}),
        ("audit-summary", {**summary, "best": {"eps_binomial_bonferroni": {"mean": 1.0}}}),
        ("audit-summary", {key: value for key, value in summary.items() if key != "eps_lb_by_tau"}),  # observational
        ("audit-summary", {**summary, "design": "injected"}),  # ... keys under another design
        ("audit-summary", {**summary, "surprise": 1}),  # a key no schema (and no docs) describe
    ]
    for name, document in broken:
        with pytest.raises(jsonschema.ValidationError):
            schemas.validate(document, name)
    (audited["out"] / "bad.json").write_text('{"epsilon": Infinity}', encoding="utf-8")
    with pytest.raises(ValueError, match="Infinity"):
        strict_load(audited["out"] / "bad.json")


def test_strict_json_writes_nan_as_null_and_infinities_as_words():
    from lia_spark.run.json_output import strict_json

    payload = {"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": (1, "x"), "d": {"e": None}, 2: True}
    text = strict_json(payload)
    assert json.loads(text) == {"a": None, "b": ["inf", "-inf", 1.5], "c": [1, "x"], "d": {"e": None}, "2": True}
    assert "NaN" not in text and "Infinity" not in text


def test_schemas_are_draft_2020_12_documented_and_cover_every_command():
    for name, schema in schemas.schemas().items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$id"] == f"{schemas.ID_PREFIX}{name}"
    assert [command for command in COMMAND_NAMES if schemas.schema_for(f"out/results/{command}.json") is None] == []
    layout = (REPO / "docs" / "layout.md").read_text(encoding="utf-8")
    assert [name for name in schemas.schemas() if f"`{name}.schema.json`" not in layout] == []
    assert schemas.schema_for("out/table/cells/rr-eps1/models/metrics.json") == "train"
    assert schemas.schema_for("out/models/proxy.output.json") == "output-transform"
    assert schemas.schema_for("out/report/report.html") is None and schemas.schema_for("out/results/x.json") is None
    with pytest.raises(KeyError, match="no lia-spark schema named 'nope'"):
        schemas.validate({}, "nope")


def test_mlflow_params_hold_no_nan_or_infinity(tmp_path):
    """flatten's convention, and the params a parent run gets from the default config (models.epsilon = inf,
    utility.epsilons ending in inf)."""
    import mlflow

    from lia_spark.run.config import config_from_dict
    from lia_spark.tracking.mlflow_runs import PipelineTracker, flatten

    assert flatten({"a": math.inf, "b": [1.0, math.inf, math.nan], "c": {"d": -math.inf}, "e": "x", "f": (1,)}) == {
        "a": "inf", "b": '[1.0, "inf", null]', "c.d": "-inf", "e": "x", "f": "[1]"}
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = PipelineTracker(config_from_dict({"tracking": {"tracking_uri": uri, "experiment": "params"}}))
    run_id = tracker.start()
    tracker.end(failed=False)
    params = mlflow.MlflowClient(uri).get_run(run_id).data.params
    assert params["models.epsilon"] == "inf" and json.loads(params["utility.epsilons"])[-1] == "inf"
    assert [key for key, value in params.items() if re.search(r"NaN|Infinity", value)] == []
