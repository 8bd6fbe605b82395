"""A privacy team's own label-DP trainer, as the e2e tests of "Audit your own model" run it: it never imports
lia_spark. It reads the inject stage's export, releases the labels by its own randomized response (flip with
probability 1 / (1 + e^eps)), fits plain xgboost on the export's columns, logs the model to MLflow as a pyfunc that
returns P(y = 1), and prints the model's URI. ``--flip-epsilon`` lets a broken implementation flip less than its
claim allows; ``--true-labels`` trains on labels it reads elsewhere (a model that never saw the injected ones);
``--predictions`` also writes (row_id, prediction) of every exported row as Parquet; ``--tsv`` reads the export's
Criteo day file instead (audit.export_tsv: no row ids, categoricals as hex strings, which the model takes as they
come: its signature says so). ``--flavours sklearn,xgboost,lightgbm,catboost`` instead fits each library's classifier
on the same released labels and logs it the ordinary way (``mlflow.<flavour>.log_model(classifier)``, no signature)
and again wrapped as a pyfunc returning its ``predict_proba(X)[:, 1]``, printing "<flavour> <native URI> <wrapped
URI>" per flavour, then "labels <URI>": a pyfunc returning the xgboost classifier's class labels (``predict``).

    python tests/own_trainer.py EXPORT --tracking-uri URI --epsilon 1 [--flip-epsilon 8] [--seed 7] [--tsv]
    python tests/own_trainer.py EXPORT --tracking-uri URI --epsilon 1 --flavours sklearn,xgboost
"""
from __future__ import annotations

import argparse
import inspect
import math

import mlflow
import numpy as np
import pandas as pd
import xgboost

LABEL = "label"
INTEGERS = [f"I{j}" for j in range(1, 14)]
CATEGORICALS = [f"C{j}" for j in range(1, 27)]


