"""The ingest stage: Criteo TSV days to day-partitioned Parquet (:mod:`.stage`), the day files it reads
(:mod:`.criteo_files`)."""
