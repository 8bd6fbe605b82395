"""The package versions lia-spark runs with, checked in the first second of a command, before Spark starts: pyspark
and MLflow inside the supported ranges (:data:`SUPPORTED`; setup.py's metadata and the README state the same), Spark
Connect only where pyspark offers what the stages use of it, and for MLflow's database stores (sqlite, the default) a
SQLAlchemy the installed MLflow can import (:func:`lia_spark.run.tracking_uri.database_store_problem`). Modules that are
missing altogether are reported where they are imported (:data:`lia_spark.run.failures.MODULE_FIXES`, the sqlite
store's :data:`lia_spark.tracking.store.DATABASE_STORE_MODULES`, the executors' check in
:mod:`lia_spark.engine.spark.deployment`).

Versions are read from each package's own source file, not by importing it (pyspark's import costs ~0.3 s, MLflow's
seconds) nor from pip's metadata (the pyspark of a Spark distribution or of a Databricks runtime has none): the
version of the package that ``import`` would load.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config
from lia_spark.run.tracking_uri import database_store_problem, resolve_tracking_uri

# Where each package states its version: (file in its folder, the name assigned there).
VERSION_SOURCES = {"pyspark": ("version.py", "__version__"), "mlflow": ("version.py", "VERSION"),
                   "sqlalchemy": ("__init__.py", "__version__")}


@dataclasses.dataclass(frozen=True)
class Supported:
    """The versions of ``module`` lia-spark runs with: (major, minor) from ``lowest`` up to, not including,
    ``below``; ``fix`` says how to get one."""

    module: str
    lowest: tuple[int, int]
    below: tuple[int, int]
    fix: str

    def accepts(self, version: tuple[int, int]) -> bool:
        return self.lowest <= version < self.below

    def range_text(self) -> str:
        below = str(self.below[0]) if self.below[1] == 0 else _dotted(self.below)
        return f">= {_dotted(self.lowest)}, < {below}"


SUPPORTED = (
    Supported("pyspark", (3, 5), (5, 0), "run where Spark 3.5 or 4.x is provided (Databricks 15.4 LTS or newer, EMR "
              "7, Dataproc 2.2), or `pip install 'pyspark[connect]>=3.5,<5'` (lia-spark's `spark` extra)"),
    Supported("mlflow", (2, 21), (4, 0), "`pip install 'mlflow>=2.21,<4'` (or mlflow-skinny, its client; "
              "Databricks ML runtime 16.4 LTS or newer brings one)"),
)
CONNECT_LOWEST = (4, 0)  # Spark Connect: progress handlers and Arrow collects (toArrow) came with pyspark 4.0


class RequirementError(ConfigError):
    """An installed package's version that lia-spark does not run with (exit 2); the message names the package,
    its version and the fix."""


def installed_version(module: str) -> str | None:
    """The version of the package ``import module`` would load (:data:`VERSION_SOURCES`), without importing it;
    None when it is not installed or its file states none."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    file, name = VERSION_SOURCES[module]
    path = Path(next(iter(spec.submodule_search_locations))) / file
    try:
        found = re.search(rf"^{name}\s*(?::\s*str\s*)?=\s*['\"]([^'\"]+)['\"]", path.read_text(encoding="utf-8"),
                          flags=re.M)
    except OSError:
        return None
    return found.group(1) if found else None


def major_minor(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a version such as ``3.5.9`` or ``4.1.0.dev0+databricks``; None when it has none."""
    found = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def _dotted(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))


def requirement_problems(config: Config, command: str) -> list[str]:
    """One line per installed version that ``command`` cannot run with under ``config`` (empty: none): a package
    outside :data:`SUPPORTED`; ``spark.remote`` (Spark Connect) with pyspark before :data:`CONNECT_LOWEST`; a
    database tracking store whose SQLAlchemy the installed MLflow cannot import, when the command uses the store
    (tracking.enabled, ``lia-spark track``, or a model read from it: audit.model_uri)."""
    versions = {module: installed_version(module) for module in VERSION_SOURCES}
    problems = []
    for supported in SUPPORTED:
        found = versions[supported.module]
        parsed = major_minor(found)
        if parsed is not None and not supported.accepts(parsed):
            problems.append(f"{supported.module}: lia-spark runs with {supported.module} {supported.range_text()}, "
                            f"got {found}; {supported.fix}")
    pyspark = major_minor(versions["pyspark"])
    if config.spark.remote.strip() and pyspark is not None and pyspark < CONNECT_LOWEST:
        problems.append(f"spark.remote: a Spark Connect session needs pyspark >= {_dotted(CONNECT_LOWEST)} (its "
                        f"progress handlers and Arrow collects), got pyspark {versions['pyspark']} with spark.remote="
                        f"{config.spark.remote!r}; leave spark.remote empty for a classic session, or use pyspark 4.x")
    mlflow = major_minor(versions["mlflow"])
    uses_store = config.tracking.enabled or command == "track" or bool(config.audit.model_uri)
    if uses_store and mlflow is not None:
        uri = resolve_tracking_uri(config.tracking)
        clash = database_store_problem(uri, mlflow, major_minor(versions["sqlalchemy"]))
        if clash is not None:
            problems.append(f"sqlalchemy: {clash[0]}, got sqlalchemy {versions['sqlalchemy']} with mlflow "
                            f"{versions['mlflow']}; {clash[1]}")
    return problems


def check_requirements(config: Config, command: str) -> None:
    """Refuse, before Spark starts, the installed versions ``command`` cannot run with (:func:`requirement_problems`).

    Raises:
        RequirementError: the first problem's line, any others after it in parentheses.
    """
    problems = requirement_problems(config, command)
    if problems:
        more = f" (also: {'; '.join(problems[1:])})" if len(problems) > 1 else ""
        raise RequirementError(problems[0] + more)
