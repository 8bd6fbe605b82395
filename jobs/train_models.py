"""spark-submit job: proxy M' and target M gradient-boosted models, canary table and test predictions
(docs/math.md §4)."""
import sys

from lia_spark.cli.main import job_main

if __name__ == "__main__":
    sys.exit(job_main("train", sys.argv[1:]))
