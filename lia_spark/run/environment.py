"""Where a run's code came from: the git commit of the checkout, the versions of the numerical packages (MLflow
tags and params, the report's footer) and the package's own files, however it was imported."""
from __future__ import annotations

import importlib.metadata
import importlib.resources
import platform
import subprocess
import zipfile
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Iterator

# Distributions whose versions each run records (xgboost ships as "xgboost" or "xgboost-cpu": whichever is installed);
# lia-spark's own is the imported code's (lia_spark.run.fingerprint.recorded_versions), not its distribution's.
PACKAGES = ("pyspark", "numpy", "scipy", "pandas", "pyarrow", "xgboost", "xgboost-cpu", "catboost",
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
    """Python's version and the installed version of each of :data:`PACKAGES` that is installed, by distribution
    name."""
    versions = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def package_files() -> Iterator[tuple[str, bytes]]:
    """Every file of the lia_spark package as (path relative to the package, bytes), sorted by path, read the same
    way whether it is imported from a folder, a wheel or a zip on ``--py-files`` (byte-code caches left out)."""
    def walk(folder: Traversable, prefix: str) -> Iterator[tuple[str, bytes]]:
        for entry in sorted(folder.iterdir(), key=lambda item: item.name):
            if entry.is_dir():
                if entry.name != "__pycache__":
                    yield from walk(entry, f"{prefix}{entry.name}/")
            elif not entry.name.endswith((".pyc", ".pyo")):
                yield f"{prefix}{entry.name}", entry.read_bytes()

    yield from walk(importlib.resources.files("lia_spark"), "")


def package_zip(path: Path) -> Path:
    """Write the lia_spark package (:func:`package_files`) as a zip at ``path`` (entries ``lia_spark/...``, fixed
    timestamps: the same files give the same bytes), importable from ``sys.path``; return ``path``."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for relative, content in package_files():
            archive.writestr(zipfile.ZipInfo(f"lia_spark/{relative}", date_time=(1980, 1, 1, 0, 0, 0)), content,
                             compress_type=zipfile.ZIP_DEFLATED)
    return path


def copy_package(folder: Path) -> Path:
    """Write the lia_spark package (:func:`package_files`) below ``folder``; return ``folder / "lia_spark"``."""
    package = folder / "lia_spark"
    for relative, content in package_files():
        target = package / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return package
