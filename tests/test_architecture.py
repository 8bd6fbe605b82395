"""The three rings: pure kernels never import pyspark or mlflow; only tracking imports mlflow."""
from __future__ import annotations

import ast
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
