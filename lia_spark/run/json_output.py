"""The one convention for every JSON file and MLflow param lia-spark writes: standard JSON, never the ``NaN`` /
``Infinity`` literals that ``jq``, JavaScript and most parsers reject. NaN becomes null, +-inf the strings "inf" /
"-inf"; the schemas of ``lia_spark/run/json_schemas`` describe the files written this way.
"""
from __future__ import annotations

import json
import math
from typing import Any, Mapping


def json_safe(value: Any) -> Any:
    """JSON-safe copy of ``value``: NaN -> None, +-inf -> "inf" / "-inf", tuples -> lists, mapping keys -> str,
    other objects -> str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def strict_json(payload: Any) -> str:
    """Indented standard JSON with sorted keys of ``payload`` (its ``to_dict()`` when it has one), by
    :func:`json_safe`."""
    payload = payload.to_dict() if hasattr(payload, "to_dict") else payload
    return json.dumps(json_safe(payload), indent=2, sort_keys=True, allow_nan=False)
