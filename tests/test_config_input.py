"""Hostile config input is refused at load, before any work, with one line naming the field (or the file) and the
value: YAML aliases beyond their limits (counted before anything is expanded), files that are not UTF-8 (named with
their likely encoding), numbers a float64 or an int64 cannot hold, integers beyond what their field can mean."""
from __future__ import annotations

import codecs
import math
import shutil
import subprocess
import types
import typing
from pathlib import Path

import pytest

from lia_spark.cli.main import main
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config, load_config
from lia_spark.run.config_text import MAX_ALIASES, MAX_NODES, expansion

REPO = Path(__file__).resolve().parent.parent

BOMB = """\
run:
  name: bomb
spark:
  extra:
    a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
    h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


def _write(tmp_path: Path, text: str | bytes, name: str = "conf.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _refusal(*arguments, **keywords) -> str:
    with pytest.raises(ConfigError) as raised:
        load_config(*arguments, **keywords)
    return str(raised.value)


# ------------------------------------------------------------------------------------------------ YAML aliases


def test_an_alias_bomb_in_a_file_is_refused_naming_the_field_the_file_and_the_limit(tmp_path):
    path = _write(tmp_path, BOMB)
    assert len(BOMB.splitlines()) == 12
    message = _refusal(path)
    assert message.startswith("spark.extra: ") and str(path) in message and f"{MAX_NODES:,}" in message
    assert "54,481,021 nodes" in message  # counted exactly on the composed graph, never expanded


def test_an_alias_bomb_in_an_override_is_refused_naming_its_field():
    levels = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]" for previous, name in zip("abcdefg", "bcdefgh")]
    message = _refusal(None, ["spark.extra={" + ", ".join(levels) + "}"])
    assert message.startswith("spark.extra: the override holds more YAML nodes") and f"{MAX_NODES:,}" in message


def test_too_many_aliases_are_refused_even_when_they_expand_to_little(tmp_path):
    values = ", ".join(["*one"] * (MAX_ALIASES + 1))
    path = _write(tmp_path, f"spark:\n  extra: {{a: &one x}}\nutility:\n  extra_mechanisms: [{values}]\n")
    message = _refusal(path)
    assert message.startswith("utility.extra_mechanisms: ") and f"the {MAX_ALIASES} a config may use" in message
    assert f"{MAX_ALIASES + 1} aliases" in message and str(path) in message


def test_a_recursive_alias_is_refused(tmp_path):
    message = _refusal(_write(tmp_path, "spark:\n  extra: &loop {a: *loop}\n"))
    assert message.startswith("spark.extra: ") and "recursive alias" in message


def test_configs_with_a_few_anchors_and_aliases_still_load(tmp_path):
    path = _write(tmp_path, """\
utility:
  epsilons: &grid [1.0, 2.0, .inf]
table:
  epsilons: *grid
spark:
  extra:
    <<: &common {spark.ui.enabled: "false"}
    spark.task.maxFailures: "2"
