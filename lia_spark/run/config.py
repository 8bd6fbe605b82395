"""Job configuration: YAML files -> validated, frozen dataclasses.

Load order: the dataclass defaults (mirrored in ``conf/defaults.yaml``), then the user's ``--conf FILE``,
then ``section.key=value`` overrides (values parsed as YAML). Every invalid value raises :class:`ConfigError` naming the field
(``section.key``) and the offending value; unknown keys are errors too, so typos never pass silently.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from lia_spark import names
from lia_spark.names import POSTERIOR_MECHANISMS, TRAINING_MECHANISMS

PIPELINE_STAGES = ("data", "train", "posteriors", "utility", "audit", "report")


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range; the message names the field."""


def _fail(field: str, value: Any, requirement: str, fix: str = "") -> typing.NoReturn:
    """Raise "<field>: <requirement>, got <value>[; <fix>]"."""
    raise ConfigError(f"{field}: {requirement}, got {value!r}" + (f"; {fix}" if fix else ""))


def _fail_repeats(field: str, values: Sequence[Any]) -> None:
    """Fail naming ``field`` when ``values`` lists an item twice (every repeat would count the same rows again)."""
    if len(set(values)) != len(values):
        _fail(field, list(values), "must not repeat a value", "list each once")


GLOB_CHARACTERS = "[]{}*?\\"
# keys of earlier versions -> how to say the same now (shown with the unknown-key error)
REPLACED_KEYS = {
    "audit.score": "audit.score and audit.t are replaced by audit.scores, a list of score names: log_ratio, "
                   "difference_t<t> (e.g. audit.scores=[difference_t2] for score difference with t = 2)",
    "audit.t": "audit.score and audit.t are replaced by audit.scores (e.g. audit.scores=[difference_t2])",
    "mechanisms.day": "mechanisms.day is replaced by mechanisms.days: target (models.target_day, the default), a "
                      "list of days (e.g. mechanisms.days=[2]) or all (every day of the data)",
}


def _fail_glob(field: str, path: str) -> None:
    """Fail naming ``field`` when ``path`` holds a character Hadoop reads as a glob pattern."""
    if any(character in GLOB_CHARACTERS for character in path):
        _fail(field, path, "holds a character Hadoop reads as a glob pattern ([ ] { } * ? \\), so Spark would "
              "not find it", "rename the folder or link it under a name without them")


_SPARK_MASTER = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|yarn|"
                           r"(spark|k8s|mesos)://\S+")
_SPARK_REMOTE = re.compile(r"sc://\S+|local(\[(\d+|\*)\])?")


