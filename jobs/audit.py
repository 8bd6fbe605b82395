"""spark-submit job: observational one-run label-inference audit of the canary table (docs/math.md §5, §6)."""
import sys

from lia_spark.cli.main import job_main

if __name__ == "__main__":
    sys.exit(job_main("audit", sys.argv[1:]))
