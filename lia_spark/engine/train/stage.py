"""Train stage: proxy M' (proxy_day, true labels) and target M (target_day, privatized labels), docs/math.md §4.

Outputs under ``<run.output_dir>/models`` (committed atomically, resumable): ``canaries`` (Parquet: row_id,
label, released_label, target_prediction, proxy_prediction, counterfactual_label, hidden_bit, reference_prediction
of the target's training rows), ``test_predictions`` (row_id, label, target_prediction, proxy_prediction of the
target day's test rows), model files (``proxy``/``target``/``stage1`` as xgboost ``.ubj`` or catboost ``.cbm``),
``metrics.json`` and, when the posteriors stage's prior is the proxy's prediction
(:func:`lia_spark.engine.attacker_prior.sources.needs_proxy_priors`: data.source=criteo with
mechanisms.prior_column=auto, or prior_column=proxy_prediction), ``priors`` (row_id, proxy_prediction of every row of
the days of mechanisms.days, scored on the executors by
:func:`lia_spark.engine.attacker_prior.sources.write_proxy_priors`). With audit.attack=membership (in_memory only)
the target leaves out the non-members among the audit.membership_candidates candidate training
rows (:func:`lia_spark.engine.models.execution.membership_candidates`) and ``membership`` (row_id, label, member,
target_prediction, proxy_prediction of the candidates) is written for the audit stage.

The game's draws (the injected coins and counterfactuals, the shadows' and extra runs' coins, the membership
baseline's members, the target's mechanism randomness) come from the audit key (docs/math.md §5.9;
:mod:`lia_spark.engine.models.audit_key`), drawn and written beside the stage's folder the first time, never in its
outputs; the fingerprint holds the key's identifier.

The fitting itself (two execution paths, the audit designs' injection and reference) is in
:mod:`lia_spark.engine.models.execution`; the model building it shares with the utility stage and the audit table in
:mod:`lia_spark.engine.models.preparation`.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import tempfile
import time
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lia_spark import names
from lia_spark.engine.attacker_prior.sources import needs_proxy_priors, write_proxy_priors
from lia_spark.engine.models import feature_frames
from lia_spark.engine.models.audit_key import draws_from_key, key_values, stage_key, stored_key
from lia_spark.engine.models.classes import check_two_classes, warn_undefined_auc
from lia_spark.engine.models.execution import distributed, in_memory
from lia_spark.engine.models.preparation import Preparation, in_memory_rows
from lia_spark.engine.runtime.outputs import copy_from_local, write_text
from lia_spark.engine.runtime.stage import Input, Resolved, Stage, StageResult, StageRun
from lia_spark.engine.spark.session import aggregate_row, describe_jobs
from lia_spark.engine.train import metrics
from lia_spark.kernels import features, model_libraries, model_output, training
from lia_spark.kernels.hashing import AuditKey
from lia_spark.kernels.mechanism_registry import label_mechanism
from lia_spark.names import (COUNTERFACTUAL_LABEL, LABEL, LABEL_INFERENCE, MEMBER, MEMBERSHIP, PROXY_PREDICTION, ROW_ID,
                             SPLIT, TARGET_PREDICTION)
from lia_spark.run import layout
from lia_spark.run.config import Config
from lia_spark.run.json_output import strict_json
from lia_spark.run.limits import check_training_rows

logger = logging.getLogger(__name__)

SPLIT_NAMES = {training.SPLIT_TRAIN: "train_target", training.SPLIT_VALID: "valid_target",
               training.SPLIT_TEST: "test_target", training.SPLIT_LEFT_OUT: "left_out_target"}


@dataclasses.dataclass
class TrainResult(StageResult):
    """What the train stage produced: settings, test metrics, timings and output paths."""

    output_dir: str
    library: str
    execution: str
    mechanism: str
    epsilon: float
    bag_size: int
    proxy_day: int
    target_day: int
    rows: dict[str, int]
    test_metrics: dict[str, float]
    seconds: dict[str, float]
    model_files: list[str]
    skipped: bool = False
    encoding_files: list[str] = dataclasses.field(default_factory=list)  # per model: .encoding.npz, .output.json
    mechanism_report: dict[str, float] = dataclasses.field(default_factory=dict)  # pate: eps, delta, T, Q, sigma, ...
    attack: str = LABEL_INFERENCE  # membership: half of the candidates left out, models/membership written

    def claimed_privacy(self) -> tuple[str, float]:
        """(training mechanism, claimed epsilon) of the target: eps = inf without noise (none, llp)."""
        mechanism = label_mechanism(self.mechanism)
        name = f"{self.mechanism} (k = {self.bag_size})" if mechanism.bag_release else self.mechanism
        return name, mechanism.claimed_epsilon(self.epsilon)

    def metrics(self) -> dict[str, float]:
        """Flat metrics: auc_test_target, log_loss_test_proxy, fit_seconds_target, rows_train_target, ..."""
        flat = {}
        for key, value in self.test_metrics.items():  # keys are "<metric>@<model>"
            metric, model = key.split("@")
            flat[f"{metric}_test_{model}"] = value
        flat.update({f"seconds_{key}": value for key, value in self.seconds.items()})
        flat.update({f"rows_{key}": float(value) for key, value in self.rows.items()})
        flat.update({f"{self.mechanism}_{key}": value for key, value in self.mechanism_report.items()})
        return flat

    def artifacts(self) -> list[str]:
        """Model files, their feature encodings and metrics.json; no per-row data (see :meth:`row_data`)."""
        return [*self.model_files, *self.encoding_files, os.path.join(self.output_dir, layout.MODEL_METRICS)]

    def models(self) -> list[str]:
        """The model files (MLflow logs them as models)."""
        return list(self.model_files)

    def row_data(self) -> list[str]:
        """The folders of the tables holding per-row labels (canaries, test predictions, membership candidates):
        they stay in the output folder and reach MLflow only with tracking.log_row_data."""
        membership_table = (layout.MEMBERSHIP,) if self.attack == MEMBERSHIP else ()
        tables = (layout.CANARIES, layout.TEST_PREDICTIONS, *membership_table)
        return [os.path.join(self.output_dir, name) for name in tables]


def _injection_counts(scored: DataFrame) -> dict[str, int]:
    """Canaries with y1 != y0 (``informative_canaries``, the m of the injected audit), on the executors. Nothing
    derived from the coins is counted: how many informative canaries trained on y1 is a function of the secret bits,
    and metrics.json, MLflow and the logs reach whoever trains or reads the run (docs/math.md §5.9)."""
    informative = F.col(COUNTERFACTUAL_LABEL) != F.col(LABEL)
    found = aggregate_row(scored.where(F.col(SPLIT) == training.SPLIT_TRAIN),
                          F.sum(informative.cast("long")).alias("informative_canaries"))
    return {"informative_canaries": int(found["informative_canaries"] or 0)}


def _test_metrics(scored: DataFrame, target_day: int) -> dict[str, float]:
    """AUC and log-loss of target and proxy on the test split, on the executors (:mod:`lia_spark.engine.train.metrics`);
    an undefined AUC (a test split of one class) is warned about once, naming the day."""
    test = scored.where(F.col(SPLIT) == training.SPLIT_TEST)
    found = {f"{name}@{model}": value for model in ("target", "proxy")
             for name, value in metrics.binary_metrics(test, label=LABEL,
                                                       prediction=f"{model}_prediction").items()}
    if math.isnan(found["auc@target"]):
        counts = {int(row[LABEL]): int(row["count"]) for row in test.groupBy(LABEL).count().collect()}
        warn_undefined_auc("train", counts.get(1, 0), counts.get(0, 0), field="models.target_day", day=target_day,
                           scored="the target and the proxy")
    return found


def _save_models(spark: SparkSession, models: dict[str, Any], specs: dict[str, features.FeatureSpec],
                 staging: str) -> tuple[list[str], list[str]]:
    """Write each model file, its feature encoding (:func:`lia_spark.kernels.features.encoding_file`) and its output
    transform (:func:`lia_spark.kernels.model_output.output_transform_file`) locally, then copy them into the staging
    folder; return the names of the model files and of the other two."""
    names, encodings = [], []
    with tempfile.TemporaryDirectory() as local:
        for name, model in models.items():
            if isinstance(model, model_libraries.FittedModel):
                path, output = model.save(os.path.join(local, name)), model.output_transform()
            else:
                path, output = os.path.join(local, name + model_libraries.XGBOOST_LIBRARY.suffix), model.output
                model.model.get_booster().save_model(path)
            encoding = features.save_spec(specs[name], features.encoding_file(path))
            transform = model_output.save_output_transform(output, model_output.output_transform_file(path))
            for written in (path, encoding, transform):
                copy_from_local(spark, written, f"{staging}/{os.path.basename(written)}")
            names.append(os.path.basename(path))
            encodings += [os.path.basename(encoding), os.path.basename(transform)]
    return names, encodings


def _prior_days(spark: SparkSession, config: Config) -> tuple[int, ...]:
    """The released days whose proxy priors train writes: none unless the posteriors stage's prior needs them."""
    return feature_frames.released_days(spark, config) if needs_proxy_priors(config) else ()


