"""How the configuration refuses a value: :class:`ConfigError` with one line naming the field, the requirement,
the value and the fix; shared by every section (:mod:`lia_spark.run.sections`, :mod:`lia_spark.run.model_sections`)
and the loader (:mod:`lia_spark.run.config`).
"""
from __future__ import annotations

import os
import posixpath
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


def local_path(path: str) -> str | None:
    """``path`` as a plain local path (plain, or a ``file:`` URI unwrapped), None on any other file system."""
    if path.startswith("file:"):
        return "/" + path[len("file:"):].lstrip("/")
    return None if is_remote_path(path) else path


def resolved_path(path: str) -> str:
    """One spelling per place, to compare paths: a local path (plain or ``file:``) absolute, with symlinks, ``.``,
    ``..`` and trailing slashes resolved (``os.path.realpath``; relative to the working directory); a URI with its
    scheme in lower case and ``.``, ``..``, repeated and trailing slashes of its path resolved."""
    local = local_path(path)
    if local is not None:
        return os.path.realpath(local)
    scheme, _, rest = path.partition(":")
    authority = ""
    if rest.startswith("//"):
        authority, _, rest = rest[2:].partition("/")
        authority = f"//{authority}"
    return f"{scheme.lower()}:{authority}{posixpath.normpath('/' + rest.lstrip('/'))}"


def path_relation(first: str, second: str) -> str:
    """How the resolved paths (:func:`resolved_path`) ``first`` and ``second`` are placed: "the same as", "inside"
    (``first`` lies below ``second``), "around" (``second`` lies below ``first``) or "" (apart)."""
    if first == second:
        return "the same as"
    if first.startswith(second.rstrip("/") + "/"):
        return "inside"
    if second.startswith(first.rstrip("/") + "/"):
        return "around"
    return ""
