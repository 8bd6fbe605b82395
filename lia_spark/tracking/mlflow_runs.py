"""MLflow tracking of pipeline runs; the only module of lia_spark that imports mlflow.

One MLflow experiment per config (``tracking.experiment``), one parent run per pipeline run, one
nested run per stage (started when the stage starts, so its duration is the stage's), and below the posteriors
and utility stages one nested run per mechanism setting named by its key (:func:`lia_spark.names.setting_key`).
The parent run holds the flattened config as params and as ``config.yaml`` (``log_dict``), seed, data fingerprint
and the versions of every numerical package as params, the git commit as MLflow's ``mlflow.source.git.commit`` tag,
the audit headline as its description (``mlflow.note.content``) and every stage metric as ``<stage>.<metric>``;
stage runs hold their own metrics, artifacts, their setting tables (``log_table``) and (train) the model files as
xgboost/catboost MLflow models. Only finite numbers are metrics: an infinite |I| percentile is left out (the
setting's ``share_infinite`` says how many rows are unbounded) instead of being stored as 1.8e308. Everything
logged comes from the stage results the pipeline passes in; no artifact is read back to find it.

Store: ``tracking.tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the
working directory with artifacts in ``./mlruns`` beside the database file.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Sequence

from lia_spark.names import BAG_SIZE, EPSILON, MECHANISM, SETTING_KEY, setting_key
from lia_spark.run import interrupts
from lia_spark.run.config import Config
from lia_spark.run.environment import git_commit
from lia_spark.run.failures import error_first_line
from lia_spark.run.fingerprint import recorded_versions
from lia_spark.run.json_output import json_safe
from lia_spark.tracking.model_logging import log_model_file, log_raw_row_model

if TYPE_CHECKING:  # the type only
    from lia_spark.records.headline import Headline

from lia_spark.run.tracking_uri import resolve_tracking_uri
from lia_spark.tracking.store import (MLFLOW_WAIT, TrackingError, budget_requests, check_tracking_store,
                                      is_locked_store, locked_store_line, logging_kept, no_retries, sqlite_path,
                                      store_answers)

logger = logging.getLogger(__name__)

GIT_COMMIT_TAG = "mlflow.source.git.commit"
DESCRIPTION_TAG = "mlflow.note.content"
CONFIG_FILE = "config.yaml"
KIND_TAG = "lia_spark.kind"
STAGE_TAG = "lia_spark.stage"
FINGERPRINT_TAG = "lia_spark.output_fingerprint"
REUSED_FROM_TAG = "lia_spark.reused_from_run"
STATUS_TAG = "lia_spark.status"  # a stage or table-cell run: ran / reused / failed (a tag: it describes the run)
ERROR_TAG = "lia_spark.error"  # a failed stage or cell: the first characters of its error
MAX_TAG_CHARS = 5000
MAX_PARAM_CHARS = 500


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mapping -> ``{"section.key": "value"}`` (MLflow params): strings as they are, +-inf as "inf" /
    "-inf", anything else as standard JSON (lists, NaN as null; :func:`lia_spark.run.json_output.json_safe`)."""
    flat: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            value = json_safe(value)
            text = value if isinstance(value, str) else json.dumps(value)
            flat[name] = text if len(text) <= MAX_PARAM_CHARS else text[:MAX_PARAM_CHARS - 3] + "..."
    return flat


def data_fingerprint(marker: Mapping[str, Any]) -> dict[str, str]:
    """Params identifying the input table: SHA-256 of its ``_LIA_COMPLETE`` marker plus its counts (not how long
    writing it took: a timing is no identity, and the stage run has it as a metric)."""
    canonical = json.dumps(marker, sort_keys=True, default=str)
    params = {"data.fingerprint": hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]}
    for key, value in marker.items():
        if key.endswith("seconds"):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            params[f"data.marker.{key}"] = str(value)
        elif isinstance(value, Mapping) and value and all(isinstance(v, int) for v in value.values()):
            params[f"data.marker.{key}"] = json.dumps(value, sort_keys=True)
    return params


