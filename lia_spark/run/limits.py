"""Limits the data decides: how many training rows the target gets, and the settings that need at least that many
(PATE's teachers and student queries, an LLP bag). Checked as soon as the target day's row count is known, before
any fit (:func:`check_training_rows`)."""
from __future__ import annotations

from typing import Callable

from lia_spark.names import IN_MEMORY
from lia_spark.run.checks import fail
from lia_spark.run.config import Config


def training_rows(config: Config, day_rows: int) -> int:
    """About how many training rows the target gets from a target day of ``day_rows`` rows: the day (in memory, its
    seeded sample of models.sample_rows_per_day when smaller) times the train share of models.split."""
    models = config.models
    sampled = day_rows
    if models.execution == IN_MEMORY and 0 < models.sample_rows_per_day < day_rows:
        sampled = models.sample_rows_per_day
    return int(sampled * models.split[0])


def check_training_rows(config: Config, day_rows: Callable[[], int], *, source: str) -> None:
    """Refuse a target that the rows cannot hold: PATE with more teachers (each needs rows) or student queries
    (each is a training row) than training rows, an LLP bag larger than the training rows. ``day_rows`` gives the
    target day's rows, asked only when the training mechanism has such a limit (counting them may be a Spark job);
    ``source`` says where they come from (for the message).

    Raises:
        ConfigError: naming the field first, with the training rows and where they come from.
    """
    models = config.models
    limited: list[tuple[str, int]] = []
    if models.mechanism.teachers:
        limited = [("pate.teachers", config.pate.teachers), ("pate.queries", config.pate.settings().queries)]
    elif models.mechanism.bag_release:
        limited = [("models.bag_size", models.bag_size)]
    if not limited:
        return
    rows = day_rows()
    available = training_rows(config, rows)
    for field, value in limited:
        if value > available:
            fail(field, value, f"must be at most the target's about {available:,} training rows (day "
                 f"{models.target_day}: {rows:,} rows, {source}; train share {models.split[0]:g})",
                 "lower it, or train on more rows (models.sample_rows_per_day, a larger day)")
