"""PATE's teachers on Spark (docs/math.md §4.6): the teacher frame is built on the executors from the day's
training rows (every one, ``teacher`` = :func:`lia_spark.kernels.pate.teacher_index` by row id) and
``groupBy(teacher).applyInPandas`` fits the teachers in parallel tasks (several teachers per task, one per group).

Each group fits its teacher with one thread (:func:`lia_spark.kernels.pate.teacher_votes`, rows in row-id order, so the
votes do not depend on the partitioning) and returns only its sampled votes on the broadcast student rows (Q rows):
no training row comes from the driver and no model travels back to it.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.types import IntegerType, StructField, StructType

from lia_spark.engine.spark.session import describe_jobs, shipped
from lia_spark.kernels import pate
from lia_spark.names import LABEL, ROW_ID

VOTES_SCHEMA = "teacher int, votes binary, rows long"
TEACHER = "teacher"


def spark_votes(training_rows: DataFrame, columns: list[str], *, teachers: int,
                model: pate.TeacherModel) -> pate.TeacherVotes:
    """A :data:`lia_spark.kernels.pate.TeacherVotes` over ``training_rows`` (row_id, label and the float feature
    ``columns`` of the target day's training rows) that fits the ``teachers`` teachers in parallel Spark tasks."""
    spark = training_rows.sparkSession
    settings = dataclasses.asdict(model)
    rows = training_rows.select(ROW_ID, LABEL, *columns)
    schema = StructType(rows.schema.fields + [StructField(TEACHER, IntegerType())])

    def votes(student_ids: np.ndarray, student_features: np.ndarray, seed: int) -> np.ndarray:
        describe_jobs(spark, f"train: {teachers} PATE teachers")
        with shipped(spark, (np.asarray(student_ids, np.int64),
                             np.asarray(student_features, dtype=np.float32))) as students:

            def assign(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
                for frame in frames:
                    yield frame.assign(**{TEACHER: pate.teacher_index(
                        frame[ROW_ID].to_numpy(np.int64), teachers=teachers, seed=seed).astype(np.int32)})

            def fit(group: pd.DataFrame) -> pd.DataFrame:
                teacher = int(group[TEACHER].iat[0])
                found = pate.teacher_votes(group[ROW_ID].to_numpy(), group[columns].to_numpy(np.float32),
                                           group[LABEL].to_numpy(), *students.value, teacher=teacher,
                                           vote_seed=seed, **settings)
                return pd.DataFrame({TEACHER: [teacher], "votes": [found.tobytes()], "rows": [len(group)]})

            found = rows.mapInPandas(assign, schema).groupBy(TEACHER).applyInPandas(fit, VOTES_SCHEMA).collect()
        if len(found) < teachers:
            raise pate.missing_teachers(np.array([row[TEACHER] for row in found]), teachers=teachers,
                                        rows=sum(row["rows"] for row in found))
        result = np.zeros((teachers, len(student_features)), dtype=np.int8)
        for row in found:
            result[row[TEACHER]] = np.frombuffer(row["votes"], dtype=np.int8)
        return result

    return votes
