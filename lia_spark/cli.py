"""Command line: ``lia-spark <stage> --conf FILE [section.key=value ...]`` and the shared job entry point.

Every spark-submit job in ``jobs/`` is ``job_main(run_stage, argv)``: parse ``--conf`` and overrides,
validate the config, get (or reuse) the SparkSession, run one library function, print its result.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any, Callable, Sequence

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
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``lia-spark STAGE [--conf FILE] [overrides]``: dispatch to one stage's job."""
    from lia_spark.stages import STAGES

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in STAGES:
        names = ", ".join(STAGES)
        print(f"usage: lia-spark {{{names}}} [--conf FILE] [section.key=value ...]", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    stage_name, rest = argv[0], argv[1:]
    return job_main(STAGES[stage_name](), rest, description=f"lia-spark {stage_name}")


if __name__ == "__main__":
    sys.exit(main())
