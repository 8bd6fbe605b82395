"""How the configuration refuses a value: :class:`ConfigError` with one line naming the field, the requirement,
the value and the fix; shared by every section (:mod:`lia_spark.run.sections`, :mod:`lia_spark.run.model_sections`)
and the loader (:mod:`lia_spark.run.config`).
"""
from __future__ import annotations

import typing
from typing import Any, Sequence


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range; the message names the field."""


def fail(field: str, value: Any, requirement: str, fix: str = "") -> typing.NoReturn:
    """Raise "<field>: <requirement>, got <value>[; <fix>]"."""
    raise ConfigError(f"{field}: {requirement}, got {value!r}" + (f"; {fix}" if fix else ""))


def fail_repeats(field: str, values: Sequence[Any]) -> None:
    """Fail naming ``field`` when ``values`` lists an item twice (every repeat would count the same rows again)."""
    if len(set(values)) != len(values):
        fail(field, list(values), "must not repeat a value", "list each once")


GLOB_CHARACTERS = "[]{}*?\\"

def fail_glob(field: str, path: str) -> None:
    """Fail naming ``field`` when ``path`` holds a character Hadoop reads as a glob pattern."""
    if any(character in GLOB_CHARACTERS for character in path):
        fail(field, path, "holds a character Hadoop reads as a glob pattern ([ ] { } * ? \\), so Spark would "
              "not find it", "rename the folder or link it under a name without them")


def is_remote_path(path: str) -> bool:
    """True for a URI (``scheme://...`` or ``dbfs:...``) rather than a plain local path."""
    return "://" in path or path.startswith("dbfs:")


def unwrapped_file_uri(path: str) -> str:
    """``path`` with a ``file:`` URI unwrapped to the plain local path; any other path as it is."""
    return "/" + path[len("file:"):].lstrip("/") if path.startswith("file:") else path
