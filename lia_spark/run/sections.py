"""The configuration sections of the run, the session, the data and the posteriors, tracking, the audit table and the
log-loss attack: frozen dataclasses whose ``validate`` names the field of any wrong value.
"""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Mapping

from lia_spark import names
from lia_spark.kernels.mechanism_registry import BAG_TRAINING_MECHANISMS, TRAINING_MECHANISMS
from lia_spark.kernels.release_mechanisms import RELEASE_MECHANISMS
from lia_spark.names import MAX_DAY, POSITION_BITS, POSTERIOR_MECHANISMS
from lia_spark.run.checks import JAVA_INT_MAX, fail, fail_above, fail_glob, fail_repeats, is_remote_path

PIPELINE_STAGES = ("data", "train", "posteriors", "utility", "audit", "report")

_SPARK_MASTER = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|yarn|"
                           r"(spark|k8s|mesos)://\S+")


_SPARK_REMOTE = re.compile(r"sc://\S+|local(\[(\d+|\*)\])?")

@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Identity of a run: its name, master seed and output folder."""

    name: str = "lia-spark"
    seed: int = 20261122
    output_dir: str = "runs/default"
    force: bool = False
    replace_foreign: bool = False  # let a run replace folders that hold files no lia_spark run wrote
    stages: tuple[str, ...] = PIPELINE_STAGES
    stale_lock_hours: float = 24.0
    progress_seconds: float = 30.0  # a progress line per running stage this often (0 = none)

    def validate(self) -> None:
        if not self.name.strip():
            fail("run.name", self.name, "must be a non-empty string")
        if not 0 <= self.seed < 2**63:
            fail("run.seed", self.seed, "must be an integer in [0, 2^63)")
        if not self.output_dir.strip():
            fail("run.output_dir", self.output_dir, "must be a non-empty path")
        fail_glob("run.output_dir", self.output_dir)
        if not self.stages:
            fail("run.stages", self.stages, "must list at least one step",
                  f"choose from {', '.join(PIPELINE_STAGES)}")
        for stage in self.stages:
            if stage not in PIPELINE_STAGES:
                fail("run.stages", stage, f"must be one of {', '.join(PIPELINE_STAGES)}")
        if len(set(self.stages)) != len(self.stages):
            fail("run.stages", self.stages, "must not repeat a stage")
        if not 0.0 < self.stale_lock_hours < math.inf:
            fail("run.stale_lock_hours", self.stale_lock_hours, "must be finite and > 0",
                  "use the hours after which a lock counts as stale, e.g. 24")
        if not 0.0 <= self.progress_seconds < math.inf:
            fail("run.progress_seconds", self.progress_seconds, "must be finite and >= 0",
                  "use the seconds between progress lines of a running stage, e.g. 30, or 0 for none")


@dataclasses.dataclass(frozen=True)
class SparkConfig:
    """Local-session defaults; ignored where a session already exists or spark-submit sets them."""

    master: str = "local[2]"
    app_name: str = "lia-spark"
    driver_memory: str = "4g"
    shuffle_partitions: int = 0
    arrow_batch_rows: int = 100_000
    extra: Mapping[str, str] = dataclasses.field(default_factory=dict)
    remote: str = ""
    parallel_fits: bool = True  # independent fits (the utility grid) as parallel Spark tasks; false: on the driver
    executor_start_seconds: float = 900.0  # how long a command waits for executors to run its first task
    ship_package: bool = False  # executors lacking lia_spark get this driver's (Connect: addArtifacts; else addPyFile)

    def validate(self) -> None:
        if self.remote and not _SPARK_REMOTE.fullmatch(self.remote.strip()):
            fail("spark.remote", self.remote, "must be a Spark Connect URL",
                  "use sc://host:port (e.g. sc://localhost:15002), local[N] for a local Connect server, or \"\" "
                  "for a classic session")
        if not _SPARK_MASTER.fullmatch(self.master.strip()):
            fail("spark.master", self.master, "must be a Spark master URL",
                  "use local[N], local[N,F], yarn, spark://host:port or k8s://...")
        if self.shuffle_partitions < 0:
            fail("spark.shuffle_partitions", self.shuffle_partitions, "must be >= 0 (0 = 4 x cores)")
        fail_above("spark.shuffle_partitions", self.shuffle_partitions, JAVA_INT_MAX, "Spark counts partitions in "
                   "a Java int")
        if self.arrow_batch_rows < 1:
            fail("spark.arrow_batch_rows", self.arrow_batch_rows, "must be >= 1")
        fail_above("spark.arrow_batch_rows", self.arrow_batch_rows, JAVA_INT_MAX, "Spark counts a batch's rows in "
                   "a Java int")
        if not 0.0 < self.executor_start_seconds < math.inf:
            fail("spark.executor_start_seconds", self.executor_start_seconds, "must be finite and > 0",
                 "use the seconds a command may wait for its first executors (default 900)")
        if not self.driver_memory[:-1].isdigit() or self.driver_memory[-1].lower() not in "kmgt":
            fail("spark.driver_memory", self.driver_memory, "must look like 512m or 4g")


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the day-partitioned Parquet table comes from and goes to (docs/math.md §1.1)."""

    source: str = "synthetic"
    criteo_paths: tuple[str, ...] = ()
    parquet_path: str = ""
    quarantine_path: str = ""
    max_malformed_share: float = 0.001
    kaggle_days: int = 7
    allow_truncated_files: bool = False
    split_gzip: bool = True  # decode each .gz once (one task per file), then scan it in parallel blocks
    task_io: bool = True  # on local paths the tasks read the text and write the Parquet themselves

    def validate(self) -> None:
        if self.source not in ("synthetic", "criteo"):
            fail("data.source", self.source, "must be one of synthetic, criteo")
        if self.source == "criteo" and not self.criteo_paths:
            fail("data.criteo_paths", self.criteo_paths, "must list day_N[.gz] or train.txt files when source=criteo")
        for path in self.criteo_paths:
            fail_glob("data.criteo_paths", path)
            if not is_remote_path(path) and not Path(path).exists():
                fail("data.criteo_paths", path, "must name existing files or folders")
        if not 0.0 <= self.max_malformed_share <= 1.0:
            fail("data.max_malformed_share", self.max_malformed_share, "must be in [0, 1]")
        if self.kaggle_days < 1:
            fail("data.kaggle_days", self.kaggle_days, "must be >= 1")
        fail_above("data.kaggle_days", self.kaggle_days, MAX_DAY + 1, f"row ids hold days 0 to {MAX_DAY}")
        fail_glob("data.parquet_path", self.parquet_path)
        fail_glob("data.quarantine_path", self.quarantine_path)


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
    """Synthetic Criteo twin (docs/math.md §1.2): size, days, target click rate and output formats."""

    rows_per_day: int = 100_000
    days: int = 2
    click_rate: float = 0.032
    write_tsv: bool = False
    gzip: bool = False
    partitions: int = 0

    def validate(self) -> None:
        if self.rows_per_day < 1:
            fail("synthetic.rows_per_day", self.rows_per_day, "must be >= 1")
        fail_above("synthetic.rows_per_day", self.rows_per_day, 1 << POSITION_BITS, f"2^{POSITION_BITS}: row ids "
                   f"are day << {POSITION_BITS} | position, so a day holds at most 2^{POSITION_BITS} rows")
        if not 1 <= self.days <= 24:
            fail("synthetic.days", self.days, "must be in [1, 24]")
        if not 0.0 < self.click_rate < 1.0:
            fail("synthetic.click_rate", self.click_rate, "must be in (0, 1)")
        if self.partitions < 0:
            fail("synthetic.partitions", self.partitions, "must be >= 0 (0 = automatic)")
        fail_above("synthetic.partitions", self.partitions, JAVA_INT_MAX, "Spark counts partitions in a Java int")


