"""Atomic stage outputs: write to a temporary sibling path, then commit by rename plus a marker file.

A folder is *complete* only when it holds ``_LIA_COMPLETE`` (JSON with the stage's counts and
parameters). Readers and resumable pipelines check the marker, so a crashed job never leaves a
half-written output that looks finished. Works on any Hadoop file system Spark can write to, and over Spark
Connect on folders the driver sees as local files (:mod:`lia_spark.engine.filesystem`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import shutil
import tempfile
import uuid
from typing import Any, Iterator, Sequence

from pyspark.sql import SparkSession

from lia_spark.engine.filesystem import error_reason, file_errors, files_for, local_folder
from lia_spark.run.fingerprint import (FINGERPRINT_KEY, Fingerprint, changes, marker_fingerprint, sealed_marker,
                                       verified_marker)

logger = logging.getLogger(__name__)

MARKER = "_LIA_COMPLETE"


def path_exists(spark: SparkSession, path: str) -> bool:
    """True when ``path`` exists on its file system."""
    return files_for(spark, path).exists(path)


def delete_path(spark: SparkSession, path: str) -> None:
    """Remove ``path`` recursively if it exists."""
    files_for(spark, path).delete(path)


def read_marker(spark: SparkSession, path: str) -> dict[str, Any] | None:
    """The committed metadata of a complete output folder, or None when it is absent, incomplete or unreadable
    (a marker that cannot be read, e.g. a file system checksum error after a hand edit, or that is not a JSON
    object is reported and treated as absent)."""
    marker = f"{path.rstrip('/')}/{MARKER}"
    if not path_exists(spark, marker):
        return None
    try:
        content = json.loads(read_text(spark, marker) or "{}")
    except (json.JSONDecodeError, UnicodeDecodeError, *file_errors()) as error:
        content = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    if not isinstance(content, dict):
        logger.warning("%s cannot be read as a JSON object (%s); the output is treated as incomplete", marker,
                       content if isinstance(content, str) else type(content).__name__)
        return None
    return content


def listing_fingerprint(spark: SparkSession, path: str) -> str:
    """SHA-256 of every file below ``path`` (relative name, size, modification time): the identity of an input
    that carries no marker, such as raw Criteo files or a user's table; "missing" when it does not exist."""
    files = files_for(spark, path)
    if not files.exists(path):
        return "missing"
    return hashlib.sha256(json.dumps(sorted(files.list_files(path))).encode("utf-8")).hexdigest()


def output_fingerprint(spark: SparkSession, path: str) -> str:
    """Fingerprint of an input table: its verified marker's (or, for a table inside a committed stage folder such
    as ``models/canaries``, the folder's), else :func:`listing_fingerprint`."""
    trimmed = path.rstrip("/")
    for folder in (trimmed, trimmed.rsplit("/", 1)[0]):
        marker = read_marker(spark, folder)
        verified = verified_marker(marker)[0] if marker is not None else None
        if verified is not None:
            return marker_fingerprint(verified)
    return listing_fingerprint(spark, trimmed)


def reusable_output(spark: SparkSession, paths: Sequence[str], fingerprint: Fingerprint, *, force: bool
                    ) -> dict[str, Any] | None:
    """The marker of ``paths[0]`` when every folder in ``paths`` is complete with a trusted marker whose
    fingerprint equals ``fingerprint``, else None; logs why the stage is reused or recomputed (naming the
    fields that changed). ``force`` (run.force) always recomputes."""
    stage = fingerprint.stage
    if force:
        logger.info("%s: recomputing (run.force=true)", stage)
        return None
    markers = []
    for path in paths:
        marker = read_marker(spark, path)
        if marker is None:
            logger.info("%s: computing, %s has no complete output", stage, path)
            return None
        verified, why = verified_marker(marker)
        if verified is None:
            logger.warning("%s: recomputing, %s is not trusted: %s", stage, path, why)
            return None
        if marker_fingerprint(verified) != fingerprint.value:
            changed = changes(verified[FINGERPRINT_KEY], fingerprint)
            logger.info("%s: recomputing, %s was produced by other settings: %s", stage, path,
                        "; ".join(changed) or "its inputs changed")
            return None
        markers.append(verified)
    logger.info("%s: reusing %s (fingerprint %s matches)", stage, ", ".join(paths), fingerprint.value[:12])
    return markers[0]


def is_complete(spark: SparkSession, path: str) -> bool:
    """True when ``path`` was committed by :func:`committed_output`."""
    return read_marker(spark, path) is not None


