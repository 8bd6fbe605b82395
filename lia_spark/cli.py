"""Command line: ``lia-spark <stage> --conf FILE [section.key=value ...]`` and the shared job entry point.

Every spark-submit job in ``jobs/`` is ``job_main(run_stage, argv)``: parse ``--conf`` and overrides,
validate the config, get (or reuse) the SparkSession, run one library function, print its result.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any, Callable, Mapping, Sequence

from lia_spark.config import Config, ConfigError, load_config

logger = logging.getLogger("lia_spark")

StageFunction = Callable[[Any, Config], Any]


def config_from_args(argv: Sequence[str] | None, description: str) -> Config:
    """Parse ``--conf FILE`` plus ``section.key=value`` overrides into a validated Config."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--conf", help="YAML config file (see conf/defaults.yaml for every key)")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="override one config value")
    args = parser.parse_args(argv)
    return load_config(args.conf, args.overrides)


def configure_logging() -> None:
    """INFO-level, timestamped logs for lia_spark; Spark's own logs stay at WARN."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)


def notebook_parameters(namespace: Mapping[str, Any], defaults: Mapping[str, str]) -> dict[str, str]:
    """Notebook parameters: Databricks widgets when ``dbutils`` is in ``namespace``, else ``$LIA_<NAME>`` or the default.

    Call as ``notebook_parameters(globals(), {"conf": "conf/demo.yaml"})``; on Databricks each name becomes
    a text widget, locally (CI, plain ``python notebook.py``) environment variables set the values.
    """
    dbutils = namespace.get("dbutils")
    values: dict[str, str] = {}
    for name, default in defaults.items():
        if dbutils is not None:
            dbutils.widgets.text(name, default, name)
            values[name] = dbutils.widgets.get(name)
        else:
            values[name] = os.environ.get(f"LIA_{name.upper()}", default)
    return values


def _printable(result: Any) -> str:
    payload = result.to_dict() if hasattr(result, "to_dict") else result
    return json.dumps(payload, indent=2, sort_keys=True, default=str)


def job_main(stage: StageFunction, argv: Sequence[str] | None = None, description: str = "") -> int:
    """Run one stage as a command: exit code 0 on success, 2 on a config error, 1 on a failed stage."""
    configure_logging()
    try:
        config = config_from_args(argv, description)
    except ConfigError as error:
        print(f"lia-spark: configuration error: {error}", file=sys.stderr)
        return 2
    from lia_spark.engine.session import get_spark

    spark = get_spark(config.spark)
    started = time.monotonic()
    name = getattr(stage, "__name__", "stage")
    logger.info("stage %s: started", name)
    try:
        result = stage(spark, config)
    except Exception as error:  # noqa: BLE001 - the job reports any failure as one clear line
        logger.exception("stage %s failed", name)
        print(f"lia-spark: {name} failed: {error}", file=sys.stderr)
        return 1
    logger.info("stage %s: finished in %.1f s", name, time.monotonic() - started)
    print(_printable(result))
    if hasattr(result, "console_summary"):
        print(result.console_summary())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``lia-spark {run,STAGE} [--conf FILE] [overrides]``: ``run`` is the whole pipeline, else one stage's job."""
    from lia_spark.stages import STAGES

    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"run": "pipeline", **{name: name for name in STAGES}}
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        names = ", ".join(commands)
        print(f"usage: lia-spark {{{names}}} [--conf FILE] [section.key=value ...]\n"
              "  run = the whole pipeline (data -> train -> posteriors -> audit -> report, tracked in MLflow)",
              file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    command, rest = argv[0], argv[1:]
    try:
        function = STAGES[commands[command]]()
    except ModuleNotFoundError as error:
        print(f"lia-spark: stage {command!r} is not installed ({error})", file=sys.stderr)
        return 2
    return job_main(function, rest, description=f"lia-spark {command}")


if __name__ == "__main__":
    sys.exit(main())