""")
    config = load_config(path)
    assert config.utility.epsilons == config.table.epsilons == (1.0, 2.0, math.inf)
    assert config.spark.extra == {"spark.ui.enabled": "false", "spark.task.maxFailures": "2"}
    for shipped in sorted((REPO / "conf").glob("*.yaml")):
        assert isinstance(load_config(shipped), Config)


def test_the_expansion_is_counted_per_field_with_the_aliases_written_in_each():
    import yaml

    root = yaml.compose("a:\n  x: &l [1, 2, 3]\n  y: [*l, *l]\nb:\n  z: 1\n")
    nodes, aliases = expansion(root)
    # "": the document's mapping and its keys a, b; a and b: their mapping and keys; a.y: its list and two lists
    assert nodes == {"": 3, "a": 3, "a.x": 4, "a.y": 1 + 2 * 4, "b": 2, "b.z": 1}
    assert aliases == {"a.y": 2}


# ------------------------------------------------------------------------------------------------- encodings


@pytest.mark.parametrize("data, encoding", [
    ("run:\n  name: café\n".encode("latin-1"), "WINDOWS-1252"),
    ("run:\n  name: \x81\n".encode("latin-1"), "ISO-8859-1"),  # 0x81 is undefined in Windows-1252
    (codecs.BOM_UTF16_LE + "run:\n  name: x\n".encode("utf-16-le"), "UTF-16LE"),
    (codecs.BOM_UTF16_BE + "run:\n  name: x\n".encode("utf-16-be"), "UTF-16BE"),
    (codecs.BOM_UTF32_LE + "run:\n  name: x\n".encode("utf-32-le"), "UTF-32LE"),
    ("run:\n  name: é\n".encode("utf-16-le"), "UTF-16LE"),  # no byte-order mark: the NUL bytes tell
], ids=["latin1", "latin1-undefined-in-cp1252", "utf16le-bom", "utf16be-bom", "utf32le-bom", "utf16le-no-bom"])
def test_a_file_that_is_not_utf8_is_named_with_the_offset_its_likely_encoding_and_iconv(tmp_path, data, encoding):
    path = _write(tmp_path, data)
    offset = next(index for index, byte in enumerate(data) if byte > 0x7F)  # the first byte UTF-8 cannot start with
    message = _refusal(path)
    assert message.startswith(f"--conf: {path} is not UTF-8 text: ") and f"at byte offset {offset} " in message
    assert encoding in message and f"iconv -f {encoding} -t UTF-8 {path}" in message
    if encoding == "ISO-8859-1":
        return  # its 0x81 is a C1 control character, which YAML refuses in any encoding
    converted = codecs.decode(data, "cp1252" if encoding == "WINDOWS-1252" else encoding)
    _write(tmp_path, converted.lstrip("\ufeff"))  # what iconv makes of it loads
    assert load_config(path).run.name == converted.lstrip("\ufeff").split("name: ")[1].strip()


@pytest.mark.skipif(shutil.which("iconv") is None, reason="needs iconv")
@pytest.mark.parametrize("data", ["run:\n  name: café\n".encode("cp1252"),
                                  codecs.BOM_UTF16_LE + "run:\n  name: café\n".encode("utf-16-le")])
def test_the_iconv_command_the_refusal_names_converts_the_file(tmp_path, data):
    path = _write(tmp_path, data)
    command = _refusal(path).split("`")[1]
    subprocess.run(command, shell=True, check=True)  # noqa: S602 - the command the message shows the user
    assert load_config(path).run.name == "café"


def test_a_utf8_file_with_a_byte_order_mark_loads(tmp_path):
    assert load_config(_write(tmp_path, codecs.BOM_UTF8 + "run:\n  name: café\n".encode())).run.name == "café"


def test_an_override_the_terminal_passed_in_another_encoding_is_refused_naming_its_field():
    passed = b"run.name=caf\xe9".decode("utf-8", "surrogateescape")  # how Python hands such argv bytes over
    message = _refusal(None, [passed])
    assert message.startswith("run.name: the value is not UTF-8 text") and "UTF-8" in message.split(";")[1]


def test_the_command_line_ends_exit_2_with_one_line_for_a_file_that_is_not_utf8(tmp_path, capsys):
    path = _write(tmp_path, "run:\n  name: café\n".encode("cp1252"))
    for command in ("config", "run"):
        assert main([command, "--conf", str(path)]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lia-spark: ")]
        assert len(lines) == 1 and lines[0].startswith(f"lia-spark: --conf: {path} is not UTF-8 text"), lines


# -------------------------------------------------------------------------------------------------- numbers


def _fields(accepts: type) -> list[tuple[str, bool]]:
    """Every config field whose type holds ``accepts`` (float or int), directly, in a list or beside a keyword or
    null: (section.key, whether it is a list)."""
    found = []
    for section, cls in typing.get_type_hints(Config).items():
        for field, annotation in typing.get_type_hints(cls).items():
            arms = typing.get_args(annotation) if typing.get_origin(annotation) is types.UnionType else (annotation,)
            for arm in arms:
                if arm is accepts:
                    found.append((f"{section}.{field}", False))
                elif typing.get_origin(arm) is tuple and typing.get_args(arm)[0] is accepts:
                    found.append((f"{section}.{field}", True))
    return found


FLOAT_FIELDS = _fields(float)
INT_FIELDS = _fields(int)


def test_every_numeric_field_is_found():
    assert len(FLOAT_FIELDS) > 20 and ("models.epsilon", False) in FLOAT_FIELDS
    assert ("audit.claimed_epsilon", False) in FLOAT_FIELDS and ("utility.epsilons", True) in FLOAT_FIELDS
    assert len(INT_FIELDS) > 35 and ("synthetic.rows_per_day", False) in INT_FIELDS
    assert ("pate.queries", False) in INT_FIELDS and ("mechanisms.days", True) in INT_FIELDS


@pytest.mark.parametrize("literal", ["1e400", "1.0e+400", "-2E999", "1" + "0" * 400])
@pytest.mark.parametrize("field, listed", FLOAT_FIELDS, ids=[field for field, _ in FLOAT_FIELDS])
def test_a_finite_literal_that_overflows_is_refused_in_every_float_field(tmp_path, field, listed, literal):
    value = f"[{literal}]" if listed else literal
    section, key = field.split(".")
    for refused in (lambda: load_config(None, [f"{field}={value}"]),
                    lambda: load_config(_write(tmp_path, f"{section}:\n  {key}: {value}\n"))):
        with pytest.raises(ConfigError) as raised:
            refused()
        message = str(raised.value)
        assert message.startswith(f"{field}: must be a number a float64 holds") and "infinity" in message, message
        assert (literal if len(literal) <= 40 else literal[:20]) in message


@pytest.mark.parametrize("overrides, value", [
    (["models.epsilon=inf"], ("models", "epsilon", math.inf)),
    (["models.epsilon=.inf"], ("models", "epsilon", math.inf)),
    (["models.epsilon=Infinity"], ("models", "epsilon", math.inf)),
    (["utility.epsilons=[1, inf]"], ("utility", "epsilons", (1.0, math.inf))),
    (["table.epsilons=[.inf, 8]"], ("table", "epsilons", (math.inf, 8.0))),
    (["audit.model_uri=runs:/r/m", "audit.claimed_epsilon=inf"], ("audit", "claimed_epsilon", "inf")),
    (["audit.model_uri=runs:/r/m", "audit.claimed_epsilon=.inf"], ("audit", "claimed_epsilon", math.inf)),
    (["models.epsilon=1e308"], ("models", "epsilon", 1e308)),
])
def test_explicit_infinity_still_means_infinity_where_the_field_allows_it(overrides, value):
    section, key, expected = value
    assert getattr(getattr(load_config(None, overrides), section), key) == expected


@pytest.mark.parametrize("literal", ["99999999999999999999999", str(1 << 63), str(-(1 << 63) - 1), "1" * 5000])
@pytest.mark.parametrize("field, listed", INT_FIELDS, ids=[field for field, _ in INT_FIELDS])
def test_an_integer_beyond_int64_is_refused_in_every_int_field(field, listed, literal):
    value = f"[{literal}]" if listed else literal
    message = _refusal(None, [f"{field}={value}"])
    assert message.startswith(f"{field}: must be an integer in [-2^63, 2^63)"), message
    assert literal[:20] in message and len(message) < 300


@pytest.mark.parametrize("override, limit", [
    (f"synthetic.rows_per_day={(1 << 40) + 1}", "2^40"),
    ("models.target_day=25", "days 0 to 24"),
    ("models.proxy_day=1000", "days 0 to 24"),
    ("mechanisms.days=[0, 25]", "days 0 to 24"),
    ("logloss.day=25", "days 0 to 24"),
    ("data.kaggle_days=26", "days 0 to 24"),
    (f"audit.runs={(1 << 15) + 1}", "run << 48"),
    (f"spark.shuffle_partitions={1 << 31}", "Java int"),
    (f"spark.arrow_batch_rows={1 << 31}", "Java int"),
    (f"synthetic.partitions={1 << 31}", "Java int"),
    (f"models.num_workers={1 << 31}", "Java int"),
])
def test_an_integer_beyond_what_its_field_can_mean_is_refused(override, limit):
    field, value = override.split("=")
    message = _refusal(None, [override])
    assert message.startswith(f"{field}: must be at most ") and limit in message
    assert message.endswith(f"got {value.strip('[]').split(', ')[-1]}")


def test_the_largest_values_a_field_can_mean_still_load(tmp_path):
    config = load_config(None, [f"synthetic.rows_per_day={1 << 40}", "data.source=criteo",
                                f"data.criteo_paths=[{tmp_path}]", "models.target_day=24", "logloss.day=24",
                                f"audit.runs={1 << 15}", "data.kaggle_days=25"])
    assert config.synthetic.rows_per_day == 1 << 40 and config.models.target_day == 24
