"""Where every output lives under ``run.output_dir`` (docs/layout.md describes each folder, its marker and writer).

Paths are plain strings joined with "/", so they hold for local folders and Hadoop URIs (hdfs://, s3a://, dbfs:)
alike. The names of folders inside a stage's committed folder are constants, because the stage writes them
into its staging folder before the commit renames it.
"""
from __future__ import annotations

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
AUDIT_KEY = "audit_key"  # the audit's secret key (owner-only file), unless audit.key_path places it elsewhere


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
