"""The raw-row pyfunc model as MLflow "models from code":
:func:`lia_spark.tracking.model_logging.log_raw_row_model` logs this file, and MLflow runs it when it loads the model
(nothing pickled), with lia_spark's code on the path (the model's ``code_paths``). The model encodes raw Criteo rows
(I1..I13, C1..C26 as the data table stores them, or as text as Criteo files write them) with the saved feature
encoding (:func:`lia_spark.kernels.features.encode_features`) and returns the saved xgboost or catboost model's click
probability, post-processed as the run did (:class:`lia_spark.kernels.model_output.OutputTransform`). Only MLflow,
numpy and pandas are imported when the file runs.
"""
from pathlib import Path
from typing import Any

import mlflow.models
import numpy as np
import pandas as pd
from mlflow.pyfunc import PythonModel


class RawRowModel(PythonModel):
    """Raw Criteo rows -> P(y = 1 | x), from the artifacts ``model``, ``encoding`` and ``output``."""

    def load_context(self, context: Any) -> None:
        from lia_spark.kernels import features, model_output
        from lia_spark.tracking.model_logging import load_model_file

        self.spec = features.load_spec(context.artifacts["encoding"])
        self.output = model_output.load_output_transform(context.artifacts["output"])
        self.model = load_model_file(Path(context.artifacts["model"]))

    def predict(self, context: Any, model_input: pd.DataFrame, params: Any = None) -> np.ndarray:
        """P(y = 1 | x) of each row of ``model_input``. (A DataFrame hint is one MLflow infers no schema from: the
        logged signature stays the one of the input example; without a hint MLflow warns on each load.)"""
        from lia_spark.kernels import features

        encoded = features.encode_features(model_input, self.spec)
        if not hasattr(self.model, "predict_proba"):
            import xgboost

            encoded = xgboost.DMatrix(encoded.to_numpy(np.float32), feature_names=list(encoded.columns))
        return self.output.probabilities(self.output.raw_output(self.model, encoded))


mlflow.models.set_model(RawRowModel())
