"""Exact distributed counts of the one-run audit's games (docs/math.md §5.1-§5.3) for every repetition and c'.

Exact distributed top-c' (lia_spark.kernels.audit explains the candidates): each canary row yields two candidates
(label 0, label 1) with keys fixed over repetitions, and repetition r's top c' rows are the first c' active
candidates in the global candidate order (|s| desc, tie hash asc). The stage never sorts per repetition:

1. *Range boundaries* - candidate keys of a hash-selected sample of rows give P - 1 cut keys; any cut keys are
   exact, the sample only balances the range sizes. The sample is about :func:`sample_rows_per_range` rows per
   range (1000 up to 256 ranges, then fewer, at least 64): at most 256,000 rows per score reach the driver up to
   4,000 ranges (1 billion canaries), 64 per range beyond.
2. *Candidates* (mapInPandas, one pass over the canaries) - per batch: the games of all R repetitions (numba
   kernel, :mod:`lia_spark.kernels._audit_game`); each shown candidate has a key, a range id and its activity /
   correctness bits packed in ceil(R / 64) words. Each batch emits one row per candidate range: the range's
   candidates as one binary blob (:meth:`lia_spark.kernels.audit.Candidates.to_bytes`) and their active / correct
   totals per repetition. Persisted (deterministic: a recomputation gives the same rows); a few large binary
   rows per task keep the JVM's caching and shuffle cost small.
3. *Range totals* (posexplode + groupBy sum of the blobs' totals) - exact active and correct counts per (range,
   repetition). The driver turns them into exclusive prefix offsets; range k holds the global active ranks
   offset[k, r] + 1 .. offset[k, r] + total[k, r] of repetition r.
4. *Cut evaluation* (groupBy(range).applyInPandas over the blobs) - each range sorts its candidates once, and for every
   (r, c') whose cut rank falls inside it reads the correct count at local rank c' - offset[k, r]; adding the
   correct-count offset gives c exactly. One output row per (r, c').
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Iterator

import numpy as np
import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from lia_spark import names
from lia_spark.engine.spark.session import aggregate_row, default_parallelism, describe_jobs
from lia_spark.kernels import audit, canary_scores, hashing, injected, recalibration
from lia_spark.kernels.audit_designs import OBSERVATIONAL_DESIGN, AuditDesign
from lia_spark.names import (AUDITED_COLUMNS, COUNTERFACTUAL_LABEL, HIDDEN_BIT, LABEL, PROXY_PREDICTION, ROW_ID,
                             RUN_COLUMNS, RUN_HIDDEN_BITS, RUN_TARGET_PREDICTIONS, SHADOW_PREDICTION, TARGET_PREDICTION)
from lia_spark.run.model_sections import AuditConfig

logger = logging.getLogger(__name__)

RANGE_CANDIDATES = 500_000  # target candidates per range (bounds the memory of one applyInPandas call; with

# 64 sampled canaries per range, past 4,000 ranges, the largest of thousands of ranges holds up to ~1.4x this)
SAMPLE_ROWS_PER_RANGE = (64, 1000)  # sampled canaries per candidate range: (fewest, most)

BOUNDARY_SAMPLE_ROWS = 256_000  # sampled canaries per score while the ranges allow it

def sample_rows_per_range(parts: int) -> int:
    """Sampled canaries per candidate range: BOUNDARY_SAMPLE_ROWS / parts within SAMPLE_ROWS_PER_RANGE, so the
    driver's sample stops growing with the canaries (range sizes vary by about 1/sqrt(this) relative s.d.)."""
    fewest, most = SAMPLE_ROWS_PER_RANGE
    return int(min(most, max(fewest, BOUNDARY_SAMPLE_ROWS // max(parts, 1))))


def _as_uint64(column: pd.Series) -> np.ndarray:
    return column.to_numpy(dtype=np.int64).view(np.uint64)


def resolve_baselines(df: DataFrame, *, section: AuditConfig) -> tuple[str, ...]:
    """The prediction columns the scores compare the target's with (docs/math.md §5.13, ``section.baseline_columns``):
    under the injected design with audit.baseline auto the shadows' (``shadow_prediction``) where the train stage
    fitted them, else the proxy's; with ``both`` each of them (the confidence split over both); with ``shadows`` or
    ``proxy`` that one; under the other designs the proxy's.

    Raises:
        ValueError: naming audit.baseline when it asks for shadows and the table has none, or under the
            observational design.
    """
    has_shadows = (SHADOW_PREDICTION in df.columns
                   and df.where(F.col(SHADOW_PREDICTION).isNotNull()).limit(1).count() > 0)
    refits = section.audit_design.refits_target
    if section.baseline == names.BASELINE_SHADOWS and (not refits or not has_shadows):
        raise ValueError(f"audit.baseline: shadows needs a canary table with {SHADOW_PREDICTION} under "
                         f"audit.design={names.INJECTED} (the train stage fits audit.shadows shadows on the in-memory "
                         f"path, every mechanism but pate), got audit.design={section.design} and "
                         f"{'no' if not has_shadows else 'a'} {SHADOW_PREDICTION}; use audit.baseline=auto or proxy")
    if not refits:
        return (PROXY_PREDICTION,)
    return section.baseline_columns((PROXY_PREDICTION, *((SHADOW_PREDICTION,) if has_shadows else ())))


def pooled_runs(df: DataFrame) -> tuple[DataFrame, int]:
    """The canary table with the extra training runs' (canary, run) pairs appended as canaries of their own
    (audit.runs, docs/math.md §5.14): run r's pair keeps the canary's y0, y1 and baselines and takes the run's coin
    and prediction (``run_hidden_bits[r-1]``, ``run_target_predictions[r-1]``; its released label and reference
    are run 0's, so null), keyed r << 48 | row_id (:func:`lia_spark.kernels.injected.pooled_keys`); and the number
    of runs R (1 and ``df`` without the run columns when it holds no extra runs).

    Raises:
        ValueError: naming the canary table when the run lists differ in length or a row id is out of range
            (:func:`lia_spark.kernels.injected.pooling_problem`).
    """
    if RUN_TARGET_PREDICTIONS not in df.columns:
        return df, 1
    with_runs = df.where(F.col(RUN_TARGET_PREDICTIONS).isNotNull())
    sizes = [F.size(RUN_TARGET_PREDICTIONS), F.coalesce(F.size(RUN_HIDDEN_BITS), F.lit(-1))]
    found = aggregate_row(with_runs, F.least(*(F.min(size) for size in sizes)).alias("shortest"),
                          F.greatest(*(F.max(size) for size in sizes)).alias("longest"),
                          F.min(ROW_ID).alias("lowest"), F.max(ROW_ID).alias("highest"))
    base = df.drop(*RUN_COLUMNS)
    if found["longest"] is None or found["longest"] < 1:
        return base, 1
    problem = injected.pooling_problem(shortest=found["shortest"], longest=found["longest"],
                                       lowest_row_id=found["lowest"], highest_row_id=found["highest"])
    if problem is not None:
        raise ValueError(f"canary table: {problem}")
    run_only = [column for column in (names.RELEASED_LABEL, names.REFERENCE_PREDICTION) if column in base.columns]
    kept = [column for column in base.columns if column not in (ROW_ID, HIDDEN_BIT, TARGET_PREDICTION, *run_only)]
    types = dict(base.dtypes)
    runs = (with_runs
            .select(ROW_ID, *kept, F.posexplode(F.arrays_zip(RUN_HIDDEN_BITS, RUN_TARGET_PREDICTIONS)).alias(
                "run", "drawn"))
            .select(F.col(ROW_ID).bitwiseOR(F.shiftleft(F.col("run").cast("long") + 1,
                                                       injected.RUN_KEY_SHIFT)).alias(ROW_ID),
                    *kept, F.col(f"drawn.{RUN_HIDDEN_BITS}").alias(HIDDEN_BIT),
                    F.col(f"drawn.{RUN_TARGET_PREDICTIONS}").alias(TARGET_PREDICTION),
                    *(F.lit(None).cast(types[column]).alias(column) for column in run_only)))
    return base.unionByName(runs), int(found["longest"]) + 1


def select_canaries(df: DataFrame, *, seed: int, canaries: int, design: AuditDesign = OBSERVATIONAL_DESIGN,
                    target: str = TARGET_PREDICTION, recalibrate: str = names.RECALIBRATE_NONE,
                    baseline: str = PROXY_PREDICTION) -> tuple[DataFrame, recalibration.RecalibrationMap | None]:
    """The canary columns of ``design`` (the prediction column ``target`` read as the target's, ``baseline`` as the
    proxy's: :func:`resolve_baselines`); with ``canaries``
    > 0 only the rows with the smallest hash of (seed, row_id); with ``recalibrate`` (target | proxy) one prediction
    column mapped onto the other's scale by :func:`recalibrated` (fitted on every selected canary, before any label
    is looked at); under the injected design then only the informative canaries (y1 != y0: the others abstain). The
    observational game's y0 is the label the model was trained on: the injected label y^b where the table has one.

    Raises:
        ValueError: if a column of the design is missing, or the injected columns hold no value.
    """
    needed = (*AUDITED_COLUMNS, *design.canary_columns, target, baseline)
    missing = [c for c in dict.fromkeys(needed) if c not in df.columns]
    if missing:
        hint = (f"; audit.design={names.INJECTED} needs a target trained by this project's train stage with "
                f"audit.design={names.INJECTED}, a model trained on `lia-spark inject`'s export (audit.model_uri), "
                f"or a table with those columns; audit a model trained on the true labels with "
                f"audit.design={names.OBSERVATIONAL}" if set(missing) & set(names.INJECTED_COLUMNS) else "")
        raise ValueError(f"canary table: missing columns {missing}, got columns={df.columns}{hint}")
    injected_fields = [F.col(c).cast("int") for c in design.canary_columns]
    df = df.select(F.col(ROW_ID).cast("long"), _trained_label(df, design),
                   F.col(target).cast("double").alias(TARGET_PREDICTION),
                   F.col(baseline).cast("double").alias(PROXY_PREDICTION),
                   *injected_fields)
    if design.injects_labels:
        df = df.where(F.col(COUNTERFACTUAL_LABEL).isNotNull() & F.col(HIDDEN_BIT).isNotNull())
    if canaries > 0:
        df = _smallest_hashes(df, seed=seed, canaries=canaries)
    mapping = None
    if recalibrate != names.RECALIBRATE_NONE:
        df, mapping = recalibrated(df, mapped=recalibrate)
    return (df.where(F.col(LABEL) != F.col(COUNTERFACTUAL_LABEL)) if design.injects_labels else df), mapping


def _trained_label(df: DataFrame, design: AuditDesign):
    """The label column y0 of the game: the true label under the injected design (whose game reads y0, y1 and b);
    under the observational design the label the target trained on, y^b where the table records an injected label."""
    if design.injects_labels or not set(names.INJECTED_COLUMNS) <= set(df.columns):
        return F.col(LABEL).cast("int")
    return (F.when(F.col(HIDDEN_BIT) == 1, F.col(COUNTERFACTUAL_LABEL)).otherwise(F.col(LABEL))
            .cast("int").alias(LABEL))


def recalibrated(df: DataFrame, *, mapped: str = names.RECALIBRATE_TARGET
                 ) -> tuple[DataFrame, recalibration.RecalibrationMap]:
    """``df`` with one prediction column replaced by the increasing map onto the other's scale, fitted on the target
    and proxy predictions of every row (:mod:`lia_spark.kernels.recalibration`; no label is read): ``mapped`` =
    target: M -> g(M) = E[M' | M]; proxy: M' -> h(M') = E[M | M']. One pass sums integer totals per logit bin
    (identical for any partitioning; at most 8,192 rows reach the driver), the second maps the column."""
    spark = df.sparkSession
    source, reference = ((TARGET_PREDICTION, PROXY_PREDICTION) if mapped == names.RECALIBRATE_TARGET
                         else (PROXY_PREDICTION, TARGET_PREDICTION))

    def totals(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in batches:
            bins, counts, sums = recalibration.bin_sums(frame[source].to_numpy(np.float64),
                                                        frame[reference].to_numpy(np.float64))
            yield pd.DataFrame({"bin": bins, "count": counts, "reference_sum": sums})

    describe_jobs(spark, f"audit: fit the label-free recalibration map of the {mapped} predictions")
    found: pd.DataFrame = (df.select(source, reference)
                           .mapInPandas(totals, "bin long, count long, reference_sum long")
                           .groupBy("bin").agg(F.sum("count").alias("count"),
                                               F.sum("reference_sum").alias("reference_sum"))
                           .toPandas())
    mapping = recalibration.RecalibrationMap.fit(found["bin"].to_numpy(), found["count"].to_numpy(),
                                                 found["reference_sum"].to_numpy())
    logger.info("audit: %s predictions recalibrated by a map fitted on %d canaries (%d bins), from %.3g to %.3g",
                mapped, mapping.canaries, mapping.centres.size, mapping.values[0], mapping.values[-1])

    def remap(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in batches:
            yield frame.assign(**{source: mapping(frame[source].to_numpy(np.float64))})

    return df.mapInPandas(remap, df.schema), mapping


def _smallest_hashes(df: DataFrame, *, seed: int, canaries: int) -> DataFrame:
    """The ``canaries`` rows of ``df`` with the smallest hash of (seed, row_id), spread over the session's cores."""

    def keyed(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in batches:
            key = hashing.hash_bits(seed, audit.CANARY_PURPOSE, frame[ROW_ID].to_numpy(dtype=np.int64))
            # order-preserving map of uint64 onto signed longs (Spark sorts longs signed)
            yield frame.assign(_key=(key ^ np.uint64(1 << 63)).view(np.int64))

    schema = StructType(df.schema.fields + [StructField("_key", LongType())])
    chosen = df.mapInPandas(keyed, schema).orderBy("_key").limit(canaries).drop("_key")
    # the top-k arrives as one partition; spread it again (the counts do not depend on the partitioning)
    return chosen.repartition(2 * default_parallelism(df.sparkSession))


@dataclasses.dataclass(frozen=True)
class CandidateRanges:
    """The candidate ranges of every score, numbered globally: score a owns ranges first[a] .. first[a + 1] - 1.

    Attributes:
        scores: the scores, in the order of ``audit.scores``.
        boundary_abs, boundary_tie: per score, the cut keys of :func:`lia_spark.kernels.audit.range_boundaries`.
        first: (A + 1,) global id of each score's first range; first[A] = the number of ranges.
    """

    scores: tuple[canary_scores.Score, ...]
    boundary_abs: tuple[np.ndarray, ...]
    boundary_tie: tuple[np.ndarray, ...]
    first: np.ndarray

    @classmethod
    def cut(cls, scores: tuple[canary_scores.Score, ...], keys: pd.DataFrame, *, parts: int) -> "CandidateRanges":
        """Ranges from a sample of candidate keys (columns score, abs_score, tie) with about ``parts`` per score."""
        cuts = [audit.range_boundaries(keys["abs_score"].to_numpy(dtype=np.float64)[rows],
                                       _as_uint64(keys["tie"])[rows], parts=parts)
                for rows in (keys["score"].to_numpy() == index for index in range(len(scores)))]
        sizes = [len(boundary_abs) + 1 for boundary_abs, _ in cuts]
        return cls(scores=scores, boundary_abs=tuple(c[0] for c in cuts), boundary_tie=tuple(c[1] for c in cuts),
                   first=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))

    @property
    def count(self) -> int:
        """Number of ranges over all scores."""
        return int(self.first[-1])

    def score_of(self) -> np.ndarray:
        """(count,) index of the score owning each range."""
        return np.repeat(np.arange(len(self.scores)), np.diff(self.first))

    def exclusive_offsets(self, totals: np.ndarray) -> np.ndarray:
        """Per (range, repetition): the sum of ``totals`` over the ranges before it of the same score."""
        offsets = np.cumsum(totals, axis=0) - totals
        return offsets - offsets[self.first[self.score_of()]]


def _sample_keys(df: DataFrame, *, scores: tuple[canary_scores.Score, ...], seed: int, fraction: float,
                 design: AuditDesign) -> pd.DataFrame:
    """Candidate keys (score index, |s|, tie) of the rows whose tie hash falls below ``fraction`` of its range."""
    threshold = np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))

    def sample(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in batches:
            kept = frame.loc[audit.tie_hashes(frame[ROW_ID].to_numpy(dtype=np.int64), seed=seed) < threshold]
            for index, score in enumerate(scores):
                abs_score, tie = design.batch_keys(kept, score, seed=seed)
                yield pd.DataFrame({"score": np.full(len(abs_score), index, dtype=np.int32),
                                    "abs_score": abs_score, "tie": tie.view(np.int64)})

    return df.mapInPandas(sample, "score int, abs_score double, tie bigint").toPandas()


CANDIDATE_SCHEMA = "range int, active_total array<bigint>, correct_total array<bigint>, candidates binary"

def _candidate_blobs(batches: Iterator[pd.DataFrame], *, repetitions: int, seed: int, ranges: CandidateRanges,
                     design: AuditDesign) -> Iterator[pd.DataFrame]:
    """Per batch and candidate range: the range's candidates as one blob and their totals per repetition (the
    games are played once per batch and shared by every score)."""
    for frame in batches:
        found_by_score = design.batch_candidates(frame, seed=seed, repetitions=repetitions, scores=ranges.scores)
        rows = []
        for index, found in enumerate(found_by_score.values()):
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
    totals: pd.DataFrame = (exploded.groupBy("range", F.col("pos").alias("repetition"))
                            .agg(F.sum("col.active_total").alias("active"), F.sum("col.correct_total").alias("correct"))
                            .toPandas())
    active = np.zeros((parts, repetitions), dtype=np.int64)
    correct = np.zeros((parts, repetitions), dtype=np.int64)
    ranges, reps = totals["range"].to_numpy(), totals["repetition"].to_numpy()
    active[ranges, reps] = totals["active"].to_numpy()
    correct[ranges, reps] = totals["correct"].to_numpy()
    return active, correct


def distributed_counts(df: DataFrame, *, section: AuditConfig, seed: int, guesses: np.ndarray | None = None,
                       design: AuditDesign = OBSERVATIONAL_DESIGN) -> tuple[int, np.ndarray, dict[str, np.ndarray]]:
    """Exact c for every score, repetition and c' of the sweep over a canary DataFrame (module docstring, steps
    1-4). Every score of ``section.scores`` is counted on the same games, in the same passes over the canaries.

    Args:
        df: canary rows (see :func:`select_canaries`); row ids must be distinct (they key the draws and ties).
        section: the audit section (repetitions, scores, sweep).
        seed: the run seed.
        guesses: guess counts to evaluate; default the sweep of ``section``.
        design: observational (section.repetitions games drawn by the audit) or injected (the one game drawn
            before training: one game, the rows of ``df`` are the informative canaries).

    Returns:
        (m, guesses (k,), score name -> correct (R, k) int64), the scores in the order of ``section.scores``.

    Raises:
        ValueError: if the table is empty.
    """
    spark = df.sparkSession
    repetitions = design.repetitions(section.repetitions)
    describe_jobs(spark, "audit: count canaries")
    m = df.count()
    if m == 0:
        raise ValueError("canary table: must hold at least one row, got 0 rows" if not design.injects_labels else
                         "canary table: no informative canary (counterfactual_label set and != label): either the "
                         "target was trained without injected labels (train it with audit.design=injected, or audit "
                         "it with audit.design=observational) or the canaries are too few (use more, or "
                         "audit.counterfactual=flip)")
    if guesses is None:
        guesses = audit.sweep_grid(m, section)
    guesses = np.asarray(guesses, dtype=np.int64)
    scores = canary_scores.resolve_scores(section.scores)
    parts = max(4 * default_parallelism(spark), -(-2 * m // RANGE_CANDIDATES))
    describe_jobs(spark, "audit: sample candidate keys for range boundaries")
    keys = _sample_keys(df, scores=scores, seed=seed, fraction=min(1.0, sample_rows_per_range(parts) * parts / m),
                        design=design)
    ranges = CandidateRanges.cut(scores, keys, parts=parts)
    logger.info("audit: %d canaries, %d repetitions, %d guess counts, %d score(s), %d candidate ranges", m,
                repetitions, len(guesses), len(scores), ranges.count)

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
        cuts: pd.DataFrame = (candidates.select("range", "candidates").groupBy("range")
                              .applyInPandas(evaluate, "range int, repetition int, guess_index int, correct long")
                              .toPandas())
    finally:
        candidates.unpersist()
    correct = np.full((len(scores), repetitions, len(guesses)), -1, dtype=np.int64)
    score_index = ranges.score_of()[cuts["range"].to_numpy()]
    correct[score_index, cuts["repetition"].to_numpy(), cuts["guess_index"].to_numpy()] = cuts["correct"].to_numpy()
    if len(cuts) != correct.size or (correct < 0).any():
        raise ValueError(f"audit: expected one count per (score, repetition, c') = {correct.size}, got {len(cuts)}")
    return m, guesses, {score.name: counts for score, counts in zip(scores, correct)}
