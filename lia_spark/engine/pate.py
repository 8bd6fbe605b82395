"""PATE's teachers on Spark (docs/math.md §4.6): ``groupBy(teacher).applyInPandas``, one task per teacher.

Each group fits its teacher with one thread (:func:`lia_spark.pate.teacher_votes`, rows in row-id order, so the
votes do not depend on the partitioning) and returns only its votes on the broadcast student rows: no model
travels back to the driver.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import SparkSession

from lia_spark import pate
from lia_spark.engine.session import describe_jobs, shipped

VOTES_SCHEMA = "teacher int, votes binary"


def spark_votes(spark: SparkSession, *, teachers: int, model: pate.TeacherModel) -> pate.TeacherVotes:
    """A :data:`lia_spark.pate.TeacherVotes` that fits the ``teachers`` teachers in parallel Spark tasks."""

    def votes(row_ids: np.ndarray, features: np.ndarray, labels: np.ndarray, teacher: np.ndarray,
              student_features: np.ndarray) -> np.ndarray:
        columns = [f"f{index}" for index in range(features.shape[1])]
        frame = pd.DataFrame(np.asarray(features, dtype=np.float32), columns=columns).assign(
            row_id=np.asarray(row_ids, np.int64), label=np.asarray(labels, np.int32),
            teacher=np.asarray(teacher, np.int32))
        settings = dict(n_estimators=model.n_estimators, max_depth=model.max_depth,
                        learning_rate=model.learning_rate, seed=model.seed)

        describe_jobs(spark, f"train: {teachers} PATE teachers")
        with shipped(spark, np.asarray(student_features, dtype=np.float32)) as students:

            def fit(group: pd.DataFrame) -> pd.DataFrame:
                found = pate.teacher_votes(group["row_id"].to_numpy(), group[columns].to_numpy(np.float32),
                                           group["label"].to_numpy(), students.value, **settings)
                return pd.DataFrame({"teacher": [int(group["teacher"].iat[0])], "votes": [found.tobytes()]})

            rows = (spark.createDataFrame(frame).repartition(teachers, "teacher").groupBy("teacher")
                    .applyInPandas(fit, VOTES_SCHEMA).collect())
        result = np.zeros((teachers, len(student_features)), dtype=np.int8)  # an empty partition votes 0
        for row in rows:
            result[row["teacher"]] = np.frombuffer(row["votes"], dtype=np.int8)
        return result

    return votes
