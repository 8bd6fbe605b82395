"""spark-submit job: Criteo TSV (day_N[.gz] or train.txt) -> day-partitioned Parquet plus quarantine
(docs/math.md §1.1)."""
import sys

from lia_spark.cli.main import job_main

if __name__ == "__main__":
    sys.exit(job_main("ingest", sys.argv[1:]))
