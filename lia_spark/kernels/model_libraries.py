"""The model libraries of ``models.library`` (docs/math.md §4), one :class:`ModelLibrary` each in :data:`LIBRARIES`:
the feature values a library reads, how it fits (labels, soft labels or bag proportions), how its raw output
becomes P(y=1|x), how its model files are written and read, and what it can train. Code asks the object, never
compares the name: ``models.library`` becomes its object once (:attr:`lia_spark.run.model_sections.ModelsConfig.
model_library`).

Light at import (numpy only): the configuration checks read the table; xgboost, catboost, pandas and scipy load
when a library first fits, predicts or reads a file.

Adding a library: a :class:`ModelLibrary` subclass here and its row in :data:`LIBRARIES` (docs/usage.md, "Adding a
model library"); its MLflow flavour in :mod:`lia_spark.tracking.model_logging`.
"""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from lia_spark import names

if TYPE_CHECKING:  # the types only: pandas and the output transform load with the first fit
    import pandas as pd

    from lia_spark.kernels.model_output import OutputTransform


@dataclasses.dataclass(frozen=True)
class BoostingParams:
    """Hyper-parameters shared by both libraries; threads = 0 uses every core."""

    n_estimators: int = names.N_ESTIMATORS
    max_depth: int = names.MAX_DEPTH
    learning_rate: float = names.LEARNING_RATE
    early_stopping_rounds: int = names.EARLY_STOPPING_ROUNDS
    threads: int = 0
    seed: int = 0

    def thread_count(self) -> int:
        """The threads a fit uses: ``threads``, or every core when 0."""
        return thread_count(self.threads)