@dataclasses.dataclass(frozen=True)
class MechanismsConfig:
    """Release mechanisms of docs/math.md §2 applied over an (epsilon, bag size) grid, posteriors per docs/math.md §3.

    The attacker's prior: ``prior_column`` ``auto`` is ``eta`` (the twin's true P(y=1|x), ``<out>/truth``)
    when data.source is synthetic, else ``proxy_prediction`` (the proxy model's prediction for every row of the
    released days, ``<out>/models/priors``, written by the train stage); ``prior_path`` overrides the table
    (:func:`lia_spark.engine.attacker_prior.sources.resolve_prior`). ``days``: the released days, ``target``
    (models.target_day), ``all`` (every day of the data) or a list of days
    (:func:`lia_spark.engine.models.feature_frames.released_days`).
    """

    days: str | tuple[int, ...] = names.TARGET_DAY
    prior_column: str = names.AUTO_PRIOR
    names: tuple[str, ...] = POSTERIOR_MECHANISMS
    epsilons: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    bag_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    bags_per_group: int = 0
    rows_per_bagging_unit: int = 1 << 18
    write_rows: bool = True
    prior_path: str = ""
    plot_sample_rows: int = 2000
    max_leakage: bool = False

    def validate(self) -> None:
        if isinstance(self.days, str):
            if self.days not in names.DAY_SELECTIONS:
                fail("mechanisms.days", self.days, "must be target, all or a list of days",
                      "e.g. mechanisms.days=[1, 2]")
        else:
            if not self.days:
                fail("mechanisms.days", list(self.days), "must list at least one day", "or use target or all")
            for day in self.days:
                if day < 0:
                    fail("mechanisms.days", day, "must be >= 0")
                fail_above("mechanisms.days", day, MAX_DAY, f"row ids hold days 0 to {MAX_DAY}")
            fail_repeats("mechanisms.days", self.days)
        if not self.prior_column.strip():
            fail("mechanisms.prior_column", self.prior_column,
                  "must be auto, eta, proxy_prediction or a column of mechanisms.prior_path")
        if not self.names:
            fail("mechanisms.names", self.names, "must list at least one mechanism")
        for name in self.names:
            if name not in RELEASE_MECHANISMS:
                fail("mechanisms.names", name, f"must be one of {', '.join(RELEASE_MECHANISMS)}")
        noisy = sorted({name for name in self.names if RELEASE_MECHANISMS[name].noisy})
        if noisy and not self.epsilons:
            fail("mechanisms.epsilons", list(self.epsilons), "must list at least one epsilon for "
                  f"{', '.join(noisy)}", "list epsilons or drop those mechanisms")
        if any(RELEASE_MECHANISMS[name].bagged for name in self.names) and not self.bag_sizes:
            fail("mechanisms.bag_sizes", list(self.bag_sizes), "must list at least one bag size for the llp "
                  "mechanisms", "list bag sizes or drop them from mechanisms.names")
        fail_repeats("mechanisms.names", self.names)
        fail_repeats("mechanisms.epsilons", self.epsilons)
        fail_repeats("mechanisms.bag_sizes", self.bag_sizes)
        for epsilon in self.epsilons:
            if not (0.0 < epsilon < math.inf):
                fail("mechanisms.epsilons", epsilon, "must be finite and > 0")
        for bag_size in self.bag_sizes:
            if not 1 <= bag_size <= names.MAX_BAG_SIZE:
                fail("mechanisms.bag_sizes", bag_size, f"must be in [1, {names.MAX_BAG_SIZE}]")
        if self.bags_per_group < 0:
            fail("mechanisms.bags_per_group", self.bags_per_group, "must be >= 0 (0 = automatic)")
        if self.rows_per_bagging_unit < 0:
            fail("mechanisms.rows_per_bagging_unit", self.rows_per_bagging_unit, "must be >= 0 (0 = one unit)")
        if self.plot_sample_rows < 1:
            fail("mechanisms.plot_sample_rows", self.plot_sample_rows, "must be >= 1")
        fail_glob("mechanisms.prior_path", self.prior_path)
        if self.bag_sizes and math.lcm(*self.bag_sizes) > 1 << 20:
            fail("mechanisms.bag_sizes", self.bag_sizes,
                  "must have a least common multiple <= 1048576 (one pandas call holds whole bags of every size)")


