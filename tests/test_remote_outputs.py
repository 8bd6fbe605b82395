"""Stages writing to a remote Hadoop output folder: posteriors (Spark writes the rows), audit, the whole pipeline,
and local copies of remote artifacts.

The remote file system is Hadoop's ViewFileSystem: ``viewfs://<table>/lia`` mounts a local temporary folder, so
Python sees a URI it cannot open while Spark and Hadoop write, read and rename through it (no server needed).
Each test mounts a fresh table (Hadoop caches FileSystem instances by scheme and authority).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.engine.posteriors.summary import plot_sample, summarize_digest
from lia_spark.engine.posteriors.units import frame_blobs
from lia_spark.engine.posteriors.writing import PLOT_COLUMNS, spark_write_posteriors
from lia_spark.engine.runtime.outputs import MARKER, is_complete, local_copies, write_text
from lia_spark.kernels import advantage
from lia_spark.kernels.criteo import make_row_id
from lia_spark.kernels.posterior_grid import plot_sample_mask, settings_grid
from lia_spark.run.config import config_from_dict

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)

SEED = 20261122
ROWS = 6000
JVM_CWD = Path.cwd()  # the driver JVM's working directory: where a worker would create a "viewfs:" folder


def mount(spark, folder: Path) -> str:
    """``viewfs://<fresh table>/lia``, whose files are those of the local ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    table = f"lia{uuid.uuid4().hex[:12]}"
    spark.sparkContext._jsc.hadoopConfiguration().set(f"fs.viewfs.mounttable.{table}.link./lia", folder.as_uri())
    return f"viewfs://{table}/lia"


@contextlib.contextmanager
def empty_cwd(folder: Path):
    """Python works in the empty ``folder``, which must still be empty at the end, and the JVM's working directory
    must hold no folder named after a URI scheme: nothing opened a remote path with Python's or the OS's local
    file functions (they would create ``viewfs:/...`` relative to one of them)."""
    folder.mkdir(parents=True)
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(before)
    assert os.listdir(folder) == []
    assert not [name for name in os.listdir(JVM_CWD) if name.endswith(":")]


@pytest.fixture
def python_cwd(tmp_path):
    with empty_cwd(tmp_path / "cwd") as folder:
        yield folder


def _listing(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if not name.endswith(".crc"))


# ------------------------------------------------------------------------------------------ posteriors


def _posteriors_config(output_dir: str, inputs: Path, **mechanisms) -> object:
    return config_from_dict({
        "run": {"output_dir": output_dir, "seed": SEED},
        "data": {"parquet_path": str(inputs / "data")},
        "mechanisms": {"days": [1], "epsilons": [1.0], "bag_sizes": [1, 8], "rows_per_bagging_unit": 1500,
                       "plot_sample_rows": 600, "prior_path": str(inputs / "truth"), **mechanisms},
    })


@pytest.fixture(scope="module")
def both(spark, tmp_path_factory):
    """One small day released into a local and into a remote output folder (4 bagging units, 7 settings)."""
    root = tmp_path_factory.mktemp("remote_posteriors")
    rng = np.random.default_rng(11)
    days = np.repeat([0, 1], [300, ROWS])
    row_ids = make_row_id(days, np.concatenate([np.arange(300), np.arange(ROWS)]))
    eta = rng.beta(0.6, 8.0, size=days.size)
    eta[:40] = 0.5
    labels = (rng.random(days.size) < eta).astype(np.int32)
    inputs = root / "inputs"
    spark.createDataFrame(pd.DataFrame({"row_id": row_ids, "day": days.astype(np.int32), "label": labels})
                          ).repartition(3).write.partitionBy("day").parquet(str(inputs / "data"))
    spark.createDataFrame(pd.DataFrame({"row_id": row_ids, "day": days.astype(np.int32), "eta": eta})
                          ).write.parquet(str(inputs / "truth"))
    local = run_stage("posteriors", spark, _posteriors_config(str(root / "local"), inputs))
    uri = mount(spark, root / "mounted")
    with empty_cwd(root / "cwd"):
        remote = run_stage("posteriors", spark, _posteriors_config(f"{uri}/out", inputs))
    return {"root": root, "inputs": inputs, "uri": uri, "local": local, "remote": remote,
            "local_dir": root / "local" / "posteriors", "remote_dir": root / "mounted" / "out" / "posteriors"}


