"""Config loading: defaults mirror conf/defaults.yaml, overrides apply, every bad value names its field."""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config, load_config, parse_override

REPO = Path(__file__).resolve().parent.parent


def test_defaults_yaml_mirrors_dataclass_defaults():
    assert load_config(REPO / "conf" / "defaults.yaml") == Config()


def test_every_shipped_config_loads():
    for path in sorted((REPO / "conf").glob("*.yaml")):
        assert isinstance(load_config(path), Config), path


def test_overrides_are_parsed_as_yaml_and_win_over_the_file():
    config = load_config(REPO / "conf" / "demo.yaml", [
        "audit.repetitions=7", "models.epsilon=inf", "mechanisms.bag_sizes=[2, 4]", "run.force=true",
        "audit.confidence=0.9",
    ])
    assert config.audit.repetitions == 7
    assert config.models.epsilon == math.inf
    assert config.mechanisms.bag_sizes == (2, 4)
    assert config.run.force is True
    assert config.audit.confidence == 0.9
    assert config.run.name == "demo"


def test_mechanisms_days_take_a_keyword_or_a_list():
    assert Config().mechanisms.days == "target"
    assert load_config(None, ["mechanisms.days=all"]).mechanisms.days == "all"
    config = load_config(None, ["synthetic.days=3", "mechanisms.days=[2, 0]"])
    assert config.mechanisms.days == (2, 0) and config.to_dict()["mechanisms"]["days"] == [2, 0]


def test_config_is_frozen():
    config = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.audit.repetitions = 3  # type: ignore[misc]


def test_derived_paths_default_below_output_dir():
    config = load_config(None, ["run.output_dir=/tmp/x"])
    assert config.parquet_path == "/tmp/x/data"
    assert config.quarantine_path == "/tmp/x/quarantine"
    assert load_config(None, ["data.parquet_path=/elsewhere"]).parquet_path == "/elsewhere"


