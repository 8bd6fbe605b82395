"""spark-submit entry point for the posteriors stage (release the labels of mechanisms.days,
posteriors, summaries, plots).

    spark-submit [--master URL] jobs/posteriors.py --conf conf/demo.yaml [mechanisms.bag_sizes=[8,64] ...]
"""
import sys

from lia_spark.cli.main import job_main

if __name__ == "__main__":
    sys.exit(job_main("posteriors", sys.argv[1:]))
