"""The stage contract: what a stage declares, and what it is handed when it computes.

A :class:`Stage` names itself and the pipeline step it serves, lists the configuration fields it reads, the
tables it reads (:class:`Input`: where each lives and which step writes it), the folders it commits and its
result type, and supplies one function, ``compute``. Everything else (fingerprint, reuse, the checks of its
inputs, the committed output with its sealed marker, the result rebuilt from a marker) is done once, by
:func:`lia_spark.engine.orchestration.registry.run_stage`, for every stage.

A stage never imports another stage: what it needs from an upstream stage reaches it as that stage's declared
result (:meth:`StageRun.upstream`).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from pyspark.sql import SparkSession

from lia_spark.engine.runtime.outputs import marker_fields, output_fingerprint
from lia_spark.run import layout
from lia_spark.run.config import Config
from lia_spark.run.fingerprint import Fingerprint, stage_parameters

if TYPE_CHECKING:
    from lia_spark.records.headline import Headline


@dataclasses.dataclass(frozen=True)
class Input:
    """A table a stage reads: ``role`` (its name in the fingerprint), where it is under a config, the config field
    that moves it, and the pipeline step that writes it ("" when the user gives it)."""

    role: str
    path: Callable[[Config], str]
    field: str
    producer: Callable[[Config], str]
    required: bool = True


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What a stage's fingerprint needs beyond its configuration fields, found by looking at the data: values
    (e.g. the released days) and further input tables (role -> path, e.g. the raw Criteo files); ``found`` is what
    the looking produced that the computation reuses (not fingerprinted: the listed source files)."""

    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    inputs: dict[str, str] = dataclasses.field(default_factory=dict)
    found: Any = None


def nothing_resolved(spark: SparkSession, config: Config) -> Resolved:
    """The default: the fields and the declared inputs are the whole identity."""
    return Resolved()


def no_check(spark: SparkSession, config: Config) -> None:
    """The default: nothing to check beyond the declared inputs."""


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of a stage that takes none: its configuration is everything it reads."""


@runtime_checkable
class TrainedTarget(Protocol):
    """What a stage reading the canary table needs of the stage that trained its target."""

    def claimed_privacy(self) -> tuple[str, float]:
        """(training mechanism, claimed epsilon) of the target."""


Upstream = TypeVar("Upstream")
R = TypeVar("R", bound="StageResult")


@dataclasses.dataclass(frozen=True)
class StageRun:
    """What ``compute`` is handed: the session, the config, the temporary folder that becomes the first output on
    success (``staging``), the fingerprint sealed into its marker, the caller's options (an instance of the stage's
    :attr:`Stage.options`), and the results of the stages that wrote its inputs (:meth:`upstream`)."""

    spark: SparkSession
    config: Config
    staging: str
    fingerprint: Fingerprint | None  # None for a stage that is not reusable (its marker is unsealed)
    started: float
    options: Any
    upstream_results: Callable[[str], StageResult | None]
    resolved: Resolved = dataclasses.field(default_factory=Resolved)

    def under(self, *names: str) -> str:
        """``staging/name/...``."""
        return layout.under(self.staging, *names)

    def upstream(self, role: str, kind: type[Upstream]) -> Upstream | None:
        """The declared result of the stage that wrote input ``role`` (rebuilt from its marker) as ``kind``, the
        protocol the reading stage needs of it, or None when the user gave that table or its writer's output is not
        complete.

        Raises:
            TypeError: naming the role and both types when the writer's result does not offer ``kind``.
        """
        result = self.upstream_results(role)
        if result is None or isinstance(result, kind):
            return result
        raise TypeError(f"input {role!r}: its writer's result {type(result).__name__} does not offer {kind.__name__}")


@dataclasses.dataclass(frozen=True)
class Stage(Generic[R]):
    """One stage's declaration (see the module docstring). ``outputs(config)``: the committed folders, all of which
    must match the fingerprint for reuse; the first holds the marker with the result. ``resolved``: values and
    tables found in the data that enter the fingerprint. ``check``: cheap checks before any long work.
    ``reused``: completes a reused result (a secondary output with its own fingerprint); the default returns it.
    ``options``: the dataclass of what a caller hands ``compute`` beyond the config (:meth:`options_from`).
    ``upfront``: what the pipeline checks before any stage runs when this stage is selected (its own inputs beyond
    the declared tables). ``step`` is "" for a stage outside the pipeline. ``R``: its result type."""

    name: str
    step: str
    fields: tuple[str, ...]
    outputs: Callable[[Config], tuple[str, ...]]
    result: type[R]
    compute: Callable[[StageRun], R]
    inputs: Callable[[Config], tuple[Input, ...]] = lambda config: ()
    resolved: Callable[[SparkSession, Config], Resolved] = nothing_resolved
    check: Callable[[SparkSession, Config], None] = no_check
    reused: Callable[[SparkSession, Config, R], R] = lambda spark, config, result: result
    options: type = NoOptions  # a frozen dataclass: what a caller may hand ``compute`` beyond the config
    describes_input: bool = False  # its marker identifies the run's input data (parameters of the parent run)
    reusable: bool = True  # False: recomputed every time, its marker unsealed (the report)
    upfront: Callable[[SparkSession, Config], None] = no_check  # the pipeline's check before any stage runs
    also_writes: Callable[[Config], tuple[str, ...]] = lambda config: ()  # folders beyond its outputs it replaces
    # or deletes: a secondary committed output (the twin's Criteo files), a scratch folder (ingest's copies)

    def written(self, config: Config) -> tuple[str, ...]:
        """Every folder this stage replaces or deletes under ``config``: its outputs and :attr:`also_writes`."""
        return (*self.outputs(config), *self.also_writes(config))

    def result_from(self, config: Config, marker: dict[str, Any], *, skipped: bool = False) -> R:
        """The stage's result rebuilt from its marker (:meth:`StageResult.from_marker`)."""
        return self.result.from_marker(config, marker, skipped=skipped)

    def options_from(self, offered: dict[str, Any]) -> Any:
        """The stage's :attr:`options` built from ``offered``.

        Raises:
            TypeError: naming the stage, the options it does not take and those it does.
        """
        unknown = sorted(set(offered) - self.option_names())
        if unknown:
            raise TypeError(f"stage {self.name!r} takes no option {', '.join(map(repr, unknown))}; its options: "
                            f"{', '.join(sorted(self.option_names())) or 'none'}")
        return self.options(**offered)

    def accepted(self, offered: dict[str, Any]) -> dict[str, Any]:
        """The part of ``offered`` (what the pipeline knows: the outcomes so far, the MLflow location) this stage's
        :attr:`options` declare."""
        return {name: value for name, value in offered.items() if name in self.option_names()}

    def option_names(self) -> frozenset[str]:
        """The names of the fields of :attr:`options`."""
        return frozenset(field.name for field in dataclasses.fields(self.options))

    def fingerprint(self, spark: SparkSession, config: Config, *, resolved: Resolved | None = None,
                    **values: Any) -> Fingerprint:
        """:class:`lia_spark.run.fingerprint.Fingerprint` of this stage under ``config``: its declared fields, the
        values it resolves from the data (``resolved``, else resolved now; plus ``values``), and the fingerprint of
        every input table."""
        resolved = resolved if resolved is not None else self.resolved(spark, config)
        inputs = {**{item.role: item.path(config) for item in self.inputs(config)}, **resolved.inputs}
        return Fingerprint(self.name, stage_parameters(self.fields, config.to_dict(), **resolved.values, **values),
                           {role: output_fingerprint(spark, path) for role, path in inputs.items()})


