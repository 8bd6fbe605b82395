"""Job configuration: YAML files -> validated, frozen dataclasses.

Load order: the dataclass defaults (mirrored in ``conf/defaults.yaml``), then the user's ``--conf FILE`` (or a
packaged config by name, :mod:`lia_spark.run.packaged_configs`), then ``section.key=value`` overrides (values parsed
as YAML). Files and overrides are read within the limits of :mod:`lia_spark.run.config_text` (UTF-8, bounded
aliases). Every invalid value raises :class:`ConfigError` naming the field (``section.key``) and the offending value;
unknown keys are errors too, so typos never pass silently, and numbers a float64 or an int64 cannot hold never pass
as infinity or reach Spark.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import math
import os
import types
import typing
from typing import Any, Mapping, Sequence

import yaml

from lia_spark import names
from lia_spark.kernels.mechanism_registry import MECHANISMS
from lia_spark.names import IN_MEMORY
from lia_spark.run.capabilities import refusal
from lia_spark.run.checks import INT64, ConfigError, fail, fail_float_overflow, fail_int_range, number_from_text
from lia_spark.run.config_text import DuplicateKeyError, OverflowedNumber, decoded, load_yaml
from lia_spark.run.model_sections import AuditConfig, ModelsConfig, PateConfig, UtilityConfig
from lia_spark.run.packaged_configs import config_source
from lia_spark.run.sections import (DataConfig, LoglossConfig, MechanismsConfig, RunConfig, SparkConfig,
                                    SyntheticConfig, TableConfig, TrackingConfig)

# keys of earlier versions -> how to say the same now (shown with the unknown-key error)
REPLACED_KEYS = {
    **{f"models.utility_{key}": f"the utility grid is its own section: models.utility_{key} is utility.{key}"
       for key in ("epsilons", "bag_sizes", "extra_mechanisms")},
    **{f"models.pate_{key}": f"PATE is its own section: models.pate_{key} is pate.{key}"
       for key in ("teachers", "queries", "noise", "pseudo_labels", "delta")},
    "audit.score": "audit.score and audit.t are replaced by audit.scores, a list of score names: log_ratio, "
                   "difference_t<t> (e.g. audit.scores=[difference_t2] for score difference with t = 2)",
    "audit.t": "audit.score and audit.t are replaced by audit.scores (e.g. audit.scores=[difference_t2])",
    "mechanisms.day": "mechanisms.day is replaced by mechanisms.days: target (models.target_day, the default), a "
                      "list of days (e.g. mechanisms.days=[2]) or all (every day of the data)",
}


@dataclasses.dataclass(frozen=True)
class Config:
    """The whole job configuration, one frozen section per stage."""

    run: RunConfig = dataclasses.field(default_factory=RunConfig)
    spark: SparkConfig = dataclasses.field(default_factory=SparkConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    synthetic: SyntheticConfig = dataclasses.field(default_factory=SyntheticConfig)
    mechanisms: MechanismsConfig = dataclasses.field(default_factory=MechanismsConfig)
    models: ModelsConfig = dataclasses.field(default_factory=ModelsConfig)
    pate: PateConfig = dataclasses.field(default_factory=PateConfig)
    utility: UtilityConfig = dataclasses.field(default_factory=UtilityConfig)
    audit: AuditConfig = dataclasses.field(default_factory=AuditConfig)
    tracking: TrackingConfig = dataclasses.field(default_factory=TrackingConfig)
    table: TableConfig = dataclasses.field(default_factory=TableConfig)
    logloss: LoglossConfig = dataclasses.field(default_factory=LoglossConfig)

    @property
    def parquet_path(self) -> str:
        """Day-partitioned Parquet table; defaults to <run.output_dir>/data."""
        return self.data.parquet_path or os.path.join(self.run.output_dir, "data")

    @property
    def quarantine_path(self) -> str:
        """Malformed input rows; defaults to <run.output_dir>/quarantine."""
        return self.data.quarantine_path or os.path.join(self.run.output_dir, "quarantine")

    def with_target(self, mechanism: str, epsilon: float, bag_size: int) -> "Config":
        """This config with the target trained under ``mechanism`` at ``epsilon`` with bags of ``bag_size``
        (models.training_mechanism, models.epsilon, models.bag_size)."""
        return dataclasses.replace(self, models=dataclasses.replace(
            self.models, training_mechanism=mechanism, epsilon=epsilon, bag_size=bag_size))

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (YAML/JSON friendly) of every resolved value."""
        return {
            section.name: {key: (list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v)
                           for key, v in dataclasses.asdict(getattr(self, section.name)).items()}
            for section in dataclasses.fields(self)
        }