@dataclasses.dataclass(frozen=True)
class TrackingConfig:
    """MLflow tracking: empty URI = $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working directory."""

    enabled: bool = True
    tracking_uri: str = ""
    experiment: str = "lia-spark"
    log_models: bool = True
    timeout_seconds: float = 10.0
    log_row_data: bool = False
    request_timeout_seconds: int = 10  # each MLflow HTTP call after the up-front check
    request_retries: int = 2  # retries of a failed MLflow HTTP call after the up-front check

    def validate(self) -> None:
        if not self.experiment.strip():
            fail("tracking.experiment", self.experiment, "must be a non-empty name")
        if not 0.0 < self.timeout_seconds <= 600.0:
            fail("tracking.timeout_seconds", self.timeout_seconds, "must be in (0, 600]")
        if not 1 <= self.request_timeout_seconds <= 600:
            fail("tracking.request_timeout_seconds", self.request_timeout_seconds, "must be in [1, 600]")
        if not 0 <= self.request_retries <= 10:
            fail("tracking.request_retries", self.request_retries, "must be in [0, 10]")


@dataclasses.dataclass(frozen=True)
class TableConfig:
    """``lia-spark audit-table``: the grid of training mechanisms x claimed epsilons whose targets are trained and
    audited (Kalemaj et al., "Observational Auditing of Label Privacy", 2025, Table 2). ``none`` is one baseline
    cell (epsilon = inf); plain ``llp`` has no epsilon (one cell per bag size, claimed epsilon = inf); the other
    LLP mechanisms get one cell per epsilon and bag size; label mechanisms one cell per epsilon. Combinations the
    configured models.library / models.execution cannot train are skipped with a warning
    (:func:`lia_spark.studies.table.table_cells`)."""

    mechanisms: tuple[str, ...] = TRAINING_MECHANISMS
    epsilons: tuple[float, ...] = (math.inf, 8.0, 4.0, 2.0, 1.0, 0.1)
    bag_sizes: tuple[int, ...] = (8,)
    paper_convention: bool = False  # also audit each cell's target the paper's way (not a valid bound)

    def validate(self) -> None:
        if not self.mechanisms:
            fail("table.mechanisms", self.mechanisms, "must list at least one training mechanism")
        for name in self.mechanisms:
            if name not in TRAINING_MECHANISMS:
                fail("table.mechanisms", name, f"must be one of {', '.join(TRAINING_MECHANISMS)}")
        if len(set(self.mechanisms)) != len(self.mechanisms):
            fail("table.mechanisms", self.mechanisms, "must not repeat a mechanism")
        if not self.epsilons:
            fail("table.epsilons", self.epsilons, "must list at least one claimed epsilon (inf allowed)")
        for epsilon in self.epsilons:
            if not epsilon > 0:
                fail("table.epsilons", epsilon, "must be > 0 (inf = no noise)")
        if len(set(self.epsilons)) != len(self.epsilons):
            fail("table.epsilons", self.epsilons, "must not repeat an epsilon")
        if set(self.mechanisms) & set(BAG_TRAINING_MECHANISMS) and not self.bag_sizes:
            fail("table.bag_sizes", self.bag_sizes, "must list at least one bag size for the llp mechanisms")
        for bag_size in self.bag_sizes:
            if not 1 <= bag_size <= names.MAX_BAG_SIZE:
                fail("table.bag_sizes", bag_size, f"must be in [1, {names.MAX_BAG_SIZE}]")
        if len(set(self.bag_sizes)) != len(self.bag_sizes):
            fail("table.bag_sizes", self.bag_sizes, "must not repeat a bag size")


