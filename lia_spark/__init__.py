"""lia_spark: label-inference auditing of label-privacy mechanisms on Apache Spark."""

__version__ = "0.1.0"
