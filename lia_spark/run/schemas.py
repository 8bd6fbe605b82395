"""JSON Schemas (draft 2020-12) of the JSON files lia-spark writes, shipped in ``lia_spark/run/json_schemas``.

Each schema is ``<name>.schema.json`` with ``$id`` ``urn:lia-spark:<name>``; schemas refer to each other by that id
(``common`` holds the shared definitions). :func:`schema_for` names the schema of an output file,
:func:`validate` checks a document (it needs the ``jsonschema`` package: ``pip install jsonschema``).
docs/layout.md lists every file with its schema.
"""
from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import PurePosixPath
from typing import Any

SCHEMA_FOLDER = "json_schemas"
SCHEMA_SUFFIX = ".schema.json"
ID_PREFIX = "urn:lia-spark:"
# results/<command>.json whose schema is another command's: track writes a pipeline result
RESULT_SCHEMAS = {"track": "pipeline"}
# <folder>/<file> of the stages' own JSON files -> schema
STAGE_FILES = {("audit", "summary.json"): "audit-summary", ("logloss", "summary.json"): "logloss-summary",
               ("models", "metrics.json"): "train", ("inject", "manifest.json"): "inject-manifest"}
OUTPUT_TRANSFORM_SUFFIX = ".output.json"  # models/<model>.output.json


@functools.cache
def schemas() -> dict[str, dict[str, Any]]:
    """Every shipped schema by name (its file name without ``.schema.json``)."""
    folder = resources.files("lia_spark.run").joinpath(SCHEMA_FOLDER)
    return {entry.name.removesuffix(SCHEMA_SUFFIX): json.loads(entry.read_text(encoding="utf-8"))
            for entry in folder.iterdir() if entry.name.endswith(SCHEMA_SUFFIX)}


def schema_for(path: str) -> str | None:
    """The name of the schema describing the JSON file at ``path`` (any output folder, a table cell's included),
    from its last two path components; None for a file lia-spark does not write."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if len(parts) < 2:
        return None
    folder, name = parts[-2], parts[-1]
    if folder == "results" and name.endswith(".json"):
        command = name.removesuffix(".json")
        command = RESULT_SCHEMAS.get(command, command)
        return command if command in schemas() else None
    if folder == "models" and name.endswith(OUTPUT_TRANSFORM_SUFFIX):
        return "output-transform"
    return STAGE_FILES.get((folder, name))


def validate(document: Any, name: str) -> None:
    """Check ``document`` (parsed JSON) against schema ``name``.

    Raises:
        KeyError: naming an unknown schema.
        jsonschema.ValidationError: the first place where the document breaks the schema.
    """
    import jsonschema
    from referencing import Registry, Resource

    if name not in schemas():
        raise KeyError(f"no lia-spark schema named {name!r}; known: {sorted(schemas())}")
    registry = Registry().with_resources((schema["$id"], Resource.from_contents(schema))
                                         for schema in schemas().values())
    jsonschema.Draft202012Validator(schemas()[name], registry=registry).validate(document)
