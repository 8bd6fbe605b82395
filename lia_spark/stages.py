"""Registry of runnable stages: name -> loader returning ``run(spark, config) -> result``.

Loaders import lazily so ``lia-spark --help`` stays fast and a stage's heavy dependencies load only
when it runs. Each stage module owns one ``run_*`` function; jobs/ and the pipeline call the same ones.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

STAGE_FUNCTIONS: dict[str, str] = {
    "generate": "lia_spark.engine.generate:run_generate",
    "ingest": "lia_spark.engine.ingest:run_ingest",
    "train": "lia_spark.engine.train:run_train_models",
    "posteriors": "lia_spark.engine.posteriors.stage:run_posteriors",
    "utility": "lia_spark.engine.utility:run_utility_tradeoff",
    "audit": "lia_spark.engine.audit:run_audit",
    "pipeline": "lia_spark.engine.pipeline:run_pipeline",
    "track": "lia_spark.engine.pipeline:run_track",  # re-log a finished output folder to MLflow
    "audit-table": "lia_spark.engine.table:run_audit_table",  # command `lia-spark audit-table` (Table 2)
    "logloss-attack": "lia_spark.engine.logloss:run_logloss_attack",  # docs/math.md §10
}


def load_stage(name: str) -> Callable[..., Any]:
    """Import and return stage ``name``'s ``run_*(spark, config)`` function."""
    module, function = STAGE_FUNCTIONS[name].split(":", 1)
    return getattr(importlib.import_module(module), function)


STAGES: dict[str, Callable[[], Callable[..., Any]]] = {
    name: functools.partial(load_stage, name) for name in STAGE_FUNCTIONS
}
