"""Stage ``posteriors``: release one day's labels through the mechanisms of SPEC 2, posteriors per SPEC 3.

Data movement only; the math is in :mod:`lia_spark.mechanisms`, :mod:`lia_spark.posteriors` and
:mod:`lia_spark.advantage`. The whole (mechanism x epsilon x bag size) grid comes from one read of the input,
one ranking shuffle and one grouping shuffle:

- Bagging (exact, reproducible; the rule of :func:`lia_spark.mechanisms.assign_bags`): every row gets the
  64-bit key ``hash(seed, "mechanism/bagging", row_id)``; rows sorted by (key, row_id) form a uniformly
  random permutation, and the row at global rank r (0-based) is in bag ``r div k`` for every bag size k, so
  all bags hold exactly k rows except the last one (``n mod k`` rows). The rank is computed without a
  single-task sort: the key's top bits pick a bucket (monotone in the key), a window
  ``partitionBy(bucket).orderBy(key, row_id)`` ranks rows inside their bucket, and the bucket's offset
  (rows in lower buckets, counted first) is added. Bags depend on neither buckets, partitions nor executors.
- Bagged mechanisms: ``groupBy(rank div G).applyInPandas`` with G a multiple of every bag size (at most
  65536 rows, see :func:`rows_per_group`), so each call holds whole bags of every size and runs the batched
  kernels for every bagged setting.
- RR: ``mapInPandas`` over the rows, every epsilon at once.
- Noise is keyed on (setting seed, bag id or row id); a setting's seed is derived from the run seed and
  the setting's name, so settings draw independent noise.
- Summaries: one aggregation plus an exact rank selection (window ``row_number`` over |I| per setting,
  sorted with spilling, never collected), so percentiles are exact and infinities stay infinite.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import time
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

from lia_spark import advantage, hashing, mechanisms, posteriors
from lia_spark.config import Config, MechanismsConfig
from lia_spark.engine.outputs import committed_output, local_output_path, marker_fields, read_marker

logger = logging.getLogger(__name__)

BAGGED_MECHANISMS = ("llp", "llp_laplace", "llp_geometric")
SETTING_KEYS = ["mechanism", "epsilon", "bag_size"]
ROWS_PER_CALL = 65_536  # input rows per pandas call, at most ...
OUTPUT_ROWS_PER_CALL = 1 << 19  # ... and about this many output rows (input rows x bagged settings)
BUCKETS_PER_SHUFFLE_PARTITION = 4
_LOCAL_WRITES = "posteriors writes its CSV and plots"
_SIGN_BIT = np.uint64(1 << 63)

INPUT_SCHEMA = StructType([
    StructField("row_id", LongType(), False),
    StructField("label", IntegerType(), False),
    StructField("prior", DoubleType(), False),
])
KEYED_SCHEMA = StructType(INPUT_SCHEMA.fields + [
    StructField("bag_key", LongType(), False),
    StructField("bucket", IntegerType(), False),
])
ROW_SCHEMA = StructType([
    StructField("row_id", LongType(), False),
    StructField("mechanism", StringType(), False),
    StructField("epsilon", DoubleType(), True),  # NaN (plain LLP) crosses Arrow as null, see compute_posteriors
    StructField("bag_size", IntegerType(), False),
    StructField("bag_id", LongType(), True),
    StructField("prior", DoubleType(), False),
    StructField("label", IntegerType(), False),
    StructField("released", DoubleType(), False),
    StructField("posterior", DoubleType(), False),
    StructField("I", DoubleType(), False),
    StructField("additive_advantage", DoubleType(), False),
    StructField("realized_advantage", DoubleType(), False),
])
SUMMARY_COLUMNS = [
    "mechanism", "epsilon", "bag_size", "rows", "mean_additive_advantage", "realized_additive_advantage",
    *(f"abs_I_p{q}" for q in advantage.PERCENTILES), "share_infinite",
]


@dataclasses.dataclass(frozen=True)
class Setting:
    """One cell of the grid: a mechanism with its epsilon (NaN for plain LLP) and bag size (1 for RR)."""

    mechanism: str
    epsilon: float
    bag_size: int

    @property
    def name(self) -> str:
        """Stable text name, e.g. ``llp_laplace_eps1_k8`` (also the MLflow metric prefix)."""
        parts = [self.mechanism]
        if not math.isnan(self.epsilon):
            parts.append(f"eps{self.epsilon:g}")
        if self.mechanism != "rr":
            parts.append(f"k{self.bag_size}")
        return "_".join(parts)


def settings_grid(config: MechanismsConfig) -> list[Setting]:
    """The grid names x epsilons x bag sizes: RR uses only epsilon, LLP only k, noisy LLP both."""
    grid = []
    for mechanism in config.names:
        epsilons = (math.nan,) if mechanism == "llp" else config.epsilons
        bag_sizes = (1,) if mechanism == "rr" else config.bag_sizes
        grid.extend(Setting(mechanism, float(eps), int(k)) for k in bag_sizes for eps in epsilons)
    return grid


def setting_seed(seed: int, setting: Setting) -> int:
    """Seed of one setting's noise: the run seed mixed with the setting's name (63 bits)."""
    return int(hashing.stream_key(seed, f"posteriors/{setting.name}")) >> 1


def rows_per_group(bag_sizes: Sequence[int], *, settings: int = 1, bags_per_group: int = 0) -> int:
    """Input rows per pandas call: a multiple of every bag size (so each call holds whole bags of every
    size) near ``bags_per_group`` x max(k), or when that is 0 near min(65536, 2^19 / settings)."""
    unit = math.lcm(*bag_sizes)
    target = bags_per_group * max(bag_sizes) if bags_per_group else min(ROWS_PER_CALL, OUTPUT_ROWS_PER_CALL // settings)
    return unit * max(1, round(target / unit))


# ----------------------------------------------------------------------------------------------- input


def prior_source(config: Config) -> str:
    """Where the prior column lives: mechanisms.prior_path, else the twin's truth table for ``eta``, else
    the canary table of the train stage."""
    if config.mechanisms.prior_path:
        return config.mechanisms.prior_path
    if config.mechanisms.prior_column == "eta":
        return os.path.join(config.run.output_dir, "truth")
    return os.path.join(config.run.output_dir, "models", "canaries")


def load_input(spark: SparkSession, config: Config) -> DataFrame:
    """The day's rows (row_id, label) inner-joined on row_id with the prior column, renamed ``prior``."""
    column, source = config.mechanisms.prior_column, prior_source(config)
    rows = (spark.read.parquet(config.parquet_path)
            .where(F.col("day") == config.mechanisms.day).select("row_id", "label"))
    priors = spark.read.parquet(source)
    if column not in priors.columns:
        raise ValueError(f"mechanisms.prior_column: {source} has no column {column!r}, got {column!r}")
    if "day" in priors.columns:  # the truth table is day-partitioned: read only the released day
        priors = priors.where(F.col("day") == config.mechanisms.day)
    priors = priors.select("row_id", F.col(column).cast("double").alias("prior"))
    return rows.join(priors, "row_id").select(F.col("row_id").cast("long"), F.col("label").cast("int"), "prior")