def _rows(folder: Path) -> pd.DataFrame:
    return (pd.read_parquet(folder / "rows")
            .sort_values(["mechanism", "epsilon", "bag_size", "row_id"], ignore_index=True))


def test_remote_posteriors_equal_local_exactly(both):
    local, remote = both["local"], both["remote"]
    assert remote.bagging_units == local.bagging_units == 4
    assert remote.input_rows == local.input_rows == ROWS and remote.settings == local.settings == 7
    assert remote.bags == local.bags and remote.rows_without_prior == local.rows_without_prior == 0
    pd.testing.assert_frame_equal(pd.DataFrame(remote.summary), pd.DataFrame(local.summary), check_exact=True)
    local_summary = pd.read_parquet(both["local_dir"] / "summary")
    pd.testing.assert_frame_equal(pd.read_parquet(both["remote_dir"] / "summary"), local_summary, check_exact=True)
    assert (both["remote_dir"] / "summary.csv").read_bytes() == (both["local_dir"] / "summary.csv").read_bytes()
    assert (local_summary["rows"] == ROWS).all() and np.isinf(local_summary["abs_I_p99"]).any()
    remote_rows, local_rows = _rows(both["remote_dir"]), _rows(both["local_dir"])
    assert len(remote_rows) == 7 * ROWS
    pd.testing.assert_frame_equal(remote_rows, local_rows, check_exact=True)


def test_remote_posteriors_report_uris_and_commit_every_file(both):
    local, remote, uri = both["local"], both["remote"], both["uri"]
    assert local.output_path == str(both["local_dir"])
    assert remote.output_path == f"{uri}/out/posteriors"
    assert remote.summary_csv == f"{uri}/out/posteriors/summary.csv"
    assert len(remote.plots) == len(local.plots) == 3 * 4
    assert [os.path.relpath(p, remote.output_path) for p in remote.plots] == [
        os.path.relpath(p, local.output_path) for p in local.plots]
    assert _listing(both["remote_dir"]) == [MARKER, "plots", "rows", "summary", "summary.csv"]
    for path in remote.artifacts():
        assert path.startswith(f"{uri}/out/posteriors/")
        size = os.path.getsize(both["remote_dir"] / os.path.relpath(path, remote.output_path))
        assert size > (1000 if path.endswith(".png") else 0), path


def test_remote_plot_sample_is_the_workers_sample(both, spark):
    """The Spark predicate (xxhash64) keeps exactly the rows of plot_sample_mask, in every setting."""
    rows = spark.read.parquet(f"{both['uri']}/out/posteriors/rows")
    sample = plot_sample(rows, fraction=0.1, seed=SEED)
    assert list(sample.columns) == PLOT_COLUMNS
    ids = _rows(both["local_dir"])["row_id"].to_numpy()
    kept = ids[plot_sample_mask(ids, fraction=0.1, seed=SEED)]
    assert 0 < len(sample) == len(kept) and sorted(sample["row_id"]) == sorted(kept)
    assert len(plot_sample(rows, fraction=1.0, seed=SEED)) == 7 * ROWS


def test_remote_posteriors_without_rows(both, spark, python_cwd):
    """write_rows=false deletes the Spark-written rows through Hadoop; the summary is still the local one."""
    mounted = both["root"] / "mounted_no_rows"
    config = _posteriors_config(f"{mount(spark, mounted)}/out", both["inputs"], write_rows=False)
    result = run_stage("posteriors", spark, config)
    assert not result.rows_written
    assert _listing(mounted / "out" / "posteriors") == [MARKER, "plots", "summary", "summary.csv"]
    pd.testing.assert_frame_equal(pd.read_parquet(mounted / "out" / "posteriors" / "summary"),
                                  pd.read_parquet(both["local_dir"] / "summary"), check_exact=True)
    assert run_stage("posteriors", spark, config).skipped