def thread_count(threads: int) -> int:
    """``threads``, or every core when 0."""
    return threads or (os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class Bags:
    """Bag membership of a set of rows (indices 0..n_bags-1) and each bag's released proportion."""

    index: np.ndarray
    alpha: np.ndarray


@dataclasses.dataclass
class FittedModel:
    """A fitted booster of ``library`` plus the post-processing that turns its output into P(y=1|x)."""

    library: ModelLibrary
    model: Any
    margin_offset: float = 0.0
    debias_epsilon: float | None = None
    best_iteration: int = 0
    fit_seconds: float = 0.0

    def output_transform(self) -> OutputTransform:
        """Its post-processing as a saveable :class:`lia_spark.kernels.model_output.OutputTransform`."""
        return self.library.output_transform(self)

    def predict(self, features: Any) -> np.ndarray:
        """P(y=1 | x) of the library's feature values (:meth:`ModelLibrary.feature_values`)."""
        transform = self.output_transform()
        return transform.probabilities(transform.raw_output(self.model, features))

    def predict_with_threads(self, threads: int = 0) -> None:
        """Predict with ``threads`` threads from now on (0 = every core); the predictions do not change."""
        self.library.use_threads(self.model, threads)

    def save(self, path_without_suffix: str) -> str:
        """Write the model to ``path_without_suffix`` + the library's suffix; returns the file path."""
        path = path_without_suffix + self.library.suffix
        self.model.save_model(path)
        return path


class ModelLibrary:
    """One model library: its name (``models.library``), model file suffix, the distributions that provide it
    (MLflow's pip requirements: the first installed), and what it can do: categoricals read natively (the feature
    frame) or as numbers (a float32 matrix), proportion matching on bags, a distributed (Spark) trainer."""

    name: ClassVar[str]
    suffix: ClassVar[str]
    distributions: ClassVar[tuple[str, ...]]
    native_categoricals: ClassVar[bool]
    bag_objective: ClassVar[bool]
    distributed: ClassVar[bool]

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(self.name)

    def feature_values(self, frame: pd.DataFrame, columns: list[str] | tuple[str, ...]) -> Any:
        """What the library fits and predicts on: the frame's ``columns`` (native categoricals) or a float32 matrix."""
        if self.native_categoricals:
            return frame[list(columns)].reset_index(drop=True)
        return frame[list(columns)].to_numpy(np.float32)

    def fit(self, train_x: Any, train_y: np.ndarray | None, valid_x: Any, valid_y: np.ndarray | None, *,
            params: BoostingParams, train_bags: Bags | None = None, valid_bags: Bags | None = None,
            feature_names: list[str] | None = None, cat_features: list[str] | None = None) -> FittedModel:
        """The library's model on labels (or soft labels in [0, 1]) ``train_y``, or on ``train_bags``' proportions,
        early-stopped on the validation rows' loss of the same kind."""
        raise NotImplementedError

    def output_transform(self, fitted: FittedModel) -> OutputTransform:
        """How ``fitted``'s raw output becomes P(y=1|x)."""
        raise NotImplementedError

    def use_threads(self, model: Any, threads: int) -> None:
        """Predict with ``threads`` threads from now on (0 = every core), where the library keeps a count."""

    def load(self, path: Path) -> Any:
        """The model in file ``path`` (written by :meth:`FittedModel.save`)."""
        raise NotImplementedError

    def teacher_predictions(self, model: TeacherModel, fit: tuple[Any, np.ndarray],
                            held_out: tuple[Any, np.ndarray] | None, student_features: Any) -> np.ndarray:
        """P_t(y=1|x) on the student rows of a PATE teacher fitted on ``fit`` with one thread, kept at its best
        iteration on ``held_out`` when given (every tree otherwise)."""
        raise NotImplementedError


class XGBoost(ModelLibrary):
    """XGBoost hist on a float32 matrix: logistic loss on labels, proportion matching on bags (a custom objective),
    margins turned into probabilities by a sigmoid; xgboost.spark for the distributed path."""

    name, suffix, distributions = names.XGBOOST, ".ubj", ("xgboost", "xgboost-cpu")
    native_categoricals, bag_objective, distributed = False, True, True

    def fit(self, train_x: Any, train_y: np.ndarray | None, valid_x: Any, valid_y: np.ndarray | None, *,
            params: BoostingParams, train_bags: Bags | None = None, valid_bags: Bags | None = None,
            feature_names: list[str] | None = None, cat_features: list[str] | None = None) -> FittedModel:
        """Logistic loss on ``train_y``, or proportion matching on ``train_bags`` (then ``valid_bags`` is needed):
        early stopping on the validation log-loss of the labels, or on the validation bags' proportion-matching
        loss."""
        import xgboost as xgb
        from scipy.special import logit

        from lia_spark.kernels.proportion_matching import proportion_matching_grad_hess, proportion_matching_loss

        started = time.monotonic()
        booster_params = _hist_params(max_depth=params.max_depth, learning_rate=params.learning_rate,
                                      threads=params.thread_count(), seed=params.seed)
        if train_bags is None:
            if train_y is None:
                raise ValueError("train_y must be given without train_bags, got None")
            dtrain = xgb.DMatrix(train_x, label=train_y, feature_names=feature_names)
            dvalid = xgb.DMatrix(valid_x, label=valid_y, feature_names=feature_names)
            booster_params.update(_logistic_params(float(np.mean(train_y))))
            booster = xgb.train(booster_params, dtrain, params.n_estimators, evals=[(dvalid, "valid")],
                                early_stopping_rounds=params.early_stopping_rounds or None, verbose_eval=False)
            offset = 0.0
        else:
            if valid_bags is None:
                raise ValueError("valid_bags must be given with train_bags")
            offset = float(logit(np.clip(np.mean(np.clip(train_bags.alpha, 0, 1)), 1e-4, 1 - 1e-4)))
            dtrain = xgb.DMatrix(train_x, base_margin=np.full(len(train_x), offset), feature_names=feature_names)
            dvalid = xgb.DMatrix(valid_x, base_margin=np.full(len(valid_x), offset), feature_names=feature_names)
            booster_params.update(disable_default_eval_metric=1, base_score=0.0)  # margins = offset + trees, also
            # where predict gets no base_margin (the default base score would add 0.5 to every margin)

            def objective(margins: np.ndarray, _matrix: Any) -> tuple[np.ndarray, np.ndarray]:
                gradient, exact, gauss_newton = proportion_matching_grad_hess(margins, train_bags.index,
                                                                              train_bags.alpha)
                return gradient, np.maximum(exact, gauss_newton)

            def metric(margins: np.ndarray, _matrix: Any) -> tuple[str, float]:
                loss = proportion_matching_loss(margins, valid_bags.index, valid_bags.alpha)
                return "bag_bce", loss / max(valid_bags.alpha.size, 1)

            booster = xgb.train(booster_params, dtrain, params.n_estimators, evals=[(dvalid, "valid")],
                                obj=objective, custom_metric=metric,
                                early_stopping_rounds=params.early_stopping_rounds or None, verbose_eval=False)
        best = getattr(booster, "best_iteration", None)
        best = params.n_estimators - 1 if best is None else int(best)
        return FittedModel(self, booster, margin_offset=offset, best_iteration=best,
                           fit_seconds=time.monotonic() - started)

    def output_transform(self, fitted: FittedModel) -> OutputTransform:
        """sigmoid(margin + offset) of trees 0..best_iteration, noise-corrected where the fit was debiased."""
        from lia_spark.kernels.model_output import OutputTransform

        return OutputTransform(margin_offset=fitted.margin_offset, best_iteration=fitted.best_iteration,
                               rr_epsilon=fitted.debias_epsilon)

    def use_threads(self, model: Any, threads: int) -> None:
        """A booster keeps the thread count it was fitted with (one in a Spark task)."""
        model.set_param({"nthread": thread_count(threads)})

    def load(self, path: Path) -> Any:
        """An xgboost Booster."""
        import xgboost

        booster = xgboost.Booster()
        booster.load_model(str(path))
        return booster

    def teacher_predictions(self, model: TeacherModel, fit: tuple[Any, np.ndarray],
                            held_out: tuple[Any, np.ndarray] | None, student_features: Any) -> np.ndarray:
        """Logistic loss from the fit rows' click rate."""
        import xgboost as xgb

        features, labels = fit
        params = {**_hist_params(max_depth=model.max_depth, learning_rate=model.learning_rate, threads=1,
                                 seed=model.seed), **_logistic_params(labels.mean() if labels.size else 0.5)}
        if held_out is not None:
            booster = xgb.train(params, xgb.DMatrix(features, label=labels), model.n_estimators,
                                evals=[(xgb.DMatrix(held_out[0], label=held_out[1]), "holdout")],
                                early_stopping_rounds=model.early_stopping_rounds or model.n_estimators,
                                verbose_eval=False)
            trees = (0, booster.best_iteration + 1)
        else:
            booster, trees = xgb.train(params, xgb.DMatrix(features, label=labels), model.n_estimators), (0, 0)
        return booster.predict(xgb.DMatrix(student_features), iteration_range=trees)


def _hist_params(*, max_depth: int, learning_rate: float, threads: int, seed: int) -> dict[str, Any]:
    """XGBoost's hist booster settings of every fit here (the seed folded into xgboost's 31 bits)."""
    return {"tree_method": "hist", "max_depth": max_depth, "eta": learning_rate, "nthread": threads,
            "seed": seed % 2**31, "verbosity": 0}


def _logistic_params(click_rate: float) -> dict[str, Any]:
    """Logistic loss on labels, boosting from the training rows' click rate clipped to [1e-4, 1 - 1e-4]."""
    return {"objective": "binary:logistic", "eval_metric": "logloss",
            "base_score": float(np.clip(click_rate, 1e-4, 1 - 1e-4))}


class CatBoost(ModelLibrary):
    """CatBoost on the feature frame with native categorical features (ordered target statistics); it predicts
    P(y=1|x) itself. No proportion-matching objective, no distributed trainer here."""

    name, suffix, distributions = names.CATBOOST, ".cbm", ("catboost",)
    native_categoricals, bag_objective, distributed = True, False, False

    def fit(self, train_x: Any, train_y: np.ndarray | None, valid_x: Any, valid_y: np.ndarray | None, *,
            params: BoostingParams, train_bags: Bags | None = None, valid_bags: Bags | None = None,
            feature_names: list[str] | None = None, cat_features: list[str] | None = None) -> FittedModel:
        """Labels in {0, 1} train with Logloss; soft labels in [0, 1] (PATE's vote shares) with CrossEntropy, the
        same loss on probabilities (catboost's Logloss does not take them). Early stopping on validation.

        Raises:
            ValueError: naming models.library when given bags.
        """
        if train_bags is not None:
            raise ValueError("models.library: catboost has no proportion-matching objective here; use xgboost for "
                             "llp mechanisms, got catboost")
        from catboost import CatBoostClassifier

        started = time.monotonic()
        binary = bool(np.isin(np.asarray(train_y), (0, 1)).all())
        model = CatBoostClassifier(iterations=params.n_estimators, depth=params.max_depth,
                                   loss_function="Logloss" if binary else "CrossEntropy",
                                   learning_rate=params.learning_rate, thread_count=params.thread_count(),
                                   random_seed=params.seed % 2**31, verbose=False, allow_writing_files=False,
                                   early_stopping_rounds=params.early_stopping_rounds or None)
        model.fit(train_x, train_y, cat_features=list(cat_features or ()), eval_set=(valid_x, valid_y),
                  use_best_model=True)
        return FittedModel(self, model, best_iteration=int(model.get_best_iteration() or 0),
                           fit_seconds=time.monotonic() - started)

    def output_transform(self, fitted: FittedModel) -> OutputTransform:
        """The model's own P(y=1|x), noise-corrected where the fit was debiased."""
        from lia_spark.kernels.model_output import OutputTransform

        return OutputTransform(link="probability", rr_epsilon=fitted.debias_epsilon)

    def load(self, path: Path) -> Any:
        """A CatBoostClassifier."""
        from catboost import CatBoostClassifier

        return CatBoostClassifier().load_model(str(path))

    def teacher_predictions(self, model: TeacherModel, fit: tuple[Any, np.ndarray],
                            held_out: tuple[Any, np.ndarray] | None, student_features: Any) -> np.ndarray:
        """CatBoost refuses labels of one class: a teacher whose rows hold one class (a small partition of rare
        clicks) predicts that class on every student row, as any model fitted on them would."""
        features, labels = fit
        if labels.size and labels.min() == labels.max():
            return np.full(len(student_features), float(labels[0]))
        from catboost import CatBoostClassifier

        booster = CatBoostClassifier(iterations=model.n_estimators, depth=model.max_depth,
                                     learning_rate=model.learning_rate, thread_count=1,
                                     random_seed=model.seed % 2**31, verbose=False, allow_writing_files=False,
                                     early_stopping_rounds=model.early_stopping_rounds or None)
        booster.fit(features, labels, cat_features=list(model.cat_features), eval_set=held_out,
                    use_best_model=held_out is not None)
        return booster.predict_proba(student_features)[:, 1]


XGBOOST_LIBRARY, CATBOOST_LIBRARY = XGBoost(), CatBoost()
LIBRARIES: dict[str, ModelLibrary] = {library.name: library for library in (XGBOOST_LIBRARY, CATBOOST_LIBRARY)}


@dataclasses.dataclass(frozen=True)
class TeacherModel:
    """The teachers' boosting settings (:func:`lia_spark.kernels.pate.teacher_votes`): library (xgboost on a matrix,
    catboost on a frame with the categorical columns ``cat_features``), trees, depth, learning rate, seed and early
    stopping rounds."""

    n_estimators: int
    max_depth: int
    learning_rate: float
    seed: int
    early_stopping_rounds: int = 0
    library: ModelLibrary = XGBOOST_LIBRARY
    cat_features: tuple[str, ...] = ()


def model_library(name: str) -> ModelLibrary:
    """The library called ``name`` (``models.library``).

    Raises:
        ValueError: naming models.library and the libraries there are.
    """
    if name not in LIBRARIES:
        raise ValueError(f"models.library must be one of {', '.join(LIBRARIES)}, got {name!r}")
    return LIBRARIES[name]


def library_of_file(path: Path) -> ModelLibrary:
    """The library whose model files end like ``path`` (:meth:`FittedModel.save`); xgboost for any other suffix (a
    distributed model's booster)."""
    return next((library for library in LIBRARIES.values() if library.suffix == path.suffix), XGBOOST_LIBRARY)
