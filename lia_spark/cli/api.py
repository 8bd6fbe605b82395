"""The Python API: the command line's work from Python (a notebook, a job of your own, a test), with typed results.

- :func:`audit_predictions`: the injected audit (docs/math.md §5.9) of a table of canaries and a model's
  predictions, pandas (in this process) or Spark (on the executors, as the audit stage counts);
- :func:`run_command`: any ``lia-spark`` command (``pipeline`` for ``lia-spark run``) on a config, returning the
  command's result (e.g. :class:`lia_spark.engine.orchestration.pipeline.PipelineResult`, whose ``console_summary()`` is
  what the command line prints).

- :func:`configure_logging`: the command line's log lines (progress every run.progress_seconds, the stages' starts
  and ends, warnings) on stderr, at INFO (``logging.DEBUG`` for lia_spark's debug lines, ``logging.WARNING`` for
  warnings only). Without it the API logs nothing unless your own logging configuration shows the ``lia_spark``
  logger.

All three are exported by the package (``lia_spark.__all__``): ``lia_spark.audit_predictions``,
``lia_spark.run_command``, ``lia_spark.configure_logging``.
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import TYPE_CHECKING, Any, Literal, Sequence, Union, overload

import numpy as np
import pandas as pd

from lia_spark import names
from lia_spark.cli.main import configure_logging as configure_logging  # re-exported: lia_spark.configure_logging
from lia_spark.kernels import injected
from lia_spark.names import (BASELINE_NAMES, COUNTERFACTUAL_LABEL, HIDDEN_BIT, LABEL, PROXY_PREDICTION, ROW_ID,
                             SHADOW_PREDICTION, TARGET_PREDICTION)
from lia_spark.records.headline import Headline
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config, load_config
from lia_spark.run.model_sections import AuditConfig
from lia_spark.run.requirements import check_requirements
from lia_spark.studies.power import ChoiceBound, audit_arrays, counts_bound, pooled_canaries

if TYPE_CHECKING:  # the engine imports pyspark: at run time it is imported by the command, not by this module
    from lia_spark.engine.audit.stage import AuditResult
    from lia_spark.engine.generate.stage import GenerateResult
    from lia_spark.engine.ingest.stage import IngestResult
    from lia_spark.engine.inject.stage import InjectResult
    from lia_spark.engine.logloss.stage import LoglossResult
    from lia_spark.engine.orchestration.audit_table import TableResult
    from lia_spark.engine.orchestration.pipeline import PipelineResult
    from lia_spark.engine.posteriors.stage import PosteriorsResult
    from lia_spark.engine.runtime.stage import StageResult
    from lia_spark.engine.train.stage import TrainResult
    from lia_spark.engine.utility.stage import UtilityResult

CommandResult = Union["StageResult", "PipelineResult", "TableResult"]

# The columns of a table to audit: the canary table of the train stage, or inject's sealed table joined with your
# model's predictions (docs/usage.md, "Audit your own model").
CANARY_COLUMNS = (ROW_ID, LABEL, COUNTERFACTUAL_LABEL, HIDDEN_BIT, TARGET_PREDICTION)
BASELINE_COLUMNS = (PROXY_PREDICTION, SHADOW_PREDICTION)


@dataclasses.dataclass(frozen=True)
class PredictionsAudit:
    """The injected audit of one table: the valid bound (pure binomial, delta = 0, Bonferroni over ``tests``), what
    reached it and the ceiling: what an attacker at exactly the claimed eps typically certifies in an audit of this
    size (``ceiling``) and the 95th percentile of that (``ceiling_95``), docs/math.md §5.12."""

    eps_lb: float
    confidence: float
    claimed_epsilon: float
    ceiling: float
    ceiling_95: float
    informative_canaries: int
    tests: int
    score: str
    guesses: int
    baselines: tuple[str, ...]
    headline: Headline
    training_runs: int = 1  # the runs the table holds, pooled into the game (docs/math.md §5.14)

    def summary(self) -> str:
        """The headline the audit stage prints: the bound first, its confidence, delta and the claimed eps."""
        return self.headline.text()


def audit_predictions(predictions: Any, *, claimed_epsilon: float = math.inf, seed: int | None = None,
                      conf: str | os.PathLike | None = None, overrides: Sequence[str] = (),
                      target: str = "the audited model", spark: Any = None) -> PredictionsAudit:
    """The injected audit of ``predictions``: a pandas or Spark DataFrame with row_id, label (y0),
    counterfactual_label (y1), hidden_bit (the coin b; the model trained on y^b), target_prediction (the model's
    P(y = 1 | x)) and proxy_prediction and / or shadow_prediction (the baselines; audit.baseline chooses). Rows without
    a coin or a counterfactual are not canaries. The audit's settings are the config's audit section (``conf``, then
    ``overrides``, e.g. ``["audit.scores=[log_ratio]"]``); ``seed`` (default run.seed) breaks ties between equal
    scores (the coins are the table's; they were drawn from the audit key). A pandas table is audited in this
    process; a Spark table on the executors (nothing proportional to its rows reaches the driver), ``spark`` its
    session (default: the table's).

    Raises:
        ConfigError: a bad setting, a design other than injected, audit.delta > 0, or audit.canaries > 0 with a
            pandas table.
        ValueError: a missing column, or no baseline column with a value.
    """
    config = load_config(conf, overrides)
    section = config.audit
    if not section.audit_design.injects_labels:
        raise ConfigError(f"audit.design: audit_predictions plays the injected game (coins drawn before training), got "
                          f"audit.design={section.design}, audit.attack={section.attack}")
    if section.delta > 0:
        raise ConfigError(f"audit.delta: audit_predictions reports the pure binomial bound (delta = 0), got "
                          f"{section.delta:g}; `lia-spark audit` gives the GDP bound at delta > 0")
    seed = config.run.seed if seed is None else seed
    if isinstance(predictions, pd.DataFrame):
        bound, baselines, runs = _audit_pandas(predictions, config, seed=seed, claimed_epsilon=claimed_epsilon)
    else:
        bound, baselines, runs = _audit_spark(predictions, config, seed=seed, claimed_epsilon=claimed_epsilon,
                                              spark=spark)
    headline = Headline(eps_lb=bound.eps_lb, eps_lb_mean=bound.eps_lb, eps_lb_std=0.0, repetitions=1,
                        confidence=section.confidence, tests=bound.tests, delta=0.0, mechanism=target,
                        claimed_epsilon=claimed_epsilon, design=names.INJECTED,
                        informative_canaries=bound.informative, ceiling=bound.ceiling, ceiling_95=bound.ceiling_95,
                        canaries=bound.informative,
                        training_runs=runs)
    return PredictionsAudit(eps_lb=bound.eps_lb, confidence=section.confidence, claimed_epsilon=claimed_epsilon,
                            ceiling=bound.ceiling, ceiling_95=bound.ceiling_95, informative_canaries=bound.informative,
                            tests=bound.tests,
                            score=bound.score, guesses=bound.guesses, baselines=baselines, headline=headline,
                            training_runs=runs)


def _baselines(frame: pd.DataFrame, section: AuditConfig) -> tuple[str, ...]:
    """The baseline columns of audit.baseline in a pandas table, as the audit stage resolves them."""
    present = tuple(column for column in BASELINE_COLUMNS if column in frame and frame[column].notna().any())
    chosen = section.baseline_columns(present)
    if not chosen or not set(chosen) <= set(present):
        wanted = " or ".join(chosen or BASELINE_COLUMNS)
        raise ValueError(f"predictions: audit.baseline={section.baseline} needs a column {wanted} with values, got "
                         f"columns {list(frame.columns)}")
    return chosen


def _check_columns(columns: list[str]) -> None:
    missing = [column for column in CANARY_COLUMNS if column not in columns]
    if missing:
        raise ValueError(f"predictions: missing columns {missing}, got columns {columns}")


def _refuse(problem: str | None) -> None:
    if problem is not None:
        raise ValueError(f"predictions: {problem}; {injected.PROBABILITY_FIX}")


def _audit_pandas(frame: pd.DataFrame, config: Config, *, seed: int,
                  claimed_epsilon: float) -> tuple[ChoiceBound, tuple[str, ...], int]:
    _check_columns(list(frame.columns))
    if config.audit.canaries > 0:
        raise ConfigError(f"audit.canaries: a pandas table is audited whole, got {config.audit.canaries}; sample "
                          "the table yourself, or pass a Spark DataFrame")
    baselines = _baselines(frame, config.audit)
    pooled, runs = pooled_canaries(frame)
    rows = pooled[pooled[HIDDEN_BIT].notna() & pooled[COUNTERFACTUAL_LABEL].notna()]
    found = injected.summarize_predictions(rows[TARGET_PREDICTION].to_numpy(np.float64),
                                           rows[baselines[0]].to_numpy(np.float64), expected=rows[ROW_ID].nunique())
    _refuse(injected.prediction_problem(found))
    bound = audit_arrays(rows[ROW_ID].to_numpy(np.int64), rows[LABEL].to_numpy(), rows[COUNTERFACTUAL_LABEL].to_numpy(),
                         rows[HIDDEN_BIT].to_numpy(), rows[TARGET_PREDICTION].to_numpy(np.float64),
                         {BASELINE_NAMES[column]: rows[column].to_numpy(np.float64) for column in baselines},
                         config.audit, seed=seed, claimed_epsilon=claimed_epsilon)
    return bound, baselines, runs


def _audit_spark(frame: Any, config: Config, *, seed: int, claimed_epsilon: float,
                 spark: Any) -> tuple[ChoiceBound, tuple[str, ...], int]:
    from lia_spark.engine.audit.stage import handed_table_counts
    from lia_spark.engine.spark.session import checksummed_parquet

    _check_columns(frame.columns)
    against = (config.audit.baseline_columns(tuple(c for c in BASELINE_COLUMNS if c in frame.columns))
               or (PROXY_PREDICTION,))[0]
    counted = handed_table_counts(checksummed_parquet(spark if spark is not None else frame.sparkSession),
                                  dataclasses.replace(config, run=dataclasses.replace(config.run, seed=seed)), frame,
                                  against=against)
    bound = counts_bound(counted.correct, counted.guesses, counted.canaries, config.audit,
                         claimed_epsilon=claimed_epsilon, choice="api")
    return bound, counted.baselines, counted.runs


Conf = Union[str, "os.PathLike[str]", None]


@overload
def run_command(command: Literal["pipeline", "run", "track"] = ..., conf: Conf = ..., *,
                overrides: Sequence[str] = ..., spark: Any = ...) -> PipelineResult: ...
@overload
def run_command(command: Literal["generate"], conf: Conf = ..., *, overrides: Sequence[str] = ...,
                spark: Any = ...) -> GenerateResult: ...
@overload
def run_command(command: Literal["ingest"], conf: Conf = ..., *, overrides: Sequence[str] = ...,
                spark: Any = ...) -> IngestResult: ...
@overload
def run_command(command: Literal["train"], conf: Conf = ..., *, overrides: Sequence[str] = ...,
                spark: Any = ...) -> TrainResult: ...
@overload
def run_command(command: Literal["posteriors"], conf: Conf = ..., *, overrides: Sequence[str] = ...,
                spark: Any = ...) -> PosteriorsResult: ...
@overload
def run_command(command: Literal["utility"], conf: Conf = ..., *, overrides: Sequence[str] = ...,
                spark: Any = ...) -> UtilityResult: ...
@overload
def run_command(command: Literal["audit"], conf: Conf = ..., *, overrides: Sequence[str] = ...,
                spark: Any = ...) -> AuditResult: ...
@overload
def run_command(command: Literal["inject"], conf: Conf = ..., *, overrides: Sequence[str] = ...,
                spark: Any = ...) -> InjectResult: ...
@overload
def run_command(command: Literal["audit-table"], conf: Conf = ..., *, overrides: Sequence[str] = ...,
                spark: Any = ...) -> TableResult: ...
@overload
def run_command(command: Literal["logloss-attack"], conf: Conf = ..., *, overrides: Sequence[str] = ...,
                spark: Any = ...) -> LoglossResult: ...
@overload
def run_command(command: str, conf: Conf = ..., *, overrides: Sequence[str] = ...,
                spark: Any = ...) -> CommandResult: ...


def run_command(command: str = "pipeline", conf: Conf = None, *, overrides: Sequence[str] = (),
                spark: Any = None) -> CommandResult:
    """Run ``lia-spark <command>`` (``pipeline`` = ``lia-spark run``; ``audit``, ``audit-table``, any stage) on the
    config ``conf`` (a file, or a packaged name such as ``"demo"``) with ``overrides``, holding the output folder's
    run lock, and write ``<run.output_dir>/results/<command>.json`` as the command line does; return the command's
    typed result (each command's type: the overloads above). ``spark``: the session to use (default: a session from
    the config's spark section, its executors checked first; either way Parquet's page CRCs written and verified on
    it, :func:`lia_spark.engine.spark.session.checksummed_parquet`). Progress is logged on the ``lia_spark`` logger:
    :func:`lia_spark.configure_logging` shows it as the command line does. Exceptions propagate (the command line
    turns them into one line and an exit code)."""
    from lia_spark.cli.main import execute_command
    from lia_spark.engine.spark.session import checksummed_parquet

    config = load_config(conf, overrides)
    check_requirements(config, command)
    if spark is None:
        from lia_spark.engine.spark.deployment import start_spark

        spark = start_spark(config.spark)
    result, _, _ = execute_command(command, checksummed_parquet(spark), config)
    return result
