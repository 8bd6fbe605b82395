"""spark-submit job: label inference from log-loss scores against a Spark oracle of one day (docs/math.md §8)."""
import sys

from lia_spark.cli.main import job_main

if __name__ == "__main__":
    sys.exit(job_main("logloss-attack", sys.argv[1:]))
