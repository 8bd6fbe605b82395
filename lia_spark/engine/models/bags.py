"""Bag releases of training rows on the executors: every row's released bag proportion (docs/math.md §4.7).

The bags and proportions are those of :func:`lia_spark.kernels.label_mechanisms.bag_proportions` on the whole row set,
bit for bit: each row's bagging unit (the top bits of its bagging key,
:func:`lia_spark.kernels.mechanisms.bagging_units`, with the unit bits of the whole set's row count) is computed on
the executors, ``groupBy(unit).applyInPandas`` hands each unit (about ``ROWS_PER_BAGGING_UNIT`` rows of row id and
label) to the pure kernel, and the kernel bags inside the unit exactly as it does for the whole set. Memory per task:
one unit, whatever the day's size.
"""
from __future__ import annotations

import functools
from typing import Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame

from lia_spark.kernels import label_mechanisms, mechanisms
from lia_spark.names import BAG_PROPORTION, LABEL, ROW_ID

UNIT = "bagging_unit"


def _with_units(frames: Iterator[pd.DataFrame], *, seed: int, unit_bits: int) -> Iterator[pd.DataFrame]:
    for frame in frames:
        keys = mechanisms.bagging_keys(frame[ROW_ID].to_numpy(np.int64), seed=seed)
        yield frame.assign(**{UNIT: mechanisms.bagging_units(keys, unit_bits=unit_bits)})


def _unit_proportions(unit: pd.DataFrame, *, mechanism: str, epsilon: float, bag_size: int, seed: int,
                      unit_bits: int) -> pd.DataFrame:
    ids = unit[ROW_ID].to_numpy(np.int64)
    bag_index, proportion = label_mechanisms.bag_proportions(
        ids, unit[LABEL].to_numpy(np.int8), mechanism=mechanism, epsilon=epsilon, bag_size=bag_size, seed=seed,
        unit_bits=unit_bits)
    return pd.DataFrame({ROW_ID: ids, BAG_PROPORTION: proportion[bag_index]})


def row_bag_proportions(rows: DataFrame, *, mechanism: str, epsilon: float, bag_size: int, seed: int,
                        rows_per_unit: int = mechanisms.ROWS_PER_BAGGING_UNIT) -> DataFrame:
    """(row_id, bag_proportion) for every row of ``rows`` (columns row_id, label): the rows bagged into random
    bags of ``bag_size`` and each bag's proportion released by ``mechanism`` (llp, llp_laplace, llp_geometric)
    at ``epsilon``, as :func:`lia_spark.kernels.label_mechanisms.bag_proportions` releases them for the same rows with
    ``unit_bits = bagging_unit_bits(rows, rows_per_unit)`` (its default for the default ``rows_per_unit``).

    One count of ``rows`` (the unit bits), then one shuffle of (row_id, label, unit)."""
    unit_bits = mechanisms.bagging_unit_bits(rows.count(), rows_per_unit)
    keyed = rows.select(ROW_ID, LABEL).mapInPandas(
        functools.partial(_with_units, seed=seed, unit_bits=unit_bits), f"{ROW_ID} long, {LABEL} int, {UNIT} int")
    return keyed.groupBy(UNIT).applyInPandas(
        functools.partial(_unit_proportions, mechanism=mechanism, epsilon=epsilon, bag_size=bag_size, seed=seed,
                          unit_bits=unit_bits), f"{ROW_ID} long, {BAG_PROPORTION} double")
