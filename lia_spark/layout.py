"""Where every output lives under ``run.output_dir`` (docs/layout.md describes each folder, its marker and writer).

Paths are plain strings joined with "/", so they hold for local folders and Hadoop URIs (hdfs://, s3a://, dbfs:)
alike. The names of folders inside a stage's committed folder are constants, because the stage writes them
into its staging folder before the commit renames it.
"""
from __future__ import annotations

from lia_spark.config import Config

TRUTH = "truth"
CRITEO_TSV = "criteo"
MODELS = "models"
CANARIES = "canaries"  # inside models/
TEST_PREDICTIONS = "test_predictions"  # inside models/
PROXY_PRIORS = "priors"  # inside models/
MODEL_METRICS = "metrics.json"  # inside models/
POSTERIORS = "posteriors"
ROWS = "rows"  # inside posteriors/
SUMMARY = "summary"  # inside posteriors/
SUMMARY_CSV = "summary.csv"  # inside posteriors/
PLOT_SAMPLE = "_plot_sample"  # inside the posteriors staging folder only (removed before the commit)
UTILITY = "utility"
AUDIT = "audit"
REPORT = "report"
TABLE = "table"
TABLE_CELLS = "cells"  # inside table/


def under(folder: str, *names: str) -> str:
    """``folder/name/...`` (a trailing "/" of ``folder`` dropped)."""
    return "/".join([folder.rstrip("/"), *names])


def truth_path(config: Config) -> str:
    """``<out>/truth``: the synthetic twin's (row_id, day, eta), written by the generate stage."""
    return under(config.run.output_dir, TRUTH)


def criteo_tsv_path(config: Config) -> str:
    """``<out>/criteo``: the twin in Criteo's TSV format (synthetic.write_tsv), written by the generate stage."""
    return under(config.run.output_dir, CRITEO_TSV)


def models_path(config: Config) -> str:
    """``<out>/models``: the train stage's folder (models, canaries, test predictions, proxy priors)."""
    return under(config.run.output_dir, MODELS)


def canaries_path(config: Config) -> str:
    """``<out>/models/canaries``: the target's training rows with both models' predictions."""
    return under(models_path(config), CANARIES)


def proxy_priors_path(config: Config) -> str:
    """``<out>/models/priors``: the proxy model's prediction for every row of mechanisms.day."""
    return under(models_path(config), PROXY_PRIORS)


def posteriors_path(config: Config) -> str:
    """``<out>/posteriors``: the posteriors stage's folder (rows, summary, summary.csv, plots)."""
    return under(config.run.output_dir, POSTERIORS)


def posterior_summary_path(config: Config) -> str:
    """``<out>/posteriors/summary``: one Parquet row per mechanism setting."""
    return under(posteriors_path(config), SUMMARY)


def utility_path(config: Config) -> str:
    """``<out>/utility``: the privacy-utility tradeoff (utility stage)."""
    return under(config.run.output_dir, UTILITY)


def audit_path(config: Config) -> str:
    """``<out>/audit``: the observational audit's results (audit stage)."""
    return under(config.run.output_dir, AUDIT)


def report_path(config: Config) -> str:
    """``<out>/report``: the run's report page (pipeline)."""
    return under(config.run.output_dir, REPORT)


def table_path(config: Config) -> str:
    """``<out>/table``: the audit table's files (``lia-spark audit-table``)."""
    return under(config.run.output_dir, TABLE)


def table_cell_path(config: Config, cell_name: str) -> str:
    """``<out>/table/cells/<cell>``: one cell's own run.output_dir (its models/ and audit/)."""
    return under(table_path(config), TABLE_CELLS, cell_name)
