"""How the configuration refuses a value: :class:`ConfigError` with one line naming the field, the requirement,
the value and the fix; shared by every section (:mod:`lia_spark.run.sections`, :mod:`lia_spark.run.model_sections`)
and the loader (:mod:`lia_spark.run.config`).
"""
from __future__ import annotations

import math
import os
import posixpath
import re
import typing
from typing import Any, Sequence


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range; the message names the field."""


def fail(field: str, value: Any, requirement: str, fix: str = "") -> typing.NoReturn:
    """Raise "<field>: <requirement>, got <value>[; <fix>]"."""
    raise ConfigError(f"{field}: {requirement}, got {value!r}" + (f"; {fix}" if fix else ""))


INT64 = (-(1 << 63), (1 << 63) - 1)  # what an integer field holds (Spark's long, numpy's int64)
JAVA_INT_MAX = (1 << 31) - 1  # a count Spark takes as a Java int (partitions, batch rows, workers)
SHOWN_DIGITS = 40  # a longer literal is shown by its first digits and its length


def shown(text: str) -> str:
    """A literal as an error shows it: as written, or its first digits and length when longer than
    :data:`SHOWN_DIGITS` characters."""
    return text if len(text) <= SHOWN_DIGITS else f"{text[:20]}... ({len(text):,} characters)"


def fail_out_of_range(field: str, text: str, requirement: str, fix: str) -> typing.NoReturn:
    """Raise "<field>: <requirement>, got <text>; <fix>" for a number literal its type cannot hold (shown as
    written, :func:`shown`)."""
    raise ConfigError(f"{field}: {requirement}, got {shown(text)}; {fix}")


def fail_float_overflow(field: str, text: str) -> typing.NoReturn:
    """Refuse a number written finite that a float64 cannot hold (it would silently become infinity)."""
    fail_out_of_range(field, text, "must be a number a float64 holds (|x| < 1.8e308); written finite it would "
                      "silently become infinity", "write a smaller number, or inf where the field allows infinity")


def fail_int_range(field: str, value: int | str) -> typing.NoReturn:
    """Refuse an integer outside the int64 range (Spark's long, numpy's int64)."""
    fail_out_of_range(field, str(value), "must be an integer in [-2^63, 2^63) (a 64-bit integer)",
                      "write a smaller number")


def is_infinity_literal(text: str) -> bool:
    """Whether ``text`` spells infinity (``inf``, ``.inf``, ``infinity``, either sign, any case)."""
    return text.strip().lower().lstrip("+-") in ("inf", ".inf", "infinity")


_NUMBER_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def number_from_text(field: str, text: str, requirement: str = "must be a number (e.g. 0.5, 1e-5, inf)") -> float:
    """A number written as text: ``1e-5``, ``1E-5``, ``.5``, ``5.`` (YAML 1.1 reads these as strings), ``inf``,
    ``.inf``, ``infinity`` (either sign).

    Raises:
        ConfigError: naming ``field``: not a number (``requirement``), or a finite literal beyond float64
            (:func:`fail_float_overflow`).
    """
    stripped = text.strip().lower()
    if is_infinity_literal(stripped):
        return -math.inf if stripped.startswith("-") else math.inf
    if not _NUMBER_TEXT.fullmatch(stripped):
        fail(field, text, requirement)
    value = float(stripped)
    if math.isinf(value):
        fail_float_overflow(field, text.strip())
    return value


def fail_above(field: str, value: int, most: int, reason: str) -> None:
    """Fail naming ``field`` when ``value`` exceeds ``most`` (``reason``: why that is the most it can mean)."""
    if value > most:
        fail(field, value, f"must be at most {most:,} ({reason})")


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


def local_path(path: str) -> str | None:
    """``path`` as a plain local path (plain, or a ``file:`` URI unwrapped), None on any other file system."""
    if path.startswith("file:"):
        return unwrapped_file_uri(path)
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
