"""Both labels where a model learns or is scored. A day whose labels are all 1 (or all 0) teaches a model nothing
but a constant: every fit that learns from one (the proxy on models.proxy_day; the target, the utility grid's fits
and the inject stage's export on models.target_day) is refused before it starts, naming the day's field and its
class counts. A test split of one class affects only the metric: its AUC is undefined (NaN, null in the stage's
JSON, not logged to MLflow; the log-loss is still defined) and the stage warns once, naming the day.
"""
from __future__ import annotations

import logging
from typing import Sequence

import numpy as np
from pyspark.sql import SparkSession

from lia_spark.engine.models.feature_frames import read_days
from lia_spark.names import DAY, LABEL
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config, day_fields

logger = logging.getLogger(__name__)

LEARNED_DAYS = ("models.proxy_day", "models.target_day")  # the days the train stage's models learn from


def class_counts(labels: np.ndarray) -> tuple[int, int]:
    """(rows labelled 1, rows labelled 0) of 0/1 ``labels``."""
    positives = int(np.count_nonzero(labels))
    return positives, int(labels.size) - positives


def _classes(positives: int, negatives: int) -> str:
    return f"{positives:,} rows labelled 1, {negatives:,} labelled 0"


def check_two_classes(spark: SparkSession, config: Config, fields: Sequence[str] = LEARNED_DAYS) -> None:
    """Fail before any fit when a day named by ``fields`` (config fields naming one day each, of
    :func:`lia_spark.run.config.day_fields`) holds rows of one class only: one aggregation of the day and label
    columns of those days (a day without rows is :func:`lia_spark.engine.models.feature_frames.check_days_present`'s
    to refuse).

    Raises:
        ConfigError: naming the first such field, its day and the class counts.
    """
    named = {field: day for field, day in day_fields(config).items() if field in fields and isinstance(day, int)}
    if not named:
        return
    counted = read_days(spark, config.parquet_path, sorted(set(named.values()))).groupBy(DAY, LABEL).count()
    counts = {(int(row[DAY]), int(row[LABEL])): int(row["count"]) for row in counted.collect()}
    for field, day in named.items():
        positives, negatives = counts.get((day, 1), 0), counts.get((day, 0), 0)
        if (positives or negatives) and not (positives and negatives):
            raise ConfigError(
                f"{field}: day {day} holds one class only ({_classes(positives, negatives)} in "
                f"{config.parquet_path}), so no model can learn from it, got {day}; choose a day with both labels, "
                "or check that day's input (the label is the first column of its Criteo file)")


def check_training_labels(labels: np.ndarray, *, field: str, day: int) -> None:
    """Fail before a fit whose training rows (their 0/1 ``labels``, the train split of ``day``, named by ``field``)
    hold one class only, although the whole day holds both (:func:`check_two_classes`): a seeded sample
    (models.sample_rows_per_day) or a day too small for its split can lose the rarer label.

    Raises:
        ConfigError: naming ``field``, the day and the class counts.
    """
    positives, negatives = class_counts(labels)
    if positives and negatives:
        return
    raise ConfigError(
        f"{field}: the {labels.size:,} training rows of day {day} (the train share of models.split, of the seeded "
        f"sample of models.sample_rows_per_day when the day is larger) hold one class only "
        f"({_classes(positives, negatives)}), so no model can learn from them, got {day}; train on more rows "
        "(a larger models.sample_rows_per_day, 0 for the whole day) or choose a day with more of the rarer label")


def warn_undefined_auc(stage: str, positives: int, negatives: int, *, field: str, day: int, scored: str) -> bool:
    """One warning when a test split (of ``day``, named by ``field``) holds one class only (``positives`` rows
    labelled 1, ``negatives`` labelled 0): the test AUC of ``scored`` is undefined. Returns whether it warned."""
    if positives and negatives:
        return False
    logger.warning("%s: the test split of day %d (%s) holds one class only (%s): the test AUC of %s is undefined "
                   "(null in the stage's JSON result, not logged to MLflow); the log-loss is still computed", stage,
                   day, field, _classes(positives, negatives), scored)
    return True
