"""Where a run's code came from: the git commit of the checkout and the versions of the numerical packages (MLflow
tags and params, the report's footer)."""
from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path

# Distributions whose versions each run records (xgboost ships as "xgboost" or "xgboost-cpu": whichever is installed).
PACKAGES = ("lia-spark", "pyspark", "numpy", "scipy", "pandas", "pyarrow", "xgboost", "xgboost-cpu", "catboost",
            "mlflow", "numba", "dp-accounting")


def git_commit() -> str | None:
    """HEAD commit of the checkout lia_spark runs from, or None outside a git checkout."""
    try:
        completed = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                                   capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = completed.stdout.strip()
    return commit if completed.returncode == 0 and commit else None


def package_versions() -> dict[str, str]:
    """Python's version and the installed version of each of :data:`PACKAGES` that is installed, by distribution name."""
    versions = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions
