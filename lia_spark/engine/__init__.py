"""Spark adapters: the only modules of lia_spark that import pyspark.

Each function takes a SparkSession or DataFrame from outside and moves data to the pure numpy kernels
(``mapInPandas`` / ``applyInPandas`` over whole batches or bags) and back.
"""