INVALID = [
    ("mechanisms.epsilons=[-1.0]", "mechanisms.epsilons", "-1.0"),
    ("mechanisms.epsilons=[0]", "mechanisms.epsilons", "0"),
    ("mechanisms.epsilons=[.inf]", "mechanisms.epsilons", "inf"),
    ("mechanisms.bag_sizes=[0]", "mechanisms.bag_sizes", "0"),
    ("mechanisms.names=[rr, shuffle]", "mechanisms.names", "shuffle"),
    ("mechanisms.names=[]", "mechanisms.names", "()"),
    ("mechanisms.epsilons=fast", "mechanisms.epsilons", "fast"),
    ("mechanisms.day=2", "mechanisms.day", "replaced by mechanisms.days"),
    ("mechanisms.days=[]", "mechanisms.days", "[]"),
    ("mechanisms.days=[1, 1]", "mechanisms.days", "[1, 1]"),
    ("mechanisms.days=[-1]", "mechanisms.days", "-1"),
    ("mechanisms.days=[1.5]", "mechanisms.days", "1.5"),
    ("mechanisms.days=2", "mechanisms.days", "must be a keyword or a list, got 2; see conf/defaults.yaml"),
    ("mechanisms.days=week", "mechanisms.days", "week"),
    ("mechanisms.days=[0, 5]", "mechanisms.days", "synthetic.days=2"),
    ("models.epsilon=-2", "models.epsilon", "-2"),
    ("models.bag_size=0", "models.bag_size", "0"),
    ("models.training_mechanism=dp_sgd", "models.training_mechanism", "dp_sgd"),
    ("pate.teachers=0", "pate.teachers", "0"),
    ("pate.noise=uniform", "pate.noise", "uniform"),
    ("pate.delta=1", "pate.delta", "1"),
    ("models.library=lightgbm", "models.library", "lightgbm"),
    ("models.execution=gpu", "models.execution", "gpu"),
    ("models.split=[0.5, 0.5]", "models.split", "(0.5, 0.5)"),
    ("models.learning_rate=0", "models.learning_rate", "0"),
    ("models.target_day=0", "models.target_day", "0"),
    ("audit.confidence=1.0", "audit.confidence", "1.0"),
    ("audit.confidence=0", "audit.confidence", "0"),
    ("audit.delta=-0.1", "audit.delta", "-0.1"),
    ("audit.tau=1.5", "audit.tau", "1.5"),
    ("audit.repetitions=0", "audit.repetitions", "0"),
    ("audit.repetitions=2.5", "audit.repetitions", "2.5"),
    ("audit.scores=[hinge]", "audit.scores", "hinge"),
    ("audit.scores=[difference_tinf]", "audit.scores", "difference_tinf"),
    ("audit.scores=[log_ratio,log_ratio]", "audit.scores", "log_ratio"),
    ("audit.score=difference", "audit.score", "replaced by audit.scores"),
    ("audit.convention=holm", "audit.convention", "holm"),
    ("audit.sweep=log", "audit.sweep", "log"),
    ("audit.sweep_points_per_decade=0", "audit.sweep_points_per_decade", "0"),
    ("audit.sweep_smallest_guesses=0", "audit.sweep_smallest_guesses", "0"),
    ("audit.shadows=3", "audit.shadows", "3"),
    ("audit.shadows=-2", "audit.shadows", "-2"),
    ("audit.baseline=reference", "audit.baseline", "reference"),
    ("audit.runs=0", "audit.runs", "0"),
    ("audit.runs=2.5", "audit.runs", "2.5"),
    ("audit.recalibrate=both", "audit.recalibrate", "both"),
    ("audit.bounds=[binomial, renyi]", "audit.bounds", "renyi"),
    ("audit.claimed_epsilon=1", "audit.claimed_epsilon", "states the claim of a target this project did not train"),
    ("audit.fail_on_finding=maybe", "audit.fail_on_finding", "'maybe'"),
    ("audit.export_gzip=true", "audit.export_gzip", "set audit.export_tsv=true too"),
    ("synthetic.click_rate=1.2", "synthetic.click_rate", "1.2"),
    ("synthetic.rows_per_day=0", "synthetic.rows_per_day", "0"),
    ("synthetic.days=25", "synthetic.days", "25"),
    ("synthetic.gzip=maybe", "synthetic.gzip", "maybe"),
    ("data.source=hdfs", "data.source", "hdfs"),
    ("data.max_malformed_share=2", "data.max_malformed_share", "2"),
    ("data.criteo_paths=[/no/such/day_0.gz]", "data.criteo_paths", "/no/such/day_0.gz"),
    ("run.seed=-1", "run.seed", "-1"),
    ("run.output_dir=''", "run.output_dir", "''"),
    ("run.progress_seconds=-1", "run.progress_seconds", "-1.0"),
    ("run.progress_seconds=.inf", "run.progress_seconds", "inf"),
    ("run.progress_seconds=often", "run.progress_seconds", "often"),
    ("spark.driver_memory=lots", "spark.driver_memory", "lots"),
    ("spark.shuffle_partitions=-4", "spark.shuffle_partitions", "-4"),
    ("spark.remote=http://host:15002", "spark.remote", "http://host:15002"),
    ("tracking.experiment=' '", "tracking.experiment", "' '"),
    ("audit.colour=blue", "audit.colour", "blue"),
    ("logloss.attacks=[primes, lattice]", "logloss.attacks", "lattice"),
    ("logloss.noise_scales=[0]", "logloss.noise_scales", "0"),
    ("logloss.decimals=[18]", "logloss.decimals", "18"),
    ("logloss.failure_probability=1", "logloss.failure_probability", "1"),
    ("logloss.queries=0", "logloss.queries", "0"),
    ("nonsense.key=1", "nonsense", "1"),
]


@pytest.mark.parametrize("override, field, shown", INVALID, ids=[case[0] for case in INVALID])
def test_invalid_value_raises_error_naming_field_and_value(override, field, shown):
    with pytest.raises(ConfigError) as raised:
        load_config(None, [override])
    message = str(raised.value)
    assert message.startswith(field), message
    assert shown in message, message


def test_source_criteo_requires_paths():
    with pytest.raises(ConfigError, match=r"^data.criteo_paths"):
        load_config(None, ["data.source=criteo"])


