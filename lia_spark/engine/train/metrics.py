"""Test metrics of predictions held in a Spark DataFrame, exact and computed on the executors.

Only a few numbers per partition reach the driver, so the cost on the driver does not grow with the rows.

- log-loss: the mean of -(y log p + (1 - y) log(1 - p)), p clipped to [1e-7, 1 - 1e-7] as in
  :func:`lia_spark.kernels.training.binary_metrics`.
- AUC (Mann-Whitney, ties counted half): the rows are grouped by distinct prediction (positives and negatives per
  score), range-partitioned by score and sorted within each partition; each partition sums its pairs ranked right
  (:func:`lia_spark.kernels.training.tied_auc_pairs`) and reports them with its negative total, and the driver adds each
  partition's positives x the negatives of the partitions below it. Equal to sklearn's ``roc_auc_score`` up to
  float rounding.
"""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lia_spark.engine.spark.session import aggregate_row
from lia_spark.kernels import training

_PART_SCHEMA = "lowest double, positives double, negatives double, pairs double"


def _partition_pairs(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """One row per partition of score groups sorted ascending: its lowest score, totals and pairs ranked right."""
    lowest, positives, negatives, pairs = math.inf, 0.0, 0.0, 0.0
    for frame in batches:
        if frame.empty:
            continue
        pos = frame["positives"].to_numpy(dtype=np.float64)
        neg = frame["negatives"].to_numpy(dtype=np.float64)
        lowest = min(lowest, float(frame["score"].iloc[0]))
        pairs += training.tied_auc_pairs(pos, neg) + pos.sum() * negatives  # negatives of earlier batches
        positives += pos.sum()
        negatives += neg.sum()
    if positives or negatives:
        yield pd.DataFrame({"lowest": [lowest], "positives": [positives], "negatives": [negatives], "pairs": [pairs]})


def binary_metrics(frame: DataFrame, *, label: str, prediction: str) -> dict[str, float]:
    """``{"auc", "log_loss"}`` of ``prediction`` against the 0/1 ``label`` over the rows of ``frame`` (NaN AUC when
    one class is absent), as :func:`lia_spark.kernels.training.binary_metrics` computes them in memory.

    Raises:
        ValueError: when ``frame`` has no rows.
    """
    clip = training.PROBABILITY_CLIP
    p = F.least(F.greatest(F.col(prediction).cast("double"), F.lit(clip)), F.lit(1.0 - clip))
    y = F.col(label).cast("double")
    rows = frame.select(y.alias("y"), p.alias("p"))
    loss = -(F.col("y") * F.log("p") + (1 - F.col("y")) * F.log1p(-F.col("p")))
    total = aggregate_row(rows, F.count(F.lit(1)).alias("n"), F.sum(loss).alias("loss"))
    if not total["n"]:
        raise ValueError("binary_metrics: the frame must hold at least one row, got 0 rows")
    groups = rows.groupBy(F.col("p").alias("score")).agg(F.sum("y").alias("positives"),
                                                          F.sum(1 - F.col("y")).alias("negatives"))
    collected: pd.DataFrame = (groups.repartitionByRange("score").sortWithinPartitions("score")
                               .mapInPandas(_partition_pairs, _PART_SCHEMA).toPandas())
    parts = collected.sort_values("lowest")
    positives, negatives = parts["positives"].sum(), parts["negatives"].sum()
    below = np.cumsum(parts["negatives"].to_numpy()) - parts["negatives"].to_numpy()
    pairs = parts["pairs"].sum() + float(np.dot(parts["positives"].to_numpy(), below))
    auc = pairs / (positives * negatives) if positives and negatives else math.nan
    return {"auc": float(auc), "log_loss": float(total["loss"] / total["n"])}
