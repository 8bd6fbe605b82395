"""spark-submit job: the injected training set for a model trained outside lia_spark (docs/usage.md, "Audit your
own model")."""
import sys

from lia_spark.cli.main import job_main

if __name__ == "__main__":
    sys.exit(job_main("inject", sys.argv[1:]))
