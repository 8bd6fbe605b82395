"""A user's MLflow model as the audit's target: its URI pinned to one version, its input columns, and how the
executors score rows with it (the engine applies it to its columns): a classifier logged with a flavour of
:data:`NATIVE_FLAVOURS` by its own ``predict_proba`` (:func:`probability_model`, :func:`positive_probability`), any
other model by its pyfunc (``mlflow.pyfunc.spark_udf``), which must return P(y = 1 | x), one number per row, from a
pandas DataFrame of the export's columns (docs/usage.md, "Audit your own model").
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
            version = str(max(int(item.version) for item in versions))
    except Exception as error:  # noqa: BLE001 - MLflow raises its own exception types; the field is what matters
        raise _failed(model_uri, error, f"check the name and alias in the registry of {tracking_uri}") from error
    return f"models:/{found['name']}/{version}"


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """What the audit reads of a model before scoring: its signature's named inputs ({column: MLflow type name
    ("long", "double", "string", ...)}, None when it names none), when it was logged (seconds since the epoch,
    None when its MLmodel file does not say) and the flavour of :data:`NATIVE_FLAVOURS` its pyfunc loads through
    ("" for any other, e.g. a PythonModel)."""

    inputs: dict[str, str] | None
    logged_seconds: float | None
    flavour: str = ""


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
    loader = (info.flavors or {}).get("python_function", {}).get("loader_module", "")
    flavour = next((name for name in NATIVE_FLAVOURS if name in (info.flavors or {}) and loader == f"mlflow.{name}"),
                   "")
    return ModelFacts(named, logged, flavour)


# MLflow's flavours of classifiers with predict_proba: their pyfunc's predict gives a classifier's class labels, so
# the audit loads the model through the flavour and scores P(y = 1) = predict_proba(X)[:, column of class 1].
NATIVE_FLAVOURS = ("sklearn", "xgboost", "lightgbm", "catboost")


@dataclasses.dataclass(frozen=True)
class ProbabilityModel:
    """A classifier of a native flavour, loaded: the executors score it as ``predict_proba(X)[:, column]`` (the
    column of class 1) of the DataFrame of ``inputs`` (its own feature names, in its order; None: it names none)."""

    model: Any
    flavour: str
    column: int
    inputs: tuple[str, ...] | None


def probability_model(model_uri: str, tracking_uri: str, flavour: str) -> ProbabilityModel | None:
    """The model at ``model_uri`` loaded through its native ``flavour`` (``mlflow.<flavour>.load_model``, see
    :class:`ModelFacts`) when it has ``predict_proba``; None for another flavour or a model without it (an xgboost
    ``Booster``, a regressor: scored by its pyfunc, which returns what ``predict`` returns).

    Raises:
        ModelError: the model cannot be loaded, or its classes are not the label's 0 and 1.
    """
    if flavour not in NATIVE_FLAVOURS:
        return None
    import importlib

    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    try:
        model = importlib.import_module(f"mlflow.{flavour}").load_model(model_uri)
    except Exception as error:  # noqa: BLE001 - MLflow and the flavour's library raise their own types
        raise _failed(model_uri, error, f"the model must load with mlflow.{flavour}.load_model where the audit runs "
                                        f"(its library installed in the driver's and the executors' Python)") from error
    if not callable(getattr(model, "predict_proba", None)):
        return None
    classes = [item.item() if hasattr(item, "item") else item for item in getattr(model, "classes_", [0, 1])]
    positive = [index for index, item in enumerate(classes) if item == 1]
    if len(classes) != 2 or not positive:
        raise ModelError(f"{MODEL_FIELD}: the {flavour} classifier's classes are {classes}, got {model_uri!r}; the "
                         "audit needs a binary classifier of the label (classes 0 and 1)")
    names = getattr(model, "feature_names_in_", None)
    names = getattr(model, "feature_names_", None) if names is None else names
    return ProbabilityModel(model, flavour, positive[0], None if names is None else tuple(str(n) for n in names))


def positive_probability(model: ProbabilityModel, frame: Any) -> Any:
    """P(y = 1) of each row of the pandas DataFrame ``frame`` (its columns in ``model.inputs``' order): the class-1
    column of the classifier's ``predict_proba``, as float64."""
    import numpy as np

    rows = frame if model.inputs is None else frame[list(model.inputs)]
    return np.asarray(model.model.predict_proba(rows), dtype=np.float64)[:, model.column]


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