def is_remote_path(path: str) -> bool:
    """True for a URI (``scheme://...`` or ``dbfs:...``) rather than a plain local path."""
    return "://" in path or path.startswith("dbfs:")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Identity of a run: its name, master seed and output folder."""

    name: str = "lia-spark"
    seed: int = 20261122
    output_dir: str = "runs/default"
    force: bool = False
    stages: tuple[str, ...] = PIPELINE_STAGES
    stale_lock_hours: float = 24.0

    def validate(self) -> None:
        if not self.name.strip():
            _fail("run.name", self.name, "must be a non-empty string")
        if not 0 <= self.seed < 2**63:
            _fail("run.seed", self.seed, "must be an integer in [0, 2^63)")
        if not self.output_dir.strip():
            _fail("run.output_dir", self.output_dir, "must be a non-empty path")
        _fail_glob("run.output_dir", self.output_dir)
        if not self.stages:
            _fail("run.stages", self.stages, "must list at least one step",
                  f"choose from {', '.join(PIPELINE_STAGES)}")
        for stage in self.stages:
            if stage not in PIPELINE_STAGES:
                _fail("run.stages", stage, f"must be one of {', '.join(PIPELINE_STAGES)}")
        if len(set(self.stages)) != len(self.stages):
            _fail("run.stages", self.stages, "must not repeat a stage")
        if not 0.0 < self.stale_lock_hours < math.inf:
            _fail("run.stale_lock_hours", self.stale_lock_hours, "must be finite and > 0",
                  "use the hours after which a lock counts as stale, e.g. 24")


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

    def validate(self) -> None:
        if self.remote and not _SPARK_REMOTE.fullmatch(self.remote.strip()):
            _fail("spark.remote", self.remote, "must be a Spark Connect URL",
                  "use sc://host:port (e.g. sc://localhost:15002), local[N] for a local Connect server, or \"\" "
                  "for a classic session")
        if not _SPARK_MASTER.fullmatch(self.master.strip()):
            _fail("spark.master", self.master, "must be a Spark master URL",
                  "use local[N], local[N,F], yarn, spark://host:port or k8s://...")
        if self.shuffle_partitions < 0:
            _fail("spark.shuffle_partitions", self.shuffle_partitions, "must be >= 0 (0 = 4 x cores)")
        if self.arrow_batch_rows < 1:
            _fail("spark.arrow_batch_rows", self.arrow_batch_rows, "must be >= 1")
        if not self.driver_memory[:-1].isdigit() or self.driver_memory[-1].lower() not in "kmgt":
            _fail("spark.driver_memory", self.driver_memory, "must look like 512m or 4g")


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

    def validate(self) -> None:
        if self.source not in ("synthetic", "criteo"):
            _fail("data.source", self.source, "must be one of synthetic, criteo")
        if self.source == "criteo" and not self.criteo_paths:
            _fail("data.criteo_paths", self.criteo_paths, "must list day_N[.gz] or train.txt files when source=criteo")
        for path in self.criteo_paths:
            _fail_glob("data.criteo_paths", path)
            if not is_remote_path(path) and not Path(path).exists():
                _fail("data.criteo_paths", path, "must name existing files or folders")
        if not 0.0 <= self.max_malformed_share <= 1.0:
            _fail("data.max_malformed_share", self.max_malformed_share, "must be in [0, 1]")
        if self.kaggle_days < 1:
            _fail("data.kaggle_days", self.kaggle_days, "must be >= 1")
        _fail_glob("data.parquet_path", self.parquet_path)
        _fail_glob("data.quarantine_path", self.quarantine_path)


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
            _fail("synthetic.rows_per_day", self.rows_per_day, "must be >= 1")
        if not 1 <= self.days <= 24:
            _fail("synthetic.days", self.days, "must be in [1, 24]")
        if not 0.0 < self.click_rate < 1.0:
            _fail("synthetic.click_rate", self.click_rate, "must be in (0, 1)")
        if self.partitions < 0:
            _fail("synthetic.partitions", self.partitions, "must be >= 0 (0 = automatic)")


@dataclasses.dataclass(frozen=True)
class MechanismsConfig:
    """Release mechanisms of docs/math.md §2 applied over an (epsilon, bag size) grid, posteriors per docs/math.md §3.

    The attacker's prior: ``prior_column`` ``auto`` is ``eta`` (the twin's true P(y=1|x), ``<out>/truth``)
    when data.source is synthetic, else ``proxy_prediction`` (the proxy model's prediction for every row of the
    released days, ``<out>/models/priors``, written by the train stage); ``prior_path`` overrides the table
    (:func:`lia_spark.engine.priors.resolve_prior`). ``days``: the released days, ``target``
    (models.target_day), ``all`` (every day of the data) or a list of days
    (:func:`lia_spark.engine.features.released_days`).
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
                _fail("mechanisms.days", self.days, "must be target, all or a list of days",
                      "e.g. mechanisms.days=[1, 2]")
        else:
            if not self.days:
                _fail("mechanisms.days", list(self.days), "must list at least one day", "or use target or all")
            for day in self.days:
                if day < 0:
                    _fail("mechanisms.days", day, "must be >= 0")
            _fail_repeats("mechanisms.days", self.days)
        if not self.prior_column.strip():
            _fail("mechanisms.prior_column", self.prior_column,
                  "must be auto, eta, proxy_prediction or a column of mechanisms.prior_path")
        if not self.names:
            _fail("mechanisms.names", self.names, "must list at least one mechanism")
        for name in self.names:
            if name not in POSTERIOR_MECHANISMS:
                _fail("mechanisms.names", name, f"must be one of {', '.join(POSTERIOR_MECHANISMS)}")
        if set(self.names) - {names.LLP} and not self.epsilons:
            _fail("mechanisms.epsilons", list(self.epsilons), "must list at least one epsilon for "
                  f"{', '.join(sorted(set(self.names) - {names.LLP}))}", "list epsilons or drop those mechanisms")
        if set(self.names) & set(names.BAG_MECHANISMS) and not self.bag_sizes:
            _fail("mechanisms.bag_sizes", list(self.bag_sizes), "must list at least one bag size for the llp "
                  "mechanisms", "list bag sizes or drop them from mechanisms.names")
        _fail_repeats("mechanisms.names", self.names)
        _fail_repeats("mechanisms.epsilons", self.epsilons)
        _fail_repeats("mechanisms.bag_sizes", self.bag_sizes)
        for epsilon in self.epsilons:
            if not (0.0 < epsilon < math.inf):
                _fail("mechanisms.epsilons", epsilon, "must be finite and > 0")
        for bag_size in self.bag_sizes:
            if not 1 <= bag_size <= names.MAX_BAG_SIZE:
                _fail("mechanisms.bag_sizes", bag_size, f"must be in [1, {names.MAX_BAG_SIZE}]")
        if self.bags_per_group < 0:
            _fail("mechanisms.bags_per_group", self.bags_per_group, "must be >= 0 (0 = automatic)")
        if self.rows_per_bagging_unit < 0:
            _fail("mechanisms.rows_per_bagging_unit", self.rows_per_bagging_unit, "must be >= 0 (0 = one unit)")
        if self.plot_sample_rows < 1:
            _fail("mechanisms.plot_sample_rows", self.plot_sample_rows, "must be >= 1")
        _fail_glob("mechanisms.prior_path", self.prior_path)
        if self.bag_sizes and math.lcm(*self.bag_sizes) > 1 << 20:
            _fail("mechanisms.bag_sizes", self.bag_sizes,
                  "must have a least common multiple <= 1048576 (one pandas call holds whole bags of every size)")


