"""The log-loss attack's summary as typed records (``<out>/logloss/summary.json``, ``LoglossResult.summary``,
docs/math.md section 8): the attacked day and its size, the single query decoded in exact arithmetic, each attack
against the exact oracle and the oracle settings that stop each attack. :meth:`LoglossSummary.to_dict` is the file's
layout; :func:`logloss_summary_schema` is its JSON Schema, generated from these records
(``lia_spark/run/json_schemas/logloss-summary.schema.json`` is that output, checked by a test).
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any

from lia_spark.records.typed import COMMON, JsonRecord, common_ref, described, schema_of

SCHEMA_ID = "urn:lia-spark:logloss-summary"


@dataclasses.dataclass(frozen=True)
class SingleQuery:
    """One query decoded in exact arithmetic."""

    rows: int = common_ref("count")
    accuracy: float = common_ref("probability")
    likelihood_bits: int = common_ref("count")


@dataclasses.dataclass(frozen=True)
class OracleResult:
    """One attack against the exact float64 oracle."""

    labels_per_query: float = described(minimum=0)
    queries_for_all: float = described(minimum=0)
    accuracy: float = described("null when the attack stopped (no decodable block).",
                                anyOf=[{"$ref": COMMON + "probability"}, {"type": "null"}])


@dataclasses.dataclass(frozen=True)
class LoglossSummary(JsonRecord):
    """The attacked day, N (its labels), the attacks' failure probability and queries per oracle setting, the single
    query decoded in exact arithmetic, per attack its result against the exact oracle, and per attack the oracle
    settings that stop it."""

    day: int = described(minimum=0)
    rows: int = common_ref("count", "N: the labels of the attacked day.")
    failure_probability: float = common_ref("probability")
    queries_per_setting: int = described(minimum=1)
    single_query: SingleQuery = described("One query decoded in exact arithmetic.")
    exact_oracle: dict[str, OracleResult] = described("Per attack, against the exact float64 oracle.",
                                                      minProperties=1)
    stopped_by: dict[str, tuple[str, ...]] = described("Per attack: the oracle settings that stop it.")


def logloss_summary_schema() -> dict[str, Any]:
    """The JSON Schema of :meth:`LoglossSummary.to_dict` (draft 2020-12)."""
    hints = typing.get_type_hints(LoglossSummary)
    fields = dataclasses.fields(LoglossSummary)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "<out>/logloss/summary.json: the log-loss attack's summary (docs/math.md section 8)",
        "description": ("Generated from lia_spark.records.logloss_summary.LoglossSummary (do not edit by hand). "
                        + " ".join((LoglossSummary.__doc__ or "").split())),
        "type": "object",
        "required": [field.name for field in fields],
        "properties": {field.name: schema_of(hints[field.name], field.metadata.get("schema")) for field in fields},
        "additionalProperties": False,
    }