@dataclasses.dataclass(frozen=True)
class TrainFound:
    """What the train stage's fingerprint looked up and its computation reuses: the released days whose proxy priors
    it writes, and the audit key its game draws from (None under the observational design)."""

    prior_days: tuple[int, ...]
    key: AuditKey | None


def _resolved(spark: SparkSession, config: Config) -> Resolved:
    """The priors' days and fields when train writes the priors, and the audit key's identifier when the target's
    training labels are drawn from it (:func:`lia_spark.engine.models.audit_key.stage_key`): another key recomputes
    the stage."""
    days = _prior_days(spark, config)
    key = stage_key(spark, config) if draws_from_key(config) else None
    values = {"mechanisms.days": days, "mechanisms.prior_column": config.mechanisms.prior_column} if days else {}
    return Resolved({**values, **(key_values(key) if key is not None else {})}, found=TrainFound(days, key))


def _days_present(spark: SparkSession, config: Config) -> None:
    """The train stage's checks before any fit: the days it reads are in the data, the days its models learn from
    hold both labels (:func:`lia_spark.engine.models.classes.check_two_classes`), and the target day holds the
    rows its training mechanism needs (:func:`lia_spark.run.limits.check_training_rows`)."""
    feature_frames.check_days_present(spark, config, ("models.proxy_day", "models.target_day",
                                                      *(feature_frames.released_day_field(config)
                                                        if needs_proxy_priors(config) else ())))
    check_two_classes(spark, config)
    check_training_rows(config, lambda: feature_frames.target_day_rows(spark, config, generating=False),
                        source="counted in the data")


