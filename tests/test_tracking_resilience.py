"""Tracking failures: a call that fails while the store answers is the call's own (warned, tracking goes on, the
runs end FINISHED); only a store that stops answering stops tracking, and only then is the server blamed."""
from __future__ import annotations

import contextlib
import functools
import logging

import mlflow
import numpy as np
import pytest
from mlflow_support import free_port, logged_models

from lia_spark.run.config import config_from_dict
from lia_spark.tracking.mlflow_runs import PipelineTracker
from lia_spark.tracking.store import store_answers


@pytest.fixture()
def tracker(tmp_path):
    config = config_from_dict({"run": {"output_dir": str(tmp_path / "out")},
                               "tracking": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                                            "experiment": "resilience", "request_timeout_seconds": 2}})
    tracker = PipelineTracker(config)
    tracker.check()
    tracker.start()
    yield tracker
    while mlflow.active_run() is not None:
        mlflow.end_run()


def _fail(message: str) -> None:
    raise RuntimeError(message)


def _stage_runs(tracker: PipelineTracker) -> dict[str, str]:
    client = mlflow.MlflowClient(tracker.tracking_uri)
    runs = client.search_runs([tracker.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{tracker.run_id}'")
    return {run.info.run_name: run.info.status for run in runs}


def test_a_call_failing_while_the_store_answers_leaves_tracking_on(tracker, caplog):
    def train_logging_fails() -> None:
        tracker.start_stage("train")
        _fail("cannot pack the model's code")

    with caplog.at_level(logging.WARNING, logger="lia_spark"):
        tracker.best_effort("stage train", train_logging_fails)
    assert not tracker.stopped and tracker.not_logged == ["stage train"]
    assert mlflow.active_run().info.run_id == tracker.run_id  # back at the parent: the next stage nests there
    (warning,) = [record.getMessage() for record in caplog.records]
    assert "cannot pack the model's code" in warning and "answers, so tracking goes on" in warning, warning

    tracker.best_effort("stage audit", functools.partial(tracker.log_stage, "audit", status="ran", seconds=1.5,
                                                         metrics={"eps_lb": 0.5}, artifacts=[]))
    tracker.end(failed=False)
    client = mlflow.MlflowClient(tracker.tracking_uri)
    assert client.get_run(tracker.run_id).info.status == "FINISHED"
    assert _stage_runs(tracker) == {"train": "FINISHED", "audit": "FINISHED"}
    assert client.get_run(tracker.run_id).data.metrics["audit.eps_lb"] == 0.5


def test_a_store_that_stops_answering_stops_tracking_naming_the_server(tracker, caplog):
    tracker.tracking_uri = f"http://127.0.0.1:{free_port()}"  # the server went away
    assert not store_answers(tracker.tracking_uri, timeout_seconds=2)
    with caplog.at_level(logging.WARNING, logger="lia_spark"):
        tracker.best_effort("stage train", functools.partial(_fail, "Connection refused"))
        tracker.best_effort("stage audit", functools.partial(_fail, "never called"))
    assert tracker.stopped and tracker.not_logged == ["stage train", "stage audit"]
    (warning,) = [record.getMessage() for record in caplog.records]
    assert f"{tracker.tracking_uri}, which no longer answers; tracking stops" in warning, warning
    assert mlflow.active_run() is None


def test_one_model_that_cannot_be_logged_does_not_stop_the_others(tracker, tmp_path, caplog):
    import xgboost

    booster = xgboost.train({"max_depth": 2}, xgboost.DMatrix(np.arange(40.0).reshape(20, 2), np.arange(20) % 2), 2)
    booster.save_model(str(tmp_path / "proxy.ubj"))
    (tmp_path / "target.ubj").write_bytes(b"not a model")
    tracker.start_stage("train")
    with caplog.at_level(logging.WARNING, logger="lia_spark"):
        tracker._log_models([tmp_path / "target.ubj", tmp_path / "proxy.ubj"], {})
    assert tracker.not_logged == ["model target.ubj"] and not tracker.stopped
    (warning,) = [record.getMessage() for record in caplog.records]
    assert warning.startswith("tracking: model target.ubj not logged (") and "the other models go on" in warning
    client = mlflow.MlflowClient(tracker.tracking_uri)
    assert list(logged_models(client, client.get_run(mlflow.active_run().info.run_id))) == ["proxy"]


def _session_config(tmp_path, **tracking):
    return config_from_dict({"run": {"output_dir": str(tmp_path / "out")},
                             "tracking": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                                          "experiment": "session", "request_timeout_seconds": 2, **tracking}})


@pytest.mark.parametrize("raises", [False, True])
def test_the_session_ends_its_run_failed_exactly_when_the_command_raises(tmp_path, raises):
    from lia_spark.tracking.session import tracking_session

    config = _session_config(tmp_path)
    with pytest.raises(RuntimeError, match="stage train failed") if raises else contextlib.nullcontext():
        with tracking_session(config, run_name="one command") as tracker:
            run_id = tracker.start()
            if raises:
                raise RuntimeError("stage train failed")
    assert mlflow.MlflowClient(tracker.tracking_uri).get_run(run_id).info.status == ("FAILED" if raises else "FINISHED")


def test_the_session_checks_the_store_before_the_command_and_is_silent_when_off(tmp_path):
    from lia_spark.tracking.session import NoTracker, tracking_session
    from lia_spark.tracking.store import TrackingError

    ran = []
    closed = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TrackingError):
        with tracking_session(_session_config(tmp_path, tracking_uri=closed, timeout_seconds=1)):
            ran.append("the command")
    assert ran == []
    with tracking_session(_session_config(tmp_path, enabled=False)) as tracker:
        assert isinstance(tracker, NoTracker) and tracker.start() == "" and tracker.location() == ""
        tracker.best_effort("stage train", lambda: ran.append("a logging call"))
    assert ran == [] and not (tmp_path / "mlflow.db").exists()