class StageResult:
    """What every stage result offers the pipeline, the tracker and the report. Results are dataclasses; their
    marker is :meth:`to_dict` and :meth:`from_dict` rebuilds them (``skipped`` = reused)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # declared by every result's @dataclass
    skipped: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (also the completion marker's content)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls: type[R], payload: dict[str, Any], *, skipped: bool = False) -> R:
        """Rebuild from :meth:`to_dict` output (extra keys ignored)."""
        values = marker_fields(cls, payload)
        values["skipped"] = skipped
        return cls(**cls.decoded(values))

    @classmethod
    def decoded(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Field values from their JSON form (lists back to tuples where the result holds tuples)."""
        return values

    @classmethod
    def from_marker(cls: type[R], config: Config, marker: dict[str, Any], *, skipped: bool = False) -> R:
        """The result of the committed output under ``config`` holding ``marker``: :meth:`from_dict` unless the
        result needs more than its marker (the report's page lives where the config puts it)."""
        return cls.from_dict(marker, skipped=skipped)

    def marker(self) -> dict[str, Any]:
        """What the completion marker holds (the whole result unless a stage says otherwise)."""
        return self.to_dict()

    def failures(self) -> dict[str, str]:
        """Parts of the computation that failed (name -> error): an output with failures is recomputed, not
        reused."""
        return {}

    def metrics(self) -> dict[str, float]:
        """Flat numeric metrics for MLflow."""
        return {}

    def artifacts(self) -> list[str]:
        """Files MLflow logs as artifacts."""
        return []

    def models(self) -> list[str]:
        """Model files MLflow logs as models."""
        return []

    def setting_rows(self) -> list[dict[str, Any]]:
        """One row per mechanism setting (one nested MLflow run each)."""
        return []

    def row_data(self) -> list[str]:
        """Tables of per-row labels: logged to MLflow only with tracking.log_row_data."""
        return []

    @property
    def headline(self) -> Headline | None:
        """The run's headline (:class:`lia_spark.records.headline.Headline`) when this result has one, else None."""
        return None

    def page(self) -> str:
        """Where a reader opens the page this result wrote ("" for none)."""
        return ""


class FilesResult(StageResult):
    """A stage result whose ``files`` tuple is a JSON list in its marker."""

    files: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        payload = dataclasses.asdict(self)
        payload["files"] = list(self.files)
        return payload

    @classmethod
    def decoded(cls, values: dict[str, Any]) -> dict[str, Any]:
        return {**values, "files": tuple(values["files"])}
