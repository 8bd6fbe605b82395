"""The helpers of lia_spark.engine.spark.capabilities on the installed pyspark (the main venv's 4.x; `make test-oldest`
runs them on 3.5): an Arrow collect in Spark's types, empty frames included, and a thread whose jobs keep the job
group."""
from __future__ import annotations

import threading

import pyarrow as pa

from lia_spark.engine.spark.capabilities import collect_arrow, inheriting_thread_target
from lia_spark.engine.spark.session import job_group


def test_an_arrow_collect_holds_the_rows_in_sparks_types(spark):
    frame = spark.range(5).selectExpr("id", "cast(id as int) as small", "id / 2 as half",
                                      "cast(id as string) as text", "if(id = 3, null, id) as gap")
    table = collect_arrow(frame)
    assert table.schema.types == [pa.int64(), pa.int32(), pa.float64(), pa.string(), pa.int64()]
    assert sorted(table.column("id").to_pylist()) == [0, 1, 2, 3, 4]
    assert table.to_pandas().sort_values("id").reset_index(drop=True).equals(
        frame.toPandas().sort_values("id").reset_index(drop=True))
    empty = collect_arrow(frame.where("id < 0"))
    assert empty.num_rows == 0 and empty.schema.names == ["id", "small", "half", "text", "gap"]
    assert empty.schema.types == table.schema.types


def test_a_thread_target_runs_its_jobs_in_the_callers_job_group(spark):
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup("lia-spark-capabilities"))
    with job_group(spark, "lia-spark-capabilities", "a test's jobs"):
        thread = threading.Thread(target=inheriting_thread_target(spark, lambda: spark.range(10).count()))
        thread.start()
        thread.join()
    assert len(set(tracker.getJobIdsForGroup("lia-spark-capabilities")) - before) >= 1