@dataclasses.dataclass(frozen=True)
class ModelsConfig:
    """Proxy M' (earlier day, true labels) and target M (later day, privatized labels), docs/math.md §4."""

    library: str = "xgboost"
    execution: str = "in_memory"
    sample_rows_per_day: int = 1_000_000  # in_memory: a seeded sample of about this many rows per day; 0 = whole day
    proxy_day: int = 0
    target_day: int = 1
    training_mechanism: str = names.NONE
    epsilon: float = math.inf
    bag_size: int = 1
    n_estimators: int = names.N_ESTIMATORS
    max_depth: int = names.MAX_DEPTH
    learning_rate: float = names.LEARNING_RATE
    early_stopping_rounds: int = names.EARLY_STOPPING_ROUNDS
    split: tuple[float, ...] = (0.8, 0.04, 0.16)
    hash_buckets: int = 1 << 18
    categorical_encoding: str = "frequency"
    min_category_count: int = 10
    num_workers: int = 0
    utility_epsilons: tuple[float, ...] = (0.1, 1.0, 2.0, 4.0, 8.0, math.inf)
    utility_bag_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    utility_extra_mechanisms: tuple[str, ...] = names.UTILITY_EXTRA_MECHANISMS
    pate_teachers: int = 100
    pate_queries: int = 10_000
    pate_noise: str = "gaussian"
    pate_pseudo_labels: bool = False
    pate_delta: float = 1e-5

    def validate(self) -> None:
        if self.library not in ("xgboost", "catboost"):
            _fail("models.library", self.library, "must be one of xgboost, catboost")
        if self.execution not in ("in_memory", "distributed"):
            _fail("models.execution", self.execution, "must be one of in_memory, distributed")
        if self.proxy_day < 0 or self.target_day < 0:
            _fail("models.proxy_day/target_day", (self.proxy_day, self.target_day), "must be >= 0")
        if self.proxy_day == self.target_day:
            _fail("models.target_day", self.target_day, "must differ from models.proxy_day")
        if self.training_mechanism not in TRAINING_MECHANISMS:
            _fail("models.training_mechanism", self.training_mechanism, f"must be one of {', '.join(TRAINING_MECHANISMS)}")
        if self.execution == "distributed" and self.library != "xgboost":
            _fail("models.execution", self.execution, f"trains xgboost only (xgboost.spark), not models.library="
                  f"{self.library}", "set models.execution=in_memory or models.library=xgboost")
        if self.training_mechanism in names.BAG_MECHANISMS and self.library != "xgboost":
            _fail("models.training_mechanism", self.training_mechanism, "needs learning from bag proportions, which "
                  f"models.library={self.library} lacks", "train a label mechanism or use models.library=xgboost")
        if self.utility_bag_sizes and self.library != "xgboost":
            _fail("models.utility_bag_sizes", list(self.utility_bag_sizes), "the utility grid's llp settings need "
                  f"proportion matching, which models.library={self.library} lacks",
                  "set models.utility_bag_sizes=[] or models.library=xgboost")
        if not self.epsilon > 0:
            _fail("models.epsilon", self.epsilon, "must be > 0 (inf = no noise)")
        if self.bag_size < 1:
            _fail("models.bag_size", self.bag_size, "must be >= 1")
        if self.n_estimators < 1:
            _fail("models.n_estimators", self.n_estimators, "must be >= 1")
        if not 1 <= self.max_depth <= 16:
            _fail("models.max_depth", self.max_depth, "must be in [1, 16]")
        if not 0.0 < self.learning_rate <= 1.0:
            _fail("models.learning_rate", self.learning_rate, "must be in (0, 1]")
        if self.early_stopping_rounds < 0:
            _fail("models.early_stopping_rounds", self.early_stopping_rounds, "must be >= 0 (0 = off)")
        if len(self.split) != 3 or min(self.split) <= 0 or abs(sum(self.split) - 1.0) > 1e-9:
            _fail("models.split", self.split, "must be three positive shares (train, validation, test) summing to 1")
        if self.hash_buckets < 2:
            _fail("models.hash_buckets", self.hash_buckets, "must be >= 2")
        if self.categorical_encoding not in ("frequency", "hash"):
            _fail("models.categorical_encoding", self.categorical_encoding, "must be one of frequency, hash")
        if self.min_category_count < 1:
            _fail("models.min_category_count", self.min_category_count, "must be >= 1")
        if self.sample_rows_per_day < 0:
            _fail("models.sample_rows_per_day", self.sample_rows_per_day, "must be >= 0 (0 = the whole day)")
        if self.num_workers < 0:
            _fail("models.num_workers", self.num_workers, "must be >= 0 (0 = Spark's default parallelism)")
        for epsilon in self.utility_epsilons:
            if not epsilon > 0:
                _fail("models.utility_epsilons", epsilon, "must be > 0")
        for bag_size in self.utility_bag_sizes:
            if bag_size < 1:
                _fail("models.utility_bag_sizes", bag_size, "must be >= 1")
        if self.pate_teachers < 1:
            _fail("models.pate_teachers", self.pate_teachers, "must be >= 1")
        if self.pate_queries < 1:
            _fail("models.pate_queries", self.pate_queries, "must be >= 1")
        if self.pate_noise not in ("gaussian", "laplace"):
            _fail("models.pate_noise", self.pate_noise, "must be one of gaussian, laplace")
        if not 0.0 < self.pate_delta < 1.0:
            _fail("models.pate_delta", self.pate_delta, "must be in (0, 1)")
        if self.training_mechanism == names.PATE and (self.library, self.execution) != ("xgboost", "in_memory"):
            _fail("models.training_mechanism", self.training_mechanism,
                  "pate needs models.library=xgboost and models.execution=in_memory")
        if not self.utility_epsilons:
            _fail("models.utility_epsilons", list(self.utility_epsilons), "must list at least one epsilon "
                  "(inf = true labels)")
        _fail_repeats("models.utility_epsilons", self.utility_epsilons)
        _fail_repeats("models.utility_bag_sizes", self.utility_bag_sizes)
        for name in self.utility_extra_mechanisms:
            if name not in names.UTILITY_EXTRA_MECHANISMS:
                _fail("models.utility_extra_mechanisms", name,
                      f"must be one of {', '.join(names.UTILITY_EXTRA_MECHANISMS)}",
                      "list some of them, or [] for the utility grid's rr and llp family only")
        _fail_repeats("models.utility_extra_mechanisms", self.utility_extra_mechanisms)


