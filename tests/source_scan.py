"""Where the package's source compares a registry's names: a registry (libraries, training mechanisms) is the one
place a name is compared, so any other comparison is a dispatch that bypassed it."""
from __future__ import annotations

import ast
from pathlib import Path


def name_comparisons(path: Path, strings: set[str], identifiers: set[str], root: Path) -> list[str]:
    """``<file>:<line>`` of every comparison (==, !=, in, not in) in ``path`` with an operand (or an element of a
    tuple, list or set operand) that is a string constant of ``strings`` or a name or attribute of ``identifiers``
    (``PATE``, ``names.PATE``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            values = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            for value in values:
                if (value.value in strings if isinstance(value, ast.Constant) else
                        getattr(value, "id", getattr(value, "attr", None)) in identifiers):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found
