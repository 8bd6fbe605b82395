"""The models a run logged, read the same way under MLflow 2 and 3 (the tracking tests run against both:
`make test-mlflow-oldest`)."""
from __future__ import annotations

import mlflow

from lia_spark.tracking.store import mlflow_3


def logged_models(client: mlflow.MlflowClient, run) -> dict[str, str]:
    """Name -> model URI of the models ``run`` logged: MLflow 3's logged models of the run, or under MLflow 2 the
    run's top-level artifact folders holding an MLmodel file (``log_model(artifact_path=name)``)."""
    run_id = run.info.run_id
    if mlflow_3():
        return {model.name: model.model_uri for model in client.search_logged_models(
            [run.info.experiment_id], filter_string=f"source_run_id = '{run_id}'")}
    return {folder.path: f"runs:/{run_id}/{folder.path}" for folder in client.list_artifacts(run_id) if folder.is_dir
            and any(item.path.endswith("/MLmodel") for item in client.list_artifacts(run_id, folder.path))}
