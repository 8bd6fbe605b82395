"""The math: pure numpy/numba kernels (docs/math.md), each checked against enumeration or a closed form.

No kernel imports pyspark, mlflow, matplotlib, the configuration or anything outside this package and
:mod:`lia_spark.names`.
"""
