"""spark-submit job: proxy M' and target M gradient-boosted models, canary table and test predictions (docs/math.md §4)."""
import sys

from lia_spark.cli import job_main
from lia_spark.engine.train import run_train_models

if __name__ == "__main__":
    sys.exit(job_main(run_train_models, sys.argv[1:], "lia-spark train: proxy and target models"))