@dataclasses.dataclass(frozen=True)
class AuditConfig:
    """Observational one-run audit (docs/math.md §5) and its epsilon lower bounds (docs/math.md §6)."""

    attack: str = names.LABEL_INFERENCE
    design: str = names.INJECTED  # injected labels (valid for any proxy) | observational (a given model, needs tau)
    counterfactual: str = names.PROXY_DRAW  # injected y1: proxy (y1 ~ M'(x)) | flip (1 - y0 on flip_share)
    flip_share: float = 0.05
    membership_candidates: int = 20_000
    repetitions: int = 100
    scores: tuple[str, ...] = (names.LOG_RATIO,)  # the tightest valid attack of the study in BENCHMARKS.md
    confidence: float = 0.95
    delta: float = 0.0
    tau: float = 0.0
    canaries: int = 0
    sweep_step_percent: float = 1.0
    extra_guess_share: float = 0.001
    convention: str = names.BONFERRONI
    bounds: tuple[str, ...] = names.BOUND_FAMILIES
    table_bounds: tuple[str, ...] = (names.BINOMIAL,)
    canary_path: str = ""

    @property
    def game(self) -> str:
        """The game the audit plays: audit.design under label inference, ``membership`` for the baseline (which
        draws its own membership coins, so neither design applies)."""
        return self.design if self.attack == names.LABEL_INFERENCE else names.MEMBERSHIP

    def validate(self) -> None:
        if self.attack not in names.ATTACKS:
            _fail("audit.attack", self.attack, f"must be one of {', '.join(names.ATTACKS)}")
        if self.design not in names.DESIGNS:
            _fail("audit.design", self.design, f"must be one of {', '.join(names.DESIGNS)}")
        if self.counterfactual not in names.COUNTERFACTUALS:
            _fail("audit.counterfactual", self.counterfactual, f"must be one of {', '.join(names.COUNTERFACTUALS)}")
        if not 0.0 < self.flip_share <= 1.0:
            _fail("audit.flip_share", self.flip_share, "must be in (0, 1]")
        if self.membership_candidates < 2:
            _fail("audit.membership_candidates", self.membership_candidates, "must be >= 2")
        if self.repetitions < 1:
            _fail("audit.repetitions", self.repetitions, "must be >= 1")
        if not self.scores:
            _fail("audit.scores", list(self.scores), "must name at least one score (e.g. [log_ratio])")
        for attack in self.scores:
            try:
                names.score_parts(attack)
            except ValueError as error:
                _fail("audit.scores", attack, "must be log_ratio or difference_t<t> with a finite number t >= 0 "
                      "(e.g. difference_t2)", str(error))
        _fail_repeats("audit.scores", self.scores)
        if not 0.0 < self.confidence < 1.0:
            _fail("audit.confidence", self.confidence, "must be in (0, 1)")
        if not 0.0 <= self.delta < 1.0:
            _fail("audit.delta", self.delta, "must be in [0, 1)")
        if not 0.0 <= self.tau < 1.0:
            _fail("audit.tau", self.tau, "must be in [0, 1)")
        if self.canaries < 0:
            _fail("audit.canaries", self.canaries, "must be >= 0 (0 = every training row)")
        if not 0.0 < self.sweep_step_percent <= 100.0:
            _fail("audit.sweep_step_percent", self.sweep_step_percent, "must be in (0, 100]")
        if not 0.0 <= self.extra_guess_share <= 1.0:
            _fail("audit.extra_guess_share", self.extra_guess_share, "must be in [0, 1]")
        if self.convention not in names.CONVENTIONS:
            _fail("audit.convention", self.convention, f"must be one of {', '.join(names.CONVENTIONS)}")
        for method in self.bounds:
            if method not in names.BOUND_FAMILIES:
                _fail("audit.bounds", method, f"must be one of {', '.join(names.BOUND_FAMILIES)}")
        for method in self.table_bounds:
            if method not in self.bounds:
                _fail("audit.table_bounds", method, "must be one of the families in audit.bounds")
        _fail_repeats("audit.bounds", self.bounds)
        _fail_repeats("audit.table_bounds", self.table_bounds)
        _fail_glob("audit.canary_path", self.canary_path)


