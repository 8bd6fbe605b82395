"""spark-submit job: write the synthetic Criteo twin (docs/math.md §1.2) - Parquet data, truth table, optional TSV."""
import sys

from lia_spark.cli.main import job_main

if __name__ == "__main__":
    sys.exit(job_main("generate", sys.argv[1:]))