def committed(spark: SparkSession, path: str) -> bool:
    """True when ``path`` is a complete output, or a table inside one (``models/canaries`` in ``models``)."""
    trimmed = path.rstrip("/")
    return is_complete(spark, trimmed) or (is_complete(spark, trimmed.rsplit("/", 1)[0])
                                           and path_exists(spark, trimmed))


@contextlib.contextmanager
def committed_output(spark: SparkSession, path: str, metadata: dict[str, Any] | None = None, *,
                     fingerprint: Fingerprint | None = None) -> Iterator[str]:
    """Yield a fresh temporary path; on success replace ``path`` by it and write the completion marker.

    ``metadata`` may be filled in by the caller inside the ``with`` block; it is written to the marker, sealed
    with ``fingerprint`` (:func:`lia_spark.run.fingerprint.sealed_marker`) when given, so :func:`reusable_output`
    can tell later whether the output still matches its configuration and inputs.
    On any exception the temporary path is deleted and ``path`` is left untouched.
    """
    final = path.rstrip("/")
    staging = f"{final}._tmp-{uuid.uuid4().hex[:12]}"
    metadata = metadata if metadata is not None else {}
    try:
        yield staging
    except BaseException:
        delete_path(spark, staging)
        raise
    files = files_for(spark, staging)
    if not files.exists(staging):
        files.make_folders(staging)
    content = sealed_marker(metadata, fingerprint) if fingerprint is not None else metadata
    files.write_text(f"{staging}/{MARKER}", json.dumps(content, sort_keys=True, default=str))
    files.delete(final)
    files.make_parent_folders(final)
    if not files.rename(staging, final):
        raise OSError(f"could not commit {staging} to {final}")


def read_text(spark: SparkSession, path: str) -> str:
    """Whole small file as text, through its file system (textFile skips names starting with '_')."""
    return files_for(spark, path).read_text(path)


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Create (or overwrite) a small text file on its file system."""
    files_for(spark, path).write_text(path, text)


def copy_from_local(spark: SparkSession, local_path: str, path: str) -> None:
    """Copy a local file to ``path`` on its file system (overwriting)."""
    files_for(spark, path).copy_from_local(local_path, path)


@contextlib.contextmanager
def local_copies(spark: SparkSession, paths: Sequence[str]) -> Iterator[list[str]]:
    """Local files for ``paths`` (e.g. a stage's ``artifacts()`` for MLflow), valid inside the ``with`` block.

    Local paths are yielded as they are (``file:`` URIs as plain paths). Remote files and folders are copied
    (Hadoop ``copyToLocalFile``) into a fresh temporary directory, keeping their names, and that directory is
    deleted at exit. A remote path that does not exist is left out (logged).
    """
    copies: list[str] = []
    directory = None
    try:
        for index, path in enumerate(paths):
            local = local_folder(path)
            if local is not None:
                copies.append(local)
                continue
            files = files_for(spark, path)
            if not files.exists(path):
                logger.warning("%s does not exist; no local copy", path)
                continue
            directory = directory or tempfile.mkdtemp(prefix="lia-copies-")
            target = f"{directory}/{index}/{path.rstrip('/').rsplit('/', 1)[-1]}"
            files.copy_to_local(path, target)
            copies.append(target)
        yield copies
    finally:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def reported_path(path: str) -> str:
    """The path a stage reports for an output: plain for a local folder (``file:`` URIs unwrapped), else the URI."""
    return local_folder(path) or path


def marker_fields(result_type: type, payload: dict[str, Any]) -> dict[str, Any]:
    """The entries of a marker payload that are fields of the dataclass ``result_type`` (extra keys ignored)."""
    names = {field.name for field in dataclasses.fields(result_type)}
    return {key: value for key, value in payload.items() if key in names}


def check_writable(spark: SparkSession, folder: str, *, field: str = "run.output_dir") -> None:
    """Create ``folder`` if needed and write and delete a probe file there through its file system.

    Raises:
        PermissionError: naming ``field`` and the file system's own reason when the folder cannot be written.
        ValueError: naming ``field`` when no file system of this session reaches ``folder``
            (:func:`lia_spark.engine.filesystem.files_for`).
    """
    probe = f"{folder.rstrip('/')}/._lia_write_check-{uuid.uuid4().hex[:12]}"
    try:
        write_text(spark, probe, "")
        delete_path(spark, probe)
    except ValueError as error:
        raise ValueError(f"{field}: {error}") from None
    except file_errors() as error:
        reason = error_reason(error)
        raise PermissionError(f"{field}: cannot write to {folder} ({reason}); choose a folder this job can write, "
                              f"got {folder!r}") from None
