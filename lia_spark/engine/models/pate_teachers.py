"""PATE's teachers on Spark (docs/math.md §4.6): the teacher frame is built on the executors from the day's
training rows (every one, ``teacher`` = :func:`lia_spark.kernels.pate.teacher_index` by row id) and
``groupBy(teacher).applyInPandas`` fits the teachers in parallel tasks (several teachers per task, one per group).

Each group fits its teacher with one thread (:func:`lia_spark.kernels.pate.teacher_votes`, rows in row-id order, so the
votes do not depend on the partitioning) and returns only its sampled votes on the broadcast student rows (Q rows):
no training row comes from the driver and no model travels back to it (the published protocol's validation split,
held-out rows, is broadcast with the student rows).
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.types import IntegerType, StructField, StructType

from lia_spark.engine.spark.session import describe_jobs, shipped
from lia_spark.kernels import pate
from lia_spark.kernels.model_libraries import TeacherModel
from lia_spark.names import LABEL, ROW_ID

VOTES_SCHEMA = "teacher int, votes binary, rows long"
TEACHER = "teacher"


def spark_votes(training_rows: DataFrame, columns: list[str], *, teachers: int, model: TeacherModel,
                validation_rows: DataFrame | None = None) -> pate.TeacherVotes:
    """A :data:`lia_spark.kernels.pate.TeacherVotes` over ``training_rows`` (row_id, label and the feature
    ``columns`` of the target day's training rows: floats for xgboost, the catboost frame's columns for catboost)
    that fits the ``teachers`` teachers in parallel Spark tasks; with ``validation_rows`` (the same columns of the
    validation split) every teacher stops on them (collected once, in row-id order, and broadcast with the
    student rows)."""
    spark = training_rows.sparkSession
    rows = training_rows.select(ROW_ID, LABEL, *columns)
    schema = StructType(rows.schema.fields + [StructField(TEACHER, IntegerType())])
    as_frame = model.library.native_categoricals

    def feature_values(frame: pd.DataFrame) -> Any:
        return model.library.feature_values(frame, columns)

    def votes(student_ids: np.ndarray, student_features: Any, seed: int) -> np.ndarray:
        describe_jobs(spark, f"{teachers} PATE teachers in parallel tasks")
        validation = None
        if validation_rows is not None:
            collected: pd.DataFrame = validation_rows.select(ROW_ID, LABEL, *columns).toPandas()
            held = collected.sort_values(ROW_ID, kind="stable")
            validation = (feature_values(held), held[LABEL].to_numpy(np.float32))
        students_shipped = (np.asarray(student_ids, np.int64),
                            student_features if as_frame else np.asarray(student_features, dtype=np.float32))
        with shipped(spark, (students_shipped, validation)) as broadcast:

            def assign(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
                for frame in frames:
                    yield frame.assign(**{TEACHER: pate.teacher_index(
                        frame[ROW_ID].to_numpy(np.int64), teachers=teachers, seed=seed).astype(np.int32)})

            def fit(group: pd.DataFrame) -> pd.DataFrame:
                teacher = int(group[TEACHER].iat[0])
                (ids, features), held_out = broadcast.value
                found = pate.teacher_votes(group[ROW_ID].to_numpy(), feature_values(group), group[LABEL].to_numpy(),
                                           ids, features, teacher=teacher, vote_seed=seed, model=model,
                                           validation=held_out)
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
