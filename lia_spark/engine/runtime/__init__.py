"""The stage machinery, independent of any one stage: the stage contract (:mod:`.stage`), the registry of every
stage (:mod:`.registry`), the commands built on it (:mod:`.commands`: the pipeline, the audit table, the log-loss
attack), committed outputs and ownership (:mod:`.outputs`), Parquet read by pyarrow with every page verified
(:mod:`.parquet_reads`), the run lock (:mod:`.lock`) and progress lines (:mod:`.progress`). Only the registry and the
orchestrators import a stage folder."""