@dataclasses.dataclass(frozen=True)
class TrackingConfig:
    """MLflow tracking: empty URI = $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working directory."""

    enabled: bool = True
    tracking_uri: str = ""
    experiment: str = "lia-spark"
    log_models: bool = True
    timeout_seconds: float = 10.0
    log_row_data: bool = False

    def validate(self) -> None:
        if not self.experiment.strip():
            _fail("tracking.experiment", self.experiment, "must be a non-empty name")
        if not 0.0 < self.timeout_seconds <= 600.0:
            _fail("tracking.timeout_seconds", self.timeout_seconds, "must be in (0, 600]")


@dataclasses.dataclass(frozen=True)
class TableConfig:
    """``lia-spark audit-table``: the grid of training mechanisms x claimed epsilons whose targets are trained and
    audited (Kalemaj et al., "Observational Auditing of Label Privacy", 2025, Table 2). ``none`` is one baseline
    cell (epsilon = inf); plain ``llp`` has no epsilon (one cell per bag size, claimed epsilon = inf); the other
    LLP mechanisms get one cell per epsilon and bag size; label mechanisms one cell per epsilon. Combinations the
    configured models.library / models.execution cannot train are skipped with a warning
    (:func:`lia_spark.studies.table.table_cells`)."""

    mechanisms: tuple[str, ...] = (names.NONE, names.RR, names.RR_WITH_PRIOR, names.RR_DEBIASED, names.LP_2ST,
                                   *names.BAG_MECHANISMS, names.PATE)
    epsilons: tuple[float, ...] = (math.inf, 8.0, 4.0, 2.0, 1.0, 0.1)
    bag_sizes: tuple[int, ...] = (8,)

    def validate(self) -> None:
        if not self.mechanisms:
            _fail("table.mechanisms", self.mechanisms, "must list at least one training mechanism")
        for name in self.mechanisms:
            if name not in TRAINING_MECHANISMS:
                _fail("table.mechanisms", name, f"must be one of {', '.join(TRAINING_MECHANISMS)}")
        if len(set(self.mechanisms)) != len(self.mechanisms):
            _fail("table.mechanisms", self.mechanisms, "must not repeat a mechanism")
        if not self.epsilons:
            _fail("table.epsilons", self.epsilons, "must list at least one claimed epsilon (inf allowed)")
        for epsilon in self.epsilons:
            if not epsilon > 0:
                _fail("table.epsilons", epsilon, "must be > 0 (inf = no noise)")
        if len(set(self.epsilons)) != len(self.epsilons):
            _fail("table.epsilons", self.epsilons, "must not repeat an epsilon")
        if any(name in names.BAG_MECHANISMS for name in self.mechanisms) and not self.bag_sizes:
            _fail("table.bag_sizes", self.bag_sizes, "must list at least one bag size for the llp mechanisms")
        for bag_size in self.bag_sizes:
            if not 1 <= bag_size <= names.MAX_BAG_SIZE:
                _fail("table.bag_sizes", bag_size, f"must be in [1, {names.MAX_BAG_SIZE}]")
        if len(set(self.bag_sizes)) != len(self.bag_sizes):
            _fail("table.bag_sizes", self.bag_sizes, "must not repeat a bag size")


