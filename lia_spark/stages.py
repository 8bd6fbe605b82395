"""Registry of runnable stages: name -> loader returning ``run(spark, config) -> result``.

Loaders import lazily so ``lia-spark --help`` stays fast and a stage's heavy dependencies load only
when it runs. Each stage module owns one ``run_*`` function; jobs/ and the pipeline call the same ones.
"""
from __future__ import annotations

from typing import Any, Callable


def _generate() -> Callable[..., Any]:
    from lia_spark.engine.generate import run_generate

    return run_generate


def _ingest() -> Callable[..., Any]:
    from lia_spark.engine.ingest import run_ingest

    return run_ingest


STAGES: dict[str, Callable[[], Callable[..., Any]]] = {
    "generate": _generate,
    "ingest": _ingest,
}
