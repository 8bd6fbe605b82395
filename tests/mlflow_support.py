"""The models a run logged, read the same way under MLflow 2 and 3 (the tracking tests run against both:
`make test-oldest`); a local `mlflow server` for the tests of a remote tracking server."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from lia_spark.tracking.store import mlflow_3

if TYPE_CHECKING:
    import mlflow

# MLflow 3's server starts a job runner with seven huey consumers (GenAI evaluation jobs, which tracking never
# uses): ~20 CPU-s of imports per server start on a CPU-bound test tier. MLflow 2 has none and ignores the variable.
SERVER_ENVIRONMENT = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def logged_models(client: mlflow.MlflowClient, run) -> dict[str, str]:
    """Name -> model URI of the models ``run`` logged: MLflow 3's logged models of the run, or under MLflow 2 the
    run's top-level artifact folders holding an MLmodel file (``log_model(artifact_path=name)``)."""
    run_id = run.info.run_id
    if mlflow_3():
        return {model.name: model.model_uri for model in client.search_logged_models(
            [run.info.experiment_id], filter_string=f"source_run_id = '{run_id}'")}
    return {folder.path: f"runs:/{run_id}/{folder.path}" for folder in client.list_artifacts(run_id) if folder.is_dir
            and any(item.path.endswith("/MLmodel") for item in client.list_artifacts(run_id, folder.path))}


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on (now)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_mlflow_server(port: int, store_uri: str, *artifact_options: str, timeout: float = 90.0) -> subprocess.Popen:
    """``mlflow server`` on 127.0.0.1:``port`` with one worker, ``store_uri`` and ``artifact_options`` (e.g.
    ``--artifacts-destination DIR``), in a process group of its own; returned once ``/health`` answers."""
    server = subprocess.Popen([str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1",
                               "--port", str(port), "--backend-store-uri", store_uri, *artifact_options,
                               "--workers", "1"], env={**os.environ, **SERVER_ENVIRONMENT},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                stop_mlflow_server(server)
                raise RuntimeError(f"mlflow server did not come up on port {port} (exit code {server.poll()})")
            time.sleep(0.5)


def stop_mlflow_server(server: subprocess.Popen) -> None:
    """SIGTERM the server's process group (server, uvicorn or gunicorn workers), SIGKILL what is left after 20 s."""
    for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            server.poll()
            try:
                os.killpg(server.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
    server.wait(timeout=10)
