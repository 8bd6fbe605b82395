"""spark-submit job: write the synthetic Criteo twin (docs/math.md §1.2) - Parquet data, truth table, optional TSV."""
import sys

from lia_spark.cli import job_main
from lia_spark.engine.generate import run_generate

if __name__ == "__main__":
    sys.exit(job_main(run_generate, sys.argv[1:], "lia-spark generate: synthetic Criteo twin"))