LOGLOSS_ATTACKS = ("primes", "binary")

LOGLOSS_NOISES = ("laplace", "gaussian")

@dataclasses.dataclass(frozen=True)
class LoglossConfig:
    """``lia-spark logloss-attack`` (docs/math.md §8): the day whose labels the log-loss oracle holds, the oracle
    settings tried (the exact float64 oracle, each rounding, each noise x scale) and how many blocks are attacked per
    (attack, setting) against the Spark oracle."""

    day: int = 1
    attacks: tuple[str, ...] = LOGLOSS_ATTACKS
    decimals: tuple[int, ...] = (15, 12, 9, 6, 4, 2)
    noises: tuple[str, ...] = LOGLOSS_NOISES
    noise_scales: tuple[float, ...] = (1e-12, 1e-9, 1e-6, 1e-3)
    failure_probability: float = 1e-6
    queries: int = 4
    single_query_rows: int = 10_000

    def validate(self) -> None:
        if self.day < 0:
            fail("logloss.day", self.day, "must be >= 0")
        fail_above("logloss.day", self.day, MAX_DAY, f"row ids hold days 0 to {MAX_DAY}")
        if not self.attacks:
            fail("logloss.attacks", self.attacks, "must list at least one attack")
        for attack in self.attacks:
            if attack not in LOGLOSS_ATTACKS:
                fail("logloss.attacks", attack, f"must be one of {', '.join(LOGLOSS_ATTACKS)}")
        for decimals in self.decimals:
            if not 0 <= decimals <= 17:
                fail("logloss.decimals", decimals, "must be in [0, 17]")
        for noise in self.noises:
            if noise not in LOGLOSS_NOISES:
                fail("logloss.noises", noise, f"must be one of {', '.join(LOGLOSS_NOISES)}")
        for scale in self.noise_scales:
            if not 0.0 < scale < math.inf:
                fail("logloss.noise_scales", scale, "must be finite and > 0")
        for field in ("attacks", "decimals", "noises", "noise_scales"):
            fail_repeats(f"logloss.{field}", getattr(self, field))
        if not 0.0 < self.failure_probability < 1.0:
            fail("logloss.failure_probability", self.failure_probability, "must be in (0, 1)")
        if self.queries < 1:
            fail("logloss.queries", self.queries, "must be >= 1")
        if self.single_query_rows < 1:
            fail("logloss.single_query_rows", self.single_query_rows, "must be >= 1")
