"""The train stage's model files as MLflow models: xgboost/catboost flavours with their signatures, and a pyfunc
that predicts from raw Criteo rows (its feature encoding and output transform packed beside the model).
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any, Callable

from lia_spark.kernels.model_libraries import CATBOOST_LIBRARY, XGBOOST_LIBRARY, ModelLibrary, library_of_file
from lia_spark.run.environment import copy_package, package_versions
from lia_spark.tracking.store import mlflow_3

logger = logging.getLogger(__name__)


def _xgboost_signature(booster: Any) -> Any:
    from mlflow.models.signature import ModelSignature
    from mlflow.types import ColSpec, Schema

    names = booster.feature_names or [f"f{i}" for i in range(booster.num_features())]
    types = booster.feature_types or ["float"] * len(names)
    inputs = Schema([ColSpec("long" if kind in ("int", "i") else "double", name) for name, kind in zip(names, types)])
    return ModelSignature(inputs=inputs, outputs=Schema([ColSpec("double", "prediction")]))


def _catboost_signature(model: Any) -> Any:
    from mlflow.models.signature import ModelSignature
    from mlflow.types import ColSpec, Schema

    categorical = set(model.get_cat_feature_indices())
    inputs = Schema([ColSpec("string" if index in categorical else "double", name)
                     for index, name in enumerate(model.feature_names_)])
    return ModelSignature(inputs=inputs, outputs=Schema([ColSpec("double", "prediction")]))


# Each library's MLflow flavour (the ``mlflow.<flavour>`` module that logs it) and the signature of its models.
FLAVOURS: dict[ModelLibrary, tuple[str, Callable[[Any], Any]]] = {
    XGBOOST_LIBRARY: ("xgboost", _xgboost_signature), CATBOOST_LIBRARY: ("catboost", _catboost_signature)}


def load_model_file(path: Path) -> Any:
    """The model in file ``path``, loaded by the library its suffix names (a catboost classifier for ``.cbm``, an
    xgboost booster otherwise)."""
    return library_of_file(path).load(path)


def model_name(path: Path) -> str:
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in path.stem) or "model"


def _requirement(*distributions: str) -> str:
    """``name==version`` of the first of ``distributions`` that is installed (xgboost or xgboost-cpu)."""
    versions = package_versions()
    name = next((d for d in distributions if d in versions), distributions[0])
    return f"{name}=={versions[name]}" if name in versions else name


def model_location(name: str) -> dict[str, str]:
    """Where ``log_model`` puts a model, in the installed MLflow's words: ``name=`` (MLflow 3, a logged model of the
    run) or ``artifact_path=`` (MLflow 2, a folder of the run's artifacts); either way the returned ``model_uri``
    loads it."""
    return {"name": name} if mlflow_3() else {"artifact_path": name}


def log_model_file(path: Path) -> str:
    """Log one model file (``.cbm`` catboost, any other xgboost) with its signature; return its URI.

    Explicit pip requirements skip MLflow's slow requirement inference.
    """
    import mlflow

    library = library_of_file(path)
    model = library.load(path)
    flavour, signature = FLAVOURS[library]
    info = getattr(mlflow, flavour).log_model(model, **model_location(model_name(path)), signature=signature(model),
                                              pip_requirements=[_requirement(*library.distributions)])
    return info.model_uri


RAW_ROWS_SUFFIX = "_raw_rows"

def raw_row_example(encoding: Path) -> Any:
    """Two raw rows for the model's input example, made up, not from the data: integers 1 and each categorical's most
    frequent value (0 without a vocabulary), then a row with every value missing."""
    import numpy as np
    import pandas as pd

    from lia_spark.kernels import criteo, features

    spec = features.load_spec(str(encoding))
    typical = {name: 1.0 for name in criteo.INT_COLUMNS}
    for name in criteo.CAT_COLUMNS:
        known = spec.vocabulary.values[name][spec.vocabulary.ranks[name] == 0] if spec.vocabulary else np.zeros(1)
        typical[name] = float(known[0]) if known.size else 0.0
    return pd.DataFrame([typical, dict.fromkeys(typical, np.nan)], columns=list(criteo.FEATURE_COLUMNS))


def log_raw_row_model(path: Path, encoding: Path, output: Path) -> str:
    """Log model file ``path`` with its feature encoding and output transform as a pyfunc model ``<name>_raw_rows``
    that scores raw Criteo rows (:mod:`lia_spark.tracking.raw_row_model`, logged from its code): signature I1..I13,
    C1..C26 (any type: doubles or int64 as the data table stores them, text as Criteo files write it, hexadecimal
    categoricals; NaN, None or "" missing) -> prediction, an input example (:func:`raw_row_example`), the two files
    as artifacts and lia_spark's code (copied from wherever it is imported: a folder, a wheel or a zip); return its
    URI."""
    import mlflow
    from mlflow.models.signature import ModelSignature
    from mlflow.types import ColSpec, Schema
    from mlflow.types.schema import AnyType

    from lia_spark.kernels import criteo

    columns = Schema([ColSpec(AnyType(), name, required=False) for name in criteo.FEATURE_COLUMNS])
    signature = ModelSignature(inputs=columns, outputs=Schema([ColSpec("double", "prediction")]))
    library = _requirement(*library_of_file(path).distributions)
    with tempfile.TemporaryDirectory(prefix="lia-spark-code-") as folder:  # a copy: the package may be in a zip
        package = copy_package(Path(folder))
        info = mlflow.pyfunc.log_model(
            **model_location(f"{model_name(path)}{RAW_ROWS_SUFFIX}"),
            python_model=str(package / "tracking" / "raw_row_model.py"),  # models from code: nothing pickled
            artifacts={"model": str(path), "encoding": str(encoding), "output": str(output)}, signature=signature,
            input_example=raw_row_example(encoding), code_paths=[str(package)],
            pip_requirements=[library, _requirement("numpy"), _requirement("pandas"), _requirement("pyyaml")])
    return info.model_uri
