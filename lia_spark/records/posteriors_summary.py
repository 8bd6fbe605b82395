"""The posteriors stage's summary as typed records (``results/posteriors.json``'s ``summary`` and ``bags``, the rows of
``<out>/posteriors/summary.csv``; docs/math.md §3, §6, §7): one :class:`SettingSummary` per mechanism setting and one
:class:`BagCount` per bag size. The file's schema (``lia_spark/run/json_schemas/posteriors.schema.json``) states the
same fields; a test holds the two equal (:func:`setting_schema`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from lia_spark.names import setting_key
from lia_spark.records.typed import JsonRecord, common_ref, described, schema_of


@dataclasses.dataclass(frozen=True)
class SettingSummary(JsonRecord):
    """One mechanism setting <mechanism>.eps<e>.k<k>; "inf" where some rows' labels are revealed for sure.

    The mean additive and realized advantages over its rows, the exact percentiles of |I| (the multiplicative
    advantage), the share of rows whose label is revealed for sure (|I| infinite), the mean pointwise maximal leakage
    (NaN when not computed) and the worst case over the other labels (nats)."""

    mechanism: str
    epsilon: float = common_ref("epsilon")  # NaN: plain llp (no noise)
    bag_size: int = described(minimum=1)
    rows: int = common_ref("count")
    mean_additive_advantage: float = common_ref("number_or_null")
    realized_additive_advantage: float = common_ref("number_or_null")
    abs_I_p50: float = common_ref("extended_number")
    abs_I_p90: float = common_ref("extended_number")
    abs_I_p98: float = common_ref("extended_number")
    abs_I_p99: float = common_ref("extended_number")
    share_infinite: float = described(anyOf=[{"$ref": "urn:lia-spark:common#/$defs/probability"}, {"type": "null"}])
    mean_max_leakage: float = common_ref("extended_number")
    worst_case_leakage: float = common_ref("extended_number")

    @property
    def key(self) -> str:
        """The setting's name (:func:`lia_spark.names.setting_key`)."""
        return setting_key(self.mechanism, self.epsilon, self.bag_size)

    def statistics(self) -> dict[str, float]:
        """Its finite statistics by name (an infinite |I| percentile is left out: ``share_infinite`` tells how many
        rows are unbounded)."""
        values = {name: float(getattr(self, name)) for name in STATISTICS}
        return {name: value for name, value in values.items() if math.isfinite(value)}


@dataclasses.dataclass(frozen=True)
class BagCount(JsonRecord):
    """Per bag size k: bags formed, full bags and the sizes of the smaller last bags (at most one per bagging
    unit)."""

    bags: int = common_ref("count")
    full_bags: int = common_ref("count")
    remainder_sizes: tuple[int, ...] = described(items={"type": "integer", "minimum": 1})


SUMMARY_COLUMNS = tuple(field.name for field in dataclasses.fields(SettingSummary))
STATISTICS = SUMMARY_COLUMNS[4:]  # after the setting (mechanism, epsilon, bag size) and its rows


def setting_schema() -> dict[str, Any]:
    """The JSON Schema of :meth:`SettingSummary.to_dict` (the ``setting`` definition of the posteriors schema)."""
    return schema_of(SettingSummary)
