"""The up-front check of the installed versions (lia_spark.run.requirements): what it reads equals what Python
imports; the installed stack passes; a pyspark or MLflow outside the supported range, Spark Connect on pyspark 3.5,
and MLflow 2's database store beside SQLAlchemy 2.1 are refused before pyspark is imported, naming the package, its
version and the fix (exit 2)."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from pipeline_support import PYTHON, REPO

from lia_spark.run.config import config_from_dict
from lia_spark.run.requirements import SUPPORTED, installed_version, major_minor, requirement_problems
from lia_spark.run.tracking_uri import database_store_problem

VERSION_FILES = {"pyspark": ("version.py", "__version__: str = '{}'\n"), "mlflow": ("version.py", 'VERSION = "{}"\n')}


def test_the_versions_read_are_those_python_imports():
    import mlflow
    import pyspark
    import sqlalchemy

    assert installed_version("pyspark") == pyspark.__version__
    assert installed_version("mlflow") == mlflow.__version__
    assert installed_version("sqlalchemy") == sqlalchemy.__version__
    assert major_minor("4.1.0.dev0+databricks") == (4, 1) and major_minor("dev") is None


def test_the_installed_stack_passes(tmp_path):
    config = config_from_dict({"run": {"output_dir": str(tmp_path / "out")},
                               "tracking": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}})
    assert requirement_problems(config, "pipeline") == []
    assert [s.module for s in SUPPORTED] == ["pyspark", "mlflow"]
    assert all(s.accepts(major_minor(installed_version(s.module))) for s in SUPPORTED)


def test_mlflow_before_3_9_cannot_open_a_database_store_beside_sqlalchemy_2_1():
    for uri in ("sqlite:////tmp/mlflow.db", "postgresql+psycopg2://host/db", "mysql://host/db"):
        what, fix = database_store_problem(uri, (2, 21), (2, 1))
        assert uri in what and "`pip install 'sqlalchemy<2.1'`" in fix
        assert database_store_problem(uri, (3, 8), (2, 1)) is not None
        assert (database_store_problem(uri, (3, 9), (2, 1)) is None
                and database_store_problem(uri, (2, 21), (2, 0)) is None)
    assert database_store_problem("http://localhost:5000", (2, 21), (2, 1)) is None
    assert database_store_problem("databricks", (2, 21), (2, 1)) is None
    assert database_store_problem("sqlite:////tmp/mlflow.db", (2, 21), None) is None  # missing: reported elsewhere


def _command(tmp_path: Path, shadow: Path | None, *overrides: str) -> subprocess.CompletedProcess:
    """`lia-spark run` on a small config, with the folder ``shadow`` first on the Python path."""
    conf = tmp_path / "conf.yaml"
    conf.write_text(f"run: {{output_dir: {tmp_path / 'out'}}}\n"
                    f"tracking: {{tracking_uri: 'sqlite:///{tmp_path / 'mlflow.db'}'}}\n", encoding="utf-8")
    path = os.pathsep.join(str(folder) for folder in (shadow, REPO) if folder is not None)
    return subprocess.run([PYTHON, "-m", "lia_spark.cli.main", "run", "--conf", str(conf), *overrides],
                          env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)


def _stale(folder: Path, module: str, version: str) -> Path:
    """A package ``module`` of ``version`` that imports nothing (as a stale Spark distribution's python/ folder on
    PYTHONPATH would shadow the venv's): loading anything of it fails, so a refusal proves nothing was imported."""
    package = folder / module
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('a stale package: the check must refuse it first')\n",
                                         encoding="utf-8")
    file, text = VERSION_FILES[module]
    (package / file).write_text(text.format(version), encoding="utf-8")
    return folder


@pytest.mark.parametrize("module, version, overrides, expected", [
    ("pyspark", "3.4.1", (),
     r"pyspark: lia-spark runs with pyspark >= 3.5, < 5, got 3.4.1; run where Spark 3.5 or 4.x"),
    ("pyspark", "5.0.0", (), r"pyspark: lia-spark runs with pyspark >= 3.5, < 5, got 5.0.0; "),
    ("mlflow", "2.20.4", (),
     r"mlflow: lia-spark runs with mlflow >= 2.21, < 4, got 2.20.4; `pip install 'mlflow>=2.21"),
    ("pyspark", "3.5.9", ("spark.remote=sc://localhost:15002",),
     r"spark.remote: a Spark Connect session needs pyspark >= 4.0 .*got pyspark 3.5.9 with spark.remote="),
])
def test_an_unsupported_package_is_refused_before_anything_imports_it(tmp_path, module, version, overrides, expected):
    done = _command(tmp_path, _stale(tmp_path / "stale", module, version), *overrides)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("lia-spark: ")]
    assert re.match(f"lia-spark: {expected}", line), line
    assert "a stale package" not in done.stderr and not (tmp_path / "out").exists()  # refused before any import


@pytest.mark.skipif(not os.environ.get("LIA_TESTS_SQLALCHEMY_21"), reason="needs MLflow < 3.9 and SQLAlchemy 2.1 in "
                    "$LIA_TESTS_SQLALCHEMY_21 (`make test-oldest` installs it)")
def test_mlflow_2_beside_sqlalchemy_2_1_is_refused_up_front_where_mlflow_itself_fails_later(tmp_path):
    """The oldest tier's real MLflow 2.21 with a real SQLAlchemy 2.1 first on the path: MLflow's own sqlite store
    fails at its first call; `lia-spark run` refuses the pair before Spark starts, naming the fix."""
    sqlalchemy_21 = Path(os.environ["LIA_TESTS_SQLALCHEMY_21"]).resolve()  # the command runs in tmp_path
    assert (sqlalchemy_21 / "sqlalchemy" / "__init__.py").is_file(), sqlalchemy_21
    plain = subprocess.run([PYTHON, "-c", f"import mlflow; mlflow.MlflowClient('sqlite:///{tmp_path / 'x.db'}')"
                                          ".search_experiments()"],
                           env={**os.environ, "PYTHONPATH": str(sqlalchemy_21)}, capture_output=True, text=True,
                           timeout=300)
    assert plain.returncode != 0 and "FallbackAsyncAdaptedQueuePool" in plain.stderr, plain.stderr[-2000:]
    done = _command(tmp_path, sqlalchemy_21)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1].startswith("lia-spark: sqlalchemy: MLflow before 3.9 cannot open the database "
                                                   "store sqlite:///"), done.stderr[-2000:]
    assert "`pip install 'sqlalchemy<2.1'`" in done.stderr and not (tmp_path / "out").exists()
