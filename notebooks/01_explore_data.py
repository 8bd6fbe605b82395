# Databricks notebook source
# MAGIC %md
# MAGIC # 01 · Explore the click-log table
# MAGIC Rows, click rate, missing values and feature ranges per day of the day-partitioned Parquet table
# MAGIC (`data.parquet_path`, default `<run.output_dir>/data`). When the table is missing, the data stage
# MAGIC (synthetic twin or Criteo ingest, per `data.source`) runs first.
# MAGIC
# MAGIC Parameters (widgets on Databricks, `LIA_CONF` / `LIA_OVERRIDES` environment variables elsewhere):
# MAGIC `conf` = YAML config path (default `/Workspace/Users/{user}/lia_spark/conf/demo.yaml`, `{user}` = you;
# MAGIC outside Databricks a missing file falls back to the packaged demo config (`--conf demo`)), `overrides` =
# MAGIC space-separated `section.key=value` pairs.
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
from lia_spark.cli.main import WORKSPACE_CONF, notebook_conf, notebook_display, notebook_parameters
from lia_spark.run.config import load_config

params = notebook_parameters(globals(), {"conf": WORKSPACE_CONF, "overrides": ""})
config = load_config(notebook_conf(params["conf"], globals()), shlex.split(params["overrides"]))
spark = get_spark(config.spark)  # the cluster's session on Databricks (Spark Connect on shared and serverless)

# COMMAND ----------

# MAGIC %md ## Load (or create) the table

# COMMAND ----------

from lia_spark.engine.runtime.outputs import is_complete, read_marker
from lia_spark.engine.orchestration.registry import run_stage, step_stage

if not is_complete(spark, config.parquet_path):
    run_stage(step_stage("data", config).name, spark, config)
table = spark.read.parquet(config.parquet_path)
print("table:", config.parquet_path)
print("marker:", read_marker(spark, config.parquet_path))

# COMMAND ----------

# MAGIC %md ## Rows and click rate per day

# COMMAND ----------

from pyspark.sql import functions as F

from lia_spark.kernels import criteo

per_day = (table.groupBy(criteo.DAY)
           .agg(F.count("*").alias("rows"), F.avg(criteo.LABEL).alias("click_rate"))
           .orderBy(criteo.DAY))
notebook_display(per_day, globals())

# COMMAND ----------

# MAGIC %md ## Missing share, quartiles of the integer features, distinct values of the categoricals

# COMMAND ----------

missing = table.select([F.avg(F.col(c).isNull().cast("double")).alias(c) for c in criteo.FEATURE_COLUMNS])
notebook_display(missing, globals())
quartiles = table.select([F.percentile_approx(c, [0.25, 0.5, 0.75], 1000).alias(c) for c in criteo.INT_COLUMNS])
notebook_display(quartiles, globals())
distinct = table.select([F.approx_count_distinct(c).alias(c) for c in criteo.CAT_COLUMNS])
notebook_display(distinct, globals())

# COMMAND ----------

# MAGIC %md ## Click rate by quantile bucket of I1 (how much signal one feature carries)

# COMMAND ----------

import matplotlib.pyplot as plt
from pyspark.ml.feature import Bucketizer

cuts = sorted(set(table.approxQuantile("I1", [i / 10 for i in range(1, 10)], 0.01)))
bucketizer = Bucketizer(splits=[-float("inf"), *cuts, float("inf")], inputCol="I1", outputCol="bucket")
by_bucket = (bucketizer.transform(table.where(F.col("I1").isNotNull()).withColumn("I1", F.col("I1").cast("double")))
             .groupBy("bucket").agg(F.count("*").alias("rows"), F.avg(criteo.LABEL).alias("click_rate"))
             .orderBy("bucket").toPandas())
figure, axis = plt.subplots(figsize=(6, 3))
axis.bar(by_bucket["bucket"], by_bucket["click_rate"])
axis.set_xlabel("quantile bucket of I1")
axis.set_ylabel("click rate")
plt.show()
print(by_bucket.to_string(index=False))
