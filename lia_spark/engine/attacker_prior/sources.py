"""The attacker's prior of the posteriors stage, owned between the stage that writes it and the stage that reads it.

:func:`resolve_prior` says which table and column the prior comes from (read by the posteriors stage, and by the
train stage to know whether it writes ``models/priors``: :func:`needs_proxy_priors`); :func:`write_proxy_priors`
scores the released days with the proxy model on the executors.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import pickle
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lia_spark.engine.models import feature_frames
from lia_spark.engine.models.distributed import predicted
from lia_spark.engine.models.preparation import model_features
from lia_spark.engine.spark.session import describe_jobs, shipped
from lia_spark.kernels import features, model_libraries
from lia_spark.names import AUTO_PRIOR, PROXY_PRIOR, ROW_ID, TRUE_PRIOR
from lia_spark.run import layout
from lia_spark.run.config import Config

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PriorSource:
    """The attacker's prior: ``column`` of the Parquet table at ``path``; ``step`` is the pipeline step that
    writes that table ("data" for the twin's truth, "train" for models/priors and models/canaries), None for
    a table of mechanisms.prior_path."""

    column: str
    path: str
    step: str | None


def resolve_prior(config: Config) -> PriorSource:
    """The prior every stage uses. Column: mechanisms.prior_column, where ``auto`` is ``eta`` when data.source
    is synthetic (the twin's true P(y=1|x)) and ``proxy_prediction`` otherwise. Table: mechanisms.prior_path
    when set, else ``<out>/truth`` for ``eta``, ``<out>/models/priors`` for ``proxy_prediction`` and
    ``<out>/models/canaries`` (the target's training rows only) for any other column."""
    section = config.mechanisms
    column = section.prior_column
    if column == AUTO_PRIOR:
        column = TRUE_PRIOR if config.data.source == "synthetic" else PROXY_PRIOR
    if section.prior_path:
        return PriorSource(column, section.prior_path, None)
    if column == TRUE_PRIOR:
        return PriorSource(column, layout.output_path(config, layout.TRUTH), "data")
    if column == PROXY_PRIOR:
        return PriorSource(column, layout.proxy_priors_path(config), "train")
    return PriorSource(column, layout.canaries_path(config), "train")


def needs_proxy_priors(config: Config) -> bool:
    """True when the resolved prior is the train stage's ``models/priors`` table (so train writes it)."""
    return resolve_prior(config).path == layout.proxy_priors_path(config)


def prior_source(config: Config) -> str:
    """The table holding the prior column (:func:`resolve_prior`)."""
    return resolve_prior(config).path


PRIORS_SCHEMA = f"{ROW_ID} long, {PROXY_PRIOR} double"

def _predicted_batches(frames: Iterator[pd.DataFrame], *, model: Any, columns: tuple[str, ...]
                       ) -> Iterator[pd.DataFrame]:
    """mapInPandas body: (row_id, proxy_prediction) of feature batches, predicted by the pickled
    :class:`lia_spark.kernels.model_libraries.FittedModel` shipped as ``model``
    (:func:`lia_spark.engine.spark.session.shipped`, unpickled once per task)."""
    fitted: model_libraries.FittedModel = pickle.loads(model.value)
    fitted.predict_with_threads(1)  # one core per Spark task; the predictions do not depend on it
    for frame in frames:
        if frame.empty:
            continue
        matrix = fitted.library.feature_values(frame, columns)
        yield pd.DataFrame({ROW_ID: frame[ROW_ID].to_numpy(np.int64), PROXY_PRIOR: fitted.predict(matrix)})


@contextlib.contextmanager
def proxy_scores(spark: SparkSession, config: Config, proxy: Any, spec: features.FeatureSpec,
                 rows: DataFrame) -> Iterator[DataFrame]:
    """(row_id long, proxy_prediction double) of every row of ``rows`` (storage columns), usable inside the block.

    The features are built on the executors with the proxy's own encoding ``spec``
    (:func:`lia_spark.engine.models.preparation.model_features`, as for its training); an in-memory proxy
    (:class:`lia_spark.kernels.model_libraries.FittedModel`, xgboost or catboost) is pickled once, shipped (broadcast on
    classic sessions; released when the block ends) and predicts in ``mapInPandas`` (exactly
    :meth:`~lia_spark.kernels.model_libraries.FittedModel.predict`); a fitted xgboost.spark model
    (models.execution=distributed) scores by its own ``transform``."""
    frame = model_features(rows, spec, config)
    if not isinstance(proxy, model_libraries.FittedModel):
        scored = predicted(proxy, frame, PROXY_PRIOR)
        yield scored.select(F.col(ROW_ID).cast("long"), F.col(PROXY_PRIOR).cast("double"))
        return
    columns = tuple(spec.feature_columns)
    with shipped(spark, pickle.dumps(proxy)) as model:
        yield frame.select(ROW_ID, *columns).mapInPandas(
            functools.partial(_predicted_batches, model=model, columns=columns), PRIORS_SCHEMA)


def write_proxy_priors(spark: SparkSession, config: Config, proxy: Any, spec: features.FeatureSpec, path: str,
                       days: Sequence[int]) -> int:
    """Score every row of the released ``days`` (:func:`lia_spark.engine.models.feature_frames.released_days`) with
    the proxy model in one distributed pass and write Parquet (row_id long, proxy_prediction double) to ``path``;
    returns the rows written.

    Distributed, nothing proportional to the rows on the driver (:func:`proxy_scores`).
    """
    describe_jobs(spark, f"train: proxy priors of days {list(days)}")
    if config.models.proxy_day in days:
        logger.warning("train: mechanisms.days includes models.proxy_day %d: the proxy's priors of that day's rows "
                       "predict its own training rows (an overfit prior)", config.models.proxy_day)
    rows = feature_frames.read_days(spark, config.parquet_path, days)
    with proxy_scores(spark, config, proxy, spec, rows) as scores:
        scores.write.parquet(path)
    written = spark.read.parquet(path).count()  # from the Parquet footers
    logger.info("train: proxy priors of %d rows of days %s written to %s", written, list(days), path)
    return written
