"""The configuration sections of the stages that train and audit models: ``models`` (the train stage; its library,
boosting and encoding are also the utility stage's and PATE's), ``pate``, ``utility`` (the utility stage's grid)
and ``audit`` (the audit stage).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from lia_spark import names
from lia_spark.kernels import hashing, pate
from lia_spark.kernels.audit_designs import AuditDesign, played_game
from lia_spark.kernels.mechanism_registry import (TRAINING_MECHANISMS, UTILITY_EXTRA_MECHANISMS, LabelMechanism,
                                                  label_mechanism)
from lia_spark.kernels.model_libraries import LIBRARIES, ModelLibrary
from lia_spark.names import EXECUTIONS, IN_MEMORY, MAX_DAY, RUN_KEY_SHIFT, XGBOOST
from lia_spark.run.checks import JAVA_INT_MAX, ConfigError, fail, fail_above, fail_glob, fail_repeats, number_from_text

NOT_STATED = "none"  # audit.claimed_epsilon of a target whose claim is not stated


@dataclasses.dataclass(frozen=True)
class ModelsConfig:
    """The train stage: proxy M' (earlier day, true labels) and target M (later day, privatized labels), docs/math.md
    §4; the library, execution path, boosting and encoding settings are also the utility stage's and PATE's."""

    library: str = XGBOOST
    execution: str = IN_MEMORY
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

    @property
    def model_library(self) -> ModelLibrary:
        """The :class:`lia_spark.kernels.model_libraries.ModelLibrary` called ``library`` (checked by validate)."""
        return LIBRARIES[self.library]

    @property
    def mechanism(self) -> LabelMechanism:
        """The :class:`lia_spark.kernels.mechanism_registry.LabelMechanism` called ``training_mechanism``."""
        return label_mechanism(self.training_mechanism, "models.training_mechanism")

    @property
    def split_shares(self) -> tuple[float, float, float]:
        """``split`` as (train, validation, test) shares (three, checked by validate)."""
        train, validation, test = self.split
        return train, validation, test

    def validate(self) -> None:
        if self.library not in LIBRARIES:
            fail("models.library", self.library, f"must be one of {', '.join(LIBRARIES)}")
        if self.execution not in EXECUTIONS:
            fail("models.execution", self.execution, f"must be one of {', '.join(EXECUTIONS)}")
        if self.proxy_day < 0 or self.target_day < 0:
            fail("models.proxy_day/target_day", (self.proxy_day, self.target_day), "must be >= 0")
        fail_above("models.proxy_day", self.proxy_day, MAX_DAY, f"row ids hold days 0 to {MAX_DAY}")
        fail_above("models.target_day", self.target_day, MAX_DAY, f"row ids hold days 0 to {MAX_DAY}")
        if self.proxy_day == self.target_day:
            fail("models.target_day", self.target_day, "must differ from models.proxy_day")
        if self.training_mechanism not in TRAINING_MECHANISMS:
            fail("models.training_mechanism", self.training_mechanism,
                 f"must be one of {', '.join(TRAINING_MECHANISMS)}")
        if not self.epsilon > 0:
            fail("models.epsilon", self.epsilon, "must be > 0 (inf = no noise)")
        if self.bag_size < 1:
            fail("models.bag_size", self.bag_size, "must be >= 1")
        if self.n_estimators < 1:
            fail("models.n_estimators", self.n_estimators, "must be >= 1")
        if not 1 <= self.max_depth <= 16:
            fail("models.max_depth", self.max_depth, "must be in [1, 16]")
        if not 0.0 < self.learning_rate <= 1.0:
            fail("models.learning_rate", self.learning_rate, "must be in (0, 1]")
        if self.early_stopping_rounds < 0:
            fail("models.early_stopping_rounds", self.early_stopping_rounds, "must be >= 0 (0 = off)")
        if len(self.split) != 3 or min(self.split) <= 0 or abs(sum(self.split) - 1.0) > 1e-9:
            fail("models.split", self.split, "must be three positive shares (train, validation, test) summing to 1")
        if self.hash_buckets < 2:
            fail("models.hash_buckets", self.hash_buckets, "must be >= 2")
        if self.categorical_encoding not in ("frequency", "hash"):
            fail("models.categorical_encoding", self.categorical_encoding, "must be one of frequency, hash")
        if self.min_category_count < 1:
            fail("models.min_category_count", self.min_category_count, "must be >= 1")
        if self.sample_rows_per_day < 0:
            fail("models.sample_rows_per_day", self.sample_rows_per_day, "must be >= 0 (0 = the whole day)")
        if self.num_workers < 0:
            fail("models.num_workers", self.num_workers, "must be >= 0 (0 = Spark's default parallelism)")
        fail_above("models.num_workers", self.num_workers, JAVA_INT_MAX, "Spark counts its tasks in a Java int")


@dataclasses.dataclass(frozen=True)
class PateConfig:
    """PATE (docs/math.md §4.6) wherever a target is trained with it (models.training_mechanism=pate, the utility
    grid, the audit table): T teachers on disjoint row-id-seeded partitions of all training rows, Q student queries
    drawn from those rows, the noise of the vote counts, the student's labels, pseudo-labels, and the delta of its
    accounting. ``protocol`` (lia_spark | published) sets queries, noise, student_labels and delta where they are
    null, the accounting and the teachers' and student's trees (:data:`lia_spark.kernels.pate.PROTOCOL_SETTINGS`)."""

    protocol: str = "lia_spark"
    teachers: int = 100
    queries: int | None = None
    noise: str | None = None
    student_labels: str | None = None
    pseudo_labels: bool = False
    delta: float | None = None

    def validate(self) -> None:
        if self.protocol not in pate.PROTOCOLS:
            fail("pate.protocol", self.protocol, f"must be one of {', '.join(pate.PROTOCOLS)}",
                 "lia_spark: 10,000 queries, GNMax, soft labels, RDP accounting; published: Wu et al.'s Criteo run")
        if self.teachers < 1:
            fail("pate.teachers", self.teachers, "must be >= 1")
        if self.queries is not None and self.queries < 1:
            fail("pate.queries", self.queries, "must be >= 1")
        if self.noise not in (None, *pate.NOISES):
            fail("pate.noise", self.noise, f"must be one of {', '.join(pate.NOISES)}")
        if self.student_labels not in (None, *pate.STUDENT_LABELS):
            fail("pate.student_labels", self.student_labels, "must be one of share, sampled",
                 "share: the student fits the noisy vote share (lia_spark); sampled: a label drawn from it")
        if self.delta is not None and not 0.0 < self.delta < 1.0:
            fail("pate.delta", self.delta, "must be in (0, 1)")
        settings = self.settings()
        if settings.accounting == pate.DATA_INDEPENDENT and settings.noise != pate.LAPLACE:
            fail("pate.noise", settings.noise, f"pate.protocol={self.protocol} accounts Laplace noise only "
                 "(the data-independent bound)", "set pate.noise=laplace or leave it unset")

    def settings(self, **fields: Any) -> pate.PateSettings:
        """The PATE settings this section resolves to (the protocol's where a field is null), ``fields`` added."""
        return pate.PateSettings.of_protocol(self.protocol, teachers=self.teachers, queries=self.queries,
                                             noise=self.noise, student_labels=self.student_labels,
                                             pseudo_labels=self.pseudo_labels, delta=self.delta, **fields)


@dataclasses.dataclass(frozen=True)
class UtilityConfig:
    """The utility stage's grid (docs/math.md §4.5): the target trained per epsilon of RR and the noisy LLP
    mechanisms, per bag size of the LLP family, plus the extra training mechanisms."""

    epsilons: tuple[float, ...] = (0.1, 1.0, 2.0, 4.0, 8.0, math.inf)
    bag_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    extra_mechanisms: tuple[str, ...] = UTILITY_EXTRA_MECHANISMS

    def validate(self) -> None:
        for epsilon in self.epsilons:
            if not epsilon > 0:
                fail("utility.epsilons", epsilon, "must be > 0")
        for bag_size in self.bag_sizes:
            if bag_size < 1:
                fail("utility.bag_sizes", bag_size, "must be >= 1")
        if not self.epsilons:
            fail("utility.epsilons", list(self.epsilons), "must list at least one epsilon (inf = true labels)")
        fail_repeats("utility.epsilons", self.epsilons)
        fail_repeats("utility.bag_sizes", self.bag_sizes)
        for name in self.extra_mechanisms:
            if name not in UTILITY_EXTRA_MECHANISMS:
                fail("utility.extra_mechanisms", name, f"must be one of {', '.join(UTILITY_EXTRA_MECHANISMS)}",
                      "list some of them, or [] for the utility grid's rr and llp family only")
        fail_repeats("utility.extra_mechanisms", self.extra_mechanisms)


@dataclasses.dataclass(frozen=True)
class AuditConfig:
    """Observational one-run audit (docs/math.md §5) and its epsilon lower bounds (docs/math.md §6)."""

    attack: str = names.LABEL_INFERENCE
    design: str = names.INJECTED  # injected labels (valid for any proxy) | observational (a given model, needs tau)
    counterfactual: str = names.PROXY_DRAW  # injected y1: proxy (y1 ~ M'(x)) | flip (1 - y0 on flip_share)
    flip_share: float = 0.05
    membership_candidates: int = 20_000
    repetitions: int = 100
    scores: tuple[str, ...] = (names.LOG_RATIO, f"{names.DIFFERENCE_PREFIX}2")  # BENCHMARKS.md: audit power
    recalibrate: str = names.RECALIBRATE_AUTO  # auto (the proxy mapped, shadows not) | none | target | proxy
    shadows: int = 4  # injected design: label-blind shadow fits with fresh coins (even; 0 = none)
    runs: int = 1  # injected design: training runs pooled into one game (R - 1 extra target fits, own coins each)
    baseline: str = names.BASELINE_AUTO  # auto (the shadows where fitted, else the proxy) | both | proxy | shadows
    confidence: float = 0.95
    delta: float = 0.0
    tau: float = 0.0
    canaries: int = 0
    sweep: str = names.GEOMETRIC  # geometric: c' = m 10^(-j/points_per_decade) down to sweep_smallest_guesses | linear
    sweep_points_per_decade: int = 4
    sweep_smallest_guesses: int = 10
    sweep_step_percent: float = 1.0  # linear: c' = 1%, 2%, ..., 100% of m, plus extra_guess_share m
    extra_guess_share: float = 0.001
    convention: str = names.BONFERRONI
    bounds: tuple[str, ...] = names.BOUND_FAMILIES
    table_bounds: tuple[str, ...] = (names.BINOMIAL,)
    canary_path: str = ""
    model_uri: str = ""  # a model trained outside lia_spark on the inject stage's export (runs:/, models:/, a folder)
    predictions_path: str = ""  # or its predictions: a table of (row_id, prediction) of the export's rows
    claimed_epsilon: str | float = NOT_STATED  # the claim of a target this project did not train (none: not stated)
    fail_on_finding: bool = False  # true: a FINDING (eps_lb above the claimed eps) exits with code 3
    export_tsv: bool = False  # inject: also write the export as a Criteo day file (inject/criteo/day_N)
    export_gzip: bool = False  # inject: gzip that file (day_N.gz)
    key_path: str = ""  # the audit key's file (read if it exists, else created there); "" = <run.output_dir>/audit_key

    @property
    def audit_design(self) -> AuditDesign:
        """The game the audit plays (:func:`lia_spark.kernels.audit_designs.played_game`): audit.design under label
        inference, the membership baseline with audit.attack=membership."""
        return played_game(self.attack, self.design)

    def baseline_columns(self, available: tuple[str, ...]) -> tuple[str, ...]:
        """The prediction columns audit.baseline compares the target's with, given the ``available`` baseline columns
        of the canary table (proxy_prediction, shadow_prediction where fitted): auto the shadows' where available,
        else the proxy's; both every available one; proxy or shadows that one (perhaps not available: the caller
        says so)."""
        if self.baseline == names.BASELINE_AUTO:
            return (names.SHADOW_PREDICTION,) if names.SHADOW_PREDICTION in available else (names.PROXY_PREDICTION,)
        if self.baseline == names.BASELINE_BOTH:
            return tuple(column for column in (names.PROXY_PREDICTION, names.SHADOW_PREDICTION) if column in available)
        return ({names.BASELINE_PROXY: names.PROXY_PREDICTION, names.BASELINE_SHADOWS: names.SHADOW_PREDICTION}
                [self.baseline],)

    def recalibration(self, baseline: str) -> str:
        """audit.recalibrate for the scores against one baseline (``proxy`` or ``shadows``, docs/math.md §5.11): auto
        maps the proxy onto the target's scale (h = E[M | M']) and leaves the shadows as they are (the target's own
        pipeline fitted again, already on its scale)."""
        if self.recalibrate != names.RECALIBRATE_AUTO:
            return self.recalibrate
        return names.RECALIBRATE_NONE if baseline == names.BASELINE_SHADOWS else names.RECALIBRATE_PROXY

    @property
    def given_target(self) -> str:
        """The field naming a target this project did not train (audit.model_uri, audit.predictions_path,
        audit.canary_path), "" when the train stage's target is audited."""
        return next((field for field, value in (("audit.model_uri", self.model_uri),
                                                ("audit.predictions_path", self.predictions_path),
                                                ("audit.canary_path", self.canary_path)) if value), "")

    @property
    def stated_claim(self) -> float:
        """audit.claimed_epsilon as a number (inf: no privacy claimed), NaN when not stated."""
        value = self.claimed_epsilon
        if isinstance(value, str):
            if value.strip().lower() == NOT_STATED:
                return math.nan
            return number_from_text("audit.claimed_epsilon", value, f"must be a number >= 0, inf or {NOT_STATED}")
        return float(value)

    def validate(self) -> None:
        if self.attack not in names.ATTACKS:
            fail("audit.attack", self.attack, f"must be one of {', '.join(names.ATTACKS)}")
        if self.design not in names.DESIGNS:
            fail("audit.design", self.design, f"must be one of {', '.join(names.DESIGNS)}")
        self._validate_given_target()
        if self.recalibrate not in names.RECALIBRATIONS:
            fail("audit.recalibrate", self.recalibrate, f"must be one of {', '.join(names.RECALIBRATIONS)}",
                 "auto (default) maps the proxy and not the shadows; target maps M onto the baseline; proxy maps "
                 "the baseline onto M (docs/math.md §5.11)")
        if self.shadows < 0 or self.shadows % 2:
            fail("audit.shadows", self.shadows, "must be an even number >= 0 (0 = no shadow fits)",
                 "shadows come in pairs with complementary coins (docs/math.md §5.13)")
        if isinstance(self.runs, bool) or not isinstance(self.runs, int) or self.runs < 1:
            fail("audit.runs", self.runs, "must be an integer >= 1 (1 = the target's own game)")
        fail_above("audit.runs", self.runs, 1 << (63 - RUN_KEY_SHIFT), f"2^{63 - RUN_KEY_SHIFT}: a pooled canary's "
                   f"key is run << {RUN_KEY_SHIFT} | row_id, a 64-bit integer")
        if self.runs > 1 and not self.audit_design.refits_target:
            fail("audit.runs", self.runs, f"above 1 pools training runs of the injected game (audit.design="
                 f"{names.INJECTED}, audit.attack={names.LABEL_INFERENCE}; here {self.design}, {self.attack})",
                 "use audit.runs=1")
        if self.runs > 1 and self.given_target:
            fail("audit.runs", self.runs, f"above 1 sets how many runs the train stage fits, and {self.given_target} "
                 "gives the audited target instead (a canary table's own runs are pooled as it holds them)",
                 "use audit.runs=1")
        if self.baseline not in names.BASELINES:
            fail("audit.baseline", self.baseline, f"must be one of {', '.join(names.BASELINES)}")
        if self.baseline == names.BASELINE_SHADOWS and self.shadows == 0 and not self.canary_path:
            fail("audit.baseline", self.baseline, "needs shadow fits: set audit.shadows to an even number >= 2")
        if self.counterfactual not in names.COUNTERFACTUALS:
            fail("audit.counterfactual", self.counterfactual, f"must be one of {', '.join(names.COUNTERFACTUALS)}")
        if not 0.0 < self.flip_share <= 1.0:
            fail("audit.flip_share", self.flip_share, "must be in (0, 1]")
        if self.membership_candidates < 2:
            fail("audit.membership_candidates", self.membership_candidates, "must be >= 2")
        if self.repetitions < 1:
            fail("audit.repetitions", self.repetitions, "must be >= 1")
        if not self.scores:
            fail("audit.scores", list(self.scores), "must name at least one score (e.g. [log_ratio])")
        for score in self.scores:
            try:
                names.score_parts(score)
            except ValueError as error:
                fail("audit.scores", score, "must be log_ratio or difference_t<t> with a finite number t >= 0 "
                      "(e.g. difference_t2)", str(error))
        fail_repeats("audit.scores", self.scores)
        if not 0.0 < self.confidence < 1.0:
            fail("audit.confidence", self.confidence, "must be in (0, 1)")
        if not 0.0 <= self.delta < 1.0:
            fail("audit.delta", self.delta, "must be in [0, 1)")
        if not 0.0 <= self.tau < 1.0:
            fail("audit.tau", self.tau, "must be in [0, 1)")
        if self.canaries < 0:
            fail("audit.canaries", self.canaries, "must be >= 0 (0 = every training row)")
        if self.sweep not in names.SWEEPS:
            fail("audit.sweep", self.sweep, f"must be one of {', '.join(names.SWEEPS)}")
        if self.sweep_points_per_decade < 1:
            fail("audit.sweep_points_per_decade", self.sweep_points_per_decade, "must be >= 1")
        if self.sweep_smallest_guesses < 1:
            fail("audit.sweep_smallest_guesses", self.sweep_smallest_guesses, "must be >= 1")
        if not 0.0 < self.sweep_step_percent <= 100.0:
            fail("audit.sweep_step_percent", self.sweep_step_percent, "must be in (0, 100]")
        if not 0.0 <= self.extra_guess_share <= 1.0:
            fail("audit.extra_guess_share", self.extra_guess_share, "must be in [0, 1]")
        if self.convention not in names.CONVENTIONS:
            fail("audit.convention", self.convention, f"must be one of {', '.join(names.CONVENTIONS)}")
        for method in self.bounds:
            if method not in names.BOUND_FAMILIES:
                fail("audit.bounds", method, f"must be one of {', '.join(names.BOUND_FAMILIES)}")
        for method in self.table_bounds:
            if method not in self.bounds:
                fail("audit.table_bounds", method, "must be one of the families in audit.bounds")
        fail_repeats("audit.bounds", self.bounds)
        fail_repeats("audit.table_bounds", self.table_bounds)
        fail_glob("audit.canary_path", self.canary_path)
        if hashing.looks_like_key(self.key_path):
            raise ConfigError("audit.key_path: names the file that holds the audit key, and this value looks like a "
                              "key itself (64 hex digits, not repeated here), which would be logged with the config "
                              "(MLflow params, config.yaml); write the key to a file only you can read (chmod 600) "
                              "and set audit.key_path to that file's path")

    def _validate_given_target(self) -> None:
        """A target this project did not train: one way to give it, the injected design's game, a sensible claim."""
        claim = self.stated_claim
        if claim < 0:
            fail("audit.claimed_epsilon", self.claimed_epsilon, f"must be a number >= 0, inf or {NOT_STATED}")
        if self.model_uri and self.predictions_path:
            fail("audit.predictions_path", self.predictions_path, "give the model (audit.model_uri) or its "
                 "predictions, not both", f"audit.model_uri is {self.model_uri!r}")
        own = self.model_uri or self.predictions_path
        if own and self.canary_path:
            fail("audit.canary_path", self.canary_path, "must be empty with audit.model_uri or "
                 "audit.predictions_path: the audit builds the canary table from the inject stage's sealed table")
        if own and self.audit_design.draws_members:
            fail("audit.attack", self.attack, "a model trained outside lia_spark is audited by label inference "
                 "(audit.design=injected on the inject stage's coins, or observational; docs/usage.md, \"Audit your "
                 "own model\")")
        if not math.isnan(claim) and not self.given_target:
            fail("audit.claimed_epsilon", self.claimed_epsilon, "states the claim of a target this project did not "
                 "train (with audit.model_uri, audit.predictions_path or audit.canary_path); the train stage's target "
                 "states its own (models.training_mechanism, models.epsilon)")
        if self.fail_on_finding and self.given_target and math.isnan(claim):
            fail("audit.fail_on_finding", self.fail_on_finding, f"needs the claim a finding exceeds: set "
                 f"audit.claimed_epsilon for the target of {self.given_target}")
        if self.export_gzip and not self.export_tsv:
            fail("audit.export_gzip", self.export_gzip, "gzips the Criteo day file of audit.export_tsv: set "
                 "audit.export_tsv=true too")
        fail_glob("audit.predictions_path", self.predictions_path)
