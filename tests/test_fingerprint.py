"""Fingerprints of stage outputs (pure): which fields each stage reads, sealed markers, change reports."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lia_spark import __version__
from lia_spark.engine.orchestration.registry import STAGES, fields_not_behind
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config, load_config
from lia_spark.run.fingerprint import (CHECKSUM_KEY, FINGERPRINT_KEY, NON_COMPUTING_MODULES, UNREAD_FIELDS, Fingerprint,
                                       changes, code_version, expand_fields, marker_fingerprint, sealed_marker,
                                       stage_parameters, verified_marker)
from lia_spark.run.sections import PIPELINE_STAGES

STAGE_FIELDS = {name: stage.fields for name, stage in STAGES.items()}  # each stage's declaration


def _config_dict(*overrides: str) -> dict:
    return load_config(None, overrides).to_dict()


def test_every_config_field_is_read_by_a_stage_or_declared_unread():
    values = Config().to_dict()
    every = {f"{section}.{key}" for section, keys in values.items() for key in keys}
    read = {name for fields in STAGE_FIELDS.values() for name in expand_fields(fields, values)}
    unread = set(expand_fields(UNREAD_FIELDS, values))
    assert read | unread == every, "declare every new config field in its stage's fields or in UNREAD_FIELDS"
    assert read & unread == set()


def test_a_run_shows_only_the_fields_its_outputs_depend_on():
    """MLflow's parent run leaves out fields no output of the run depends on: the whole pipeline only those of the
    stages outside it; an audit of the train stage's target keeps the target's fields (through the canaries it
    reads), an audit of a model trained elsewhere does not (it reads the inject stage's tables)."""
    everything = fields_not_behind(Config(), PIPELINE_STAGES)
    assert {name.split(".")[0] for name in everything} == {"data", "logloss"}  # ingest's (the twin is read) and
    assert all(name.startswith("data.") == (name in STAGES["ingest"].fields) for name in everything)  # logloss's
    own_target = fields_not_behind(Config(), ["audit"])
    assert not own_target & {"models.epsilon", "models.training_mechanism", "audit.scores", "run.seed"}
    assert {"mechanisms.epsilons", "utility.epsilons"} <= own_target
    given = fields_not_behind(load_config(None, ["audit.model_uri=runs:/r/model", "audit.claimed_epsilon=1"]),
                              ["audit"])
    assert {"models.epsilon", "models.training_mechanism", "models.bag_size", "pate.teachers"} <= given
    assert not given & {"models.proxy_day", "models.target_day", "audit.counterfactual", "audit.model_uri"}


def _different(value):
    """Another value of the same type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1 if math.isfinite(value) else 1.0
    if isinstance(value, list):
        return [*value, value[-1]] if value else ["/x"]
    return f"{value}-other"


@pytest.mark.parametrize("stage", sorted(name for name, fields in STAGE_FIELDS.items() if fields))
def test_each_field_a_stage_reads_changes_its_fingerprint_and_unread_ones_do_not(stage):
    fields = STAGE_FIELDS[stage]
    base = Fingerprint(stage, stage_parameters(fields, _config_dict()), {})
    unread = Fingerprint(stage, stage_parameters(fields, _config_dict("run.name=other", "spark.master=local[1]")), {})
    assert unread.value == base.value
    for field in expand_fields(STAGE_FIELDS[stage], Config().to_dict()):
        section, key = field.split(".", 1)
        values = _config_dict()
        values[section][key] = _different(values[section][key])
        moved = Fingerprint(stage, stage_parameters(fields, values), {})
        assert moved.value != base.value, field
        assert [text.split(" ")[0] for text in changes(base.to_dict(), moved)] == [field]


def test_input_fingerprints_and_code_version_enter_the_fingerprint():
    parameters = stage_parameters(STAGE_FIELDS["audit"], _config_dict())
    base = Fingerprint("audit", parameters, {"canaries": "a" * 64})
    assert Fingerprint("audit", parameters, {"canaries": "b" * 64}).value != base.value
    assert Fingerprint("audit", parameters, {"canaries": "a" * 64}, code_version="9.9").value != base.value
    assert changes(base.to_dict(), Fingerprint("audit", parameters, {"canaries": "b" * 64})) == [
        "input canaries changed"]


def test_infinite_and_list_values_are_json_stable():
    parameters = stage_parameters(STAGE_FIELDS["utility"], _config_dict())
    assert parameters["utility.epsilons"][-1] == "inf"
    json.dumps(parameters, allow_nan=False)  # strict JSON: no Infinity
    assert stage_parameters(STAGE_FIELDS["utility"], _config_dict()) == parameters


def test_sealed_marker_round_trip_and_tampering():
    fingerprint = Fingerprint("audit", stage_parameters(STAGE_FIELDS["audit"], _config_dict()), {"canaries": "c" * 64})
    marker = json.loads(json.dumps(sealed_marker({"canaries": 1000, "summary": {"best": 1.5}}, fingerprint)))
    verified, why = verified_marker(marker)
    assert why == "" and marker_fingerprint(verified) == fingerprint.value
    edited = dict(marker, canaries=999)  # a hand-edited count
    assert verified_marker(edited)[0] is None and "checksum" in verified_marker(edited)[1]
    resealed = json.loads(json.dumps(marker))  # parameters edited and the checksum recomputed by hand
    resealed[FINGERPRINT_KEY]["parameters"]["audit.repetitions"] = 1
    resealed.pop(CHECKSUM_KEY)
    resealed = sealed_like(resealed)
    assert verified_marker(resealed)[0] is None and "does not match" in verified_marker(resealed)[1]
    old_style = {key: value for key, value in marker.items() if key not in (FINGERPRINT_KEY, CHECKSUM_KEY)}
    assert verified_marker(old_style)[0] is None and "older" in verified_marker(old_style)[1]


def sealed_like(content: dict) -> dict:
    """A marker whose checksum was recomputed over edited content (what a careful hand-edit would do)."""
    import hashlib

    text = json.dumps(content, sort_keys=True, default=str)
    return dict(content, **{CHECKSUM_KEY: hashlib.sha256(text.encode("utf-8")).hexdigest()})


@pytest.mark.parametrize("text, expected", [("1e-5", 1e-5), ("1E-5", 1e-5), (".5", 0.5), ("5.", 5.0),
                                            ("inf", math.inf), (".inf", math.inf), ("Infinity", math.inf),
                                            ("2.5e+1", 25.0)])
def test_floats_as_typed(text, expected):
    field = "audit.delta" if expected < 1 else "models.epsilon"
    config = load_config(None, [f"{field}={text}"])
    assert (config.audit.delta if expected < 1 else config.models.epsilon) == expected


def test_float_in_yaml_file_and_bad_text(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("audit:\n  delta: 1e-5\nmechanisms:\n  epsilons: [1e-1, .5, 2]\n", encoding="utf-8")
    config = load_config(path)
    assert config.audit.delta == 1e-5 and config.mechanisms.epsilons == (0.1, 0.5, 2.0)
    for bad in ("abc", "nan", "1e", "1.2.3"):
        with pytest.raises(ConfigError, match="audit.delta"):
            load_config(None, [f"audit.delta={bad}"])


def test_code_version_hashes_the_computing_sources():
    package = Path(__file__).resolve().parent.parent / "lia_spark"
    assert all((package / name).is_file() for name in NON_COMPUTING_MODULES)  # no stale names
    version, digest = code_version().split("+")
    assert version == __version__ and len(digest) == 12
    assert Fingerprint("audit", {}, {}).code_version == code_version()