# --------------------------------------------------------------------------------------------- bagging


def _bag_keys(batches: Iterator[pd.DataFrame], *, seed: int, buckets: int) -> Iterator[pd.DataFrame]:
    """Key = hash bits with the sign bit flipped (signed order = unsigned order), bucket = key's top bits."""
    for batch in batches:
        bits = hashing.hash_bits(seed, mechanisms.BAGGING_PURPOSE, batch["row_id"].to_numpy(np.int64))
        bucket = ((bits >> np.uint64(32)) * np.uint64(buckets)) >> np.uint64(32)
        yield batch.assign(bag_key=(bits ^ _SIGN_BIT).view(np.int64), bucket=bucket.astype(np.int32))


def with_bag_keys(df: DataFrame, *, seed: int, buckets: int = 0) -> DataFrame:
    """Adds the bagging key and its bucket to rows (row_id, label, prior); other columns are dropped.

    Args:
        df: rows with columns row_id, label, prior.
        seed: run seed; the order of the keys depends only on (seed, set of row ids).
        buckets: ranking buckets (parallelism only; 0 = 4 x shuffle partitions).
    """
    buckets = buckets or BUCKETS_PER_SHUFFLE_PARTITION * int(df.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    return df.select(*INPUT_SCHEMA.fieldNames()).mapInPandas(
        functools.partial(_bag_keys, seed=seed, buckets=buckets), KEYED_SCHEMA)


def rank_rows(df: DataFrame, *, seed: int, buckets: int = 0) -> DataFrame:
    """Global rank ``bag_rank`` (0-based) of every row in the random order of :func:`mechanisms.assign_bags`.

    ``df`` holds rows (row_id, label, prior), optionally already keyed by :func:`with_bag_keys` (persist that
    to hash once: the bucket counts and the ranking both read it; its keys then win over ``seed``).
    ``seed`` and ``buckets`` as in :func:`with_bag_keys`.
    """
    spark = df.sparkSession
    keyed = df if "bag_key" in df.columns else with_bag_keys(df, seed=seed, buckets=buckets)
    spark.sparkContext.setJobDescription("posteriors: count rows per bagging bucket")
    counts = keyed.groupBy("bucket").count().toPandas().sort_values("bucket")
    counts["offset"] = counts["count"].cumsum() - counts["count"]
    offsets = spark.createDataFrame(counts[["bucket", "offset"]], "bucket int, offset long")
    ranked = keyed.withColumn("_rank", F.row_number().over(Window.partitionBy("bucket").orderBy("bag_key", "row_id")))
    return (ranked.join(F.broadcast(offsets), "bucket")
            .withColumn("bag_rank", F.col("offset") + F.col("_rank") - 1)
            .select(*INPUT_SCHEMA.fieldNames(), "bag_rank"))


def assign_bags(df: DataFrame, *, bag_size: int, seed: int, buckets: int = 0) -> DataFrame:
    """Random bags of exactly ``bag_size`` rows (one remainder bag at most): adds bag_rank and bag_id."""
    if isinstance(bag_size, bool) or not isinstance(bag_size, int) or bag_size < 1:
        raise ValueError(f"bag_size: must be a positive integer, got {bag_size!r}")
    return rank_rows(df, seed=seed, buckets=buckets).withColumn("bag_id", F.expr(f"bag_rank div {bag_size}"))


# ------------------------------------------------------------------------------------------ posteriors


def _row_frame(rows: pd.DataFrame, setting: Setting, bag_ids, released: np.ndarray,
               result: posteriors.Posteriors) -> pd.DataFrame:
    """Per-row output of one setting: posteriors plus the additive and realized advantages."""
    prior = rows["prior"].to_numpy(np.float64)
    label = rows["label"].to_numpy(np.int64)
    return pd.DataFrame({
        "row_id": rows["row_id"].to_numpy(np.int64),
        "mechanism": setting.mechanism,
        "epsilon": setting.epsilon,
        "bag_size": np.int32(setting.bag_size),
        "bag_id": bag_ids,
        "prior": prior,
        "label": label.astype(np.int32),
        "released": np.asarray(released, dtype=np.float64),
        "posterior": result.posterior,
        "I": result.multiplicative_advantage,
        "additive_advantage": advantage.additive_advantage(result.posterior, prior),
        "realized_advantage": advantage.realized_advantage(result.posterior, prior, label),
    })


def bag_posteriors(rows: pd.DataFrame, settings: Sequence[Setting], seed: int) -> pd.DataFrame:
    """Bagged settings on whole bags: bag of a row = bag_rank div k (rows hold whole bags of every k)."""
    rows = rows.sort_values("bag_rank", kind="stable")
    ranks = rows["bag_rank"].to_numpy(np.int64)
    labels = rows["label"].to_numpy(np.int64)
    priors = rows["prior"].to_numpy(np.float64)
    frames = []
    for k in sorted({s.bag_size for s in settings}):
        row_bags = ranks // k
        bag_ids, bag_sizes = np.unique(row_bags, return_counts=True)
        sums = mechanisms.bag_sums(labels, bag_sizes)
        for setting in (s for s in settings if s.bag_size == k):
            eps, noise_seed = setting.epsilon, setting_seed(seed, setting)
            if setting.mechanism == "llp":
                released = sums / bag_sizes
                result = posteriors.llp_bags(priors, bag_sizes, sums)
            elif setting.mechanism == "llp_laplace":
                released = mechanisms.laplace_release(sums, bag_sizes, bag_ids, epsilon=eps, seed=noise_seed)
                result = posteriors.llp_laplace_bags(priors, bag_sizes, released, epsilon=eps)
            else:
                clipped, released = mechanisms.geometric_release(sums, bag_sizes, bag_ids, epsilon=eps, seed=noise_seed)
                result = posteriors.llp_geometric_bags(priors, bag_sizes, clipped, epsilon=eps)
            frames.append(_row_frame(rows, setting, row_bags, np.repeat(released, bag_sizes), result))
    return pd.concat(frames, ignore_index=True)


def rr_posteriors(rows: pd.DataFrame, settings: Sequence[Setting], seed: int) -> pd.DataFrame:
    """Every RR setting on a batch of rows: flip keyed on (setting seed, row_id), then the RR posterior."""
    ids = rows["row_id"].to_numpy(np.int64)
    labels = rows["label"].to_numpy(np.int64)
    priors = rows["prior"].to_numpy(np.float64)
    no_bag = pd.array([None] * len(rows), dtype="Int64")
    frames = []
    for setting in settings:
        released = mechanisms.rr_release(labels, ids, epsilon=setting.epsilon, seed=setting_seed(seed, setting))
        frames.append(_row_frame(rows, setting, no_bag, released, posteriors.rr(priors, released, epsilon=setting.epsilon)))
    return pd.concat(frames, ignore_index=True)


def _rr_batches(batches: Iterator[pd.DataFrame], *, settings: Sequence[Setting], seed: int) -> Iterator[pd.DataFrame]:
    for batch in batches:
        yield rr_posteriors(batch, settings, seed)


def compute_posteriors(df: DataFrame, *, settings: Sequence[Setting], seed: int, bags_per_group: int = 0,
                       buckets: int = 0) -> DataFrame:
    """Per-row releases, posteriors and advantages (schema :data:`ROW_SCHEMA`) for every setting.

    Args:
        df: rows with columns row_id, label, prior (optionally keyed, see :func:`rank_rows`).
        settings: grid cells (see :func:`settings_grid`).
        seed: run seed (bags and noise derive from it).
        bags_per_group: bags of the largest size per pandas call (0 = automatic, see :func:`rows_per_group`).
        buckets: ranking buckets (see :func:`rank_rows`).
    """
    outputs = []
    rr = [s for s in settings if s.mechanism == "rr"]
    if rr:
        outputs.append(df.select(*INPUT_SCHEMA.fieldNames()).mapInPandas(
            functools.partial(_rr_batches, settings=rr, seed=seed), ROW_SCHEMA))
    bagged = [s for s in settings if s.mechanism in BAGGED_MECHANISMS]
    if bagged:
        group_rows = rows_per_group([s.bag_size for s in bagged], settings=len(bagged), bags_per_group=bags_per_group)

        def bag_group(rows: pd.DataFrame) -> pd.DataFrame:
            return bag_posteriors(rows, bagged, seed)

        outputs.append(rank_rows(df, seed=seed, buckets=buckets)
                       .withColumn("_group", F.expr(f"bag_rank div {group_rows}"))
                       .groupBy("_group").applyInPandas(bag_group, ROW_SCHEMA))
    if not outputs:
        raise ValueError(f"settings: must hold at least one setting, got {settings!r}")
    rows = functools.reduce(DataFrame.unionByName, outputs)
    return rows.withColumn("epsilon", F.coalesce(F.col("epsilon"), F.lit(math.nan)))


# ------------------------------------------------------------------------------------------ summaries


def percentile_rank(n: int, q: float) -> int:
    """0-based rank of the q-th percentile among n sorted values: ceil(q n / 100) - 1, at least 0, the
    order statistic of :func:`lia_spark.advantage.exact_percentile` (no interpolation, so inf stays inf)."""
    return max(int(math.ceil(q / 100.0 * n)), 1) - 1


def summarize_rows(rows: DataFrame) -> pd.DataFrame:
    """One row per setting with the columns :data:`SUMMARY_COLUMNS` (exact percentiles of |I|).

    Means are Spark aggregates; the percentiles are the order statistics of |I| at :func:`percentile_rank`,
    picked with a window ``row_number`` per setting (sorted with spilling, only picked rows collected).
    """
    spark = rows.sparkSession
    abs_i = F.abs(F.col("I"))
    spark.sparkContext.setJobDescription("posteriors: per-setting means")
    stats = rows.groupBy(*SETTING_KEYS).agg(
        F.count(F.lit(1)).alias("rows"),
        F.avg("additive_advantage").alias("mean_additive_advantage"),
        F.avg("realized_advantage").alias("realized_additive_advantage"),
        F.avg((abs_i == math.inf).cast("double")).alias("share_infinite"),
    ).toPandas()
    wanted = sorted({percentile_rank(int(n), q) for n in stats["rows"] for q in advantage.PERCENTILES})
    spark.sparkContext.setJobDescription("posteriors: exact order statistics of |I|")
    order = Window.partitionBy(*SETTING_KEYS).orderBy("abs_I")
    picked = (rows.select(*SETTING_KEYS, abs_i.alias("abs_I"))
              .withColumn("_rank", F.row_number().over(order) - 1)
              .where(F.col("_rank").isin(wanted))
              .toPandas())
    values = {(Setting(m, e, int(k)).name, int(r)): v for m, e, k, r, v in
              picked[SETTING_KEYS + ["_rank", "abs_I"]].itertuples(index=False)}
    for q in advantage.PERCENTILES:
        stats[f"abs_I_p{q}"] = [values[(Setting(m, e, int(k)).name, percentile_rank(int(n), q))] for m, e, k, n in
                                stats[["mechanism", "epsilon", "bag_size", "rows"]].itertuples(index=False)]
    stats["bag_size"] = stats["bag_size"].astype("int32")
    return stats[SUMMARY_COLUMNS].sort_values(SETTING_KEYS, ignore_index=True)


def _sample_batches(batches: Iterator[pd.DataFrame], *, fraction: float, seed: int) -> Iterator[pd.DataFrame]:
    for batch in batches:
        keep = hashing.uniform(seed, "posteriors:plot_sample", batch["row_id"].to_numpy(np.int64)) < fraction
        yield batch[keep]


def sample_rows(rows: DataFrame, *, fraction: float, seed: int) -> pd.DataFrame:
    """A bounded random sample for plots: the same rows (hash of row_id < fraction) in every setting."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction: must be in (0, 1], got {fraction!r}")
    columns = ["row_id", *SETTING_KEYS, "prior", "posterior", "I", "additive_advantage"]
    schema = StructType([ROW_SCHEMA[c] for c in columns])
    rows.sparkSession.sparkContext.setJobDescription("posteriors: sample rows for plots")
    return rows.select(*columns).mapInPandas(
        functools.partial(_sample_batches, fraction=fraction, seed=seed), schema).toPandas()


# ------------------------------------------------------------------------------------------------ stage


@dataclasses.dataclass(frozen=True)
class PosteriorsResult:
    """Outcome of the posteriors stage: where outputs went, the per-setting summary and bag counts."""

    output_path: str
    input_rows: int
    settings: int
    rows_written: bool
    summary: tuple[dict[str, Any], ...]
    bags: dict[str, dict[str, int]]
    plots: tuple[str, ...]
    seconds: float
    skipped: bool = False

    @property
    def summary_csv(self) -> str:
        return os.path.join(self.output_path, "summary.csv")

    def to_dict(self) -> dict[str, Any]:
        payload = dataclasses.asdict(self)
        payload["summary"] = [dict(row) for row in self.summary]
        payload["plots"] = list(self.plots)
        return payload

    @classmethod
    def from_dict(cls, payload: dict[str, Any], *, skipped: bool = False) -> "PosteriorsResult":
        values = marker_fields(cls, payload)
        values.update(summary=tuple(values["summary"]), plots=tuple(values["plots"]), skipped=skipped)
        return cls(**values)

    def metrics(self) -> dict[str, float]:
        """Flat finite metrics: ``<setting>_<statistic>`` per setting plus input size and throughput."""
        metrics = {"posteriors_input_rows": float(self.input_rows), "posteriors_seconds": self.seconds}
        for row in self.summary:
            name = Setting(row["mechanism"], float(row["epsilon"]), int(row["bag_size"])).name
            for column in SUMMARY_COLUMNS[4:]:
                if math.isfinite(row[column]):
                    metrics[f"{name}_{column}"] = float(row[column])
        return metrics

    def artifacts(self) -> list[str]:
        """The summary CSV and the plot PNGs (local paths)."""
        return [self.summary_csv, *self.plots]


def _native(value: Any) -> Any:
    """numpy scalars -> Python scalars (the marker is JSON)."""
    return value.item() if isinstance(value, np.generic) else value


def run_posteriors(spark: SparkSession, config: Config) -> PosteriorsResult:
    """Release config.mechanisms.day through the grid of settings; write rows, summaries and plots.

    Output ``<run.output_dir>/posteriors``: ``rows`` (if mechanisms.write_rows), ``summary`` (Parquet),
    ``summary.csv`` and ``plots/*.png``, committed atomically. Skipped when complete and not run.force.
    """
    output = os.path.join(config.run.output_dir, "posteriors")
    local_output = local_output_path(output, writes=_LOCAL_WRITES)
    marker = read_marker(spark, output)
    if marker is not None and not config.run.force:
        logger.info("posteriors: %s is complete, skipped", output)
        return PosteriorsResult.from_dict(marker, skipped=True)
    started = time.monotonic()
    section = config.mechanisms
    settings = settings_grid(section)
    logger.info("posteriors: day %d, prior %s, %d settings", section.day, section.prior_column, len(settings))
    metadata: dict[str, Any] = {}
    with committed_output(spark, output, metadata) as staging:
        spark.sparkContext.setJobDescription("posteriors: read rows and priors")
        source = with_bag_keys(load_input(spark, config), seed=config.run.seed).persist(StorageLevel.MEMORY_AND_DISK)
        rows = compute_posteriors(source, settings=settings, seed=config.run.seed, bags_per_group=section.bags_per_group)
        if section.write_rows:
            spark.sparkContext.setJobDescription("posteriors: write per-row posteriors")
            rows.write.parquet(f"{staging}/rows")
            stored = spark.read.parquet(f"{staging}/rows")
        else:
            stored = rows.persist(StorageLevel.DISK_ONLY)
        summary = summarize_rows(stored)
        input_rows = int(summary["rows"].max()) if len(summary) else 0
        logger.info("posteriors: %d input rows, %d result rows", input_rows, int(summary["rows"].sum()))
        (spark.createDataFrame(summary).coalesce(1)
         .withColumn("epsilon", F.coalesce(F.col("epsilon"), F.lit(math.nan)))  # Arrow turned NaN into null
         .write.parquet(f"{staging}/summary"))
        local_staging = local_output_path(staging, writes=_LOCAL_WRITES)
        summary.to_csv(os.path.join(local_staging, "summary.csv"), index=False)
        fraction = min(1.0, section.plot_sample_rows / max(input_rows, 1))
        sample = sample_rows(stored, fraction=fraction, seed=config.run.seed)
        from lia_spark.plots import plot_posteriors  # driver only: keeps matplotlib out of the Python workers

        written = plot_posteriors(sample, output_dir=os.path.join(local_staging, "plots"))
        if not section.write_rows:
            stored.unpersist()
        source.unpersist()
        sizes = sorted({s.bag_size for s in settings if s.mechanism in BAGGED_MECHANISMS})
        result = PosteriorsResult(
            output_path=local_output, input_rows=input_rows, settings=len(settings), rows_written=section.write_rows,
            summary=tuple({key: _native(value) for key, value in record.items()} for record in summary.to_dict("records")),
            bags={str(k): {"bags": -(-input_rows // k), "remainder_size": input_rows % k} for k in sizes},
            plots=tuple(os.path.join(local_output, os.path.relpath(p, local_staging)) for p in written),
            seconds=time.monotonic() - started)
        metadata.update(result.to_dict())
    logger.info("posteriors: done in %.1f s (%.0f input rows/s)", result.seconds, input_rows / max(result.seconds, 1e-9))
    return result
