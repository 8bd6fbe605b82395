"""spark-submit entry point for the whole pipeline.

    spark-submit [--master URL] [--py-files dist/lia_spark-0.1.0.zip] \\
        jobs/pipeline.py --conf conf/demo.yaml [section.key=value ...]
"""
import sys

from lia_spark.cli.main import job_main

if __name__ == "__main__":
    sys.exit(job_main("pipeline", sys.argv[1:]))
