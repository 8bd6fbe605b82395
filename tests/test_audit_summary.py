"""The typed records of the summaries (audit, log-loss attack): the shipped JSON Schemas are the ones generated from
them, and a summary file reads back into the same record (both audit designs, non-finite numbers included)."""
from __future__ import annotations

import json
import math

import pytest
from pipeline_support import REPO
from summary_support import audit_summary

from lia_spark.kernels import advantage
from lia_spark.records.audit_summary import AuditSummary, audit_summary_schema
from lia_spark.records.logloss_summary import LoglossSummary, OracleResult, SingleQuery, logloss_summary_schema
from lia_spark.records.posteriors_summary import SUMMARY_COLUMNS, BagCount, SettingSummary, setting_schema
from lia_spark.records.typed import schema_of
from lia_spark.run import schemas
from lia_spark.run.json_output import json_safe, strict_json

SCHEMAS = REPO / "lia_spark" / "run" / "json_schemas"


@pytest.mark.parametrize("name, generated", [("audit-summary", audit_summary_schema),
                                             ("logloss-summary", logloss_summary_schema)])
def test_the_shipped_schema_is_the_one_generated_from_the_records(name, generated):
    assert json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8")) == generated(), (
        f"regenerate lia_spark/run/json_schemas/{name}.schema.json from {generated.__name__}()")


def test_the_posteriors_schema_states_the_records_fields():
    shipped = json.loads((SCHEMAS / "posteriors.schema.json").read_text(encoding="utf-8"))
    assert shipped["$defs"]["setting"] == setting_schema()
    bags = {key: value for key, value in schema_of(BagCount).items() if key != "description"}
    assert shipped["properties"]["bags"]["additionalProperties"] == bags
    assert [f"abs_I_p{q}" for q in advantage.PERCENTILES] == [c for c in SUMMARY_COLUMNS if c.startswith("abs_I_p")]


def test_a_posteriors_setting_reads_back_from_its_file_with_plain_llps_nan_epsilon():
    """What the stage writes (summary.csv's row, the result's JSON) reads back into the same record; NaN (plain llp's
    epsilon, a leakage not computed) is null in the file and an infinite percentile "inf"."""
    setting = SettingSummary("llp", math.nan, 8, 1000, 0.01, 0.02, 0.5, 2.0, math.inf, math.inf, 0.03, math.nan,
                             math.log(2))
    written = json.loads(strict_json(setting.to_dict()))
    assert list(setting.to_dict()) == list(SUMMARY_COLUMNS) and written["epsilon"] is None
    assert written["abs_I_p98"] == "inf"
    read = SettingSummary.from_dict(written)
    assert json_safe(read.to_dict()) == written and read.key == "llp.epsinf.k8"
    assert read.statistics() == {"mean_additive_advantage": 0.01, "realized_additive_advantage": 0.02,
                                 "abs_I_p50": 0.5, "abs_I_p90": 2.0, "share_infinite": 0.03,
                                 "worst_case_leakage": math.log(2)}
    assert BagCount.from_dict(json.loads(strict_json(BagCount(3, 2, (5,)).to_dict()))) == BagCount(3, 2, (5,))


def test_a_logloss_summary_matches_its_schema_and_reads_back_with_a_stopped_attacks_null_accuracy():
    summary = LoglossSummary(day=1, rows=1000, failure_probability=0.01, queries_per_setting=3,
                             single_query=SingleQuery(rows=500, accuracy=1.0, likelihood_bits=4096),
                             exact_oracle={"binary": OracleResult(12.0, 84.0, 1.0),
                                           "primes": OracleResult(5.0, 200.0, math.nan)},
                             stopped_by={"binary": (), "primes": ("round2", "laplace0.001")})
    written = json.loads(strict_json(summary.to_dict()))
    schemas.validate(written, "logloss-summary")
    assert written["exact_oracle"]["primes"]["accuracy"] is None and written["stopped_by"]["binary"] == []
    read = LoglossSummary.from_dict(written)
    assert json_safe(read.to_dict()) == written and read.stopped_by["primes"] == ("round2", "laplace0.001")
    assert math.isnan(read.exact_oracle["primes"].accuracy) and read.single_query == summary.single_query
    written["exact_oracle"]["primes"]["accuracy"] = 1.5
    with pytest.raises(Exception, match="1.5"):
        schemas.validate(written, "logloss-summary")


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
