"""Spark stage of the observational one-run audit (docs/math.md §5, §6): exact counts for every repetition and c'.

Exact distributed top-c' (lia_spark.audit explains the candidates): each canary row yields two candidates
(label 0, label 1) with keys fixed over repetitions, and repetition r's top c' rows are the first c' active
candidates in the global candidate order (|s| desc, tie hash asc). The stage never sorts per repetition:

1. *Range boundaries* - candidate keys of a hash-selected sample of rows give P - 1 cut keys; any cut keys are
   exact, the sample only balances the range sizes. The sample is about :func:`sample_rows_per_range` rows per
   range (1000 up to 256 ranges, then fewer, at least 64): at most 256,000 rows per score reach the driver up to
   4,000 ranges (1 billion canaries), 64 per range beyond.
2. *Candidates* (mapInPandas, one pass over the canaries) - per batch: the games of all R repetitions (numba
   kernel, :mod:`lia_spark._audit_game`); each shown candidate has a key, a range id and its activity /
   correctness bits packed in ceil(R / 64) words. Each batch emits one row per candidate range: the range's
   candidates as one binary blob (:meth:`lia_spark.audit.Candidates.to_bytes`) and their active / correct
   totals per repetition. Persisted (deterministic: a recomputation gives the same rows); a few large binary
   rows per task keep the JVM's caching and shuffle cost small.
3. *Range totals* (posexplode + groupBy sum of the blobs' totals) - exact active and correct counts per (range,
   repetition). The driver turns them into exclusive prefix offsets; range k holds the global active ranks
   offset[k, r] + 1 .. offset[k, r] + total[k, r] of repetition r.
4. *Cut evaluation* (groupBy(range).applyInPandas over the blobs) - each range sorts its candidates once, and for every
   (r, c') whose cut rank falls inside it reads the correct count at local rank c' - offset[k, r]; adding the
   correct-count offset gives c exactly. One output row per (r, c').

With audit.attack=membership the stage instead counts the membership baseline over the train stage's candidate
table on the driver (:func:`membership_counts`, docs/math.md §5.8). Then the bounds run on the driver
(lia_spark.audit_sweep.evaluate_attacks: the best over the scores of audit.scores x the sweep). Outputs under ``<run.output_dir>/audit``:
``results`` (Parquet) and ``results.csv`` (per repetition and c': c', c, per-point bounds), ``summary.json``
and ``plots/eps_vs_guesses.png``, committed atomically; resumable.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import tempfile
import time
from typing import Any, Iterator

import numpy as np
import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from lia_spark import audit, audit_sweep, hashing, injected, layout, membership, names
from lia_spark.config import AuditConfig, Config
from lia_spark.engine.outputs import copy_from_local, reported_path
from lia_spark.engine.session import default_parallelism, describe_jobs
from lia_spark.engine.stage import FilesResult, Input, Stage, StageRun
from lia_spark.headline import Headline

logger = logging.getLogger(__name__)

CANARY_COLUMNS = ("row_id", "label", "target_prediction", "proxy_prediction")  # every design reads these
REFERENCE_COLUMN = "reference_prediction"  # optional: the observational design's label-blind reference
RANGE_CANDIDATES = 500_000  # target candidates per range (bounds the memory of one applyInPandas call; with
# 64 sampled canaries per range, past 4,000 ranges, the largest of thousands of ranges holds up to ~1.4x this)
SAMPLE_ROWS_PER_RANGE = (64, 1000)  # sampled canaries per candidate range: (fewest, most)
BOUNDARY_SAMPLE_ROWS = 256_000  # sampled canaries per score while the ranges allow it


def sample_rows_per_range(parts: int) -> int:
    """Sampled canaries per candidate range: BOUNDARY_SAMPLE_ROWS / parts within SAMPLE_ROWS_PER_RANGE, so the
    driver's sample stops growing with the canaries (range sizes vary by about 1/sqrt(this) relative s.d.)."""
    fewest, most = SAMPLE_ROWS_PER_RANGE
    return int(min(most, max(fewest, BOUNDARY_SAMPLE_ROWS // max(parts, 1))))
FILES = ("results.csv", "summary.json", "plots/eps_vs_guesses.png")  # beside the results table


def canary_path(config: Config) -> str:
    """The canary table read by the stage: audit.canary_path, else <run.output_dir>/models/canaries."""
    return config.audit.canary_path or layout.canaries_path(config)


def _as_uint64(column: pd.Series) -> np.ndarray:
    return column.to_numpy(dtype=np.int64).view(np.uint64)


def _canary_arrays(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return (frame["row_id"].to_numpy(dtype=np.int64), frame["label"].to_numpy(),
            frame["target_prediction"].to_numpy(dtype=np.float64), frame["proxy_prediction"].to_numpy(dtype=np.float64))


def _game_candidates(frame: pd.DataFrame, *, design: str, seed: int, repetitions: int,
                     attacks: tuple[audit.Attack, ...]) -> dict[str, audit.Candidates]:
    """The candidates of one batch of canaries under ``design``: the observational games of every repetition
    (:func:`lia_spark.audit.attack_candidates`) or the injected game (:func:`lia_spark.injected.attack_candidates`)."""
    row_ids, label, target, proxy = _canary_arrays(frame)
    if design == names.INJECTED:
        return injected.attack_candidates(row_ids, label, frame["counterfactual_label"].to_numpy(),
                                          frame["hidden_bit"].to_numpy(), target, proxy, seed=seed, attacks=attacks)
    return audit.attack_candidates(row_ids, label, target, proxy, seed=seed, repetitions=repetitions, attacks=attacks)


def _candidate_keys(frame: pd.DataFrame, attack: audit.Attack, *, design: str, seed: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(|s|, tie hash) of every candidate a batch may show under ``design``: one per informative canary (injected),
    two per canary (observational: label 0 and label 1)."""
    row_ids, label, target, proxy = _canary_arrays(frame)
    if design == names.INJECTED:
        return (np.abs(injected.injected_scores(target, proxy, label, attack=attack)),
                audit.tie_hashes(row_ids, seed=seed))
    scores = audit.candidate_scores(target, proxy, score=attack.score, t=attack.t)
    return np.abs(scores), audit.candidate_ties_labels(row_ids, seed=seed)[0]


def select_canaries(df: DataFrame, *, seed: int, canaries: int, design: str = names.OBSERVATIONAL,
                    target: str = "target_prediction") -> DataFrame:
    """The canary columns of ``design`` (the prediction column ``target`` read as the target's); with ``canaries``
    > 0 only the rows with the smallest hash of (seed, row_id); under the injected design then only the informative
    canaries (y1 != y0: the others abstain).

    Raises:
        ValueError: if a column of the design is missing, or the injected columns hold no value.
    """
    needed = (*CANARY_COLUMNS, *(injected.CANARY_COLUMNS if design == names.INJECTED else ()), target)
    missing = [c for c in dict.fromkeys(needed) if c not in df.columns]
    if missing:
        hint = (f"; audit.design={names.INJECTED} needs a target trained by this project's train stage with "
                f"audit.design={names.INJECTED} (or a table with those columns); audit a given model with "
                f"audit.design={names.OBSERVATIONAL}" if set(missing) & set(injected.CANARY_COLUMNS) else "")
        raise ValueError(f"canary table: missing columns {missing}, got columns={df.columns}{hint}")
    injected_fields = [F.col(c).cast("int") for c in injected.CANARY_COLUMNS] if design == names.INJECTED else []
    df = df.select(F.col("row_id").cast("long"), F.col("label").cast("int"),
                   F.col(target).cast("double").alias("target_prediction"), F.col("proxy_prediction").cast("double"),
                   *injected_fields)
    if design == names.INJECTED:
        df = df.where(F.col("counterfactual_label").isNotNull() & F.col("hidden_bit").isNotNull())
    if canaries > 0:
        df = _smallest_hashes(df, seed=seed, canaries=canaries)
    return df.where(F.col("label") != F.col("counterfactual_label")) if design == names.INJECTED else df


def _smallest_hashes(df: DataFrame, *, seed: int, canaries: int) -> DataFrame:
    """The ``canaries`` rows of ``df`` with the smallest hash of (seed, row_id), spread over the session's cores."""

    def keyed(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in batches:
            key = hashing.hash_bits(seed, audit.CANARY_PURPOSE, frame["row_id"].to_numpy(dtype=np.int64))
            # order-preserving map of uint64 onto signed longs (Spark sorts longs signed)
            yield frame.assign(_key=(key ^ np.uint64(1 << 63)).view(np.int64))

    schema = StructType(df.schema.fields + [StructField("_key", LongType())])
    chosen = df.mapInPandas(keyed, schema).orderBy("_key").limit(canaries).drop("_key")
    # the top-k arrives as one partition; spread it again (the counts do not depend on the partitioning)
    return chosen.repartition(2 * default_parallelism(df.sparkSession))


@dataclasses.dataclass(frozen=True)
class CandidateRanges:
    """The candidate ranges of every attack, numbered globally: attack a owns ranges first[a] .. first[a + 1] - 1.

    Attributes:
        attacks: the attacks, in the order of ``audit.scores``.
        boundary_abs, boundary_tie: per attack, the cut keys of :func:`lia_spark.audit.range_boundaries`.
        first: (A + 1,) global id of each attack's first range; first[A] = the number of ranges.
    """

    attacks: tuple[audit.Attack, ...]
    boundary_abs: tuple[np.ndarray, ...]
    boundary_tie: tuple[np.ndarray, ...]
    first: np.ndarray

    @classmethod
    def cut(cls, attacks: tuple[audit.Attack, ...], keys: pd.DataFrame, *, parts: int) -> "CandidateRanges":
        """Ranges from a sample of candidate keys (columns attack, abs_score, tie) with about ``parts`` per attack."""
        cuts = [audit.range_boundaries(keys["abs_score"].to_numpy(dtype=np.float64)[rows],
                                       _as_uint64(keys["tie"])[rows], parts=parts)
                for rows in (keys["attack"].to_numpy() == index for index in range(len(attacks)))]
        sizes = [len(boundary_abs) + 1 for boundary_abs, _ in cuts]
        return cls(attacks=attacks, boundary_abs=tuple(c[0] for c in cuts), boundary_tie=tuple(c[1] for c in cuts),
                   first=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))

    @property
    def count(self) -> int:
        """Number of ranges over all attacks."""
        return int(self.first[-1])

    def attack_of(self) -> np.ndarray:
        """(count,) index of the attack owning each range."""
        return np.repeat(np.arange(len(self.attacks)), np.diff(self.first))

    def exclusive_offsets(self, totals: np.ndarray) -> np.ndarray:
        """Per (range, repetition): the sum of ``totals`` over the ranges before it of the same attack."""
        offsets = np.cumsum(totals, axis=0) - totals
        return offsets - offsets[self.first[self.attack_of()]]


def _sample_keys(df: DataFrame, *, attacks: tuple[audit.Attack, ...], seed: int, fraction: float,
                 design: str) -> pd.DataFrame:
    """Candidate keys (attack index, |s|, tie) of the rows whose tie hash falls below ``fraction`` of its range."""
    threshold = np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))

    def sample(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in batches:
            kept = frame.loc[audit.tie_hashes(frame["row_id"].to_numpy(dtype=np.int64), seed=seed) < threshold]
            for index, attack in enumerate(attacks):
                abs_score, tie = _candidate_keys(kept, attack, design=design, seed=seed)
                yield pd.DataFrame({"attack": np.full(len(abs_score), index, dtype=np.int32),
                                    "abs_score": abs_score, "tie": tie.view(np.int64)})

    return df.mapInPandas(sample, "attack int, abs_score double, tie bigint").toPandas()


CANDIDATE_SCHEMA = "range int, active_total array<bigint>, correct_total array<bigint>, candidates binary"


def _candidate_blobs(batches: Iterator[pd.DataFrame], *, repetitions: int, seed: int, ranges: CandidateRanges,
                     design: str) -> Iterator[pd.DataFrame]:
    """Per batch and candidate range: the range's candidates as one blob and their totals per repetition (the
    games are played once per batch and shared by every attack)."""
    for frame in batches:
        found_by_attack = _game_candidates(frame, design=design, seed=seed, repetitions=repetitions,
                                           attacks=ranges.attacks)
        rows = []
        for index, found in enumerate(found_by_attack.values()):
            range_of = ranges.first[index] + audit.range_ids(found.abs_score, found.tie, ranges.boundary_abs[index],
                                                             ranges.boundary_tie[index])
            order = np.argsort(range_of, kind="stable")
            present, starts = np.unique(range_of[order], return_index=True)
            for range_id, chunk in zip(present, np.split(order, starts[1:])):
                part = found.subset(chunk)
                rows.append((int(range_id), audit.bit_totals(part.active, repetitions=repetitions),
                             audit.bit_totals(part.correct, repetitions=repetitions), part.to_bytes()))
        yield pd.DataFrame(rows, columns=["range", "active_total", "correct_total", "candidates"])


def _evaluate_range(blobs: pd.DataFrame, *, repetitions: int, guesses: np.ndarray, active_offset: np.ndarray,
                    correct_offset: np.ndarray) -> pd.DataFrame:
    range_id = int(blobs["range"].iloc[0])
    found = audit.Candidates.concatenate([audit.Candidates.from_bytes(blob, repetitions=repetitions)
                                          for blob in blobs["candidates"]])
    order = audit.candidate_order(found.abs_score, found.tie, found.label)
    local_ranks = guesses[None, :] - active_offset[range_id][:, None]
    local = audit.correct_at_ranks(found.active[order], found.correct[order], local_ranks, repetitions=repetitions)
    repetition, index = np.nonzero(local >= 0)
    return pd.DataFrame({"range": np.full(len(repetition), range_id, dtype=np.int32),
                         "repetition": repetition.astype(np.int32), "guess_index": index.astype(np.int32),
                         "correct": local[repetition, index] + correct_offset[range_id, repetition]})


def _range_totals(candidates: DataFrame, *, parts: int, repetitions: int) -> tuple[np.ndarray, np.ndarray]:
    """(active, correct) totals per (range, repetition), summed by Spark over the candidate blobs."""
    exploded = candidates.select("range", F.posexplode(F.arrays_zip("active_total", "correct_total")))
    totals = (exploded.groupBy("range", F.col("pos").alias("repetition"))
              .agg(F.sum("col.active_total").alias("active"), F.sum("col.correct_total").alias("correct"))
              .toPandas())
    active = np.zeros((parts, repetitions), dtype=np.int64)
    correct = np.zeros((parts, repetitions), dtype=np.int64)
    ranges, reps = totals["range"].to_numpy(), totals["repetition"].to_numpy()
    active[ranges, reps] = totals["active"].to_numpy()
    correct[ranges, reps] = totals["correct"].to_numpy()
    return active, correct


def distributed_counts(df: DataFrame, *, settings: AuditConfig, seed: int, guesses: np.ndarray | None = None,
                       design: str = names.OBSERVATIONAL) -> tuple[int, np.ndarray, dict[str, np.ndarray]]:
    """Exact c for every attack, repetition and c' of the sweep over a canary DataFrame (module docstring, steps
    1-4). Every attack of ``settings.scores`` is counted on the same games, in the same passes over the canaries.

    Args:
        df: canary rows (see :func:`select_canaries`); row ids must be distinct (they key the draws and ties).
        settings: the audit section (repetitions, attacks, sweep).
        seed: the run seed.
        guesses: guess counts to evaluate; default the sweep of ``settings``.
        design: observational (settings.repetitions games drawn by the audit) or injected (the one game drawn
            before training: R = 1, the rows of ``df`` are the informative canaries).

    Returns:
        (m, guesses (k,), attack name -> correct (R, k) int64), the attacks in the order of ``settings.scores``.

    Raises:
        ValueError: if the table is empty.
    """
    spark = df.sparkSession
    repetitions = 1 if design == names.INJECTED else settings.repetitions
    describe_jobs(spark, "audit: count canaries")
    m = df.count()
    if m == 0:
        raise ValueError("canary table: must hold at least one row, got 0 rows" if design == names.OBSERVATIONAL else
                         "canary table: no informative canary (counterfactual_label set and != label): either the "
                         "target was trained without injected labels (train it with audit.design=injected, or audit "
                         "it with audit.design=observational) or the canaries are too few (use more, or "
                         "audit.counterfactual=flip)")
    if guesses is None:
        guesses = audit.guess_grid(m, step_percent=settings.sweep_step_percent, extra_share=settings.extra_guess_share)
    guesses = np.asarray(guesses, dtype=np.int64)
    attacks = audit.resolve_attacks(settings.scores)
    parts = max(4 * default_parallelism(spark), -(-2 * m // RANGE_CANDIDATES))
    describe_jobs(spark, "audit: sample candidate keys for range boundaries")
    keys = _sample_keys(df, attacks=attacks, seed=seed, fraction=min(1.0, sample_rows_per_range(parts) * parts / m),
                        design=design)
    ranges = CandidateRanges.cut(attacks, keys, parts=parts)
    logger.info("audit: %d canaries, %d repetitions, %d guess counts, %d attack(s), %d candidate ranges", m,
                repetitions, len(guesses), len(attacks), ranges.count)

    def candidate_batches(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        return _candidate_blobs(batches, repetitions=repetitions, seed=seed, ranges=ranges, design=design)

    # a few large binary rows per task: cheap to cache and to shuffle (no per-candidate rows in the JVM)
    candidates = df.mapInPandas(candidate_batches, CANDIDATE_SCHEMA).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        describe_jobs(spark, f"audit: play {repetitions} games, totals per candidate range")
        active_total, correct_total = _range_totals(candidates, parts=ranges.count, repetitions=repetitions)
        active_offset = ranges.exclusive_offsets(active_total)
        correct_offset = ranges.exclusive_offsets(correct_total)

        def evaluate(blobs: pd.DataFrame) -> pd.DataFrame:
            return _evaluate_range(blobs, repetitions=repetitions, guesses=guesses, active_offset=active_offset,
                                   correct_offset=correct_offset)

        describe_jobs(spark, "audit: sort each candidate range once, exact counts at the cut ranks")
        cuts = (candidates.select("range", "candidates").groupBy("range")
                .applyInPandas(evaluate, "range int, repetition int, guess_index int, correct long").toPandas())
    finally:
        candidates.unpersist()
    correct = np.full((len(attacks), repetitions, len(guesses)), -1, dtype=np.int64)
    attack_index = ranges.attack_of()[cuts["range"].to_numpy()]
    correct[attack_index, cuts["repetition"].to_numpy(), cuts["guess_index"].to_numpy()] = cuts["correct"].to_numpy()
    if len(cuts) != correct.size or (correct < 0).any():
        raise ValueError(f"audit: expected one count per (attack, repetition, c') = {correct.size}, got {len(cuts)}")
    return m, guesses, {attack.name: counts for attack, counts in zip(attacks, correct)}


def results_frame(bounds: audit_sweep.AttackBounds) -> pd.DataFrame:
    """Long table: one row per (attack, repetition, c') with c, c/c' and the per-point bounds (each point at the
    per-test confidence of the audit: the split over attacks x sweep points for "bonferroni")."""
    frames = []
    for attack, sweep in bounds.per_attack.items():
        repetitions, points = sweep.correct.shape
        frame = pd.DataFrame({
            "score": attack,
            "repetition": np.repeat(np.arange(repetitions, dtype=np.int32), points),
            "guesses": np.tile(sweep.guesses, repetitions),
            "correct": sweep.correct.ravel(),
        })
        frame["accuracy"] = frame["correct"] / frame["guesses"]
        for key, values in sweep.per_guess.items():
            frame[key] = values.ravel()
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def plot_sweep(frame: pd.DataFrame, *, path: str, title: str, confidence: float, deltas: dict[str, float]) -> str:
    """PNG (the local file ``path``) of the mean (+- std band over repetitions) per-point epsilon lower bound
    against c', one line per attack and bound; each line names its family, convention, confidence and delta
    (``deltas``: family -> delta), the bands are labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = [c for c in frame.columns if c.startswith("eps_")]
    figure, axis = plt.subplots(figsize=(6.4, 4.0))
    several = frame["score"].nunique() > 1
    band_label = f"bands: +-1 std over {frame['repetition'].nunique()} repetitions"
    for attack, rows in frame.groupby("score", sort=False):
        stats = rows.groupby("guesses")[columns].agg(["mean", "std"])
        for column in columns:
            family, convention = column[len("eps_"):].rsplit("_", 1)
            mean, std = stats[(column, "mean")], stats[(column, "std")].fillna(0.0)
            valid = "" if convention == names.BONFERRONI else ", not a valid bound"
            label = f"{family}, {convention}{valid} ({confidence:.0%}, delta = {deltas.get(family, math.nan):g})"
            axis.plot(stats.index, mean, label=f"{attack}: {label}" if several else label)
            axis.fill_between(stats.index, mean - std, mean + std, alpha=0.2, label=band_label)
            band_label = None
    axis.set_xscale("log")
    axis.set_xlabel("number of guesses c'")
    axis.set_ylabel("epsilon lower bound")
    axis.set_title(title)
    axis.legend(fontsize=8)
    figure.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


@dataclasses.dataclass(frozen=True)
class AuditResult(FilesResult):
    """Outcome of the audit stage: sizes, the summary of best bounds per repetition and output files."""

    output_path: str
    canaries: int
    repetitions: int
    guess_counts: int
    convention: str
    summary: dict[str, Any]
    files: tuple[str, ...]
    seconds: float
    skipped: bool = False

    def metrics(self) -> dict[str, float]:
        """The headline's ``eps_lb`` (and ``claimed_eps``), ``audit_<bound>_<convention>_mean/std`` for each best
    bound ("paper": the paper's convention, not a valid bound), and ``audit_eps_<family>``: the valid
    (Bonferroni) mean."""
        metrics = {"audit_canaries": float(self.canaries), "audit_repetitions": float(self.repetitions),
                   "audit_seconds": self.seconds, **self.headline.metrics()}
        for key, stats in self.summary["best"].items():
            metrics[f"audit_{key}_mean"] = stats["mean"]
            metrics[f"audit_{key}_std"] = stats["std"]
            if key.startswith("eps_") and key.endswith(f"_{names.BONFERRONI}"):
                metrics[f"audit_{key.removesuffix(f'_{names.BONFERRONI}')}"] = stats["mean"]
        return {key: value for key, value in metrics.items() if math.isfinite(value)}

    @property
    def headline(self) -> Headline:
        """The valid bound beside the claimed epsilon (:class:`lia_spark.headline.Headline`)."""
        return Headline.from_dict(self.summary["headline"])

    def console_summary(self) -> str:
        """The headline line, printed last by the job."""
        return f"audit: {self.headline.text()}"

    def artifacts(self) -> list[str]:
        """results.csv, summary.json and the plot (URIs when the output folder is remote: see
        :func:`lia_spark.engine.outputs.local_copies`)."""
        return list(self.files)


def label_inference_counts(spark: SparkSession, config: Config, canaries: DataFrame | None, *,
                           target: str = "target_prediction") -> tuple[int, np.ndarray, dict[str, np.ndarray]]:
    """(m, guesses, score name -> correct (R, k)) of the label-inference audit of audit.design over the canary table
    (``canaries`` or :func:`canary_path`, optionally sampled to audit.canaries rows), scoring the prediction column
    ``target`` (the target's, or the label-blind reference's); injected: m = the informative canaries, R = 1."""
    if canaries is None:
        describe_jobs(spark, "audit: read canaries")
        canaries = spark.read.parquet(canary_path(config))
    df = select_canaries(canaries, seed=config.run.seed, canaries=config.audit.canaries, design=config.audit.design,
                         target=target)
    if config.audit.canaries > 0:
        df = df.persist(StorageLevel.MEMORY_AND_DISK)  # the sample's top-k selection is a full scan: run it once
    try:
        return distributed_counts(df, settings=config.audit, seed=config.run.seed, design=config.audit.design)
    finally:
        df.unpersist()


def reference_counts(spark: SparkSession, config: Config, canaries: DataFrame | None
                     ) -> tuple[int, np.ndarray, dict[str, np.ndarray]] | None:
    """The observational counts of the label-blind reference (the canary table's reference_prediction, same games
    as the target's), or None when the table has no reference (a given model without one, the injected design)."""
    if config.audit.design != names.OBSERVATIONAL:
        return None
    table = canaries if canaries is not None else spark.read.parquet(canary_path(config))
    if REFERENCE_COLUMN not in table.columns or table.where(F.col(REFERENCE_COLUMN).isNotNull()).limit(1).count() == 0:
        logger.info("audit: the canary table has no %s: no label-blind reference audited", REFERENCE_COLUMN)
        return None
    return label_inference_counts(spark, config, table.where(F.col(REFERENCE_COLUMN).isNotNull()),
                                  target=REFERENCE_COLUMN)


def membership_counts(spark: SparkSession, config: Config) -> tuple[int, np.ndarray, dict[str, np.ndarray]]:
    """(2m, guesses, {"membership": correct (1, k)}) of the membership baseline (docs/math.md §5.8) over the train
    stage's candidate table (2m rows, collected to the driver: audit.membership_candidates bounds it)."""
    describe_jobs(spark, "audit: read membership candidates")
    frame = spark.read.parquet(layout.membership_path(config)).toPandas()
    if frame.empty:
        raise ValueError(f"membership candidates: {layout.membership_path(config)} holds no row; train with "
                         f"audit.attack={names.MEMBERSHIP}")
    guesses, correct = membership.sweep_counts(
        frame["row_id"].to_numpy(np.int64), frame["label"].to_numpy(), frame["member"].to_numpy(np.int8),
        frame["target_prediction"].to_numpy(np.float64), frame["proxy_prediction"].to_numpy(np.float64),
        seed=config.run.seed, step_percent=config.audit.sweep_step_percent, extra_share=config.audit.extra_guess_share)
    return len(frame), guesses, {names.MEMBERSHIP: correct}


def audited_path(config: Config) -> str:
    """The table the audit reads: the membership candidates with audit.attack=membership, else the canaries."""
    return layout.membership_path(config) if config.audit.attack == names.MEMBERSHIP else canary_path(config)


def _audit(run: StageRun) -> AuditResult:
    """Audit the canary table (option ``canaries``, a frame, or :func:`canary_path`), or with
    audit.attack=membership the train stage's membership candidates, and write ``<run.output_dir>/audit``."""
    spark, config, started = run.spark, run.config, run.started
    settings, canaries = config.audit, run.options.get("canaries")
    output_path = reported_path(layout.output_path(config, layout.AUDIT))
    if settings.attack == names.MEMBERSHIP:
        if canaries is not None:
            raise ValueError(f"audit.attack={names.MEMBERSHIP} audits the train stage's candidates, not a canary "
                             "table; got a canaries frame")
        m, guesses, correct = membership_counts(spark, config)
    else:
        m, guesses, correct = label_inference_counts(spark, config, canaries)
    design = settings.game
    tau = settings.tau if design == names.OBSERVATIONAL else 0.0  # injected coins assume nothing of the proxy
    repetitions = next(iter(correct.values())).shape[0]
    counted = time.monotonic()
    bounds = audit_sweep.evaluate_attacks(correct, guesses, canaries=m, confidence=settings.confidence,
                                          delta=settings.delta, tau=tau, families=settings.bounds,
                                          table_families=settings.table_bounds)
    logger.info("audit: counts in %.1f s, bounds in %.1f s", counted - started, time.monotonic() - counted)
    summary = {
        "attack": settings.attack, "design": design, "canaries": m, "repetitions": repetitions,
        "guesses": guesses.tolist(), "confidence": settings.confidence, "delta": settings.delta, "tau": tau,
        "gdp_delta": bounds.gdp_delta, "gdp_tau_vacuous": bounds.gdp_tau_vacuous, "scores": list(bounds.attacks),
        "tests": bounds.tests, "default_convention": settings.convention,
        "best": audit_sweep.summarize(bounds.best),
        "best_guesses_median": {key: float(np.median(v)) for key, v in bounds.best_guesses.items()},
        "best_score_share": {key: {attack: float(np.mean(winners == attack)) for attack in bounds.attacks}
                              for key, winners in bounds.best_attacks.items()},
        "per_score": {attack: audit_sweep.summarize(sweep.best) for attack, sweep in bounds.per_attack.items()},
    }
    observational = (_observational_checks(spark, config, canaries, bounds, correct, guesses, m)
                     if design == names.OBSERVATIONAL else {})
    summary.update(observational)
    summary["headline"] = _headline(config, bounds, design=design, canaries=m, observational=observational,
                                    trained=run.upstream("canaries")).to_dict()
    if bounds.gdp_tau_vacuous and names.GDP in settings.bounds:
        logger.warning("audit: tau=%g >= c'/m at every sweep point: the f-DP (gdp) tau bound is vacuous", settings.tau)
    frame = results_frame(bounds)
    with tempfile.TemporaryDirectory(prefix="lia-audit-") as local:
        describe_jobs(spark, "audit: write results")
        spark.createDataFrame(frame).coalesce(1).write.parquet(run.under("results"))
        frame.to_csv(os.path.join(local, FILES[0]), index=False)
        with open(os.path.join(local, FILES[1]), "w", encoding="utf-8") as handle:
            json.dump(summary, handle, indent=2, sort_keys=True)
        plot_sweep(frame, path=os.path.join(local, FILES[2]),
                   title=f"{settings.attack} audit: {m} canaries, {repetitions} repetitions",
                   confidence=settings.confidence, deltas={names.BINOMIAL: settings.delta, names.GDP: bounds.gdp_delta})
        for name in FILES:  # written locally, copied to the output folder on any Hadoop file system
            copy_from_local(spark, os.path.join(local, name), run.under(name))
    files = tuple(os.path.join(output_path, name) for name in FILES)
    result = AuditResult(output_path=output_path, canaries=m, repetitions=repetitions, guess_counts=len(guesses),
                         convention=settings.convention, summary=summary, files=files,
                         seconds=time.monotonic() - started)
    logger.info("audit: done in %.1f s; paper convention, not a valid bound (mean best per repetition): %s",
                result.seconds, {k: round(v["mean"], 4) for k, v in summary["best"].items() if k.endswith(names.PAPER)})
    log = logger.warning if result.headline.is_finding else logger.info
    log("audit: %s", result.headline.text())
    return result


def headline_family(settings: AuditConfig) -> str:
    """The bound family of the headline, fixed by the config before any data is seen (so it stays a valid 95%
    bound): binomial at delta = 0; GDP when delta > 0 (its delta enters through eps(mu, delta), while the
    binomial bound's delta term grows with the number of canaries m and is vacuous once m * delta is large);
    the computed family when only one is."""
    if names.GDP in settings.bounds and (settings.delta > 0 or names.BINOMIAL not in settings.bounds):
        return names.GDP
    return names.BINOMIAL


def _observational_checks(spark: SparkSession, config: Config, canaries: DataFrame | None,
                          bounds: audit_sweep.AttackBounds, correct: dict[str, np.ndarray], guesses: np.ndarray,
                          m: int) -> dict[str, Any]:
    """What the observational bound rests on (docs/math.md §5.10): ``tau_break_even`` (tau* per repetition, first
    and mean), ``eps_lb_by_tau`` (the first repetition's valid bound at the taus of
    :data:`lia_spark.audit_sweep.TAU_GRID`), ``reference`` (the label-blind reference's valid bound and tau*, null
    without one) and ``calibrated`` (the target's valid bound at the reference's largest tau*)."""
    settings = config.audit
    family = headline_family(settings)
    level = audit_sweep.attack_confidence(settings.confidence, convention=names.BONFERRONI, attacks=len(correct),
                                          points=len(guesses))

    def sensitivity(counts: dict[str, np.ndarray], size: int) -> audit_sweep.TauSensitivity:
        return audit_sweep.tau_sensitivity(counts, guesses if size == m else _grid(size, settings), canaries=size,
                                           level=level, delta=settings.delta, family=family)

    own = sensitivity(correct, m)
    checks: dict[str, Any] = {
        "tau_break_even": {"first": float(own.break_even[0]), "mean": float(own.break_even.mean()),
                           "repetitions": len(own.break_even)},
        "eps_lb_by_tau": {f"{tau:g}": float(eps) for tau, eps in zip(own.taus, own.eps_lb)},
        "reference": None, "calibrated": None}
    found = reference_counts(spark, config, canaries)
    if found is None:
        return checks
    size, _, reference = found
    valid = names.bound_key(family, names.BONFERRONI)
    reference_best = audit_sweep.evaluate_attacks(reference, _grid(size, settings), canaries=size,
                                                  confidence=settings.confidence, delta=settings.delta, tau=0.0,
                                                  families=(family,)).best[valid]
    reference_tau = sensitivity(reference, size)
    calibrated_tau = float(reference_tau.break_even.max())
    calibrated = audit_sweep.evaluate_attacks(correct, guesses, canaries=m, confidence=settings.confidence,
                                              delta=settings.delta, tau=calibrated_tau, families=(family,)).best[valid]
    checks["reference"] = {"eps_lb": float(reference_best[0]), **audit_sweep.summarize({"eps_lb": reference_best})[
        "eps_lb"], "tau_break_even": float(reference_tau.break_even[0]), "canaries": size}
    checks["calibrated"] = {"tau": calibrated_tau, "eps_lb": float(calibrated[0]),
                            "eps_lb_mean": float(calibrated.mean()),
                            "note": "the target's bound at the tau that brings the label-blind reference to 0: "
                                    "valid only if that reference's tau* covers the proxy's error"}
    logger.info("audit: label-blind reference eps_lb %.3f (tau* %.3g); calibrated target bound %.3f at tau %.3g",
                reference_best[0], reference_tau.break_even[0], calibrated[0], calibrated_tau)
    return checks


def _grid(canaries: int, settings: AuditConfig) -> np.ndarray:
    return audit.guess_grid(canaries, step_percent=settings.sweep_step_percent, extra_share=settings.extra_guess_share)


def _headline(config: Config, bounds: audit_sweep.AttackBounds, *, design: str, canaries: int,
              observational: dict[str, Any], trained: Any) -> Headline:
    """The first repetition's valid (Bonferroni over attacks x sweep points) bound of :func:`headline_family`, with
    what it assumes: nothing (injected) or tau, tau* and the reference (observational), beside the claimed privacy
    of the target the train stage reports (``trained``, its result; None for a canary table of audit.canary_path:
    "an unknown mechanism", NaN)."""
    family = headline_family(config.audit)
    tests = bounds.tests
    valid = np.asarray(bounds.best[names.bound_key(family, names.BONFERRONI)], dtype=np.float64)
    mechanism, claimed = trained.claimed_privacy() if trained is not None else ("an unknown mechanism", math.nan)
    reference, calibrated = observational.get("reference") or {}, observational.get("calibrated") or {}
    return Headline(eps_lb=float(valid[0]), eps_lb_mean=float(valid.mean()),
                    eps_lb_std=float(valid.std(ddof=1)) if len(valid) > 1 else 0.0, repetitions=len(valid),
                    confidence=config.audit.confidence, tests=tests, delta=config.audit.delta, mechanism=mechanism,
                    claimed_epsilon=claimed, family=family, tau=config.audit.tau if design == names.OBSERVATIONAL
                    else 0.0, design=design, informative_canaries=canaries if design == names.INJECTED else 0,
                    tau_break_even=observational.get("tau_break_even", {}).get("first", math.nan),
                    reference_eps_lb=reference.get("eps_lb", math.nan), calibrated_tau=calibrated.get("tau", math.nan),
                    calibrated_eps_lb=calibrated.get("eps_lb", math.nan))


AUDIT = Stage(
    name="audit", step="audit", result=AuditResult, compute=_audit, recomputed_with=("canaries",),
    fields=("run.seed", "audit.*"),
    outputs=lambda config: (layout.output_path(config, layout.AUDIT),),
    inputs=lambda config: (Input("canaries", audited_path, "audit.canary_path",
                                 lambda c: "" if c.audit.canary_path else "train"),))
