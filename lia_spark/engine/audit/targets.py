"""Where the audited target's canary table comes from, chosen once per configuration (:func:`audited_target`): the
train stage's canary table (or audit.canary_path's, a table given), or a model of your own scored on the inject
stage's sealed table (audit.model_uri, audit.predictions_path; :mod:`lia_spark.engine.audit.own_model`). The audit
stage asks the chosen object for its table, its declared inputs, its canaries and how the headline names it.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import ClassVar, Iterator

from pyspark.sql import DataFrame

from lia_spark.engine.audit.own_model import own_model_canaries, target_description
from lia_spark.engine.runtime.stage import Input, StageRun
from lia_spark.engine.spark.session import describe_jobs
from lia_spark.run import layout
from lia_spark.run.config import Config


def canary_path(config: Config) -> str:
    """The canary table read by the stage: audit.canary_path, else <run.output_dir>/models/canaries."""
    return config.audit.canary_path or layout.canaries_path(config)


@dataclasses.dataclass(frozen=True)
class TrainedCanaries:
    """The canary table the train stage wrote (or audit.canary_path's): read as it is, with the label-blind
    reference where the train stage fitted one."""

    has_reference: ClassVar[bool] = True

    def table(self, config: Config) -> str:
        return canary_path(config)

    def inputs(self, config: Config) -> tuple[Input, ...]:
        """The canary table, written by train unless audit.canary_path gives it."""
        return (Input("canaries", audited_path, "audit.canary_path",
                      lambda c: "" if c.audit.canary_path else "train"),)

    @contextlib.contextmanager
    def canaries(self, run: StageRun) -> Iterator[DataFrame]:
        """The table as it is."""
        describe_jobs(run.spark, "audit: read canaries")
        yield run.spark.read.parquet(self.table(run.config))

    def description(self, config: Config, found: str) -> str:
        """"": the train stage's result states the target (or, for a table given, "an unknown mechanism")."""
        return ""


@dataclasses.dataclass(frozen=True)
class OwnModel:
    """A model trained outside lia_spark on the inject stage's export: the sealed coins with its predictions of
    every canary, scored here (audit.model_uri) or given (audit.predictions_path); no label-blind reference."""

    has_reference: ClassVar[bool] = False

    def table(self, config: Config) -> str:
        return layout.sealed_path(config)

    def inputs(self, config: Config) -> tuple[Input, ...]:
        """The sealed table (where `lia-spark inject` ran) and audit.predictions_path's table when given."""
        sealed = Input("canaries", audited_path, "run.output_dir", lambda c: "inject")
        if not config.audit.predictions_path:
            return (sealed,)
        return sealed, Input("predictions", lambda c: c.audit.predictions_path, "audit.predictions_path", lambda c: "")

    @contextlib.contextmanager
    def canaries(self, run: StageRun) -> Iterator[DataFrame]:
        """The sealed table with the model's checked predictions (:func:`own_model_canaries`), unpersisted after."""
        table = own_model_canaries(run.spark, run.config, run.resolved.found)
        try:
            yield table
        finally:
            table.unpersist()

    def description(self, config: Config, found: str) -> str:
        """"its own mechanism (model <pinned uri>)" or "(predictions <path>)"."""
        return target_description(config, found)


AuditedTarget = TrainedCanaries | OwnModel


def audited_target(config: Config) -> AuditedTarget:
    """A model of your own with audit.model_uri or audit.predictions_path, else the (train stage's or given) canary
    table."""
    return OwnModel() if config.audit.model_uri or config.audit.predictions_path else TrainedCanaries()


def audited_path(config: Config) -> str:
    """The table the audit reads: the membership candidates with audit.attack=membership, else the audited target's
    table (:func:`audited_target`)."""
    if config.audit.audit_design.draws_members:
        return layout.membership_path(config)
    return audited_target(config).table(config)
