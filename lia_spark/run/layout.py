"""Where every output lives under ``run.output_dir`` (docs/layout.md describes each folder, its marker and writer),
and the check that no two of a run's outputs, nor an input and an output, share a place (:func:`check_paths_apart`).

Paths are plain strings joined with "/", so they hold for local folders and Hadoop URIs (hdfs://, s3a://, dbfs:)
alike. The names of folders inside a stage's committed folder are constants, because the stage writes them
into its staging folder before the commit renames it.
"""
from __future__ import annotations

import dataclasses
import re

from lia_spark.run.checks import fail, path_relation, resolved_path
from lia_spark.run.config import Config

TRUTH = "truth"
CRITEO_TSV = "criteo"
MODELS = "models"
CANARIES = "canaries"  # inside models/
TEST_PREDICTIONS = "test_predictions"  # inside models/
MEMBERSHIP = "membership"  # inside models/, with audit.attack=membership
PROXY_PRIORS = "priors"  # inside models/
MODEL_METRICS = "metrics.json"  # inside models/
POSTERIORS = "posteriors"
ROWS = "rows"  # inside posteriors/
SUMMARY = "summary"  # inside posteriors/
SUMMARY_CSV = "summary.csv"  # inside posteriors/
PLOTS = "plots"  # inside posteriors/ and audit/
PLOT_SAMPLE = "_plot_sample"  # inside the posteriors staging folder only (removed before the commit)
UNIT_SPILL = "_unit_rows"  # inside the posteriors staging folder only: the input rows by bagging unit
UTILITY = "utility"
AUDIT = "audit"
REPORT = "report"
TABLE = "table"
INJECT = "inject"
EXPORT = "export"  # inside inject/: the training set handed to the user's trainer
SEALED = "sealed"  # inside inject/: the canaries' true labels, counterfactuals and coins (never handed out)
INJECT_MANIFEST = "manifest.json"  # inside inject/
EXPORT_TSV = "criteo"  # inside inject/: the export as a Criteo day file (audit.export_tsv)
TABLE_CELLS = "cells"  # inside table/
LOGLOSS = "logloss"
RESULTS = "results"  # <command>.json of every command
AUDIT_KEY = "audit_key"  # the audit's secret key (an owner-only file), unless audit.key_path places it elsewhere


def under(folder: str, *names: str) -> str:
    """``folder/name/...`` (a trailing "/" of ``folder`` dropped)."""
    return "/".join([folder.rstrip("/"), *names])


def output_path(config: Config, *names: str) -> str:
    """``<out>/name/...``, e.g. ``output_path(config, AUDIT)`` (the folders are listed in docs/layout.md)."""
    return under(config.run.output_dir, *names)


def canaries_path(config: Config) -> str:
    """``<out>/models/canaries``: the target's training rows with both models' predictions (train stage)."""
    return output_path(config, MODELS, CANARIES)


def export_path(config: Config) -> str:
    """``<out>/inject/export``: the target day's rows with each canary's label replaced by y^b (inject stage), for a
    trainer outside this project."""
    return output_path(config, INJECT, EXPORT)


def sealed_path(config: Config) -> str:
    """``<out>/inject/sealed``: per canary its true label, y1, the coin b and the proxy's prediction (inject stage);
    read by the audit of a model trained on the export."""
    return output_path(config, INJECT, SEALED)


def membership_path(config: Config) -> str:
    """``<out>/models/membership``: the membership baseline's candidates, their inclusion bit and both models'
    predictions (train stage, audit.attack=membership)."""
    return output_path(config, MODELS, MEMBERSHIP)


def proxy_priors_path(config: Config) -> str:
    """``<out>/models/priors``: the proxy model's prediction for every row of the days of mechanisms.days (train
    stage)."""
    return output_path(config, MODELS, PROXY_PRIORS)


def posterior_summary_path(config: Config) -> str:
    """``<out>/posteriors/summary``: one Parquet row per mechanism setting (posteriors stage)."""
    return output_path(config, POSTERIORS, SUMMARY)


def audit_key_path(config: Config) -> str:
    """The audit key's file: audit.key_path, else ``<out>/audit_key`` (beside the stage folders, so no commit of a
    stage replaces it and a re-run of the same folder finds it)."""
    return config.audit.key_path or output_path(config, AUDIT_KEY)


def table_cell_path(config: Config, cell_name: str) -> str:
    """``<out>/table/cells/<cell>``: one audit-table cell's own run.output_dir (its models/ and audit/)."""
    return output_path(config, TABLE, TABLE_CELLS, cell_name)


OUTPUT, INPUT = "output", "input"
_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


