"""How a saved model's raw output becomes P(y=1|x) (docs/math.md §4): the post-processing of every trained model,
saved beside its model file, so a model loaded elsewhere (MLflow's raw-row model) predicts what the run reported.

Light on purpose (numpy, scipy and the label mechanisms only): MLflow's raw-row model imports it where only the
model's own library is installed.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np
from scipy.special import expit

from lia_spark.kernels import label_mechanisms as lm

OUTPUT_LINKS = ("sigmoid", "probability", "identity")


@dataclasses.dataclass(frozen=True)
class OutputTransform:
    """How a saved model's raw output becomes P(y=1|x) (saved beside the model file: :func:`save_output_transform`).

    ``link``: sigmoid of the xgboost margin + ``margin_offset`` (classifiers; proportion matching boosts from an
    offset), ``probability`` (catboost's P(y=1|x)) or ``identity`` (the bag-proportion regression's value); xgboost
    boosters use trees 0..``best_iteration`` (None = all). Then the noise correction of rr_debiased
    (``rr_epsilon``, :func:`lia_spark.kernels.label_mechanisms.debias_rr_predictions`) or of the bag-proportion
    regression (``bag_size``, ``mean_proportion``,
    :func:`lia_spark.kernels.label_mechanisms.debias_bag_predictions`)."""

    link: str = "sigmoid"
    margin_offset: float = 0.0
    best_iteration: int | None = None
    rr_epsilon: float | None = None
    bag_size: int | None = None
    mean_proportion: float | None = None

    def __post_init__(self) -> None:
        if self.link not in OUTPUT_LINKS:
            raise ValueError(f"link must be one of {OUTPUT_LINKS}, got {self.link!r}")

    def probabilities(self, raw: np.ndarray) -> np.ndarray:
        """P(y=1|x) from the raw output (margins, probabilities or regression values) of the model."""
        raw = np.asarray(raw, dtype=np.float64)
        values = expit(raw + self.margin_offset) if self.link == "sigmoid" else raw
        if self.rr_epsilon is not None:
            values = lm.debias_rr_predictions(values, epsilon=self.rr_epsilon)
        if self.bag_size is not None:
            if self.mean_proportion is None:
                raise ValueError(f"mean_proportion must be given with bag_size={self.bag_size}, got None")
            values = lm.debias_bag_predictions(values, bag_size=self.bag_size, mean_proportion=self.mean_proportion)
        return values

    def raw_output(self, model: Any, features: Any) -> np.ndarray:
        """The raw output :meth:`probabilities` reads: an xgboost Booster's margins (or regression values) on the
        feature matrix, or a catboost model's P(y=1|x) on the frame."""
        if self.link == "probability":
            return model.predict_proba(features)[:, 1]
        import xgboost as xgb

        trees = (0, 0) if self.best_iteration is None else (0, self.best_iteration + 1)
        return model.predict(features if isinstance(features, xgb.DMatrix) else xgb.DMatrix(features),
                             output_margin=True, validate_features=False, iteration_range=trees)


def output_transform_file(model_file: str) -> str:
    """Where a model file's :class:`OutputTransform` is saved: ``<folder>/<model name>.output.json``."""
    folder, name = os.path.split(model_file)
    return os.path.join(folder, f"{name.split('.')[0]}.output.json")


def save_output_transform(transform: OutputTransform, path: str) -> str:
    """Write ``transform`` as JSON to ``path``; return ``path``."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(dataclasses.asdict(transform), handle, indent=2, sort_keys=True)
    return path


def load_output_transform(path: str) -> OutputTransform:
    """The :class:`OutputTransform` written by :func:`save_output_transform`."""
    with open(path, encoding="utf-8") as handle:
        return OutputTransform(**json.load(handle))
