"""Typed records as JSON: a dataclass field's schema keywords (:func:`described`), the JSON form of a record
(:func:`plain`), reading it back (:func:`typed`) and the JSON Schema generated from the dataclasses
(:func:`schema_of`), shared by the records of this folder.

Non-finite numbers follow the JSON convention of :mod:`lia_spark.run.json_output`: NaN is null, +-inf "inf" /
"-inf"; reading turns them back into floats.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Mapping

COMMON = "urn:lia-spark:common#/$defs/"


def described(description: str = "", **schema: Any) -> Any:
    """A dataclass field whose JSON Schema adds ``schema`` (keywords) and ``description`` to the generated one."""
    extra = {**schema, **({"description": description} if description else {})}
    return dataclasses.field(metadata={"schema": extra})


def common_ref(name: str, description: str = "") -> Any:
    """A dataclass field whose schema is the common definition ``name`` (``common.schema.json``)."""
    return described(description, **{"$ref": COMMON + name})


def plain(value: Any) -> Any:
    """JSON-ready form: records by field (their own ``to_dict`` when they have one), tuples as lists."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value):
        return {field.name: plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


class JsonRecord:
    """A dataclass record whose JSON form is its fields' (:func:`plain`), read back field by field (:func:`typed`)."""

    __dataclass_fields__: typing.ClassVar[dict[str, dataclasses.Field[Any]]]  # declared by the record's @dataclass

    def to_dict(self) -> dict[str, Any]:
        """The file's layout: every field in declaration order."""
        return {field.name: plain(getattr(self, field.name)) for field in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls: type[R], payload: Mapping[str, Any]) -> R:
        """Read :meth:`to_dict`'s layout (the file, a marker's result, or a row of a table)."""
        hints = typing.get_type_hints(cls)
        return cls(**{field.name: typed(hints[field.name], payload[field.name]) for field in dataclasses.fields(cls)})


R = typing.TypeVar("R", bound=JsonRecord)


def number(value: Any) -> float:
    """A float from its JSON form: null -> NaN, "inf" / "-inf" -> +-inf."""
    return math.nan if value is None else float(value)


def typed(hint: Any, value: Any) -> Any:
    """``value`` (JSON form) as the type ``hint``."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = next(argument for argument in arguments if argument is not type(None))
        return None if value is None else typed(inner, value)
    if origin is dict:
        return {key: typed(arguments[1], item) for key, item in value.items()}
    if origin is tuple:
        return tuple(typed(arguments[0], item) for item in value)
    if hint is float:
        return number(value)
    if hasattr(hint, "from_dict"):  # a record with its own JSON form (Ceiling, Headline): the inverse of _plain's
        return hint.from_dict(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return hint(**{field.name: typed(hints[field.name], value[field.name]) for field in dataclasses.fields(hint)})
    return value


def schema_of(hint: Any, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON Schema of the type ``hint`` with a field's ``extra`` keywords (a ``$ref`` replaces the type)."""
    extra = dict(extra or {})
    if "$ref" in extra or "anyOf" in extra:  # the field states its whole schema
        return extra
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = next(argument for argument in arguments if argument is not type(None))
        description = extra.pop("description", "")
        schema = {"oneOf": [{"type": "null"}, schema_of(inner, extra)]}
        return {**({"description": description} if description else {}), **schema}
    if origin is dict:
        base: dict[str, Any] = {"type": "object"}
        if "additionalProperties" not in extra:
            base["additionalProperties"] = schema_of(arguments[1])
        return {**base, **extra}
    if origin is tuple:
        return {"type": "array", **({} if "items" in extra else {"items": schema_of(arguments[0])}), **extra}
    if dataclasses.is_dataclass(hint) and "type" not in extra:
        hints = typing.get_type_hints(hint)
        fields = dataclasses.fields(hint)
        return {**({"description": (hint.__doc__ or "").split("\n\n")[0].replace("\n    ", " ")}
                   if "description" not in extra else {}),
                "type": "object", "required": [field.name for field in fields],
                "properties": {field.name: schema_of(hints[field.name], field.metadata.get("schema"))
                               for field in fields},
                "additionalProperties": False, **extra}
    simple = {int: "integer", float: "number", str: "string", bool: "boolean"}
    if hint in simple and "enum" not in extra:
        return {"type": simple[hint], **extra}
    return extra