def _coerce(field: str, value: Any, annotation: Any) -> Any:
    """Convert a YAML value to the field's declared type, or fail naming the field."""
    origin = typing.get_origin(annotation)
    if origin is types.UnionType:  # a keyword (str) or the other type, e.g. str | tuple[int, ...]; or None (null)
        arms = typing.get_args(annotation)
        if value is None and type(None) in arms:
            return None
        if isinstance(value, str) and str in arms:
            return value
        (other,) = [arm for arm in arms if arm not in (str, type(None))]
        if typing.get_origin(other) is tuple and (isinstance(value, (str, bytes)) or not isinstance(value, Sequence)):
            fail(field, value, "must be a keyword or a list",
                 f"see conf/defaults.yaml (lia-spark config --init) for {field}, e.g. [{value!s}]")
        return _coerce(field, value, other)
    if origin is tuple:
        (item_type, _) = typing.get_args(annotation)
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            fail(field, value, "must be a list")
        return tuple(_coerce(field, item, item_type) for item in value)
    if origin is collections.abc.Mapping:
        if not isinstance(value, Mapping):
            fail(field, value, "must be a mapping")
        return {str(k): str(v) for k, v in value.items()}
    if annotation is bool:
        if not isinstance(value, bool):
            fail(field, value, "must be true or false")
        return value
    if annotation is int:
        if isinstance(value, OverflowedNumber) and value.integer:
            fail_int_range(field, value.text)
        if isinstance(value, bool) or not isinstance(value, int):
            fail(field, value, "must be an integer")
        if not INT64[0] <= value <= INT64[1]:
            fail_int_range(field, value)
        return value
    if annotation is float:
        return _number(field, value)
    if annotation is str:
        if not isinstance(value, str):
            fail(field, value, "must be a string")
        return value
    raise TypeError(f"unsupported config type {annotation!r} for {field}")


