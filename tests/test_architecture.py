"""The architecture, read from the package's folders and import graph:

- ``kernels/`` (the math) imports nothing of the package but other kernels and the vocabulary ``names``; no
  pyspark, mlflow, matplotlib or configuration;
- only ``engine/`` imports pyspark, only ``tracking/`` mlflow, only ``present/`` matplotlib;
- the vocabulary imports nothing, the posterior grid only numpy;
- the typed records (``records/``) import only the kernels, the vocabulary and each other;
- the graph has no cycle, neither between modules nor between the top folders, and a stage never reaches another
  stage's module (what it needs from upstream arrives
  as that stage's declared result);
- the commands of the CLI are the registry's.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lia_spark"
FOLDERS = ("kernels", "records", "studies", "present", "run", "tracking", "engine", "cli")
LAZY_API = "lia_spark.cli.api"  # the Python API, which the package root re-exports on first use


def test_the_package_root_imports_only_the_python_api_and_only_lazily():
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    top_level = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    inner = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert top_level == [] and [f"{node.module}.{alias.name}" for node in inner for alias in node.names] == [LAZY_API]


def test_the_package_root_exports_its_api_and_lists_it():
    import lia_spark
    from lia_spark.cli import api

    assert lia_spark.__all__ == ["__version__", *lia_spark.API]
    assert set(lia_spark.API) <= set(dir(lia_spark))
    assert all(getattr(lia_spark, name) is getattr(api, name) for name in lia_spark.API)
    with pytest.raises(AttributeError, match="no attribute 'run_commands'"):
        lia_spark.run_commands  # noqa: B018 - a typo is an AttributeError, as on any module


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def _folder_of(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0] if len(path.relative_to(PACKAGE).parts) > 1 else ""


def test_every_module_lives_in_a_folder_of_the_architecture():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "names.py"]  # the version and the vocabulary
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(FOLDERS)


def test_kernels_import_only_kernels_and_the_vocabulary():
    kernels = sorted((PACKAGE / "kernels").glob("*.py"))
    assert len(kernels) > 20, "no kernel modules found"
    outside = {str(p.relative_to(PACKAGE)): sorted(module for module in _modules_imported(p)
                                                  if not module.startswith(("lia_spark.kernels", "lia_spark.names"))
                                                  and module != "lia_spark")
               for p in kernels}
    assert {name: modules for name, modules in outside.items() if modules} == {}
    foreign = {str(p.relative_to(PACKAGE)): sorted(_imported_roots(p) & {"pyspark", "mlflow", "matplotlib"})
               for p in kernels}
    assert {name: roots for name, roots in foreign.items() if roots} == {}


def _modules_imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {module for module in found if module.split(".")[0] == "lia_spark"}


@pytest.mark.parametrize("library, folder", [("pyspark", "engine"), ("mlflow", "tracking"), ("matplotlib", "present")])
def test_one_folder_imports_each_heavy_library(library, folder):
    importers = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if library in _imported_roots(p)}
    assert importers and {name for name in importers if not name.startswith(f"{folder}/")} == set()


def test_vocabulary_imports_nothing_and_the_posterior_grid_only_numpy():
    assert _imported_roots(PACKAGE / "names.py") == set()
    assert _imported_roots(PACKAGE / "kernels" / "posterior_grid.py") <= {"__future__", "dataclasses", "math",
                                                                         "typing", "numpy", "lia_spark"}


def test_only_the_session_and_file_modules_reach_the_jvm():
    """Spark Connect sessions (Databricks shared and serverless compute) have no SparkContext and no JVM: every
    other module goes through engine/spark/session.py and engine/spark/filesystem.py, which also work over Connect."""
    reaching = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                if re.search(r"sparkContext|\._jvm\b|\._jsc\b", p.read_text(encoding="utf-8"))}
    assert reaching == {"engine/spark/session.py", "engine/spark/filesystem.py"}


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
    graph["lia_spark"] -= {"lia_spark.cli", LAZY_API}  # imported at attribute access, never at import
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


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Top folder (``kernels``, ``engine``, ...; ``names`` and the root are their own) -> the other top folders its
    modules import."""
    def folder(module: str) -> str:
        return module.split(".")[1] if module.count(".") else module

    folders: dict[str, set[str]] = {}
    for module, imported in graph.items():
        folders.setdefault(folder(module), set()).update(folder(other) for other in imported)
    return {name: imported - {name} for name, imported in folders.items()}