def test_remote_percentiles_ranked_on_driver_or_by_spark(both, spark):
    """summarize_digest over Spark-read rows: the exact order statistics, ranked on the driver or by a window."""
    rows = spark.read.parquet(f"{both['uri']}/out/posteriors/rows")
    rr_rows = rows.where("mechanism = 'rr'")
    settings = settings_grid(_posteriors_config("unused", both["inputs"]).mechanisms)
    digest = spark_write_posteriors(
        frame_blobs(rr_rows.select("row_id", "label"), rr_rows.select("row_id", "prior"), seed=SEED, unit_bits=2),
        output_dir=f"{both['uri']}/again", settings=settings, seed=SEED, unit_bits=2)
    again = spark.read.parquet(f"{both['uri']}/again/rows")
    on_driver = summarize_digest(spark, digest, again)
    in_spark = summarize_digest(spark, digest, again, driver_rows=0)
    pd.testing.assert_frame_equal(on_driver, in_spark, check_exact=True)
    local_rows = _rows(both["local_dir"])
    for record in on_driver.to_dict("records"):
        same_epsilon = (local_rows["epsilon"].isna() if math.isnan(record["epsilon"])
                        else local_rows["epsilon"] == record["epsilon"])
        cell = local_rows[(local_rows["mechanism"] == record["mechanism"]) & same_epsilon
                          & (local_rows["bag_size"] == record["bag_size"])]
        assert [record[f"abs_I_p{q}"] for q in advantage.PERCENTILES] == [
            advantage.exact_percentile(np.abs(cell["I"].to_numpy()), q) for q in advantage.PERCENTILES]


# ------------------------------------------------------------------------------------------ audit


def test_remote_audit_equals_local(spark, tmp_path, python_cwd):
    rng = np.random.default_rng(5)
    m = 1500
    proxy = rng.uniform(0.02, 0.98, m)
    label = (rng.random(m) < proxy).astype(np.int32)
    target = np.clip(proxy + 0.3 * (2 * label - 1) * rng.random(m), 0.001, 0.999)
    canaries = str(tmp_path / "canaries")
    spark.createDataFrame(pd.DataFrame({
        "row_id": rng.choice(1 << 40, m, replace=False).astype(np.int64), "label": label, "released_label": label,
        "target_prediction": target, "proxy_prediction": proxy})).write.parquet(canaries)
    uri = mount(spark, tmp_path / "mounted")
    results = {}
    for name, output_dir in (("local", str(tmp_path / "local")), ("remote", f"{uri}/out")):
        config = config_from_dict({"run": {"output_dir": output_dir, "seed": 3},
                                   "audit": {"repetitions": 4, "canary_path": canaries,
                                             "design": "observational"}})
        results[name] = run_stage("audit", spark, config)
        assert run_stage("audit", spark, config).skipped
    local, remote = results["local"], results["remote"]
    assert local.output_path == str(tmp_path / "local" / "audit") and remote.output_path == f"{uri}/out/audit"
    assert remote.summary == local.summary
    assert is_complete(spark, remote.output_path)
    assert _listing(tmp_path / "mounted" / "out" / "audit") == [MARKER, "plots", "results", "results.csv",
                                                                 "summary.json"]
    for local_file, remote_file in zip(local.files, remote.files):
        assert remote_file == f"{uri}/out/audit/{os.path.relpath(local_file, local.output_path)}"
        mapped = tmp_path / "mounted" / "out" / "audit" / os.path.relpath(remote_file, remote.output_path)
        assert mapped.stat().st_size > 0
        if not local_file.endswith(".png"):
            assert mapped.read_bytes() == Path(local_file).read_bytes(), local_file
    summary = json.loads((tmp_path / "mounted" / "out" / "audit" / "summary.json").read_text(encoding="utf-8"))
    assert summary["canaries"] == m
    pd.testing.assert_frame_equal(spark.read.parquet(f"{uri}/out/audit/results").toPandas(),
                                  pd.read_parquet(tmp_path / "local" / "audit" / "results"), check_exact=True)