def _number(field: str, value: Any) -> float:
    """A float field's value: a YAML number or a number written as text (:func:`lia_spark.run.checks.number_from_text`);
    a literal float64 cannot hold (:class:`lia_spark.run.config_text.OverflowedNumber`, an integer beyond 1.8e308)
    is refused, never read as infinity."""
    if isinstance(value, OverflowedNumber):
        fail_float_overflow(field, value.text)
    if isinstance(value, str):
        value = number_from_text(field, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(field, value, "must be a number")
    try:
        number = float(value)
    except OverflowError:
        fail_float_overflow(field, str(value))
    if math.isnan(number):
        fail(field, value, "must be a number")
    return number


def _build_section(name: str, cls: type, values: Mapping[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in values:
        if key not in known:
            replaced = REPLACED_KEYS.get(f"{name}.{key}", "")
            raise ConfigError(f"{name}.{key}: unknown key (known: {', '.join(sorted(known))}), got {values[key]!r}"
                              + (f"; {replaced}" if replaced else ""))
    kwargs = {key: _coerce(f"{name}.{key}", value, hints[key]) for key, value in values.items()}
    section = cls(**kwargs)
    section.validate()
    return section


def _merge(base: dict[str, Any], update: Mapping[str, Any], origin: str) -> dict[str, Any]:
    merged = {key: dict(value) for key, value in base.items()}
    for section, values in update.items():
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise ConfigError(f"{section}: must be a mapping of keys in {origin}, got {values!r}")
        merged.setdefault(section, {}).update(values)
    return merged


def _read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    source = config_source(path)
    try:
        content = load_yaml(decoded(source.read_bytes(), str(path)), where=str(path))
    except DuplicateKeyError as error:
        raise ConfigError(f"--conf: {error.problem} in {path} (line {error.problem_mark.line + 1}), got the key "
                          "twice; keep one of them") from error
    except yaml.YAMLError as error:
        raise ConfigError(f"--conf: {path} is not valid YAML ({error}), got the file's text") from error
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise ConfigError(f"--conf: {path} must hold a mapping of sections, got {type(content).__name__}")
    return content


def parse_override(text: str) -> tuple[str, str, Any]:
    """Split ``section.key=value`` into its parts; the value is parsed as YAML (``[1, 2]``, ``inf``, ``true``) within
    the limits of :func:`lia_spark.run.config_text.load_yaml`."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"override: must look like section.key=value, got {text!r}")
    dotted, raw = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    field = f"{section}.{key}"
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{field}: the value is not UTF-8 text (the terminal passed bytes of another encoding), "
                          f"got {raw!r}; set the terminal's locale to UTF-8 (e.g. LANG=C.UTF-8)") from None
    try:
        value = load_yaml(raw, where="the override", field=field) if raw.strip() else ""
    except DuplicateKeyError as error:
        raise ConfigError(f"{field}: {error.problem} in the value, got {raw!r}; keep one of them") from error
    except yaml.YAMLError as error:
        raise ConfigError(f"{dotted}: value is not valid YAML ({error}), got {raw!r}") from error
    return section, key, value


def load_config(path: str | os.PathLike | None = None, overrides: Sequence[str] = ()) -> Config:
    """Defaults <- YAML file <- ``section.key=value`` overrides, validated into a frozen :class:`Config`."""
    values: dict[str, Any] = {}
    if path is not None:
        values = _merge(values, _read_yaml(path), str(path))
    for text in overrides:
        section, key, value = parse_override(text)
        values = _merge(values, {section: {key: value}}, "overrides")
    return config_from_dict(values)


def config_from_dict(values: Mapping[str, Any]) -> Config:
    """Validate a nested mapping of sections (missing keys take the dataclass defaults)."""
    sections = {f.name: f.type for f in dataclasses.fields(Config)}
    hints = typing.get_type_hints(Config)
    for section in values:
        if section not in sections:
            raise ConfigError(f"{section}: unknown section (known: {', '.join(sections)}), got {values[section]!r}")
    built = {name: _build_section(name, hints[name], values.get(name) or {}) for name in sections}
    config = Config(**built)
    _check_synthetic_days(config)
    _check_capabilities(config)
    return config


def _check_capabilities(config: Config) -> None:
    """The target's mechanism and the utility grid's LLP settings against the capability table
    (:func:`lia_spark.run.capabilities.unsupported`): library, execution path and audit game; audit.runs against
    the execution path and the mechanism."""
    models = config.models
    found = refusal(models.training_mechanism, library=models.library, execution=models.execution,
                    game=config.audit.audit_design)
    if found is not None:
        fail(found.field, getattr(models, found.field.split(".")[1]), found.reason, found.fix)
    if config.audit.runs > 1 and (models.execution != IN_MEMORY or models.mechanism.teachers):
        teachers = ", ".join(name for name, known in MECHANISMS.items() if known.teachers)
        fail("audit.runs", config.audit.runs, f"above 1 refits the target on the in-memory path, every mechanism but "
             f"{teachers} (whose teachers would be fitted again per run); here models.execution={models.execution}, "
             f"models.training_mechanism={models.training_mechanism}", "use audit.runs=1")
    grid = refusal(names.LLP, library=models.library, execution=IN_MEMORY)
    if config.utility.bag_sizes and grid is not None:
        fail("utility.bag_sizes", list(config.utility.bag_sizes), f"the utility grid's llp settings: {grid.reason}",
              "set utility.bag_sizes=[] or models.library=xgboost")


def _check_synthetic_days(config: Config) -> None:
    """The synthetic twin generated into the default data folder holds days 0..synthetic.days-1: every day
    a stage reads must be one of them."""
    if config.data.source != "synthetic" or config.data.parquet_path:
        return
    for field, value in day_fields(config).items():
        if any(day >= config.synthetic.days for day in (value if isinstance(value, list) else [value])):
            fail(field, value, f"names a day the synthetic twin does not hold (synthetic.days={config.synthetic.days}"
                  f" makes days 0..{config.synthetic.days - 1})", "choose among them or raise synthetic.days")


def day_fields(config: Config) -> dict[str, int | list[int]]:
    """Every config field that names days of the data, with its value (a day, or a list of days); mechanisms.days
    only when it lists days (target is models.target_day, all is every day there is)."""
    fields: dict[str, int | list[int]] = {"models.proxy_day": config.models.proxy_day,
                                          "models.target_day": config.models.target_day,
                                          "logloss.day": config.logloss.day}
    if not isinstance(config.mechanisms.days, str):
        fields["mechanisms.days"] = list(config.mechanisms.days)
    return fields
