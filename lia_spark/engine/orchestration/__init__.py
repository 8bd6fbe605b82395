"""What runs the stages, above every stage folder: the registry of every stage and ``run_stage`` (:mod:`.registry`),
the pipeline (:mod:`.pipeline`), the commands built on them (:mod:`.commands`) and the audit table
(:mod:`.audit_table`). Only this folder (and the command line above it) imports a stage folder's declaration."""
