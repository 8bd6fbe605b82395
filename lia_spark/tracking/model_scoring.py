"""A user's MLflow model as the audit's target: its URI pinned to one version, its input columns, and a Spark UDF
that scores rows with it on the executors (``mlflow.pyfunc.spark_udf``; the engine applies it to its columns).

The model's pyfunc must return P(y = 1 | x), one number per row, from a pandas DataFrame of the export's columns
(docs/usage.md, "Audit your own model").
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import re
from typing import Any

MODEL_FIELD = "audit.model_uri"
_REGISTERED = re.compile(r"^models:/(?P<name>[^/@]+)(?:/(?P<version>[^/]+)|@(?P<alias>.+))$")


class ModelError(ValueError):
    """The model of audit.model_uri cannot be found or loaded; the message names the field and the URI."""


def _failed(model_uri: str, error: Exception, fix: str) -> ModelError:
    return ModelError(f"{MODEL_FIELD}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}, "
                      f"got {model_uri!r}; {fix}")


def local_model_folder(model_uri: str) -> str:
    """The folder of a model given as a local path (``/path``, ``file:/path``), else "" (runs:/, models:/, ...)."""
    if model_uri.startswith("file:"):
        return re.sub(r"^file:(//)?", "", model_uri)
    return "" if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", model_uri) else os.path.abspath(model_uri)


def pinned_model_uri(model_uri: str, tracking_uri: str) -> str:
    """``model_uri`` pointing at one immutable model: ``models:/name@alias``, ``models:/name/<stage>`` and
    ``models:/name/latest`` become ``models:/name/<version>`` as the registry resolves them now; other URIs are
    returned as given (a run's artifacts and a numbered version do not change).

    Raises:
        ModelError: the registry does not know the name, alias or stage.
    """
    found = _REGISTERED.match(model_uri)
    if found is None or (found["version"] or "").isdigit():
        return model_uri
    import mlflow
    from mlflow import MlflowClient

    mlflow.set_tracking_uri(tracking_uri)
    client = MlflowClient(tracking_uri=tracking_uri)
    try:
        if found["alias"]:
            version = client.get_model_version_by_alias(found["name"], found["alias"]).version
        else:
            stages = None if found["version"].lower() == "latest" else [found["version"]]
            versions = client.get_latest_versions(found["name"], stages=stages)
            if not versions:
                raise LookupError(f"no version of {found['name']} in stage {found['version']}")
            version = max(int(item.version) for item in versions)
    except Exception as error:  # noqa: BLE001 - MLflow raises its own exception types; the field is what matters
        raise _failed(model_uri, error, f"check the name and alias in the registry of {tracking_uri}") from error
    return f"models:/{found['name']}/{version}"


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """What the audit reads of a model before scoring: its signature's named inputs ({column: MLflow type name
    ("long", "double", "string", ...)}, None when it names none) and when it was logged (seconds since the epoch,
    None when its MLmodel file does not say)."""

    inputs: dict[str, str] | None
    logged_seconds: float | None


def model_facts(model_uri: str, tracking_uri: str) -> ModelFacts:
    """The model's :class:`ModelFacts`, from its MLmodel file.

    Raises:
        ModelError: the model cannot be found.
    """
    import mlflow
    from mlflow.models import get_model_info

    mlflow.set_tracking_uri(tracking_uri)
    try:
        info = get_model_info(model_uri)
    except Exception as error:  # noqa: BLE001 - MLflow raises its own exception types
        raise _failed(model_uri, error, f"give a runs:/, models:/ or local MLflow model URI known to "
                                        f"{tracking_uri} (tracking.tracking_uri)") from error
    inputs = info.signature.inputs if info.signature is not None else None
    named = (None if inputs is None or not inputs.has_input_names()
             else {name: getattr(kind, "name", str(kind)) for name, kind in inputs.input_types_dict().items()})
    created = str(info.utc_time_created or "")
    try:
        logged = datetime.datetime.fromisoformat(created).replace(tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        logged = None
    return ModelFacts(named, logged)


def model_udf(spark: Any, model_uri: str, tracking_uri: str) -> Any:
    """The model as a Spark UDF returning a double per row (the executors' Python must hold the model's libraries:
    ``env_manager=local``).

    Raises:
        ModelError: the model cannot be loaded.
    """
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    try:
        return mlflow.pyfunc.spark_udf(spark, model_uri, result_type="double", env_manager="local")
    except Exception as error:  # noqa: BLE001 - MLflow raises its own exception types
        raise _failed(model_uri, error, "the model must load with mlflow.pyfunc.load_model where the executors "
                                        "run") from error
