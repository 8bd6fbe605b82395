"""The rings of the package, read from its import graph: kernels import no engine module, pyspark or mlflow; only
engine modules import pyspark; only tracking imports mlflow; the vocabulary imports nothing and the posterior grid
only numpy; the graph has no cycle; a stage never reaches another stage's module (what it needs from upstream
arrives as that stage's declared result); the commands of the CLI are the registry's."""
from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "lia_spark"
OUTSIDE_KERNELS = ("cli.py", "tracking.py")  # the top-level modules that are not kernels


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
    kernels = [p for p in PACKAGE.glob("*.py") if p.name not in OUTSIDE_KERNELS]
    assert kernels, "no kernel modules found"
    offenders = {p.name: sorted(_imported_roots(p) & {"pyspark", "mlflow"}) for p in kernels}
    assert {name: roots for name, roots in offenders.items() if roots} == {}


def test_only_tracking_imports_mlflow():
    importers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "mlflow" in _imported_roots(p))
    assert importers in ([], ["tracking.py"])


def test_kernels_import_no_engine_module():
    kernels = [p for p in PACKAGE.glob("*.py") if p.name not in OUTSIDE_KERNELS]
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


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at any depth of its code (function-level imports included)."""
    modules = {_module_name(path): path for path in package.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                candidates = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            imported.update(candidate for candidate in candidates if candidate in modules and candidate != name)
        graph[name] = imported
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as a list of modules (empty when there is none)."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for successor in sorted(graph[node]):
            if state.get(successor) == 1:
                return path[path.index(successor):] + [successor]
            if successor not in state and (found := visit(successor)):
                return found
        state[node] = 2
        path.pop()
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return []


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for successor in graph[todo.pop()] - seen:
            seen.add(successor)
            todo.append(successor)
    return seen


def stage_modules(package: Path = PACKAGE) -> set[str]:
    """The modules that declare a stage (``NAME = Stage(``)."""
    return {_module_name(path) for path in package.rglob("*.py")
            if re.search(r"^[A-Z]+ = Stage\(", path.read_text(encoding="utf-8"), flags=re.M)}


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert len(graph) > 40 and sum(map(len, graph.values())) > 100  # the whole package was read
    assert cycle(graph) == []


def test_a_stage_never_reaches_another_stage_module():
    graph, stages = import_graph(), stage_modules()
    assert len(stages) == 8, stages  # generate, ingest, train, posteriors, utility, audit, report, logloss
    assert {stage: sorted(reachable(graph, stage) & stages) for stage in stages} == {stage: [] for stage in stages}


def test_the_cli_lists_the_registry_commands():
    from lia_spark.cli import COMMAND_NAMES
    from lia_spark.engine.commands import COMMANDS
    from lia_spark.engine.stages import STAGES

    assert COMMAND_NAMES == tuple(COMMANDS)
    assert {stage.name for stage in STAGES.values()} == set(STAGES)
