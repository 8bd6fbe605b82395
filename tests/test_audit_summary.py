"""The audit summary's typed records: the shipped JSON Schema is the one generated from them, and a summary file
reads back into the same record (both designs, non-finite numbers included)."""
from __future__ import annotations

import json
import math

import pytest

from lia_spark.records.audit_summary import AuditSummary, audit_summary_schema
from lia_spark.run import schemas
from lia_spark.run.json_output import json_safe, strict_json
from pipeline_support import REPO
from summary_support import audit_summary

SCHEMA_FILE = REPO / "lia_spark" / "run" / "json_schemas" / "audit-summary.schema.json"


def test_the_shipped_schema_is_the_one_generated_from_the_records():
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == audit_summary_schema(), (
        "regenerate lia_spark/run/json_schemas/audit-summary.schema.json from audit_summary_schema()")


@pytest.mark.parametrize("design", ["injected", "observational"])
def test_a_summary_file_matches_its_schema_and_reads_back_into_the_same_record(design):
    summary = audit_summary(design)
    written = json.loads(strict_json(summary))
    schemas.validate(written, "audit-summary")
    assert ("eps_lb_by_tau" in written) == (design == "observational") and "observational" not in written
    assert written["ceiling"]["claimed_epsilon"] == "inf" and written["gdp_delta"] is None
    read = AuditSummary.from_dict(written)
    assert json_safe(read.to_dict()) == written
    assert read.headline_bound == summary.best["eps_binomial_bonferroni"] and read.guesses == (10, 20)
    if design == "observational":
        assert read.observational.tau_break_even.first == math.inf and read.observational.reference.canaries == 100


def test_a_summary_without_a_field_its_design_needs_fails_the_schema():
    written = json.loads(strict_json(audit_summary("observational")))
    with pytest.raises(Exception, match="eps_lb_by_tau"):
        schemas.validate({key: value for key, value in written.items() if key != "eps_lb_by_tau"}, "audit-summary")
