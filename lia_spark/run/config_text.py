"""A config's text read as YAML, within limits: a ``--conf`` file must be UTF-8, and a file or a ``section.key=value``
override holds at most :data:`MAX_ALIASES` aliases and :data:`MAX_NODES` nodes once they are expanded, counted on
the composed node graph before any Python object is built (a dozen lines of nested aliases, the "billion laughs",
would otherwise expand to tens of millions of values and hang the command). A mapping that repeats a key is
refused, and a number literal its type cannot hold (a float written finite that float64 cannot hold, ``1e400``; an
integer of more digits than Python converts) reaches the caller as :class:`OverflowedNumber`, which every numeric
field refuses (:mod:`lia_spark.run.config`).
"""
from __future__ import annotations

import codecs
import collections
import shlex
from typing import Any

import yaml

from lia_spark.run.checks import ConfigError, is_infinity_literal, shown

MAX_ALIASES = 100  # aliases (*name) in one file or override
MAX_NODES = 100_000  # YAML nodes (scalars, lists, mappings) once every alias is expanded

# Byte-order marks, the longest first (UTF-32 LE's begins with UTF-16 LE's), and what iconv calls each encoding.
BYTE_ORDER_MARKS = ((codecs.BOM_UTF32_LE, "UTF-32LE"), (codecs.BOM_UTF32_BE, "UTF-32BE"),
                    (codecs.BOM_UTF16_LE, "UTF-16LE"), (codecs.BOM_UTF16_BE, "UTF-16BE"))


class OverflowedNumber:
    """A number literal its YAML type cannot hold: a float written finite (``1e400``, ``1.0e+400``) whose float64
    value is infinite (only ``.inf``, ``inf`` or ``infinity`` mean infinity), or an integer too long for Python to
    convert (over 4,300 digits). ``text`` is the literal as written; ``integer`` tells which."""

    def __init__(self, text: str, *, integer: bool = False) -> None:
        self.text = text
        self.integer = integer

    def __repr__(self) -> str:
        return shown(self.text)

    def __str__(self) -> str:
        return self.text


MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A YAML mapping names one key twice (plain YAML keeps the last value silently)."""


class ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping with a repeated key (merge keys, ``<<: *base``, still work) and
    reads a number literal its type cannot hold as :class:`OverflowedNumber`."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:  # ``<<: *base``: its keys are defaults the mapping's own keys override
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise DuplicateKeyError(problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> Any:
        value = super().construct_yaml_float(node)
        if value in (float("inf"), float("-inf")) and not is_infinity_literal(node.value):
            return OverflowedNumber(node.value)
        return value

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            return OverflowedNumber(node.value, integer=True)


ConfigLoader.add_constructor("tag:yaml.org,2002:float", ConfigLoader.construct_yaml_float)
ConfigLoader.add_constructor("tag:yaml.org,2002:int", ConfigLoader.construct_yaml_int)


def decoded(data: bytes, path: str) -> str:
    """The text of the config file ``path`` (its bytes ``data``), which must be UTF-8 (a UTF-8 byte-order mark is
    dropped).

    Raises:
        ConfigError: ``--conf: ...`` naming the file, the first byte that is not UTF-8 (its offset and line), the
            encoding the bytes look like and the ``iconv`` command that converts the file.
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        offset = error.start
        encoding, why = likely_encoding(data)
        line = data.count(b"\n", 0, offset) + 1
        quoted = shlex.quote(path)
        raise ConfigError(
            f"--conf: {path} is not UTF-8 text: byte {data[offset]:#04x} at byte offset {offset} (line {line}) is "
            f"not valid UTF-8 ({why}), got the file's bytes; save it as UTF-8, e.g. `iconv -f {encoding} -t UTF-8 "
            f"{quoted} > {quoted}.utf8 && mv {quoted}.utf8 {quoted}`"
        ) from None


