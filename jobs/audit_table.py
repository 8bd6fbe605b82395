"""spark-submit job: train and audit a target per training mechanism x claimed epsilon, the observational-auditing
paper's Table 2 (eps lower bounds) and Table 5 (utility) in one command, resumable per cell.

    spark-submit [--py-files dist/lia_spark-0.1.0.zip] jobs/audit_table.py --conf FILE [overrides]
"""
import sys

from lia_spark.cli.main import job_main

if __name__ == "__main__":
    sys.exit(job_main("audit-table", sys.argv[1:]))