def test_missing_and_malformed_files_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("audit: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
    not_mapping = tmp_path / "list.yaml"
    not_mapping.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(not_mapping)
    section_not_mapping = tmp_path / "section.yaml"
    section_not_mapping.write_text("audit: 3\n")
    with pytest.raises(ConfigError, match="^audit: must be a mapping"):
        load_config(section_not_mapping)


@pytest.mark.parametrize("text", ["audit.repetitions", "repetitions=3", "=3"])
def test_malformed_override_is_rejected(text):
    with pytest.raises(ConfigError, match="override"):
        parse_override(text)


@pytest.mark.parametrize("library", ["xgboost", "catboost"])
@pytest.mark.parametrize("execution", ["in_memory", "distributed"])
@pytest.mark.parametrize("attack", ["label_inference", "membership"])
def test_one_capability_table_decides_the_config_and_the_audit_table(library, execution, attack):
    """Every training mechanism x library x execution path x audit game: the config refuses exactly what the table
    refuses (naming the table's field), and the audit table skips exactly those of its mechanisms."""
    from lia_spark.kernels.audit_designs import INJECTED_DESIGN, MEMBERSHIP_DESIGN
    from lia_spark.kernels.mechanism_registry import TRAINING_MECHANISMS
    from lia_spark.run.capabilities import refusal, unsupported
    from lia_spark.studies.table import table_cells

    base = [f"models.library={library}", f"models.execution={execution}", f"audit.attack={attack}",
            "utility.bag_sizes=[]", "models.epsilon=1.0"]
    game = INJECTED_DESIGN if attack == "label_inference" else MEMBERSHIP_DESIGN
    for mechanism in TRAINING_MECHANISMS:
        found = refusal(mechanism, library=library, execution=execution, game=game)
        overrides = [*base, f"models.training_mechanism={mechanism}"]
        if found is None:
            load_config(None, overrides)
        else:
            with pytest.raises(ConfigError, match=rf"^{re.escape(found.field)}: {re.escape(found.reason)}"):
                load_config(None, overrides)
    trainable = [*base, "models.training_mechanism=none"]
    if refusal("none", library=library, execution=execution, game=game) is None:
        config = load_config(None, trainable)
        _, skipped = table_cells(config)
        assert skipped == {name: unsupported(name, library=library, execution=execution, game=game)
                           for name in config.table.mechanisms
                           if unsupported(name, library=library, execution=execution, game=game)}


@pytest.mark.parametrize("overrides, field, shown", [
    (["audit.model_uri=runs:/r/model", "audit.predictions_path=/p"], "audit.predictions_path", "not both"),
    (["audit.model_uri=runs:/r/model", "audit.canary_path=/c"], "audit.canary_path", "must be empty"),
    (["audit.predictions_path=/p", "audit.attack=membership"], "audit.attack", "membership"),
    (["audit.model_uri=runs:/r/model", "audit.claimed_epsilon=-1"], "audit.claimed_epsilon", "-1"),
    (["audit.model_uri=runs:/r/model", "audit.claimed_epsilon=some"], "audit.claimed_epsilon", "some"),
    (["audit.predictions_path=/p/*.parquet"], "audit.predictions_path", "*"),
    (["audit.model_uri=runs:/r/model", "audit.fail_on_finding=true"], "audit.fail_on_finding", "claimed_epsilon"),
    (["audit.model_uri=runs:/r/model", "audit.runs=2"], "audit.runs", "audit.model_uri gives the audited target"),
    (["models.execution=distributed", "audit.runs=2"], "audit.runs", "models.execution=distributed"),
    (["models.training_mechanism=pate", "audit.runs=2"], "audit.runs", "models.training_mechanism=pate"),
    (["audit.design=observational", "audit.runs=3"], "audit.runs", "injected game"),
])
def test_a_model_of_your_own_is_given_one_way_under_the_injected_design(overrides, field, shown):
    with pytest.raises(ConfigError, match=rf"^{re.escape(field)}: .*{re.escape(shown)}"):
        load_config(None, overrides)


@pytest.mark.parametrize("text, claim", [("none", math.nan), ("1", 1.0), ("0.5", 0.5), ("inf", math.inf),
                                         (".inf", math.inf), ("1e-2", 0.01)])
def test_the_claimed_epsilon_of_a_model_of_your_own(text, claim):
    stated = load_config(None, ["audit.model_uri=runs:/r/model", f"audit.claimed_epsilon={text}"]).audit.stated_claim
    assert (math.isnan(stated) and math.isnan(claim)) or stated == claim


@pytest.mark.parametrize("baseline, recalibrate, available, expected", [
    ("auto", "auto", ("proxy_prediction", "shadow_prediction"), {"shadow_prediction": "none"}),
    ("auto", "auto", ("proxy_prediction",), {"proxy_prediction": "proxy"}),
    ("both", "auto", ("proxy_prediction", "shadow_prediction"),
     {"proxy_prediction": "proxy", "shadow_prediction": "none"}),
    ("both", "target", ("proxy_prediction",), {"proxy_prediction": "target"}),
    ("proxy", "none", ("proxy_prediction", "shadow_prediction"), {"proxy_prediction": "none"}),
    ("shadows", "proxy", ("proxy_prediction", "shadow_prediction"), {"shadow_prediction": "proxy"}),
])
def test_the_audit_picks_its_baselines_and_their_maps(baseline, recalibrate, available, expected):
    """audit.baseline auto: the shadows where the canary table holds them, else the proxy; audit.recalibrate auto:
    the proxy mapped onto the target's scale, the shadows left as they are (docs/math.md §5.11, §5.13)."""
    section = load_config(None, [f"audit.baseline={baseline}", f"audit.recalibrate={recalibrate}"]).audit
    names = {"proxy_prediction": "proxy", "shadow_prediction": "shadows"}
    chosen = section.baseline_columns(available)
    assert {column: section.recalibration(names[column]) for column in chosen} == expected