LOGLOSS_ATTACKS = ("primes", "binary")
LOGLOSS_NOISES = ("laplace", "gaussian")


@dataclasses.dataclass(frozen=True)
class LoglossConfig:
    """``lia-spark logloss-attack`` (docs/math.md §8): the day whose labels the log-loss oracle holds, the oracle settings
    tried (the exact float64 oracle, each rounding, each noise x scale) and how many blocks are attacked per
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
            _fail("logloss.day", self.day, "must be >= 0")
        if not self.attacks:
            _fail("logloss.attacks", self.attacks, "must list at least one attack")
        for attack in self.attacks:
            if attack not in LOGLOSS_ATTACKS:
                _fail("logloss.attacks", attack, f"must be one of {', '.join(LOGLOSS_ATTACKS)}")
        for decimals in self.decimals:
            if not 0 <= decimals <= 17:
                _fail("logloss.decimals", decimals, "must be in [0, 17]")
        for noise in self.noises:
            if noise not in LOGLOSS_NOISES:
                _fail("logloss.noises", noise, f"must be one of {', '.join(LOGLOSS_NOISES)}")
        for scale in self.noise_scales:
            if not 0.0 < scale < math.inf:
                _fail("logloss.noise_scales", scale, "must be finite and > 0")
        if not 0.0 < self.failure_probability < 1.0:
            _fail("logloss.failure_probability", self.failure_probability, "must be in (0, 1)")
        if self.queries < 1:
            _fail("logloss.queries", self.queries, "must be >= 1")
        if self.single_query_rows < 1:
            _fail("logloss.single_query_rows", self.single_query_rows, "must be >= 1")


@dataclasses.dataclass(frozen=True)
class Config:
    """The whole job configuration, one frozen section per stage."""

    run: RunConfig = dataclasses.field(default_factory=RunConfig)
    spark: SparkConfig = dataclasses.field(default_factory=SparkConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    synthetic: SyntheticConfig = dataclasses.field(default_factory=SyntheticConfig)
    mechanisms: MechanismsConfig = dataclasses.field(default_factory=MechanismsConfig)
    models: ModelsConfig = dataclasses.field(default_factory=ModelsConfig)
    audit: AuditConfig = dataclasses.field(default_factory=AuditConfig)
    tracking: TrackingConfig = dataclasses.field(default_factory=TrackingConfig)
    table: TableConfig = dataclasses.field(default_factory=TableConfig)
    logloss: LoglossConfig = dataclasses.field(default_factory=LoglossConfig)

    @property
    def parquet_path(self) -> str:
        """Day-partitioned Parquet table; defaults to <run.output_dir>/data."""
        return self.data.parquet_path or os.path.join(self.run.output_dir, "data")

    @property
    def quarantine_path(self) -> str:
        """Malformed input rows; defaults to <run.output_dir>/quarantine."""
        return self.data.quarantine_path or os.path.join(self.run.output_dir, "quarantine")

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (YAML/JSON friendly) of every resolved value."""
        return {
            section.name: {key: (list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v)
                           for key, v in dataclasses.asdict(getattr(self, section.name)).items()}
            for section in dataclasses.fields(self)
        }


