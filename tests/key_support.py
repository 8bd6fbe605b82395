"""Audit keys for tests: a fixed key file for runs whose numbers must not change between sessions (audit.key_path),
and the key a run used, read back from its key file."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from lia_spark.engine.models.audit_key import new_local_key_file
from lia_spark.kernels.hashing import AuditKey, parsed_key
from lia_spark.run import layout


def key_file(path: str | os.PathLike, label: str = "lia-spark tests") -> str:
    """A fixed audit key (the SHA-256 of ``label``) at ``path``, written as lia-spark writes its own (owner-only,
    exclusive); left as it is when it exists. Returns the path, for audit.key_path."""
    new_local_key_file(str(path), AuditKey(hashlib.sha256(label.encode("utf-8")).digest()))
    return str(path)


def stored_key(config) -> AuditKey:
    """The audit key in ``config``'s key file (audit.key_path, else <run.output_dir>/audit_key)."""
    return parsed_key(Path(layout.audit_key_path(config)).read_text(encoding="ascii"))
