"""Checks of the JSON lia-spark writes, shared by the tests of the stages and of whole runs: standard JSON (no NaN /
Infinity literal, which Python's json accepts and jq or a browser do not) that matches its shipped schema."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lia_spark.run import schemas
from lia_spark.run.json_output import strict_json


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-standard JSON literal {name}")


def strict_load(path: Path | str) -> Any:
    """The parsed file; ValueError naming the literal when it holds NaN, Infinity or -Infinity."""
    return json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=_reject_constant)


def check_file(path: Path | str) -> Any:
    """The parsed output file, after checking it is standard JSON and matches the schema :func:`schemas.schema_for`
    names for it."""
    name = schemas.schema_for(str(path))
    assert name is not None, f"{path}: no schema describes it (lia_spark.run.schemas.schema_for)"
    document = strict_load(path)
    schemas.validate(document, name)
    return document


def check_result(result: Any, command: str) -> Any:
    """What ``lia-spark <command>`` writes for ``result`` (results/<command>.json), after checking it matches that
    file's schema."""
    document = json.loads(strict_json(result))
    schemas.validate(document, schemas.schema_for(f"results/{command}.json"))
    return document