def _key_usable(spark: SparkSession, config: Config) -> None:
    """Before any stage of the pipeline runs: the audit key file, when there is one and the game draws from it, can be
    used (:func:`lia_spark.engine.models.audit_key.stored_key` raises naming audit.key_path otherwise)."""
    if draws_from_key(config):
        stored_key(spark, config)


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """``preparation`` (in_memory only, :class:`lia_spark.engine.models.preparation.Preparation`): keeps the fitted
    proxy and the target day's features for the next training with the same data, seed and models fields apart from
    the training mechanism; ``lia-spark audit-table`` passes one for all its cells."""

    preparation: Preparation | None = None


def _train(run: StageRun) -> TrainResult:
    """Train proxy and target models; write canaries, test predictions, models and metrics into ``run.staging``
    (:class:`TrainOptions`)."""
    spark, config, m = run.spark, run.config, run.config.models
    out, found = layout.output_path(config, layout.MODELS), run.resolved.found
    prior_days, key = found.prior_days, found.key
    logger.info("train: %s/%s, proxy day %d, target day %d, mechanism %s (eps=%s, k=%d)", m.library, m.execution,
                m.proxy_day, m.target_day, m.training_mechanism, m.epsilon, m.bag_size)
    if m.execution == "in_memory":
        proxy_rows, target_rows = (in_memory_rows(spark, config, day) for day in (m.proxy_day, m.target_day))
        fit = in_memory
    else:
        proxy_rows, target_rows = (feature_frames.read_day(spark, config.parquet_path, day)
                                   for day in (m.proxy_day, m.target_day))
        fit = distributed
    trained = fit(spark, config, proxy_rows, target_rows, run.options.preparation or Preparation(), key)
    scored, seconds = trained.scored.cache(), dict(trained.seconds)
    describe_jobs(spark, "train: write canaries and test predictions")
    scored.where(F.col(SPLIT) == training.SPLIT_TRAIN).select(*names.CANARY_COLUMNS).write.parquet(
        run.under(layout.CANARIES))
    scored.where(F.col(SPLIT) == training.SPLIT_TEST).select(
        ROW_ID, LABEL, TARGET_PREDICTION, PROXY_PREDICTION).write.parquet(run.under(layout.TEST_PREDICTIONS))
    if config.audit.audit_design.draws_members:
        scored.where(F.col(MEMBER).isNotNull()).select(*names.MEMBERSHIP_COLUMNS).write.parquet(
            run.under(layout.MEMBERSHIP))
    split_counts: pd.DataFrame = scored.groupBy(SPLIT).count().toPandas()
    named = split_counts.assign(name=lambda f: f[SPLIT].map(SPLIT_NAMES))
    rows = {name: int(count) for name, count in named[["name", "count"]].itertuples(index=False)}
    if config.audit.audit_design.injects_labels:
        rows.update(_injection_counts(scored))
    test_metrics = {**_test_metrics(scored, m.target_day), **trained.extra_metrics}
    if prior_days:
        prior_started = time.monotonic()
        rows["priors"] = write_proxy_priors(spark, config, trained.models["proxy"], trained.specs["proxy"],
                                           run.under(layout.PROXY_PRIORS), prior_days)
        seconds["write_priors"] = time.monotonic() - prior_started
    files, encodings = _save_models(spark, trained.models, trained.specs, run.staging)
    seconds["total"] = time.monotonic() - run.started
    result = TrainResult(output_dir=out, library=m.library, execution=m.execution, mechanism=m.training_mechanism,
                         epsilon=m.epsilon, bag_size=m.bag_size, proxy_day=m.proxy_day, target_day=m.target_day,
                         rows=rows, test_metrics=test_metrics, seconds=seconds,
                         model_files=[os.path.join(out, name) for name in files],
                         encoding_files=[os.path.join(out, name) for name in encodings],
                         mechanism_report=trained.mechanism_report, attack=config.audit.attack)
    write_text(spark, run.under(layout.MODEL_METRICS), strict_json(result))
    scored.unpersist()
    logger.info("train: done in %.1f s, test AUC target %.4f proxy %.4f", seconds["total"],
                test_metrics["auc@target"], test_metrics["auc@proxy"])
    return result


TRAIN = Stage(
    name="train", step="train", result=TrainResult, compute=_train, resolved=_resolved, check=_days_present,
    options=TrainOptions, upfront=_key_usable,
    fields=("run.seed", "data.source", "models.library", "models.execution", "models.sample_rows_per_day",
            "models.proxy_day", "models.target_day", "models.training_mechanism", "models.epsilon", "models.bag_size",
            "models.n_estimators", "models.max_depth", "models.learning_rate", "models.early_stopping_rounds",
            "models.split", "models.hash_buckets", "models.categorical_encoding", "models.min_category_count",
            "models.num_workers", "pate.*", "audit.attack", "audit.membership_candidates",
            "audit.design", "audit.counterfactual", "audit.flip_share", "audit.shadows", "audit.runs"),
    outputs=lambda config: (layout.output_path(config, layout.MODELS),),
    inputs=lambda config: (Input("data", lambda c: c.parquet_path, "data.parquet_path", lambda c: "data"),))
