# Databricks notebook source
# MAGIC %md
# MAGIC # 02 · Run the label-privacy audit
# MAGIC The whole pipeline on one config: data (synthetic twin or Criteo ingest) -> proxy and target models ->
# MAGIC posteriors per mechanism setting -> one-run label-inference audit (injected canaries by default) with
# MAGIC epsilon lower bounds -> report, tracked as one MLflow run with nested runs per stage. Finished stages are
# MAGIC reused (set `run.force=true` to recompute).
# MAGIC
# MAGIC Parameters (widgets on Databricks, `LIA_CONF` / `LIA_OVERRIDES` environment variables elsewhere):
# MAGIC `conf` = YAML config path (default `/Workspace/Users/{user}/lia_spark/conf/demo.yaml`, `{user}` = you;
# MAGIC outside Databricks a missing file falls back to the packaged demo config (`--conf demo`)), `overrides` =
# MAGIC space-separated `section.key=value` pairs. On Databricks, set
# MAGIC `tracking.experiment` to a workspace path such as `/Users/you@example.com/lia-spark`.
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

import shlex

from lia_spark.engine.spark.session import get_spark
from lia_spark.cli.main import WORKSPACE_CONF, configure_logging, notebook_conf, notebook_parameters
from lia_spark.run.config import load_config

configure_logging()
params = notebook_parameters(globals(), {"conf": WORKSPACE_CONF, "overrides": ""})
config = load_config(notebook_conf(params["conf"], globals()), shlex.split(params["overrides"]))
spark = get_spark(config.spark)  # the cluster's session on Databricks (Spark Connect on shared and serverless)

# COMMAND ----------

# MAGIC %md ## Run the pipeline

# COMMAND ----------

from lia_spark.engine.orchestration.pipeline import run_pipeline

result = run_pipeline(spark, config)
print(result.console_summary())

# COMMAND ----------

# MAGIC %md ## Audit results: epsilon lower bounds and guess counts

# COMMAND ----------

import pandas as pd

audit = result.step("audit")
metrics = pd.DataFrame(sorted((audit.metrics() if audit is not None else {}).items()), columns=["metric", "value"])
print(metrics.to_string(index=False))

# COMMAND ----------

# MAGIC %md ## The run's report (tables and plots of every stage)

# COMMAND ----------

if "displayHTML" in globals() and result.report_path:
    with open(result.step("report").result.html_path, encoding="utf-8") as handle:
        displayHTML(handle.read())  # noqa: F821 - Databricks built-in
else:
    print("report:", result.report_path)
