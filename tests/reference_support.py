"""Committed reference values: the numbers of a result document, written once by the newest supported stack
(tests/reference/<name>.json) and compared by every tier, so the oldest supported stack (`make test-oldest`: Spark
3.5, MLflow 2.21, xgboost 2.x) is held to the newest's numbers.

A value is every number, boolean, null and non-path string of the document, keyed by its path (``steps[2].result.
summary[0].auc``), but for what describes how a run went rather than what it computed (:data:`LEFT_OUT`: timings, ids,
where fits ran). Numbers agree within :data:`RELATIVE` (float noise, and only that); everything else exactly; the
same keys on both sides. After a change that alters the numbers on purpose, write the references again on the newest
stack (the main venv) and commit them:

    LIA_WRITE_REFERENCE=1 .venv/bin/python -m pytest -n 0 tests/test_reference_numbers.py
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterator

import pytest

FOLDER = Path(__file__).resolve().parent / "reference"
WRITE = "LIA_WRITE_REFERENCE"
LEFT_OUT = ("seconds", "mlflow_run_id", "tracking_uri", "fits_where", "model_uri", "output_dir", "run_name")
RELATIVE, ABSOLUTE = 1e-9, 1e-12


def values(document: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every compared leaf of a JSON document (see the module)."""
    if isinstance(document, dict):
        for key, item in sorted(document.items()):
            if not any(part in key for part in LEFT_OUT):
                yield from values(item, f"{path}.{key}" if path else key)
    elif isinstance(document, list):
        for index, item in enumerate(document):
            yield from values(item, f"{path}[{index}]")
    elif not (isinstance(document, str) and "/" in document):
        yield path, document


def _agree(found: Any, expected: Any) -> bool:
    if isinstance(found, bool) or isinstance(expected, bool) or not isinstance(found, (int, float)) \
            or not isinstance(expected, (int, float)):
        return found == expected
    return math.isclose(found, expected, rel_tol=RELATIVE, abs_tol=ABSOLUTE)


def check_reference(name: str, document: Any, minimum: int) -> None:
    """Compare ``document``'s values with tests/reference/<name>.json (at least ``minimum`` of them); with
    $LIA_WRITE_REFERENCE set, write that file instead and fail, so a run that writes never passes."""
    import mlflow
    import pyspark

    found = dict(values(document))
    assert len(found) >= minimum, f"{name}: only {len(found)} values to compare"
    path = FOLDER / f"{name}.json"
    if os.environ.get(WRITE):
        FOLDER.mkdir(exist_ok=True)
        stack = {"pyspark": pyspark.__version__, "mlflow": mlflow.__version__}
        path.write_text(json.dumps({"written_by": stack, "values": found}, indent=1, sort_keys=True) + "\n",
                        encoding="utf-8")
        pytest.fail(f"{path}: written ({len(found)} values, {stack}); commit it and run again without ${WRITE}")
    expected = json.loads(path.read_text(encoding="utf-8"))
    reference = expected["values"]
    differ = [f"{key}: {found.get(key, '<absent>')!r} here, {reference.get(key, '<absent>')!r} in the reference"
              for key in sorted(set(found) | set(reference))
              if key not in found or key not in reference or not _agree(found[key], reference[key])]
    assert not differ, (f"{path} (written by {expected['written_by']}): {len(differ)} of {len(reference)} values "
                        f"differ beyond rel {RELATIVE:g}:\n" + "\n".join(differ[:40]) +
                        f"\n(intended? write it again: {WRITE}=1, see tests/reference_support.py)")