def test_the_top_folders_import_each_other_without_a_loop():
    """A loop between folders (present -> studies -> present, run -> tracking -> run) makes neither the lower one:
    each folder sits below the folders that import it."""
    folders = folder_graph(import_graph())
    assert set(FOLDERS) <= set(folders)
    assert cycle(folders) == []
    assert cycle({**folders, "kernels": folders["kernels"] | {"cli"}})  # the check finds a loop when there is one


def test_records_import_only_kernels_the_vocabulary_and_records():
    records = sorted((PACKAGE / "records").glob("*.py"))
    assert len(records) >= 3
    outside = {str(p.relative_to(PACKAGE)): sorted(module for module in _modules_imported(p) if not module.startswith(
        ("lia_spark.kernels", "lia_spark.names", "lia_spark.records"))) for p in records}
    assert {name: modules for name, modules in outside.items() if modules} == {}


def test_a_stage_never_reaches_another_stage_module():
    graph, stages = import_graph(), stage_modules()
    assert len(stages) == 9, stages  # generate, ingest, train, posteriors, utility, audit, report, logloss, inject
    assert {stage: sorted(reachable(graph, stage) & stages) for stage in stages} == {stage: [] for stage in stages}


def test_the_cli_lists_the_registry_commands():
    from lia_spark.cli.main import COMMAND_NAMES
    from lia_spark.engine.orchestration.commands import COMMANDS
    from lia_spark.engine.orchestration.registry import STAGES

    assert COMMAND_NAMES == tuple(COMMANDS)
    assert {stage.name for stage in STAGES.values()} == set(STAGES)


ENGINE = "lia_spark.engine"
RUNTIME_CONTRACT = tuple(f"{ENGINE}.runtime.{name}"
                         for name in ("stage", "outputs", "parquet_reads", "lock", "progress"))
ORCHESTRATORS = tuple(f"{ENGINE}.orchestration.{name}" for name in ("registry", "pipeline", "commands", "audit_table"))
STAGE_FOLDERS = ("generate", "ingest", "train", "posteriors", "utility", "audit", "report", "logloss", "inject")


def _engine_folder(module: str) -> str:
    """``lia_spark.engine.<folder>.<module>`` -> folder; the engine package itself -> ``""``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 else ""


def _engine_imports(graph: dict[str, set[str]], module: str) -> set[str]:
    return {imported for imported in graph[module] if imported.startswith(f"{ENGINE}.")
            and imported.count(".") > 2}  # modules, not the folders' packages


def test_engine_folders_are_those_of_the_layout():
    folders = sorted(p.name for p in (PACKAGE / "engine").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(["runtime", "orchestration", "spark", "models", "attacker_prior", *STAGE_FOLDERS])
    assert sorted(p.name for p in (PACKAGE / "engine").glob("*.py")) == ["__init__.py"]
    for folder, modules in (("runtime", RUNTIME_CONTRACT), ("orchestration", ORCHESTRATORS)):
        assert set(modules) == {_module_name(p) for p in (PACKAGE / "engine" / folder).glob("*.py")
                                if p.name != "__init__.py"}


def engine_folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Folder of the engine -> the engine's other folders its modules import."""
    folders: dict[str, set[str]] = {}
    for module, imported in graph.items():
        if _engine_folder(module):
            folders.setdefault(_engine_folder(module), set()).update(
                _engine_folder(m) for m in _engine_imports(graph, module))
    return {name: imported - {name, ""} for name, imported in folders.items()}


