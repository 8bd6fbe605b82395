"""A benchmark's audit key from its own seed: the studies here audit this project's own targets, not somebody else's
model, so their coins may be reproducible from the seed (the product's audits draw a random key; docs/math.md §5.9)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from lia_spark.engine.models.audit_key import new_local_key_file
from lia_spark.kernels.hashing import AuditKey


def seeded_key_file(path: Path, seed: int) -> str:
    """``path`` holding the audit key of benchmark seed ``seed`` (the SHA-256 of a fixed text and the seed), written
    owner-only as lia-spark writes its own (left as it is when it exists); the value for audit.key_path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new_local_key_file(str(path), AuditKey(hashlib.sha256(f"lia-spark benchmark seed {seed}".encode()).digest()))
    return str(path)
