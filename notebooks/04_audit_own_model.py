# Databricks notebook source
# MAGIC %md
# MAGIC # 04 · Audit your own model
# MAGIC A valid lower bound on the label-DP epsilon of a model **your** code trains (its own RR, LLP or PATE, its own
# MAGIC trainer, its model in MLflow), with no assumption on the proxy (docs/usage.md, "Audit your own model"):
# MAGIC
# MAGIC 1. `inject` writes the target day's rows with every label replaced by y^b (a counterfactual y1 on a fair coin
# MAGIC    b) to `<run.output_dir>/inject/export`; the coins stay in `inject/sealed` and are keyed on the audit key
# MAGIC    `<run.output_dir>/audit_key` (or `audit.key_path`), which your trainer must never read;
# MAGIC 2. your trainer trains on the export and logs its model: a classifier with its flavour (sklearn, xgboost,
# MAGIC    lightgbm, catboost: the audit reads its predict_proba), or a pyfunc returning P(y = 1) per row;
# MAGIC 3. the audit scores the exported rows with that model on the executors and guesses the coins.
# MAGIC
# MAGIC Parameters (widgets on Databricks, `LIA_<NAME>` environment variables elsewhere): `conf`, `overrides` (as in
# MAGIC notebook 02), `model_uri` = your model (`runs:/...`, `models:/name/version`, `models:/name@alias`; empty = the
# MAGIC example trainer of step 2 trains one), `claimed_epsilon` = the epsilon you claim for it.
# MAGIC
# MAGIC Install: as in notebook 01 (`make wheel`, `dist/` copied into this Git folder).

# COMMAND ----------

# MAGIC %pip install ../dist/lia_spark-0.1.0-py3-none-any.whl

# COMMAND ----------

if "dbutils" in globals():  # Databricks: a fresh Python process imports the package just installed
    dbutils.library.restartPython()  # noqa: F821 - dbutils exists on Databricks

# COMMAND ----------

import shlex

from lia_spark.cli.main import WORKSPACE_CONF, notebook_conf, notebook_parameters
from lia_spark.engine.spark.session import get_spark
from lia_spark.run.config import load_config

params = notebook_parameters(globals(), {"conf": WORKSPACE_CONF, "overrides": "", "model_uri": "",
                                         "claimed_epsilon": "1"})
conf_path, overrides = notebook_conf(params["conf"], globals()), shlex.split(params["overrides"])
config = load_config(conf_path, overrides)
spark = get_spark(config.spark)  # the cluster's session on Databricks (Spark Connect on shared and serverless)

# COMMAND ----------

# MAGIC %md ## 1. The injected training set (reused while its fingerprint matches)

# COMMAND ----------

from lia_spark.engine.runtime.outputs import is_complete
from lia_spark.engine.orchestration.registry import run_stage, step_stage

if not is_complete(spark, config.parquet_path):
    run_stage(step_stage("data", config).name, spark, config)
injected = run_stage("inject", spark, config)
print(injected.console_summary())

# COMMAND ----------

# MAGIC %md
# MAGIC ## 2. Train with your own code
# MAGIC Replace this cell by your trainer, reading `injected.export_path` and nothing else of the output folder. The
# MAGIC example: randomized response at the claimed epsilon, xgboost's classifier, logged the ordinary way
# MAGIC (`mlflow.xgboost.log_model`; the audit reads its `predict_proba`, as for sklearn, lightgbm and catboost).

# COMMAND ----------

import math

import mlflow
import numpy as np
import xgboost

from lia_spark.tracking.model_logging import model_location
from lia_spark.run.tracking_uri import resolve_tracking_uri

model_uri = params["model_uri"]
if not model_uri:
    rows = spark.read.parquet(injected.export_path).toPandas()
    columns = [column for column in rows.columns if column not in ("label", "row_id", "day")]
    epsilon = float(params["claimed_epsilon"])
    flip = np.random.default_rng(7).random(len(rows)) < 1.0 / (1.0 + math.exp(epsilon))
    released = np.where(flip, 1 - rows["label"].to_numpy(), rows["label"].to_numpy())
    classifier = xgboost.XGBClassifier(n_estimators=50, max_depth=6, learning_rate=0.3, n_jobs=2)
    classifier.fit(rows[columns], released)
    mlflow.set_tracking_uri(resolve_tracking_uri(config.tracking))
    mlflow.set_experiment(config.tracking.experiment)
    with mlflow.start_run(run_name="own trainer (notebook 04)") as trained:
        mlflow.xgboost.log_model(classifier, **model_location("model"))  # name= (MLflow 3) or artifact_path= (2)
    model_uri = f"runs:/{trained.info.run_id}/model"
print("model:", model_uri)

# COMMAND ----------

# MAGIC %md ## 3. The audit: the model scored on the executors against the sealed coins

# COMMAND ----------

audited = load_config(conf_path, [*overrides, f"audit.model_uri={model_uri}",
                                  f"audit.claimed_epsilon={params['claimed_epsilon']}"])
result = run_stage("audit", spark, audited)
print(result.console_summary())
print("FINDING" if result.headline.is_finding else "no finding", "- summary:", result.files[1])