def test_the_engine_folders_import_each_other_without_a_loop():
    """Each folder of the engine sits below the folders that import it: the contract and spark/ at the bottom, the
    orchestration at the top; a loop (the contract's registry importing every stage that imports the contract) would
    make neither the lower one."""
    folders = engine_folder_graph(import_graph())
    assert set(folders) >= {"runtime", "orchestration", "spark", "models", *STAGE_FOLDERS}
    assert cycle(folders) == []
    assert cycle({**folders, "runtime": folders["runtime"] | {"train"}})  # the check finds a loop when there is one


def test_only_the_orchestration_imports_a_stage_folder():
    graph = import_graph()
    importers = {module for module in graph if module.startswith(ENGINE) and _engine_folder(module) not in STAGE_FOLDERS
                 and any(_engine_folder(m) in STAGE_FOLDERS for m in _engine_imports(graph, module))}
    assert importers and {module for module in importers if _engine_folder(module) != "orchestration"} == set()


def test_spark_imports_nothing_else_of_the_engine():
    graph = import_graph()
    spark = {module for module in graph if _engine_folder(module) == "spark" and module.count(".") > 2}
    assert len(spark) == 5  # session, filesystem, deployment, capabilities, memory
    assert {module: sorted(m for m in _engine_imports(graph, module) if _engine_folder(m) != "spark")
            for module in spark} == {module: [] for module in spark}


def test_models_import_only_spark_the_outputs_progress_and_models():
    """And the attacker prior imports models too, never a stage."""
    graph = import_graph()
    allowed = {"spark", "models"}
    runtime = {f"{ENGINE}.runtime.outputs", f"{ENGINE}.runtime.progress"}
    models = {module for module in graph if _engine_folder(module) == "models" and module.count(".") > 2}
    assert len(models) >= 8
    prior = {module for module in graph if _engine_folder(module) == "attacker_prior" and module.count(".") > 2}
    assert {module: sorted(m for m in _engine_imports(graph, module)
                           if _engine_folder(m) not in allowed | {"attacker_prior"} and m not in runtime)
            for module in prior} == {module: [] for module in prior}
    assert {module: sorted(m for m in _engine_imports(graph, module)
                           if _engine_folder(m) not in allowed and m not in runtime)
            for module in models} == {module: [] for module in models}


def test_a_stage_folder_imports_the_contract_spark_models_the_prior_and_itself():
    graph = import_graph()
    stage_side = {module for module in graph if _engine_folder(module) in STAGE_FOLDERS}
    assert len(stage_side) > 15
    outside = {module: sorted(m for m in _engine_imports(graph, module)
                              if _engine_folder(m) not in {"spark", "models", "attacker_prior", _engine_folder(module)}
                              and m not in RUNTIME_CONTRACT)
               for module in stage_side}
    assert outside == {module: [] for module in stage_side}


def test_the_runtime_contract_never_imports_a_stage_or_a_model():
    graph = import_graph()
    outside = {module: sorted(m for m in _engine_imports(graph, module)
                              if _engine_folder(m) != "spark" and m not in RUNTIME_CONTRACT)
               for module in RUNTIME_CONTRACT}
    assert outside == {module: [] for module in RUNTIME_CONTRACT}


def test_the_cli_sits_above_everything():
    """Nothing imports the command line; the configuration (run/) never imports the engine or the CLI."""
    graph = import_graph()
    into_cli = sorted(module for module, imported in graph.items() if not module.startswith("lia_spark.cli")
                      and any(m.startswith("lia_spark.cli") for m in imported))
    assert into_cli == []
    run_up = sorted(module for module, imported in graph.items() if module.startswith("lia_spark.run")
                    and any(m.startswith((ENGINE, "lia_spark.cli")) for m in imported))
    assert run_up == []