_FLOAT_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _float_text(field: str, text: str) -> float:
    """A number written as text: ``1e-5``, ``1E-5``, ``.5``, ``5.`` (YAML 1.1 reads these as strings), ``inf``,
    ``.inf``, ``infinity`` (either sign)."""
    stripped = text.strip().lower()
    unsigned = stripped.lstrip("+-")
    if unsigned in ("inf", ".inf", "infinity"):
        return -math.inf if stripped.startswith("-") else math.inf
    if not _FLOAT_TEXT.fullmatch(stripped):
        _fail(field, text, "must be a number (e.g. 0.5, 1e-5, inf)")
    return float(stripped)


def _coerce(field: str, value: Any, annotation: Any) -> Any:
    """Convert a YAML value to the field's declared type, or fail naming the field."""
    origin = typing.get_origin(annotation)
    if origin is types.UnionType:  # a keyword (str) or the other type, e.g. str | tuple[int, ...]
        if isinstance(value, str) and str in typing.get_args(annotation):
            return value
        (other,) = [arm for arm in typing.get_args(annotation) if arm is not str]
        if typing.get_origin(other) is tuple and (isinstance(value, (str, bytes)) or not isinstance(value, Sequence)):
            _fail(field, value, "must be a keyword or a list", f"see conf/defaults.yaml for {field}, e.g. [{value}]")
        return _coerce(field, value, other)
    if origin is tuple:
        (item_type, _) = typing.get_args(annotation)
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            _fail(field, value, "must be a list")
        return tuple(_coerce(field, item, item_type) for item in value)
    if origin is collections.abc.Mapping:
        if not isinstance(value, Mapping):
            _fail(field, value, "must be a mapping")
        return {str(k): str(v) for k, v in value.items()}
    if annotation is bool:
        if not isinstance(value, bool):
            _fail(field, value, "must be true or false")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(field, value, "must be an integer")
        return value
    if annotation is float:
        if isinstance(value, str):
            value = _float_text(field, value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            _fail(field, value, "must be a number")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            _fail(field, value, "must be a string")
        return value
    raise TypeError(f"unsupported config type {annotation!r} for {field}")


def _build_section(name: str, cls: type, values: Mapping[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in values:
        if key not in known:
            replaced = REPLACED_KEYS.get(f"{name}.{key}", "")
            raise ConfigError(f"{name}.{key}: unknown key (known: {', '.join(sorted(known))}), got {values[key]!r}"
                              + (f"; {replaced}" if replaced else ""))
    kwargs = {key: _coerce(f"{name}.{key}", value, hints[key]) for key, value in values.items()}
    section = cls(**kwargs)
    section.validate()
    return section


def _merge(base: dict[str, Any], update: Mapping[str, Any], origin: str) -> dict[str, Any]:
    merged = {key: dict(value) for key, value in base.items()}
    for section, values in update.items():
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise ConfigError(f"{section}: must be a mapping of keys in {origin}, got {values!r}")
        merged.setdefault(section, {}).update(values)
    return merged


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A YAML mapping names one key twice (plain YAML keeps the last value silently)."""


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping with a repeated key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise DuplicateKeyError(problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"--conf: file not found, got {str(path)!r}")
    try:
        content = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeyLoader)  # noqa: S506 - a safe loader
    except DuplicateKeyError as error:
        raise ConfigError(f"--conf: {error.problem} in {path} (line {error.problem_mark.line + 1}), got the key "
                          "twice; keep one of them") from error
    except yaml.YAMLError as error:
        raise ConfigError(f"--conf: {path} is not valid YAML ({error}), got the file's text") from error
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise ConfigError(f"--conf: {path} must hold a mapping of sections, got {type(content).__name__}")
    return content


def parse_override(text: str) -> tuple[str, str, Any]:
    """Split ``section.key=value`` into its parts; the value is parsed as YAML (``[1, 2]``, ``inf``, ``true``)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"override: must look like section.key=value, got {text!r}")
    dotted, raw = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as error:
        raise ConfigError(f"{dotted}: value is not valid YAML ({error}), got {raw!r}") from error
    return section, key, value


def load_config(path: str | os.PathLike | None = None, overrides: Sequence[str] = ()) -> Config:
    """Defaults <- YAML file <- ``section.key=value`` overrides, validated into a frozen :class:`Config`."""
    values: dict[str, Any] = {}
    if path is not None:
        values = _merge(values, _read_yaml(Path(path)), str(path))
    for text in overrides:
        section, key, value = parse_override(text)
        values = _merge(values, {section: {key: value}}, "overrides")
    return config_from_dict(values)


def config_from_dict(values: Mapping[str, Any]) -> Config:
    """Validate a nested mapping of sections (missing keys take the dataclass defaults)."""
    sections = {f.name: f.type for f in dataclasses.fields(Config)}
    hints = typing.get_type_hints(Config)
    for section in values:
        if section not in sections:
            raise ConfigError(f"{section}: unknown section (known: {', '.join(sections)}), got {values[section]!r}")
    built = {name: _build_section(name, hints[name], values.get(name) or {}) for name in sections}
    config = Config(**built)
    _check_synthetic_days(config)
    return config


def _check_synthetic_days(config: Config) -> None:
    """The synthetic twin generated into the default data folder holds days 0..synthetic.days-1: every day
    a stage reads must be one of them."""
    if config.data.source != "synthetic" or config.data.parquet_path:
        return
    for field, value in day_fields(config).items():
        if any(day >= config.synthetic.days for day in (value if isinstance(value, list) else [value])):
            _fail(field, value, f"names a day the synthetic twin does not hold (synthetic.days={config.synthetic.days}"
                  f" makes days 0..{config.synthetic.days - 1})", "choose among them or raise synthetic.days")


def day_fields(config: Config) -> dict[str, int | list[int]]:
    """Every config field that names days of the data, with its value (a day, or a list of days); mechanisms.days
    only when it lists days (target is models.target_day, all is every day there is)."""
    fields: dict[str, int | list[int]] = {"models.proxy_day": config.models.proxy_day,
                                          "models.target_day": config.models.target_day,
                                          "logloss.day": config.logloss.day}
    if not isinstance(config.mechanisms.days, str):
        fields["mechanisms.days"] = list(config.mechanisms.days)
    return fields
