"""The three rings: kernels import no engine module, pyspark or mlflow; only engine modules import pyspark; only
tracking imports mlflow; the vocabulary imports nothing and the posterior grid only numpy."""
from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "lia_spark"


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_kernels_import_neither_pyspark_nor_mlflow():
    kernels = [p for p in PACKAGE.glob("*.py") if p.name not in ("cli.py", "stages.py", "tracking.py")]
    assert kernels, "no kernel modules found"
    offenders = {p.name: sorted(_imported_roots(p) & {"pyspark", "mlflow"}) for p in kernels}
    assert {name: roots for name, roots in offenders.items() if roots} == {}


def test_only_tracking_imports_mlflow():
    importers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "mlflow" in _imported_roots(p))
    assert importers in ([], ["tracking.py"])


def test_kernels_import_no_engine_module():
    kernels = [p for p in PACKAGE.glob("*.py") if p.name not in ("cli.py", "stages.py", "tracking.py")]
    offenders = {p.name: [node.module for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
                          if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lia_spark.engine")]
                 for p in kernels}
    assert {name: modules for name, modules in offenders.items() if modules} == {}


def test_vocabulary_imports_nothing_and_the_posterior_grid_only_numpy():
    assert _imported_roots(PACKAGE / "names.py") == set()
    assert _imported_roots(PACKAGE / "posterior_grid.py") <= {"__future__", "dataclasses", "math", "typing", "numpy",
                                                             "lia_spark"}


def test_only_the_session_and_file_modules_reach_the_jvm():
    """Spark Connect sessions (Databricks shared and serverless compute) have no SparkContext and no JVM: every
    other module goes through engine/session.py and engine/filesystem.py, which also work over Connect."""
    reaching = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                if re.search(r"sparkContext|\._jvm\b|\._jsc\b", p.read_text(encoding="utf-8"))}
    assert reaching == {"engine/session.py", "engine/filesystem.py"}


def test_only_engine_modules_import_pyspark():
    importers = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "pyspark" in _imported_roots(p)}
    assert importers and all(name.startswith("engine/") for name in importers)
