"""Spark stage of the one-run audit (docs/math.md §5, §6): the games' exact counts
(:mod:`lia_spark.engine.audit.counts`), or with audit.attack=membership the membership baseline over the train stage's
candidate table on the driver (:func:`membership_counts`, docs/math.md §5.8). Then the bounds run on the driver
(lia_spark.kernels.audit_sweep.evaluate_scores: the best over the scores of audit.scores x the sweep). Outputs under
``<run.output_dir>/audit``: ``results`` (Parquet) and ``results.csv`` (per repetition and c': c', c, per-point
bounds), ``summary.json`` and ``plots/eps_vs_guesses.png``, committed atomically; resumable.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import tempfile
import time
from typing import Any, TypedDict

import numpy as np
import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lia_spark import names
from lia_spark.engine.audit.counts import distributed_counts, pooled_runs, resolve_baselines, select_canaries
from lia_spark.engine.audit.own_model import check_predictions, given_model
from lia_spark.engine.audit.targets import AuditedTarget, audited_target, canary_path
from lia_spark.engine.runtime.outputs import copy_from_local, path_exists, reported_path
from lia_spark.engine.runtime.stage import FilesResult, Stage, StageRun, TrainedTarget
from lia_spark.engine.spark.session import aggregate_row, describe_jobs
from lia_spark.kernels import audit, audit_sweep, membership
from lia_spark.kernels.audit_designs import AuditDesign
from lia_spark.names import (BASELINE_NAMES, LABEL, MEMBER, PROXY_PREDICTION, REFERENCE_PREDICTION, ROW_ID,
                             TARGET_PREDICTION)
from lia_spark.present.charts import plot_sweep
from lia_spark.records.audit_summary import (AuditSummary, BoundStatistics, Calibrated, ObservationalChecks, ProxyError,
                                             RecalibrationMap, ReferenceBound, TauBreakEven)
from lia_spark.records.headline import Headline
from lia_spark.run import layout
from lia_spark.run.config import Config
from lia_spark.run.json_output import strict_json
from lia_spark.run.model_sections import AuditConfig

logger = logging.getLogger(__name__)


FILES = ("results.csv", "summary.json", "plots/eps_vs_guesses.png")  # beside the results table


def _statistics(best: dict[str, np.ndarray]) -> dict[str, BoundStatistics]:
    """Mean, std, min, max and share positive of each best-bound array (:func:`audit_sweep.summarize`)."""
    return {key: BoundStatistics(**stats) for key, stats in audit_sweep.summarize(best).items()}


def results_frame(bounds: audit_sweep.ScoreBounds) -> pd.DataFrame:
    """Long table: one row per (score, repetition, c') with c, c/c' and the per-point bounds (each point at the
    per-test confidence of the audit: the split over scores x sweep points for "bonferroni")."""
    frames = []
    for score, sweep in bounds.per_score.items():
        repetitions, points = sweep.correct.shape
        frame = pd.DataFrame({
            "score": score,
            "repetition": np.repeat(np.arange(repetitions, dtype=np.int32), points),
            "guesses": np.tile(sweep.guesses, repetitions),
            "correct": sweep.correct.ravel(),
        })
        frame["accuracy"] = frame["correct"] / frame["guesses"]
        for key, values in sweep.per_guess.items():
            frame[key] = values.ravel()
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


@dataclasses.dataclass(frozen=True)
class AuditResult(FilesResult):
    """Outcome of the audit stage: sizes, the summary of best bounds per repetition and output files."""

    output_path: str
    canaries: int
    repetitions: int
    guess_counts: int
    convention: str
    summary: AuditSummary
    files: tuple[str, ...]
    seconds: float
    skipped: bool = False

    def metrics(self) -> dict[str, float]:
        """``canaries``, ``repetitions``, the headline's ``eps_lb`` (and ``claimed_eps``, ...),
        ``<bound>_<convention>_mean/std`` for each best bound ("paper": the paper's convention, not a valid bound),
        and ``eps_<family>``: the valid (Bonferroni) mean. MLflow shows them as ``audit.<name>`` (the stage's prefix);
        the stage's time is ``audit.seconds``."""
        metrics = {"canaries": float(self.canaries), "repetitions": float(self.repetitions),
                   **self.headline.metrics()}
        for key, stats in self.summary.best.items():
            metrics[f"{key}_mean"] = stats.mean
            metrics[f"{key}_std"] = stats.std
            if key.startswith("eps_") and key.endswith(f"_{names.BONFERRONI}"):
                metrics[key.removesuffix(f"_{names.BONFERRONI}")] = stats.mean
        return {key: value for key, value in metrics.items() if math.isfinite(value)}

    @property
    def headline(self) -> Headline:
        """The valid bound beside the claimed epsilon (:class:`lia_spark.records.headline.Headline`)."""
        return self.summary.headline

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "summary": self.summary.to_dict()}

    @classmethod
    def decoded(cls, values: dict[str, Any]) -> dict[str, Any]:
        return {**super().decoded(values), "summary": AuditSummary.from_dict(values["summary"])}

    def console_summary(self) -> str:
        """The headline line, printed last by the job."""
        return f"audit: {self.headline.text()}"

    def artifacts(self) -> list[str]:
        """results.csv, summary.json and the plot (URIs when the output folder is remote: see
        :func:`lia_spark.engine.runtime.outputs.local_copies`)."""
        return list(self.files)


class MeasuredProxyError(TypedDict):
    """The proxy's TV error against the twin's truth (:func:`proxy_error`), the fields of :class:`ProxyError` the
    measurement gives."""

    max: float
    p99: float
    p95: float
    mean: float
    canaries: int


@dataclasses.dataclass(frozen=True)
class GameCounts:
    """The counts of one label-inference audit: m, the sweep's guess counts, score name -> correct (R, k) (with
    several baselines ``<score>@<baseline>``, e.g. ``log_ratio@shadows``), each baseline column's recalibration
    summary ({} without one) and the baseline columns the scores compared the target's with."""

    canaries: int
    guesses: np.ndarray
    correct: dict[str, np.ndarray]
    recalibration: dict[str, RecalibrationMap]
    baselines: tuple[str, ...]
    proxy_error: MeasuredProxyError | None = None  # observational on the twin: :func:`proxy_error`
    runs: int = 1  # injected: the training runs pooled into the game (audit.runs; m counts every run's canaries)


def truth_table(spark: SparkSession, config: Config, *, data_rows: bool) -> DataFrame | None:
    """The twin's true P(y=1|x) (``<out>/truth``: row_id, eta) for canaries that are rows of the data table
    (``data_rows``: the train stage's or the inject stage's), or None: audit.canary_path (rows of another table),
    data.source=criteo, or no truth table."""
    path = layout.output_path(config, layout.TRUTH)
    if not data_rows or config.audit.canary_path or config.data.source != "synthetic" or not path_exists(spark, path):
        return None
    return spark.read.parquet(path).select(ROW_ID, "eta")


def proxy_error(df: DataFrame, truth: DataFrame) -> MeasuredProxyError | None:
    """The total-variation error of the proxy the observational game draws y1 from (the canaries' ``proxy_prediction``
    as the game reads it, recalibrated where audit.recalibrate maps it) against the true P(y=1|x): for Bernoulli
    laws TV = |M'(x) - eta(x)|; its maximum over the canaries (the tau that makes the bound hold, docs/math.md §5.10),
    99th and 95th percentiles and mean. None when a canary has no truth row (logged)."""
    gap = F.abs(F.col(PROXY_PREDICTION) - F.col("eta"))
    row = aggregate_row(df.select(ROW_ID, PROXY_PREDICTION).join(truth, ROW_ID, "left"),
                        F.count(F.lit(1)).alias("canaries"), F.count("eta").alias("matched"), F.max(gap).alias("max"),
                        F.percentile_approx(gap, [0.99, 0.95], 10_000).alias("quantiles"), F.avg(gap).alias("mean"))
    if row["matched"] < row["canaries"] or not row["canaries"]:
        logger.warning("audit: %d of %d canaries have no row in the truth table: the proxy's error is not measured",
                       row["canaries"] - row["matched"], row["canaries"])
        return None
    return {"max": float(row["max"]), "p99": float(row["quantiles"][0]), "p95": float(row["quantiles"][1]),
            "mean": float(row["mean"]), "canaries": int(row["canaries"])}


def label_inference_counts(spark: SparkSession, config: Config, canaries: DataFrame, *,
                           target: str = TARGET_PREDICTION, data_rows: bool = False) -> GameCounts:
    """The counts of the label-inference audit of audit.design over the canary table ``canaries`` (optionally
    sampled to audit.canaries rows), scoring the prediction column ``target`` (the
    target's, or the label-blind reference's) against each baseline of audit.baseline (:func:`resolve_baselines`:
    one pass per baseline; the sweep is the same, m being the same), each baseline recalibrated as audit.recalibrate
    says for it (``AuditConfig.recalibration``); injected: m = the informative canaries (of every pooled run), one
    game; observational on the twin also the proxy's measured error (:func:`proxy_error`) when the canaries are rows
    of the data table (``data_rows``: the train stage's or the inject stage's)."""
    design = config.audit.audit_design
    truth = truth_table(spark, config, data_rows=data_rows) if design.assumes_tau else None
    runs = 1
    if design.refits_target and target == TARGET_PREDICTION:
        canaries, runs = pooled_runs(canaries)
    baselines = resolve_baselines(canaries, section=config.audit)
    maps: dict[str, RecalibrationMap] = {}
    correct, m, guesses, error = {}, 0, np.zeros(0, dtype=np.int64), None
    for baseline in baselines:
        mapped = config.audit.recalibration(BASELINE_NAMES[baseline])
        df, mapping = select_canaries(canaries, seed=config.run.seed, canaries=config.audit.canaries,
                                      design=design, target=target, recalibrate=mapped,
                                      baseline=baseline)
        if config.audit.canaries > 0 or mapping is not None:
            df = df.persist(StorageLevel.MEMORY_AND_DISK)  # a sample's top-k and the map are full scans: run them once
        try:
            m, guesses, counts = distributed_counts(df, section=config.audit, seed=config.run.seed, design=design)
            if truth is not None:
                describe_jobs(spark, "audit: the proxy's error against the twin's truth")
                error = proxy_error(df, truth)
        finally:
            df.unpersist()
        suffix = "" if len(baselines) == 1 else f"@{BASELINE_NAMES[baseline]}"
        correct.update({f"{score}{suffix}": values for score, values in counts.items()})
        if mapping is not None:
            maps[baseline] = RecalibrationMap(mapped=mapped, **mapping.summary())
    return GameCounts(m, guesses, correct, maps, baselines, error, runs)


def handed_table_counts(spark: SparkSession, config: Config, table: DataFrame, *, against: str) -> GameCounts:
    """:func:`label_inference_counts` of a canary table handed over from Python (``lia_spark.audit_predictions``),
    its runs pooled (:func:`pooled_runs`) and every pair's ``target_prediction`` checked first as a model's are
    (:func:`check_predictions`, beside the baseline column ``against``).

    Raises:
        ValueError: naming ``predictions`` and what is wrong with them.
    """
    pooled, runs = pooled_runs(table)  # every run's predictions checked, as the pandas path checks them
    canaries = pooled.where(F.col(names.HIDDEN_BIT).isNotNull() & F.col(names.COUNTERFACTUAL_LABEL).isNotNull())
    check_predictions(canaries, canaries.select(ROW_ID).distinct().count(), "predictions", "the table", against)
    return dataclasses.replace(label_inference_counts(spark, config, pooled), runs=runs)


def reference_counts(spark: SparkSession, config: Config) -> GameCounts | None:
    """The observational counts of the label-blind reference (the canary table's reference_prediction, same games
    as the target's), or None when the table has no reference (a given model without one, a model of your own, the
    injected design)."""
    if not config.audit.audit_design.fits_reference or not audited_target(config).has_reference:
        return None
    table = spark.read.parquet(canary_path(config))
    if (REFERENCE_PREDICTION not in table.columns
            or table.where(F.col(REFERENCE_PREDICTION).isNotNull()).limit(1).count() == 0):
        logger.info("audit: the canary table has no %s: no label-blind reference audited", REFERENCE_PREDICTION)
        return None
    return label_inference_counts(spark, config, table.where(F.col(REFERENCE_PREDICTION).isNotNull()),
                                  target=REFERENCE_PREDICTION)


def membership_counts(spark: SparkSession, config: Config) -> tuple[int, np.ndarray, dict[str, np.ndarray]]:
    """(2m, guesses, {"membership": correct (1, k)}) of the membership baseline (docs/math.md §5.8) over the train
    stage's candidate table (2m rows, collected to the driver: audit.membership_candidates bounds it)."""
    describe_jobs(spark, "audit: read membership candidates")
    frame: pd.DataFrame = spark.read.parquet(layout.membership_path(config)).toPandas()
    if frame.empty:
        raise ValueError(f"membership candidates: {layout.membership_path(config)} holds no row; train with "
                         f"audit.attack={names.MEMBERSHIP}")
    guesses, correct = membership.sweep_counts(
        frame[ROW_ID].to_numpy(np.int64), frame[LABEL].to_numpy(), frame[MEMBER].to_numpy(np.int8),
        frame[TARGET_PREDICTION].to_numpy(np.float64), frame[PROXY_PREDICTION].to_numpy(np.float64),
        seed=config.run.seed, sweep=config.audit)
    return len(frame), guesses, {names.MEMBERSHIP: correct}


def _label_inference(run: StageRun, audited: AuditedTarget) -> GameCounts:
    """The label-inference counts of the audited target: the train stage's, a given canary table's, or a model of
    your own's (its canary table built from the sealed coins and its predictions)."""
    with audited.canaries(run) as canaries:
        return label_inference_counts(run.spark, run.config, canaries, data_rows=True)


def _audit(run: StageRun) -> AuditResult:
    """Audit the canary table (:func:`canary_path`), or with audit.attack=membership the train stage's membership
    candidates, and write ``<run.output_dir>/audit``."""
    spark, config, started = run.spark, run.config, run.started
    section, design, audited = config.audit, config.audit.audit_design, audited_target(config)
    output_path = reported_path(layout.output_path(config, layout.AUDIT))
    recalibration: dict[str, RecalibrationMap]
    baselines: tuple[str, ...]
    if design.draws_members:
        (m, guesses, correct), recalibration, baselines = membership_counts(spark, config), {}, (PROXY_PREDICTION,)
        error, runs = None, 1
    else:
        counts = _label_inference(run, audited)
        m, guesses, correct = counts.canaries, counts.guesses, counts.correct
        recalibration, baselines, error = counts.recalibration, counts.baselines, counts.proxy_error
        runs = counts.runs
    tau = design.tau(section.tau)  # injected coins assume nothing of the proxy
    repetitions = next(iter(correct.values())).shape[0]
    counted = time.monotonic()
    bounds = audit_sweep.evaluate_scores(correct, guesses, canaries=m, confidence=section.confidence,
                                          delta=section.delta, tau=tau, families=section.bounds,
                                          table_families=section.table_bounds)
    logger.info("audit: counts in %.1f s, bounds in %.1f s", counted - started, time.monotonic() - counted)
    observational = (_observational_checks(spark, config, correct, guesses, m, error)
                     if design.assumes_tau else None)
    trained = (None if section.given_target  # a Protocol: upstream's isinstance check reads it at run time
               else run.upstream("canaries", TrainedTarget))  # type: ignore[type-abstract]
    headline = _headline(config, bounds, design=design, canaries=m, observational=observational, trained=trained,
                         given=audited.description(config, run.resolved.found),
                         runs=runs)
    ceiling = audit_sweep.ceiling(canaries=m, guesses=guesses, claimed_epsilon=headline.claimed_epsilon,
                                  tests=bounds.tests, confidence=section.confidence, delta=section.delta,
                                  tau=headline.lead_tau,
                                  family=headline.family)
    summary = AuditSummary(
        attack=section.attack, design=design.name, canaries=m, repetitions=repetitions,
        guesses=tuple(int(g) for g in guesses), confidence=section.confidence, delta=section.delta, tau=tau,
        gdp_delta=bounds.gdp_delta, gdp_tau_vacuous=bounds.gdp_tau_vacuous, scores=tuple(bounds.scores),
        tests=bounds.tests, default_convention=section.convention,
        recalibration=recalibration,
        baselines=tuple(baselines), best=_statistics(bounds.best),
        best_guesses_median={key: float(np.median(v)) for key, v in bounds.best_guesses.items()},
        best_score_share={key: {score: float(np.mean(winners == score)) for score in bounds.scores}
                          for key, winners in bounds.best_scores.items()},
        per_score={score: _statistics(sweep.best) for score, sweep in bounds.per_score.items()},
        ceiling=ceiling, headline=dataclasses.replace(headline, ceiling=ceiling.eps_lb, ceiling_95=ceiling.eps_lb_95),
        observational=observational)
    if bounds.gdp_tau_vacuous and names.GDP in section.bounds:
        logger.warning("audit: tau=%g >= c'/m at every sweep point: the f-DP (gdp) tau bound is vacuous", section.tau)
    frame = results_frame(bounds)
    with tempfile.TemporaryDirectory(prefix="lia-audit-") as local:
        describe_jobs(spark, "audit: write results")
        spark.createDataFrame(frame).coalesce(1).write.parquet(run.under("results"))
        frame.to_csv(os.path.join(local, FILES[0]), index=False)
        with open(os.path.join(local, FILES[1]), "w", encoding="utf-8") as handle:
            handle.write(strict_json(summary))
        plot_sweep(frame, path=os.path.join(local, FILES[2]),
                   title=f"{section.attack} audit: {m} canaries, {repetitions} repetitions",
                   confidence=section.confidence, deltas={names.BINOMIAL: section.delta, names.GDP: bounds.gdp_delta})
        for name in FILES:  # written locally, copied to the output folder on any Hadoop file system
            copy_from_local(spark, os.path.join(local, name), run.under(name))
    files = tuple(os.path.join(output_path, name) for name in FILES)
    result = AuditResult(output_path=output_path, canaries=m, repetitions=repetitions, guess_counts=len(guesses),
                         convention=section.convention, summary=summary, files=files,
                         seconds=time.monotonic() - started)
    logger.info("audit: done in %.1f s; paper convention, not a valid bound (mean best per repetition): %s",
                result.seconds, {k: round(v.mean, 4) for k, v in summary.best.items() if k.endswith(names.PAPER)})
    log = logger.warning if result.headline.is_finding else logger.info
    log("audit: %s", result.headline.text())
    return result


def headline_family(section: AuditConfig) -> str:
    """The bound family of the headline, fixed by the config before any data is seen (so it stays a valid 95%
    bound): binomial at delta = 0; GDP when delta > 0 (its delta enters through eps(mu, delta), while the
    binomial bound's delta term grows with the number of canaries m and is vacuous once m * delta is large);
    the computed family when only one is."""
    if names.GDP in section.bounds and (section.delta > 0 or names.BINOMIAL not in section.bounds):
        return names.GDP
    return names.BINOMIAL


def _observational_checks(spark: SparkSession, config: Config, correct: dict[str, np.ndarray], guesses: np.ndarray,
                          m: int, error: MeasuredProxyError | None) -> ObservationalChecks:
    """What the observational bound rests on (docs/math.md §5.10): ``proxy_tv`` (on the twin, the proxy's measured
    error and the valid bound at its maximum, null elsewhere), ``tau_break_even`` (tau* per repetition, first and
    mean), ``eps_lb_by_tau`` (the first repetition's valid bound at the taus of
    :data:`lia_spark.kernels.audit_sweep.TAU_GRID`), ``reference`` (the label-blind reference's valid bound at the
    headline's tau: the proxy's measured maximum error on the twin, else audit.tau; and its own tau*; null without
    one) and ``calibrated`` (the target's bound at the reference's largest tau*: not a bound, kept for comparison)."""
    section = config.audit
    family = headline_family(section)
    valid = names.bound_key(family, names.BONFERRONI)
    level = audit_sweep.score_confidence(section.confidence, convention=names.BONFERRONI, scores=len(correct),
                                          points=len(guesses))

    def sensitivity(counts: dict[str, np.ndarray], size: int) -> audit_sweep.TauSensitivity:
        return audit_sweep.tau_sensitivity(counts, guesses if size == m else _grid(size, section), canaries=size,
                                           level=level, delta=section.delta, family=family)

    def bound_at(counts: dict[str, np.ndarray], size: int, tau: float) -> np.ndarray:
        return audit_sweep.evaluate_scores(counts, guesses if size == m else _grid(size, section), canaries=size,
                                           confidence=section.confidence, delta=section.delta, tau=tau,
                                           families=(family,)).best[valid]

    own = sensitivity(correct, m)
    lead_tau = error["max"] if error is not None else section.tau  # the headline's tau: the reference is read there
    checks = ObservationalChecks(
        proxy_tv=None,
        tau_break_even=TauBreakEven(first=float(own.break_even[0]), mean=float(own.break_even.mean()),
                                    repetitions=len(own.break_even)),
        eps_lb_by_tau={f"{tau:g}": float(eps) for tau, eps in zip(own.taus, own.eps_lb)}, reference=None,
        calibrated=None)
    if error is not None:
        measured = bound_at(correct, m, error["max"])
        spread = audit_sweep.summarize({"eps_lb": measured})["eps_lb"]
        checks = dataclasses.replace(checks, proxy_tv=ProxyError(
            **error, eps_lb=float(measured[0]), eps_lb_mean=spread["mean"], eps_lb_std=spread["std"]))
        logger.info("audit: the proxy's TV error against the twin's truth: max %.4g, p99 %.4g, mean %.4g; valid "
                    "bound at the max %.3f", error["max"], error["p99"], error["mean"], measured[0])
    found = reference_counts(spark, config)
    if found is None:
        return checks
    size, reference = found.canaries, found.correct
    reference_best = bound_at(reference, size, lead_tau)
    reference_tau = sensitivity(reference, size)
    calibrated_tau = float(reference_tau.break_even.max())
    calibrated = bound_at(correct, m, calibrated_tau)
    reference_statistics = audit_sweep.summarize({"eps_lb": reference_best})["eps_lb"]
    checks = dataclasses.replace(checks, reference=ReferenceBound(
        eps_lb=float(reference_best[0]), **reference_statistics, tau=lead_tau,
        tau_break_even=float(reference_tau.break_even[0]), canaries=size), calibrated=Calibrated(
        tau=calibrated_tau, eps_lb=float(calibrated[0]), eps_lb_mean=float(calibrated.mean()),
        note="not a bound: the target's bound at the tau that brings the label-blind reference to 0 in every "
             "repetition; it would hold only if that tau covered the proxy's error, which nothing checks"))
    logger.info("audit: label-blind reference eps_lb %.3f at tau %.4g (its tau* %.3g); not a bound: the target at "
                "tau %.3g, %.3f", reference_best[0], lead_tau, reference_tau.break_even[0], calibrated_tau,
                calibrated[0])
    return checks


def _grid(canaries: int, section: AuditConfig) -> np.ndarray:
    return audit.sweep_grid(canaries, section)


def _headline(config: Config, bounds: audit_sweep.ScoreBounds, *, design: AuditDesign, canaries: int,
              observational: ObservationalChecks | None, trained: TrainedTarget | None, given: str,
              runs: int = 1) -> Headline:
    """The first repetition's valid (Bonferroni over scores x sweep points) bound of :func:`headline_family`, with
    what it assumes: nothing (injected; observational at the proxy's measured worst-case error, ``proxy_tv``) or
    audit.tau, with tau* and the reference at the same tau (observational), beside the claimed
    privacy of the target the train stage reports (``trained``, its result), or for a target this project did not
    train, ``given`` (its description; "an unknown mechanism" for a canary table of audit.canary_path) at
    audit.claimed_epsilon (NaN when not stated); ``runs`` the training runs pooled into the injected game."""
    family = headline_family(config.audit)
    valid = np.asarray(bounds.best[names.bound_key(family, names.BONFERRONI)], dtype=np.float64)
    mechanism, claimed = (trained.claimed_privacy() if trained is not None
                          else (given or "an unknown mechanism", config.audit.stated_claim))
    reference = observational.reference if observational is not None else None
    measured = observational.proxy_tv if observational is not None else None
    first, mean, std = float(valid[0]), float(valid.mean()), float(valid.std(ddof=1)) if len(valid) > 1 else 0.0
    if measured is not None:
        first, mean, std = measured.eps_lb, measured.eps_lb_mean, measured.eps_lb_std
    return Headline(eps_lb=first, eps_lb_mean=mean, eps_lb_std=std, repetitions=len(valid),
                    confidence=config.audit.confidence, tests=bounds.tests, delta=config.audit.delta,
                    mechanism=mechanism, claimed_epsilon=claimed, family=family,
                    tau=design.tau(config.audit.tau), design=design.name,
                    informative_canaries=design.informative(canaries), canaries=canaries,
                    tau_break_even=observational.tau_break_even.first if observational is not None else math.nan,
                    reference_eps_lb=reference.eps_lb if reference is not None else math.nan,
                    reference_tau_break_even=reference.tau_break_even if reference is not None else math.nan,
                    measured_tau=measured.max if measured is not None else math.nan,
                    training_runs=runs)


AUDIT = Stage(
    name="audit", step="audit", result=AuditResult, compute=_audit, resolved=given_model,
    fields=("run.seed", "audit.*"),
    outputs=lambda config: (layout.output_path(config, layout.AUDIT),),
    inputs=lambda config: audited_target(config).inputs(config))