def test_the_sqlite_store_without_the_full_mlflow_names_the_extra(tmp_path, monkeypatch):
    """MLflow's client alone (mlflow-skinny: a runtime's, or the plain wheel's) cannot open the default sqlite store:
    the up-front check says so, naming the field and the `tracking` extra, before any stage."""
    import importlib.util

    from lia_spark.tracking.store import TrackingError, check_tracking_store

    present = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "sqlalchemy"
                        else present(name, *rest))
    with pytest.raises(TrackingError, match=r"^tracking.tracking_uri: the sqlite store .* needs the full mlflow .*"
                                            r"without sqlalchemy\); `pip install 'lia-spark\[tracking\]'`"):
        check_tracking_store(f"sqlite:///{tmp_path / 'mlflow.db'}", timeout_seconds=1.0)
    check_tracking_store(f"file://{tmp_path / 'mlruns'}", timeout_seconds=1.0)  # a file store needs the client alone



def test_every_tracker_offers_the_protocols_calls_with_the_same_signatures():
    """The commands call a :class:`Tracker` (a :class:`TableTracker` for the audit table) whether tracking is on or
    off: the NoTracker and MLflow's trackers each define every call of the protocol with its signature, so no call
    is safe only because tracking happened to be on."""
    import inspect

    from lia_spark.tracking.mlflow_runs import AuditTableTracker
    from lia_spark.tracking.session import NoTracker, TableTracker, Tracker

    def calls(protocol) -> dict[str, inspect.Signature]:
        return {name: inspect.signature(member) for name, member in vars(protocol).items()
                if inspect.isfunction(member) and not name.startswith("_")}

    table_calls = {**calls(Tracker), **calls(TableTracker)}
    assert {"start", "best_effort", "start_stage", "log_stage", "log_cell", "log_table", "end"} <= set(table_calls)
    for tracker, expected in ((NoTracker, table_calls), (PipelineTracker, calls(Tracker)),
                              (AuditTableTracker, table_calls)):
        assert {name: inspect.signature(getattr(tracker, name)) for name in expected} == expected, tracker
    assert set(Tracker.__annotations__) == {"run_id", "tracking_uri", "not_logged"}
    off = NoTracker()
    assert all(hasattr(off, name) for name in Tracker.__annotations__)
    assert off.log_cell("none", mechanism="none", claimed_epsilon=1.0, bag_size=1, status="ran", seconds=0.0,
                        metrics={}) is None and off.not_logged == []
