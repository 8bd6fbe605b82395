"""Spark adapters: the only modules of lia_spark that import pyspark, by concern.

- :mod:`.runtime`: the stage contract every stage imports (the declaration, outputs, lock and progress);
- :mod:`.orchestration`: above the stages: the registry, the pipeline, the commands and the audit table;
- :mod:`.spark`: the session, files on Hadoop paths, the executors' Python;
- :mod:`.models`: the fitting shared by train, utility and the audit table;
- one folder per stage (:mod:`.generate`, :mod:`.ingest`, :mod:`.train`, :mod:`.posteriors`, :mod:`.utility`,
  :mod:`.audit`, :mod:`.report`, :mod:`.logloss`) holding its declaration (``stage.py``) and private helpers.

Each function takes a SparkSession or DataFrame from outside and moves data to the pure numpy kernels
(``mapInPandas`` / ``applyInPandas`` over whole batches or bags) and back.
"""
