"""The stage contract every stage folder imports, independent of any one stage: the stage declaration
(:mod:`.stage`), committed outputs and ownership (:mod:`.outputs`), Parquet read by pyarrow with every page verified
(:mod:`.parquet_reads`), the run lock (:mod:`.lock`) and progress lines (:mod:`.progress`). It imports no stage and
no orchestrator: what runs the stages sits above them, in :mod:`lia_spark.engine.orchestration`."""
