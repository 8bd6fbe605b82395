"""The posteriors stage's summary as typed records (``results/posteriors.json``'s ``summary`` and ``bags``, the rows of
``<out>/posteriors/summary.csv``; docs/math.md §3, §6, §7): one :class:`SettingSummary` per mechanism setting and one
:class:`BagCount` per bag size. The file's schema (``lia_spark/run/json_schemas/posteriors.schema.json``) states the
same fields; a test holds the two equal (:func:`setting_schema`).
"""
from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Mapping

from lia_spark.names import setting_key
from lia_spark.records.typed import common_ref, described, plain, schema_of, typed


@dataclasses.dataclass(frozen=True)
class SettingSummary:
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

    def to_dict(self) -> dict[str, Any]:
        """The file's layout (a row of summary.csv)."""
        return {field.name: plain(getattr(self, field.name)) for field in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> "SettingSummary":
        """Read :meth:`to_dict`'s layout (the file, a marker's result, or a row of the summary table)."""
        hints = typing.get_type_hints(cls)
        return cls(**{field.name: _value(hints[field.name], payload[field.name]) for field in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class BagCount:
    """Per bag size k: bags formed, full bags and the sizes of the smaller last bags (at most one per bagging
    unit)."""

    bags: int = common_ref("count")
    full_bags: int = common_ref("count")
    remainder_sizes: tuple[int, ...] = described(items={"type": "integer", "minimum": 1})

    def to_dict(self) -> dict[str, Any]:
        """The file's layout."""
        return {field.name: plain(getattr(self, field.name)) for field in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> "BagCount":
        """Read :meth:`to_dict`'s layout."""
        return cls(int(payload["bags"]), int(payload["full_bags"]), tuple(int(k) for k in payload["remainder_sizes"]))


SUMMARY_COLUMNS = tuple(field.name for field in dataclasses.fields(SettingSummary))
STATISTICS = SUMMARY_COLUMNS[4:]  # after the setting (mechanism, epsilon, bag size) and its rows


def _value(hint: Any, value: Any) -> Any:
    """A field from its JSON form or a table cell (numpy scalars included)."""
    if hint is int:
        return int(value)
    if hint is str:
        return str(value)
    return typed(hint, value)


def setting_schema() -> dict[str, Any]:
    """The JSON Schema of :meth:`SettingSummary.to_dict` (the ``setting`` definition of the posteriors schema)."""
    return schema_of(SettingSummary)
