# Databricks notebook source
# MAGIC %md
# MAGIC # 03 · Compare MLflow runs
# MAGIC One row per pipeline run of an experiment (parent runs only): the settings that differ between runs
# MAGIC and the headline metrics (model AUC, epsilon lower bounds of the audit), plus a plot of one metric
# MAGIC across runs. Needs no Spark.
# MAGIC
# MAGIC Parameters (widgets on Databricks, `LIA_*` environment variables elsewhere): `experiment`,
# MAGIC `tracking_uri` (empty = `$MLFLOW_TRACKING_URI` or `sqlite:///mlflow.db`), `metric` (the metric to plot,
# MAGIC default `audit.eps_binomial_bonferroni_mean`; an unknown name falls back to the first audit metric).
# MAGIC
# MAGIC Install: lia-spark is not on a package index. Build its wheel with `make wheel` and copy `dist/` into this
# MAGIC Git folder (the `%pip` path below is relative to this notebook's folder, the working directory on Databricks
# MAGIC Runtime 14+; or point it at the wheel anywhere in the workspace or a volume), then Python restarts so the
# MAGIC package is imported fresh. Or install the wheel as a cluster library and delete both cells. Without the
# MAGIC `[spark]` extra: the runtime's pyspark, xgboost and MLflow stay (a runtime without xgboost needs
# MAGIC `[xgboost]`). Runs on classic, shared and serverless compute (Spark Connect).

# COMMAND ----------

# MAGIC %pip install ../dist/lia_spark-0.1.0-py3-none-any.whl

# COMMAND ----------

if "dbutils" in globals():  # Databricks: a fresh Python process imports the package just installed
    dbutils.library.restartPython()  # noqa: F821 - dbutils exists on Databricks

# COMMAND ----------

from lia_spark.cli.main import notebook_display, notebook_parameters
from lia_spark.run.sections import TrackingConfig
from lia_spark.tracking.mlflow_runs import pipeline_runs
from lia_spark.run.tracking_uri import resolve_tracking_uri

params = notebook_parameters(globals(), {"experiment": "lia-spark-demo", "tracking_uri": "",
                                         "metric": "audit.eps_binomial_bonferroni_mean"})
tracking_uri = resolve_tracking_uri(TrackingConfig(tracking_uri=params["tracking_uri"]))
runs = pipeline_runs(experiment=params["experiment"], tracking_uri=tracking_uri)
print(f"{len(runs)} pipeline runs in {params['experiment']!r} at {tracking_uri}")

# COMMAND ----------

# MAGIC %md ## Settings that differ between runs, and headline metrics

# COMMAND ----------

param_columns = [c for c in runs.columns if c.startswith("params.") and not c.startswith("params.env.")
                 and runs[c].nunique(dropna=False) > 1]
metric_columns = sorted(c for c in runs.columns if c.startswith("metrics.")
                        and c.split(".")[1] in ("train", "audit") and not c.endswith(".seconds"))
table = runs[["run_id", "tags.mlflow.runName", "status", "start_time", *param_columns, *metric_columns]]
notebook_display(table, globals())  # a grid on Databricks (the table is wide), printed elsewhere

# COMMAND ----------

# MAGIC %md ## One metric across runs

# COMMAND ----------

import matplotlib.pyplot as plt

audit_metrics = [c[len("metrics."):] for c in metric_columns if c.startswith("metrics.audit.")]
metric = params["metric"] if f"metrics.{params['metric']}" in runs.columns else next(iter(audit_metrics), "")
if metric:
    ordered = runs.sort_values("start_time")
    figure, axis = plt.subplots(figsize=(7, 3))
    axis.plot(range(len(ordered)), ordered[f"metrics.{metric}"], marker="o")
    axis.set_xticks(range(len(ordered)), ordered["tags.mlflow.runName"], rotation=45, ha="right")
    axis.set_ylabel(metric)
    figure.tight_layout()
    plt.show()
    notebook_display(ordered[["run_id", f"metrics.{metric}"]], globals())