# ------------------------------------------------------------------------------------------ local copies


def test_local_copies_of_remote_files_and_folders(spark, tmp_path, python_cwd):
    uri = mount(spark, tmp_path / "mounted")
    write_text(spark, f"{uri}/a/summary.csv", "x,y\n1,2\n")
    spark.range(5).coalesce(1).write.parquet(f"{uri}/a/table")
    local_file = tmp_path / "local.txt"
    local_file.write_text("local", encoding="utf-8")
    paths = [str(local_file), local_file.as_uri(), f"{uri}/a/summary.csv", f"{uri}/a/table", f"{uri}/a/missing.png",
             f"{uri}/a/summary.csv"]
    with local_copies(spark, paths) as copies:
        assert copies[:2] == [str(local_file), str(local_file)]
        assert len(copies) == 5  # the missing remote file is left out
        csv, table, csv_again = (Path(copy) for copy in copies[2:])
        assert csv.name == csv_again.name == "summary.csv" and csv != csv_again
        assert csv.read_text(encoding="utf-8") == "x,y\n1,2\n"
        assert table.name == "table" and pd.read_parquet(table)["id"].tolist() == list(range(5))
        assert not [name for name in os.listdir(table) if name.endswith(".crc")]
        temporary = csv.parent.parent
    assert not temporary.exists() and local_file.exists()
    with local_copies(spark, [str(local_file)]) as copies:
        assert copies == [str(local_file)]


# ------------------------------------------------------------------------------------------ pipeline


def test_pipeline_writes_every_output_to_a_remote_folder(spark, tmp_path, python_cwd, monkeypatch):
    import tempfile

    from pipeline_support import tiny_values

    from lia_spark.engine.orchestration.pipeline import run_pipeline

    scratch = tmp_path / "driver-tmp"  # the driver's temporary folder, to see what the run leaves there
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    uri = mount(spark, tmp_path / "mounted")
    values = tiny_values(Path("unused"), f"sqlite:///{tmp_path / 'mlflow.db'}")
    values["run"]["output_dir"] = f"{uri}/run1"
    values["synthetic"]["rows_per_day"] = 8000
    values["tracking"]["log_models"] = False
    result = run_pipeline(spark, config_from_dict(values))
    assert {step.step: step.status for step in result.steps} == {
        "data": "ran", "train": "ran", "posteriors": "ran", "utility": "ran", "audit": "ran", "report": "ran"}
    out = tmp_path / "mounted" / "run1"
    for folder in ("data", "truth", "models", "posteriors", "utility", "audit", "report"):
        assert (out / folder / MARKER).is_file(), folder
    assert list((out / "models" / "canaries").glob("*.parquet")) and list((out / "data").glob("day=1/*.parquet"))
    for name in ("posteriors/summary.csv", "audit/summary.json", "audit/results.csv", "report/report.html",
                 "utility/tradeoff.csv"):
        assert (out / name).stat().st_size > 0, name
    assert len(list((out / "posteriors" / "plots").glob("*.png"))) == 3 * 4
    assert list((out / "audit" / "plots").glob("*.png"))
    assert result.report_path == f"{uri}/run1/report/report.html"
    report = result.step("report").result
    assert report.figures >= 12 and report.tables >= 3  # the remote CSVs and plots are embedded
    posteriors = result.step("posteriors").result
    assert posteriors.output_path == f"{uri}/run1/posteriors" and posteriors.input_rows == 8000
    # MLflow got local copies of the remote artifacts (its store keeps them in mlruns beside the database)
    assert result.mlflow_run_id
    for artifact in ("posteriors/summary.csv", "posteriors/spindle_rr.png", "audit/summary.json",
                     "utility/tradeoff.csv", "report/report.html"):
        assert list(tmp_path.glob(f"mlruns/*/artifacts/{artifact}")), artifact
    assert sorted(path.name for path in scratch.iterdir() if path.name.startswith("lia-")) == []  # no local copy left
