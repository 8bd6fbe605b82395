"""The posteriors stage (``jobs/posteriors.py``, output ``<run.output_dir>/posteriors``), by concern:

- :mod:`.prior`: which table and column hold the attacker's prior, checked before any stage;
- :mod:`.reading`: the day's data and prior rows (pyarrow for local Parquet, Spark otherwise);
- :mod:`.units`: rows packed by bagging unit, one shuffle to one partition per unit;
- :mod:`.writing`: the pass that runs every setting per unit and writes the per-row results and their digest;
- :mod:`.summary`: summaries with exact percentiles, bag counts, the plot sample;
- :mod:`.stage`: the stage declaration ``POSTERIORS`` and its computation.

The computation without Spark is :mod:`lia_spark.kernels.posterior_grid`.
"""