def finite_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Finite numeric metrics as floats. NaN and +-inf are dropped (MLflow would store inf as 1.8e308), and so
    are values that are not numbers."""
    numbers: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            logger.warning("tracking: metric %s=%r is not a number; not logged", key, value)
        elif math.isfinite(value):
            numbers[str(key)] = float(value)
    return numbers


def table_frame(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Setting rows as a pandas table for ``mlflow.log_table``: a ``setting`` key column first, non-finite numbers as
    empty cells (JSON has no inf; ``share_infinite`` keeps the count)."""
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame([dict(row) for row in rows])
    frame.insert(0, "setting", [setting_key(row[MECHANISM], row[EPSILON], row[BAG_SIZE]) for row in rows])
    numeric = frame.select_dtypes("floating").columns
    frame[numeric] = frame[numeric].astype("float64").where(np.isfinite(frame[numeric].astype("float64")))
    return frame.astype(object).where(frame.notna(), None)


def _param_text(value: Any) -> str:
    """A setting key as the summary CSV writes it: "" for NaN (plain LLP's epsilon), else ``str``."""
    return "" if isinstance(value, float) and math.isnan(value) else str(value)


class StoreGone(RuntimeError):
    """A logging call failed and the store no longer answers (already probed: :meth:`PipelineTracker.best_effort`
    need not ask again)."""


