"""spark-submit job: label inference from log-loss scores against a Spark oracle of one day (docs/math.md §10)."""
import sys

from lia_spark.cli import job_main
from lia_spark.engine.logloss import run_logloss_attack

if __name__ == "__main__":
    sys.exit(job_main(run_logloss_attack, sys.argv[1:], "lia-spark logloss-attack: labels from log-loss scores"))