@dataclasses.dataclass(frozen=True)
class PlacedPath:
    """A path a run writes (``role`` :data:`OUTPUT`: a folder or file it replaces or deletes whole) or reads
    (:data:`INPUT`): the config field that places it, what it holds (``models folder``), the path as configured,
    and whether the user set that field (``chosen``) rather than leaving it to its place under run.output_dir."""

    field: str
    holds: str
    path: str
    role: str = OUTPUT
    chosen: bool = False


def placed_paths(config: Config) -> tuple[PlacedPath, ...]:
    """Every path a run of ``config`` writes or reads, one row per field value: the outputs of every stage (of the
    data step, the one data.source chooses) and the inputs a user gives. run.output_dir itself is the outputs'
    container, not an output. A field that places nothing (empty, a model URI of MLflow's, a table lia-spark's own
    stages write) has no row."""
    data, audit = config.data, config.audit
    synthetic = data.source == "synthetic"

    def folder(name: str, holds: str, *, written: bool = True) -> PlacedPath:
        return PlacedPath("run.output_dir", f"{holds} folder", output_path(config, name) if written else "")

    rows = (
        PlacedPath("data.parquet_path", "data table", config.parquet_path, chosen=bool(data.parquet_path)),
        PlacedPath("data.quarantine_path", "quarantine of malformed lines", "" if synthetic else config.quarantine_path,
                   chosen=bool(data.quarantine_path)),
        PlacedPath("data.parquet_path", "ingest's decoded copies", "" if synthetic else f"{config.parquet_path}"
                   ".gunzip", chosen=bool(data.parquet_path)),
        folder(TRUTH, TRUTH, written=synthetic),
        folder(CRITEO_TSV, CRITEO_TSV, written=synthetic and config.synthetic.write_tsv),
        *(folder(name, name) for name in (MODELS, POSTERIORS, UTILITY, AUDIT, REPORT, LOGLOSS, INJECT, TABLE, RESULTS)),
        PlacedPath("audit.key_path", "audit key file", audit_key_path(config), chosen=bool(audit.key_path)),
        *(PlacedPath("data.criteo_paths", "Criteo input", "" if synthetic else path, INPUT, True)
          for path in data.criteo_paths),
        PlacedPath("audit.predictions_path", "predictions table", audit.predictions_path, INPUT, True),
        PlacedPath("audit.model_uri", "model folder", _local_model(audit.model_uri), INPUT, True),
        PlacedPath("audit.canary_path", "canary table", _given_table(config, audit.canary_path), INPUT, True),
        PlacedPath("mechanisms.prior_path", "prior table", _given_table(config, config.mechanisms.prior_path),
                   INPUT, True),
    )
    return tuple(row for row in rows if row.path)


def _local_model(uri: str) -> str:
    """audit.model_uri when it is a folder on a file system (a path or a ``file:`` URI), "" for MLflow's
    ``runs:/``, ``models:/`` and other URIs."""
    return uri if not _URI_SCHEME.match(uri) or uri.startswith("file:") else ""


def _given_table(config: Config, path: str) -> str:
    """``path`` unless it names a table lia-spark's own stages write under ``config`` (the truth, the proxy
    priors, the canaries), which the run reads where it wrote it."""
    own = {resolved_path(table) for table in (output_path(config, TRUTH), proxy_priors_path(config),
                                               canaries_path(config))}
    return "" if path and resolved_path(path) in own else path


_RELATIONS = {"the same as": "be the same path as", "inside": "lie inside", "around": "hold"}
_FROM_THE_OTHER_SIDE = {"the same as": "the same as", "inside": "around", "around": "inside"}


def check_paths_apart(config: Config) -> None:
    """Before any work: no two outputs of :func:`placed_paths`, nor an input and an output, may be the same path or
    lie one inside the other, compared resolved (:func:`lia_spark.run.checks.resolved_path`): a stage replaces its
    output whole, so the commit of one would delete the other (e.g. data.quarantine_path=<out>/data, or
    data.parquet_path=<out>/models, which train's commit would delete).

    Raises:
        ConfigError: naming first the field the user set of the two (else the first), its value, and the other
            field with its path.
    """
    rows = [(row, resolved_path(row.path)) for row in placed_paths(config)]
    for index, (first, first_place) in enumerate(rows):
        for second, second_place in rows[index + 1:]:
            relation = path_relation(first_place, second_place)
            if not relation or first.role == second.role == INPUT:
                continue
            if second.chosen and not first.chosen:
                first, second, relation = second, first, _FROM_THE_OTHER_SIDE[relation]
            fail(first.field, first.path, f"the {first.holds} must not {_RELATIONS[relation]} the {second.holds} of "
                 f"{second.field} ({second.path}): lia-spark replaces each output whole, so a commit of one would "
                 "delete the other", f"choose another {first.field} or {second.field} (lia-spark stopped before any "
                 "work)")
