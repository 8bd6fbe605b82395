"""What each stage reads, and the fingerprint that decides whether its committed output may be reused.

A stage's output is reused only when everything that produced it is unchanged: every configuration field the
stage reads (its declaration's ``fields``, :class:`lia_spark.engine.runtime.stage.Stage`), the code it runs
(:func:`code_version`: lia_spark's version and a hash of its sources) and the fingerprints of the outputs it reads.
The fingerprint is the SHA-256 of those three, canonically JSON-encoded.

The completion marker of an output stores its fingerprint with the parameters behind it and a checksum of the
whole marker (:func:`sealed_marker`), so a hand-edited or truncated marker is never trusted
(:func:`verified_marker`), and a recomputation can say which fields changed (:func:`changes`).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from typing import Any, Mapping

from lia_spark import __version__
from lia_spark.run.environment import package_files, package_versions

FINGERPRINT_KEY = "lia_fingerprint"
CHECKSUM_KEY = "lia_marker_sha256"

# Fields no stage's output depends on: identity and location of the run, session settings, tracking.
UNREAD_FIELDS: tuple[str, ...] = ("run.name", "run.output_dir", "run.force", "run.replace_foreign",
                                  "run.stages", "run.stale_lock_hours",
                                  "run.progress_seconds", "spark.*",
                                  "data.parquet_path", "data.quarantine_path", "data.split_gzip", "data.task_io",
                                  "synthetic.write_tsv",
                                  "synthetic.gzip", "tracking.*",
                                  # audit-table: which cells exist; each cell's own train/audit output is
                                  # fingerprinted by the models.* fields the cell sets
                                  "table.*",
                                  # what the command's exit code makes of a finding, not what the audit computes
                                  "audit.fail_on_finding",
                                  # where the audit key lives: the key itself enters as its identifier
                                  # (lia_spark.engine.models.audit_key.key_values)
                                  "audit.key_path")


def expand_fields(patterns: tuple[str, ...], config: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
    """Dotted field names of ``patterns`` ("section.*" expanded over the sections of ``config``'s dict, less the
    fields of that section :data:`UNREAD_FIELDS` names one by one)."""
    names: list[str] = []
    for pattern in patterns:
        section, key = pattern.split(".", 1)
        if key == "*":
            names.extend(f"{section}.{name}" for name in config[section] if f"{section}.{name}" not in UNREAD_FIELDS)
        else:
            names.append(pattern)
    return tuple(names)


def _plain(value: Any) -> Any:
    """JSON-stable value: tuples as lists, non-finite floats as strings (JSON has no inf/NaN)."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def stage_parameters(fields: tuple[str, ...], config: Mapping[str, Mapping[str, Any]], **extra: Any
                     ) -> dict[str, Any]:
    """``{"section.key": value}`` of the ``fields`` a stage reads (its declaration's), from ``Config.to_dict()``,
    plus ``extra``."""
    values = {name: _plain(config[name.split(".", 1)[0]][name.split(".", 1)[1]])
              for name in expand_fields(fields, config)}
    values.update({key: _plain(value) for key, value in extra.items()})
    return values


# Modules that produce no stage output (command line, orchestration, tracking, report, the audit table's
# collation): editing them does not change what a stage computes, so they stay out of code_version().
NON_COMPUTING_MODULES = ("cli/main.py", "tracking/mlflow_runs.py", "tracking/model_logging.py", "tracking/store.py",
                         "present/report.py", "studies/table.py", "cli/command_help.py", "run/schemas.py",
                         "engine/orchestration/commands.py", "engine/orchestration/pipeline.py",
                         "engine/orchestration/audit_table.py", "engine/report/stage.py", "engine/spark/session.py",
                         "engine/runtime/progress.py")


@functools.cache
def code_version() -> str:
    """lia-spark's version plus the first 12 hex digits of the SHA-256 of the Python sources that compute stage
    outputs (all but :data:`NON_COMPUTING_MODULES`), so an output of edited code is never reused; the same whether
    the package is imported from a checkout, a wheel or a zip on ``--py-files``."""
    digest = hashlib.sha256()
    for relative, content in package_files():
        if relative.endswith(".py") and relative not in NON_COMPUTING_MODULES:
            digest.update(relative.encode("utf-8") + b"\0" + content)
    return f"{__version__}+{digest.hexdigest()[:12]}"


def recorded_versions() -> dict[str, str]:
    """:func:`package_versions` with lia-spark's entry the imported code's :func:`code_version` (what the executors'
    check reports), not the installed distribution's version: a zip on ``--py-files`` or an edited checkout runs other
    code than the distribution's metadata names."""
    return package_versions() | {"lia-spark": code_version()}


def _digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """Identity of one stage output: the stage, its parameters, the code version and its inputs' fingerprints."""

    stage: str
    parameters: dict[str, Any]
    inputs: dict[str, str]
    code_version: str = dataclasses.field(default_factory=code_version)

    @property
    def value(self) -> str:
        """SHA-256 (hex) of stage, parameters, code version and input fingerprints."""
        return _digest({"stage": self.stage, "parameters": self.parameters, "inputs": self.inputs,
                        "code_version": self.code_version})

    def to_dict(self) -> dict[str, Any]:
        """What the marker stores (``value`` included)."""
        return {**dataclasses.asdict(self), "value": self.value}


def sealed_marker(payload: Mapping[str, Any], fingerprint: Fingerprint) -> dict[str, Any]:
    """Marker content: ``payload`` plus the fingerprint and a SHA-256 checksum over both."""
    marker = {**json.loads(json.dumps(payload, default=str)), FINGERPRINT_KEY: fingerprint.to_dict()}
    marker[CHECKSUM_KEY] = _digest(marker)
    return marker


def verified_marker(marker: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """(marker, "") when its checksum and fingerprint are intact, else (None, why it is not trusted)."""
    content = {key: value for key, value in marker.items() if key != CHECKSUM_KEY}
    stored = content.get(FINGERPRINT_KEY)
    if CHECKSUM_KEY not in marker or not isinstance(stored, Mapping):
        return None, "its marker has no fingerprint (written by an older lia-spark)"
    if marker[CHECKSUM_KEY] != _digest(content):
        return None, "its marker was modified after it was written (checksum mismatch)"
    try:
        recomputed = Fingerprint(stored["stage"], stored["parameters"], stored["inputs"], stored["code_version"])
    except (KeyError, TypeError):
        return None, "its marker's fingerprint is incomplete"
    if recomputed.value != stored.get("value"):
        return None, "its marker's fingerprint does not match its parameters"
    return dict(marker), ""


def marker_fingerprint(marker: Mapping[str, Any]) -> str:
    """The fingerprint value stored in a verified marker."""
    return str(marker[FINGERPRINT_KEY]["value"])


def changes(stored: Mapping[str, Any], current: Fingerprint) -> list[str]:
    """Human-readable differences between a marker's fingerprint and the current one (empty when equal)."""
    found = []
    if stored.get("code_version") != current.code_version:
        found.append(f"lia-spark {stored.get('code_version')} -> {current.code_version}")
    old, new = stored.get("parameters", {}), current.parameters
    for name in sorted(set(old) | set(new)):
        if old.get(name, "<unset>") != new.get(name, "<unset>"):
            found.append(f"{name} {json.dumps(old.get(name, '<unset>'))} -> {json.dumps(new.get(name, '<unset>'))}")
    old_inputs, new_inputs = stored.get("inputs", {}), current.inputs
    for name in sorted(set(old_inputs) | set(new_inputs)):
        if old_inputs.get(name) != new_inputs.get(name):
            found.append(f"input {name} changed")
    return found