class PipelineTracker:
    """One MLflow parent run for a pipeline run, with nested runs per stage and per mechanism setting."""

    def __init__(self, config: Config, *, run_name: str | None = None) -> None:
        self.config = config
        self.run_name = run_name or config.run.name
        self.tracking_uri = resolve_tracking_uri(config.tracking)
        self.experiment_id = ""
        self.run_id = ""
        self.not_logged: list[str] = []
        self.stopped = False  # the store stopped answering: no more MLflow calls this run
        commit = git_commit()
        self.commit_tags = {GIT_COMMIT_TAG: commit} if commit else {}  # on every run it starts, nested ones too

    def best_effort(self, what: str, log: Callable[[], Any]) -> None:
        """Call ``log``; a failure never stops the stages. If the store no longer answers, warn naming the server,
        close the runs locally and skip every later call (each named in :attr:`not_logged` once). If it still
        answers, the failure is the call's own (a model that cannot be packed, say): warn naming it, return to the
        parent run and go on tracking."""
        if self.stopped:
            if what not in self.not_logged:
                self.not_logged.append(what)
            return
        try:
            log()
        except Exception as error:  # noqa: BLE001 - MLflow and its HTTP client raise many types
            interrupts.check()
            self.not_logged.append(what)
            if not isinstance(error, StoreGone) and self._store_answers():
                logger.warning("tracking: %s not fully logged (%s); the store at %s answers, so tracking goes on",
                               what, error_first_line(error), self.tracking_uri)
                self._return_to_parent()
                return
            database = sqlite_path(self.tracking_uri)
            cause = (locked_store_line(database, MLFLOW_WAIT) if database is not None and is_locked_store(error)
                     else error_first_line(error))
            logger.warning("tracking: %s not logged to %s, which no longer answers; tracking stops for this run and "
                           "the stages go on (%s)", what, self.tracking_uri, cause)
            self.stopped = True
            _abandon_runs()

    def _store_answers(self) -> bool:
        """Whether the store still answers after a failed call (:func:`store_answers`, its own time budget)."""
        return store_answers(self.tracking_uri, timeout_seconds=self.config.tracking.request_timeout_seconds)

    def _return_to_parent(self) -> None:
        """End the nested runs a failed logging call left open (FINISHED: the stage itself did not fail), so the
        next stage nests under the parent run again."""
        import mlflow

        while (active := mlflow.active_run()) is not None and active.info.run_id != self.run_id:
            mlflow.end_run(status="FINISHED")

    def check(self) -> None:
        """Connectivity check with ``tracking.timeout_seconds`` (see :func:`check_tracking_store`); then every later
        MLflow call gets the time budget of :func:`budget_requests`."""
        check_tracking_store(self.tracking_uri, timeout_seconds=self.config.tracking.timeout_seconds)
        logger.debug("tracking: MLflow HTTP calls budgeted: %s", budget_requests(self.config.tracking))

    def start(self, omitted: Collection[str] = ()) -> str:
        """Create (or reuse) the experiment, start the parent run, log config and environment params: every config
        field but those in ``omitted`` (fields no output of the run depends on; the whole config is the artifact
        ``config.yaml``)."""
        import mlflow

        mlflow.set_tracking_uri(self.tracking_uri)
        name = self.config.tracking.experiment
        try:
            with logging_kept():  # the client creates the store (MLflow 2: its migrations reconfigure logging)
                client = mlflow.MlflowClient(self.tracking_uri)
                experiment = client.get_experiment_by_name(name)
            if experiment is None:
                database = sqlite_path(self.tracking_uri)
                location = (database.parent / "mlruns").resolve().as_uri() if database is not None else None
                self.experiment_id = client.create_experiment(name, artifact_location=location)
            else:
                self.experiment_id = experiment.experiment_id
            mlflow.set_experiment(experiment_id=self.experiment_id)
            run = mlflow.start_run(experiment_id=self.experiment_id, run_name=self.run_name,
                                   nested=mlflow.active_run() is not None, tags={KIND_TAG: "pipeline"})
        except Exception as error:  # noqa: BLE001 - MLflow's errors, and sqlalchemy's from a sqlite store
            database = sqlite_path(self.tracking_uri)
            if database is not None and is_locked_store(error):  # locked after the up-front check
                raise TrackingError(locked_store_line(database, MLFLOW_WAIT)) from error
            if not isinstance(error, mlflow.exceptions.MlflowException):
                raise
            raise TrackingError(f"tracking: cannot start a run in experiment {name!r} at "
                                f"{self.tracking_uri}: {error}") from error
        self.run_id = run.info.run_id
        params = {name: value for name, value in flatten(self.config.to_dict()).items()
                  if ".".join(name.split(".")[:2]) not in omitted}
        params["seed"] = str(self.config.run.seed)
        params.update({f"env.{package}": version for package, version in recorded_versions().items()})
        mlflow.log_params(params)
        mlflow.log_dict(self.config.to_dict(), CONFIG_FILE)
        mlflow.set_tags(self.commit_tags)
        logger.info("tracking: MLflow run %s in experiment %r (%s)", self.run_id, name, self.tracking_uri)
        return self.run_id

    def log_data_marker(self, marker: Mapping[str, Any]) -> None:
        """Parent-run params identifying the input table (:func:`data_fingerprint` of its marker), and the table as
        the run's MLflow input (``log_input``: a dataset named ``data`` whose source is its Parquet path and whose
        digest is that fingerprint)."""
        import mlflow
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.data.spark_dataset_source import SparkDatasetSource

        params = data_fingerprint(marker)
        mlflow.log_params(params)
        source = SparkDatasetSource(path=self.config.parquet_path)
        table = MetaDataset(  # type: ignore[abstract]  # mlflow's documented use; its base is no ABC (profile unset)
            source, name="data", digest=params["data.fingerprint"])
        mlflow.log_input(table, context="input")

    def start_stage(self, stage: str) -> None:
        """Start the nested run of ``stage`` now, as the stage starts (it shows RUNNING while the stage works);
        :meth:`log_stage` fills and ends it."""
        import mlflow

        mlflow.start_run(run_name=stage, nested=True, tags={KIND_TAG: "stage", STAGE_TAG: stage, **self.commit_tags})

    def log_stage(self, stage: str, *, status: str, seconds: float, metrics: Mapping[str, Any],
                  artifacts: Sequence[str], models: Sequence[str] = (),
                  settings: Sequence[Mapping[str, Any]] = (), error: str = "", fingerprint: str = "") -> None:
        """Fill and end the nested run of ``stage`` (started by :meth:`start_stage`, else now): status, metrics,
        artifacts, models and per-setting runs; its end time is its start plus the stage's ``seconds``, so the
        MLflow duration is the stage's own and not the time logging took.

        ``artifacts`` and ``models`` are local files (``models``: the train stage's model files, logged as MLflow
        models when tracking.log_models); ``settings`` are the posteriors summary or utility table rows (a table
        ``<stage>/settings.json`` and one nested run each). All three are logged only when the stage ran.

        The parent run also gets ``<stage>.<metric>`` and ``<stage>.seconds`` so runs compare in one table.
        The stage run is tagged with the fingerprint of the output it produced or reused
        (:data:`FINGERPRINT_TAG`). A reused output's artifacts are not logged again: the run is tagged with
        the run that logged them (:data:`REUSED_FROM_TAG`, found by that fingerprint).
        """
        import mlflow

        active = mlflow.active_run()
        if active is None or active.info.run_id == self.run_id:
            self.start_stage(stage)
        run = mlflow.active_run()
        if run is None:
            raise ValueError("the stage's nested run is active here (it was running or start_stage started it)")
        numbers = finite_metrics(metrics)
        client = mlflow.MlflowClient(self.tracking_uri)
        mlflow.log_metrics({f"{stage}.{key}": value for key, value in numbers.items()}
                           | {f"{stage}.seconds": seconds}, run_id=self.run_id)
        client.set_tag(self.run_id, f"lia_spark.status.{stage}", status)
        tags = {FINGERPRINT_TAG: fingerprint} if fingerprint else {}
        producer = self._producing_run(stage, fingerprint) if status == "reused" and fingerprint else None
        if producer:
            tags[REUSED_FROM_TAG] = producer
        mlflow.set_tags(tags | {STATUS_TAG: status, **({ERROR_TAG: error[:MAX_TAG_CHARS]} if error else {})})
        mlflow.log_param("stage", stage)
        mlflow.log_metrics(numbers | {"seconds": seconds})
        if status == "ran":
            for text in artifacts:
                self._log_artifact(stage, Path(text))
            if self.config.tracking.log_models:
                self._log_models([Path(text) for text in models], {Path(text).name: Path(text) for text in artifacts})
            if settings:
                mlflow.log_table(table_frame(settings), artifact_file=f"{stage}/settings.json")
            self._log_settings(stage, settings)
        final = "FAILED" if status == "failed" else "FINISHED"
        mlflow.end_run(status=final)
        client.set_terminated(run.info.run_id, status=final,
                              end_time=run.info.start_time + round(1000 * seconds))

    def _log_models(self, models: Sequence[Path], artifacts: Mapping[str, Path]) -> None:
        """Each model file as an MLflow model of its library and, when its feature encoding and output transform are
        among the ``artifacts`` (by file name), as a pyfunc model that scores raw Criteo rows
        (:func:`log_raw_row_model`). Outputs written before output transforms were saved get no raw-row model (it
        could not reproduce the run's predictions), with a warning."""
        from lia_spark.kernels.features import encoding_file
        from lia_spark.kernels.model_output import output_transform_file

        for path in models:
            self._log_model(f"model {path.name}", functools.partial(log_model_file, path))
            encoding = artifacts.get(Path(encoding_file(str(path))).name)
            output = artifacts.get(Path(output_transform_file(str(path))).name)
            if encoding is not None and output is None:
                logger.warning("tracking: no raw-row model for %s: its output transform %s is missing (train it "
                               "again to get one)", path.name, Path(output_transform_file(str(path))).name)
            elif encoding is not None and output is not None:
                self._log_model(f"raw-row model {path.name}",
                                functools.partial(log_raw_row_model, path, encoding, output))

    def _log_model(self, what: str, log: Callable[[], str]) -> None:
        """Log one MLflow model; if that fails while the store answers, warn naming the model and the cause and go
        on with the others (a store that no longer answers propagates to :meth:`best_effort` as :class:`StoreGone`)."""
        try:
            logger.info("tracking: logged %s as %s", what, log())
        except Exception as error:  # noqa: BLE001 - packing a model raises many types
            if not self._store_answers():
                raise StoreGone(str(error)) from error
            logger.warning("tracking: %s not logged (%s); the other models go on", what, error_first_line(error))
            self.not_logged.append(what)

    def _producing_run(self, stage: str, fingerprint: str) -> str | None:
        """The stage run (any experiment of this store) that ran and logged the output with ``fingerprint``."""
        import mlflow

        client = mlflow.MlflowClient(self.tracking_uri)
        experiments = [e.experiment_id for e in client.search_experiments()]
        runs = client.search_runs(experiments, filter_string=(f"tags.`{FINGERPRINT_TAG}` = '{fingerprint}' and "
                                                              f"tags.`{STAGE_TAG}` = '{stage}' and "
                                                              f"tags.`{STATUS_TAG}` = 'ran'"),
                                  max_results=1, order_by=["attributes.start_time DESC"])
        return runs[0].info.run_id if runs else None

    def _log_artifact(self, stage: str, path: Path) -> None:
        import mlflow

        if not path.exists():
            logger.warning("tracking: artifact %s of stage %s does not exist; not logged", path, stage)
            return
        if path.is_dir():
            mlflow.log_artifacts(str(path), artifact_path=f"{stage}/{path.name}")
            return
        mlflow.log_artifact(str(path), artifact_path=stage)

    def _log_settings(self, stage: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Nested run per mechanism setting named ``<stage>/<key>`` (:func:`lia_spark.names.setting_key`; posteriors
        and utility share keys, and MLflow lists runs by name): the key and its (mechanism, epsilon, bag_size) as
        params, the rest as metrics when finite (:func:`finite_metrics`)."""
        import mlflow

        for row in rows:
            setting = {key: _param_text(row[key]) for key in SETTING_KEY}
            name = setting_key(row[MECHANISM], row[EPSILON], row[BAG_SIZE])
            values = {key: value for key, value in row.items() if key not in setting
                      and isinstance(value, (int, float)) and not isinstance(value, bool)}
            with mlflow.start_run(run_name=f"{stage}/{name}", nested=True,
                                  tags={KIND_TAG: "setting", STAGE_TAG: stage, **self.commit_tags}):
                mlflow.log_params({"setting": name, **setting})
                mlflow.log_metrics(finite_metrics(values))

    def set_headline(self, headline: Headline) -> None:
        """The audit headline (:class:`lia_spark.records.headline.Headline`) on the parent run: its tags
        (``audit.eps_lb``, ``audit.claimed_eps``, ...) and its text as the run's description."""
        import mlflow

        mlflow.set_tags({**headline.tags(), DESCRIPTION_TAG: headline.text()})

    def log_report(self, path: str) -> None:
        """Attach the run's report page to the parent run under ``report/``."""
        import mlflow

        mlflow.log_artifact(path, artifact_path="report")

    def end(self, *, failed: bool) -> None:
        """Close the parent run as FINISHED or FAILED, and a stage run left open by an interrupted stage with it."""
        import mlflow

        while (active := mlflow.active_run()) is not None:  # an outer run of the caller stays open
            mlflow.end_run(status="FAILED" if failed else "FINISHED")
            if active.info.run_id == self.run_id:
                break

    def location(self) -> str:
        """Where to look at the run: a UI URL for servers, else the ``mlflow ui`` command for the store."""
        if self.tracking_uri.startswith(("http://", "https://")):
            return f"{self.tracking_uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"
        return (f"run {self.run_id} in experiment {self.config.tracking.experiment!r}; view it with "
                f"`mlflow ui --backend-store-uri {self.tracking_uri}`")


def _abandon_runs() -> None:
    """End every active MLflow run of this process locally, once the store is gone (one call each, no retry: the
    store will not record it anyway; ``lia-spark track`` logs the run later)."""
    import mlflow

    with no_retries():
        while mlflow.active_run() is not None:
            try:
                mlflow.end_run(status="FAILED")
            except Exception:  # noqa: BLE001 - end_run pops the run before it contacts the store
                logger.debug("tracking: could not mark run as FAILED", exc_info=True)


def pipeline_runs(*, experiment: str, tracking_uri: str, max_results: int = 100) -> Any:
    """Parent (pipeline) runs of ``experiment`` as a pandas DataFrame, newest first.

    Columns as in ``mlflow.search_runs``: ``run_id``, ``status``, ``params.*``, ``metrics.<stage>.<name>``.
    """
    import mlflow

    client = mlflow.MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ValueError(f"tracking.experiment: no MLflow experiment named {experiment!r} at {tracking_uri}")
    mlflow.set_tracking_uri(tracking_uri)
    return mlflow.search_runs(experiment_ids=[found.experiment_id], filter_string=f"tags.`{KIND_TAG}` = 'pipeline'",
                              max_results=max_results, order_by=["attributes.start_time DESC"])


TABLE_KIND = "audit_table"
TABLE_CELL_KIND = "table_cell"
TABLE_CELL_TAGS = ("audit.eps_lb", "audit.claimed_eps", "audit.mechanism")


class AuditTableTracker(PipelineTracker):
    """One MLflow parent run for an ``lia-spark audit-table`` run (tagged ``lia_spark.kind = audit_table``), one
    nested run per cell (mechanism x claimed epsilon) and the table's CSVs and plot as the parent's artifacts."""

    def start(self, omitted: Collection[str] = ()) -> str:
        """Start the parent run like a pipeline's (config, seed and environment params but ``omitted``), tagged as a
        table."""
        import mlflow

        run_id = super().start(omitted)
        mlflow.set_tag(KIND_TAG, TABLE_KIND)
        return run_id

    def log_cell(self, cell: str, *, mechanism: str, claimed_epsilon: float, bag_size: int, status: str,
                 seconds: float, metrics: Mapping[str, Any], error: str = "", fingerprint: str = "") -> None:
        """Nested run named by the cell's setting key (:func:`lia_spark.names.setting_key`, e.g. ``rr.eps1.k1``):
        params setting, cell (its folder name), mechanism, claimed_epsilon and bag_size; the finite
        ``metrics`` (eps_lb_mean/std, test_auc, test_log_loss, ...); tags ``audit.eps_lb`` (the mean valid bound),
        ``audit.claimed_eps``, ``audit.mechanism``, :data:`STATUS_TAG` (and :data:`ERROR_TAG`). The parent run gets
        ``<setting key>.<metric>``; a failed cell's run ends FAILED."""
        import mlflow

        numbers = finite_metrics(metrics)
        key = setting_key(mechanism, claimed_epsilon, bag_size)
        claimed = "inf" if math.isinf(claimed_epsilon) else f"{claimed_epsilon:g}"
        eps_lb = numbers.get("eps_lb_mean")
        tags = {KIND_TAG: TABLE_CELL_KIND, "lia_spark.cell": cell, "audit.claimed_eps": claimed,
                "audit.mechanism": mechanism, "audit.eps_lb": "" if eps_lb is None else f"{eps_lb:.6g}",
                STATUS_TAG: status, **({ERROR_TAG: error[:MAX_TAG_CHARS]} if error else {}),
                **({FINGERPRINT_TAG: fingerprint} if fingerprint else {}), **self.commit_tags}
        mlflow.log_metrics({f"{key}.{name}": value for name, value in numbers.items()} | {f"{key}.seconds": seconds})
        with mlflow.start_run(run_name=key, nested=True, tags=tags):
            mlflow.log_params({"setting": key, "cell": cell, "mechanism": mechanism, "claimed_epsilon": claimed,
                               "bag_size": str(bag_size)})
            mlflow.log_metrics(numbers | {"seconds": seconds})
            if status == "failed":
                mlflow.end_run(status="FAILED")

    def log_table(self, *, metrics: Mapping[str, Any], artifacts: Sequence[str]) -> None:
        """Parent-run metrics (cell counts, seconds) and the table's files under ``table/``."""
        import mlflow

        mlflow.log_metrics(finite_metrics(metrics))
        for text in artifacts:
            path = Path(text)
            if path.exists():
                mlflow.log_artifact(str(path), artifact_path="table")
            else:
                logger.warning("tracking: table artifact %s does not exist; not logged", path)