def numeric(rows: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The feature columns as floats: hex strings (a Criteo file's categoricals) as their integer value."""
    return pd.DataFrame({column: (rows[column].map(lambda token: int(token, 16), na_action="ignore")
                                  if rows[column].dtype == object or pd.api.types.is_string_dtype(rows[column])
                                  else rows[column]).astype("float64") for column in columns})


class ClickModel(mlflow.pyfunc.PythonModel):
    """P(click) of a row of the export's columns (the label left out)."""

    def __init__(self, booster: xgboost.Booster, columns: list[str]):
        self.booster, self.columns = booster, columns

    def predict(self, context, model_input: pd.DataFrame, params=None) -> np.ndarray:
        return self.booster.predict(xgboost.DMatrix(numeric(model_input, self.columns), missing=np.nan))


class Probability(mlflow.pyfunc.PythonModel):
    """P(click) of a fitted classifier: its predict_proba's class-1 column, of the columns it was fitted on."""

    def __init__(self, classifier, columns: list[str]):
        self.classifier, self.columns = classifier, columns

    def predict(self, context, model_input: pd.DataFrame, params=None) -> np.ndarray:
        return self.classifier.predict_proba(model_input[self.columns])[:, 1]


class Labels(Probability):
    """The same classifier's class labels (predict): what a careless wrapper returns."""

    def predict(self, context, model_input: pd.DataFrame, params=None) -> np.ndarray:
        return self.classifier.predict(model_input[self.columns])


def classifier(flavour: str, seed: int):
    """An unfitted classifier of ``flavour``'s library, small (the tests' exports have a few thousand rows)."""
    if flavour == "sklearn":
        from sklearn.ensemble import RandomForestClassifier

        return RandomForestClassifier(n_estimators=40, max_depth=12, n_jobs=2, random_state=seed)
    if flavour == "xgboost":
        return xgboost.XGBClassifier(n_estimators=40, max_depth=6, n_jobs=2, random_state=seed)
    if flavour == "lightgbm":
        import lightgbm

        return lightgbm.LGBMClassifier(n_estimators=40, num_leaves=31, n_jobs=2, random_state=seed, verbose=-1)
    if flavour == "catboost":
        import catboost

        return catboost.CatBoostClassifier(iterations=40, depth=6, thread_count=2, random_seed=seed, verbose=0,
                                           allow_writing_files=False)
    raise SystemExit(f"--flavours: unknown flavour {flavour!r}")


def log_flavours(flavours: list[str], rows: pd.DataFrame, columns: list[str], released: np.ndarray,
                 seed: int) -> None:
    """Fit and log each flavour's classifier natively and wrapped; then the class-label pyfunc (see the module)."""
    fitted = {}
    for flavour in flavours:
        model = classifier(flavour, seed).fit(rows[columns], released)
        fitted[flavour] = model
        with mlflow.start_run() as run:
            getattr(mlflow, flavour).log_model(model, **model_location("model"), **trusted_types(flavour, model))
            mlflow.pyfunc.log_model(**model_location("wrapped"), python_model=Probability(model, columns),
                                    pip_requirements=[])  # not inferred: a subprocess per model, seconds each
        print(flavour, f"runs:/{run.info.run_id}/model", f"runs:/{run.info.run_id}/wrapped")
    labels = fitted.get("xgboost") or classifier("xgboost", seed).fit(rows[columns], released)
    with mlflow.start_run() as run:
        mlflow.pyfunc.log_model(**model_location("labels"), python_model=Labels(labels, columns), pip_requirements=[])
    print("labels", f"runs:/{run.info.run_id}/labels")


def trusted_types(flavour: str, model) -> dict[str, list[str]]:
    """What MLflow 3's sklearn flavour needs to log a model in its default skops format (its error names the
    argument): the model's types that skops does not trust by default; nothing elsewhere (MLflow 2 pickles)."""
    if flavour != "sklearn" or not hasattr(mlflow.sklearn, "SERIALIZATION_FORMAT_SKOPS"):
        return {}
    import skops.io

    return {"skops_trusted_types": skops.io.get_untrusted_types(data=skops.io.dumps(model))}


def model_location(name: str) -> dict[str, str]:
    """Where log_model puts the model, in the installed MLflow's words: name= (MLflow 3) or artifact_path= (2)."""
    return {"name": name} if "name" in inspect.signature(mlflow.pyfunc.log_model).parameters else {
        "artifact_path": name}


def read_criteo_day(path: str) -> pd.DataFrame:
    """A Criteo day file as its reader would load it: integers as floats (NaN when empty), categoricals as strings."""
    return pd.read_csv(path, sep="\t", header=None, names=[LABEL, *INTEGERS, *CATEGORICALS],
                       dtype={**{column: "float64" for column in INTEGERS},
                              **{column: object for column in CATEGORICALS}})


def randomized_response(labels: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Each binary label kept with probability e^eps / (1 + e^eps), flipped otherwise."""
    flip = rng.random(labels.size) < 1.0 / (1.0 + math.exp(epsilon))
    return np.where(flip, 1 - labels, labels)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("export")
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument("--epsilon", type=float, required=True, help="the claimed label-DP epsilon")
    parser.add_argument("--flip-epsilon", type=float, help="the epsilon the flips really use (a broken RR)")
    parser.add_argument("--true-labels", help="Parquet of (row_id, label): train on these instead of the export's")
    parser.add_argument("--predictions", help="also write (row_id, prediction) of every exported row here")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--tsv", help="train on this Criteo day file of the export instead (its lines in row_id order)")
    parser.add_argument("--flavours", help="comma-separated: log these libraries' classifiers natively and wrapped")
    args = parser.parse_args()

    if args.tsv:
        rows = read_criteo_day(args.tsv)
    else:
        rows = pd.read_parquet(args.export).sort_values("row_id", kind="stable").reset_index(drop=True)
    if args.true_labels:
        truth = pd.read_parquet(args.true_labels)[["row_id", LABEL]]
        rows = rows.drop(columns=LABEL).merge(truth, on="row_id", how="left")
    columns = [column for column in rows.columns if column not in (LABEL, "row_id", "day")]
    rng = np.random.default_rng(args.seed)
    released = randomized_response(rows[LABEL].to_numpy(np.int64), args.flip_epsilon or args.epsilon, rng)
    mlflow.set_tracking_uri(args.tracking_uri)
    mlflow.set_experiment("own-trainer")
    if args.flavours:
        log_flavours(args.flavours.split(","), rows, columns, released, args.seed)
        return
    # base_score fixed: xgboost 3 estimates the starting intercept otherwise than 2.x, so the same trainer fitted
    # other trees under each (the reference numbers of tests/test_reference_numbers.py hold on both)
    booster = xgboost.train({"objective": "binary:logistic", "max_depth": 10, "eta": 0.3, "nthread": 2,
                             "seed": args.seed, "base_score": 0.5},
                            xgboost.DMatrix(numeric(rows, columns), label=released, missing=np.nan),
                            num_boost_round=60)
    model = ClickModel(booster, columns)
    with mlflow.start_run() as run:
        mlflow.log_param("claimed_epsilon", args.epsilon)
        signature = mlflow.models.infer_signature(rows[columns]) if args.tsv else None
        mlflow.pyfunc.log_model(**model_location("model"), python_model=model, signature=signature)
    if args.predictions:
        pd.DataFrame({"row_id": rows["row_id"], "prediction": model.predict(None, rows)}).to_parquet(args.predictions)
    print(f"runs:/{run.info.run_id}/model")


if __name__ == "__main__":
    main()