def likely_encoding(data: bytes) -> tuple[str, str]:
    """The encoding that bytes which are not UTF-8 most likely have, as ``iconv`` names it, and why: a byte-order
    mark names UTF-16/32; NUL bytes suggest UTF-16 without one; otherwise Windows-1252 where every byte is defined
    there, else Latin-1 (ISO-8859-1), with the first byte above 0x7f as it reads there."""
    for mark, name in BYTE_ORDER_MARKS:
        if data.startswith(mark):
            return name, f"it is {name} text: it starts with the {name} byte-order mark {mark.hex(' ')}"
    if b"\x00" in data:
        name = "UTF-16LE" if data[1::2].count(0) > data[0::2].count(0) else "UTF-16BE"
        return name, f"it looks like {name} text: NUL bytes between its characters and no byte-order mark"
    first = next(index for index, byte in enumerate(data) if byte > 0x7F)
    byte = data[first:first + 1]
    try:
        data.decode("cp1252")
    except UnicodeDecodeError:
        return "ISO-8859-1", (f"it looks like Latin-1 (ISO-8859-1) text: {byte[0]:#04x} is "
                              f"{byte.decode('latin-1')!r} there")
    return "WINDOWS-1252", (f"it looks like Windows-1252 or Latin-1 text: {byte[0]:#04x} is "
                            f"{byte.decode('cp1252')!r} there")


def load_yaml(text: str, *, where: str, field: str = "") -> Any:
    """``text`` parsed as YAML (:class:`ConfigLoader`) once its composed nodes are within :data:`MAX_ALIASES` and
    :data:`MAX_NODES` (:func:`expansion`); None for an empty document. ``where`` names the text (a file, "the
    override"), ``field`` its config field when known (an override's).

    Raises:
        ConfigError: beyond a limit, naming the field (the one with the most aliases, or the largest expansion, for
            a file), ``where`` and the limit; or nesting deeper than Python's recursion limit.
        DuplicateKeyError, yaml.YAMLError: the text is not valid YAML or repeats a key.
    """
    loader = ConfigLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ConfigError(f"{field or '--conf'}: {where} nests lists or mappings too deeply to read, got "
                              "the text; write it flatter") from None
        if node is None:
            return None
        nodes, aliases = expansion(node, field)
        if sum(aliases.values()) > MAX_ALIASES:
            worst = max(aliases, key=aliases.__getitem__)
            raise ConfigError(
                f"{worst or '--conf'}: {where} uses more YAML aliases than the {MAX_ALIASES} a config may use, got "
                f"{sum(aliases.values()):,} aliases ({aliases[worst]:,} in {worst or 'the document'}); write the "
                "values out instead of repeating *aliases")
        if sum(nodes.values()) > MAX_NODES:
            worst = max(nodes, key=nodes.__getitem__)
            raise ConfigError(
                f"{worst or '--conf'}: {where} holds more YAML nodes, once its aliases are expanded, than the "
                f"{MAX_NODES:,} a config may hold, got {sum(nodes.values()):,} nodes ({nodes[worst]:,} in "
                f"{worst or 'the document'}, through {sum(aliases.values()):,} aliases); write the values out "
                "instead of nesting *aliases")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def expansion(root: yaml.Node, field: str = "") -> tuple[dict[str, int], dict[str, int]]:
    """Per config field the YAML nodes it holds once every alias is expanded, and the aliases written in it: the
    whole text is ``field`` when given; else each ``section.key`` of a mapping of sections owns its value, each
    section the rest of its mapping, "" the document's own mapping. Linear in the composed graph: a node reached
    again is an alias, whose expanded size was computed once when it was first reached; nothing is expanded.

    Raises:
        ConfigError: an alias inside the list or mapping it names (a recursive alias: its expansion never ends).
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    nodes: dict[str, int] = collections.defaultdict(int)
    aliases: dict[str, int] = collections.defaultdict(int)

    def walk(node: yaml.Node, owner: str, depth: int) -> int:
        if id(node) in open_nodes:
            raise ConfigError(f"{owner or '--conf'}: an alias refers to a list or mapping that holds it, so its "
                              "expansion never ends, got a recursive alias; remove it")
        if id(node) in sizes:
            aliases[owner] += 1
            nodes[owner] += sizes[id(node)]
            return sizes[id(node)]
        open_nodes.add(id(node))
        nodes[owner] += 1
        total = 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                total += walk(key, owner, depth + 1)
                total += walk(value, _owner(owner, depth, key, field), depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            total += sum(walk(item, owner, depth + 1) for item in node.value)
        open_nodes.discard(id(node))
        sizes[id(node)] = total
        return total

    walk(root, field, 0)
    return dict(nodes), dict(aliases)


def _owner(owner: str, depth: int, key: yaml.Node, field: str) -> str:
    """The field that owns the value of ``key`` in a mapping at ``depth``: below the document's mapping (depth 0) the
    section, below a section's (depth 1) ``section.key``; deeper, or with a ``field`` for the whole text, the
    mapping's own."""
    name = str(key.value) if isinstance(key, yaml.ScalarNode) else ""
    if field or depth > 1 or not name:
        return owner
    return name if depth == 0 else f"{owner}.{name}"
