"""Atomic stage outputs: write to a temporary sibling path with a marker file, then commit it in place of the old
output (:func:`replace_folder`: a committed output is never absent, a kill at any moment leaves one committed
copy); and what tells lia_spark's folders from anybody else's.

A folder is *complete* only when it holds ``_LIA_COMPLETE`` (JSON with the stage's counts and
parameters, and every file's size and, for files that are not Parquet, SHA-256). Readers and resumable pipelines
check the marker, so a crashed job never leaves a half-written output that looks finished, and reuse compares the
files with the marker before trusting them (:func:`damaged_files`; Parquet pages carry their own CRC, verified as
they are read). Works on any Hadoop file system Spark can write to, and over Spark Connect on folders the driver
sees as local files (:mod:`lia_spark.engine.spark.filesystem`).

Ownership: a folder is lia_spark's only when it holds a marker (a committed output) or is claimed (a staging or
scratch folder beside ``<path>.lia-claim``, which records the run that made it). Everything else is the user's:
never replaced, never swept (:func:`foreign_entries`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
import uuid
from typing import Any, Iterator, Sequence

from pyspark.sql import SparkSession

from lia_spark.engine.spark.filesystem import error_reason, file_errors, files_for, local_folder
from lia_spark.run.failures import WRITING_NOTE, is_no_space
from lia_spark.run.fingerprint import (FINGERPRINT_KEY, Fingerprint, changes, marker_fingerprint, sealed_marker,
                                       verified_marker)

logger = logging.getLogger(__name__)

MARKER = "_LIA_COMPLETE"
FILES_KEY = "lia_files"  # in the marker: relative file name -> [size in bytes, SHA-256 hex or "" for Parquet]
CLAIM_SUFFIX = ".lia-claim"  # <path>.lia-claim: <path> is a staging or scratch folder a lia_spark run made
REPLACES_KEY = "replaces"  # in a claim: the committed folder the claimed one is, moved aside while it is replaced
ASIDE_INFIX = "._old-"  # <output>._old-<12 hex>: a committed output moved aside while its successor takes its place
DIGESTED_SIZE = 64 * 2**20  # files that are not Parquet and at most this large get a SHA-256 in the marker


class ForeignFilesError(ValueError):
    """A path lia_spark would replace or sweep holds files no lia_spark run wrote (message: field first)."""


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
    except (json.JSONDecodeError, UnicodeDecodeError) + file_errors() as error:
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


def committed_folder(spark: SparkSession, path: str) -> tuple[str, dict[str, Any]] | None:
    """(folder, its verified marker) of the committed output holding the table ``path``: ``path`` itself, or for a
    table inside a committed stage folder such as ``models/canaries``, the folder; None when neither is committed
    with a trusted marker."""
    trimmed = path.rstrip("/")
    for folder in (trimmed, trimmed.rsplit("/", 1)[0]):
        marker = read_marker(spark, folder)
        verified = verified_marker(marker)[0] if marker is not None else None
        if verified is not None:
            return folder, verified
    return None


def output_fingerprint(spark: SparkSession, path: str) -> str:
    """Fingerprint of an input table: its committed folder's marker's (:func:`committed_folder`), else
    :func:`listing_fingerprint`."""
    found = committed_folder(spark, path)
    return marker_fingerprint(found[1]) if found is not None else listing_fingerprint(spark, path.rstrip("/"))


def reusable_output(spark: SparkSession, paths: Sequence[str], fingerprint: Fingerprint, *, force: bool
                    ) -> dict[str, Any] | None:
    """The marker of ``paths[0]`` when every folder in ``paths`` is complete with a trusted marker whose
    fingerprint equals ``fingerprint`` and holds the files its marker lists (:func:`damaged_files`), else None;
    logs why the stage is reused or recomputed (naming the fields or files that changed). ``force`` (run.force)
    always recomputes."""
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
        damaged = damaged_files(spark, path, verified)
        if damaged:
            logger.warning("%s: recomputing, %s no longer holds the files its marker lists: %s", stage, path,
                           "; ".join(damaged[:5]) + (f" and {len(damaged) - 5} more" if len(damaged) > 5 else ""))
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
    """Yield a fresh temporary path, claimed for this run (:func:`claimed`); on success replace ``path`` by it and
    write the completion marker, which lists every file written with its size and digest (:data:`FILES_KEY`).

    ``metadata`` may be filled in by the caller inside the ``with`` block; it is written to the marker, sealed
    with ``fingerprint`` (:func:`lia_spark.run.fingerprint.sealed_marker`) when given, so :func:`reusable_output`
    can tell later whether the output still matches its configuration and inputs.
    On any exception the temporary path is deleted and ``path`` is left untouched.
    """
    final = path.rstrip("/")
    staging = f"{final}._tmp-{uuid.uuid4().hex[:12]}"
    metadata = metadata if metadata is not None else {}
    with claimed(spark, staging):
        yield staging
        files = files_for(spark, staging)
        if not files.exists(staging):
            files.make_folders(staging)
        payload = {**metadata, FILES_KEY: written_files(spark, staging)}
        content = sealed_marker(payload, fingerprint) if fingerprint is not None else payload
        files.write_text(f"{staging}/{MARKER}", json.dumps(content, sort_keys=True, default=str))
        files.make_parent_folders(final)
        replace_folder(spark, staging, final)


def replace_folder(spark: SparkSession, staging: str, final: str) -> None:
    """Put the complete folder ``staging`` (claimed by this run) at ``final``, in place of what is there.

    Where the file system swaps two folders atomically (a local disk: :func:`lia_spark.engine.spark.filesystem.
    exchange_local`) ``final`` never stops being a whole folder, the old or the new, and the old one, now at
    ``staging`` and still claimed, is deleted (a kill before that leaves it to the next run's sweep). Elsewhere
    (HDFS, object stores; a local file system without the swap) the old folder is first renamed to a claimed
    sibling :data:`ASIDE_INFIX` whose claim names ``final``, then ``staging`` to ``final``, then the sibling is
    deleted: ``final`` is absent between the two renames, and a kill there leaves the sibling, which the next run
    moves back (:func:`clear_leftover`).
    """
    files = files_for(spark, final)
    if not files.exists(final):
        _renamed(files, staging, final)
    elif files.exchange(staging, final):  # the old output now sits at ``staging``, still claimed
        files.delete(staging)
    else:
        _replaced_through_aside(spark, staging, final)


def _renamed(files: Any, source: str, target: str) -> None:
    """Rename ``source`` to ``target`` (absent), or raise OSError naming both."""
    if not files.rename(source, target):
        raise OSError(f"could not rename {source} to {target}")


def _replaced_through_aside(spark: SparkSession, staging: str, final: str) -> None:
    """:func:`replace_folder` by two renames: ``final`` to a claimed sibling, ``staging`` to ``final``; on a failure
    of the second the old folder is renamed back (and, should that fail too, its claim stays for the next run)."""
    files = files_for(spark, final)
    aside = f"{final}{ASIDE_INFIX}{uuid.uuid4().hex[:12]}"
    files.write_text(claim_path(aside), json.dumps(_claim_record(aside, replaces=final), sort_keys=True))
    if not files.rename(final, aside):
        files.delete(claim_path(aside))
        raise OSError(f"could not move {final} aside to {aside} to replace it")
    try:
        _renamed(files, staging, final)
    except BaseException:
        _renamed(files, aside, final)
        files.delete(claim_path(aside))
        raise
    files.delete(aside)
    files.delete(claim_path(aside))


def foreign_entries(spark: SparkSession, path: str) -> list[str]:
    """The names of what makes ``path`` someone else's: [] when it does not exist, is an empty folder, a lia_spark
    output (it holds a marker file, trusted or not: an edited or damaged marker is recomputed, not foreign) or a
    folder a run claimed (:func:`claimed`); else its entries (itself for a file), sorted."""
    files = files_for(spark, path)
    if (not files.exists(path) or files.exists(f"{path.rstrip('/')}/{MARKER}")
            or files.exists(claim_path(path))):
        return []
    return sorted(entry.name for entry in files.list_folder(path))


def foreign_error(field: str, path: str, entries: list[str]) -> ForeignFilesError:
    """The refusal of a path that holds ``entries`` no lia_spark run wrote."""
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
    return ForeignFilesError(
        f"{field}: {path} exists and holds files no lia_spark run wrote ({shown}), got {path!r}; lia-spark replaces "
        "its folders whole, so it stopped before any work and touched nothing: choose a new or empty folder, or set "
        "run.replace_foreign=true to let it replace them (run.force does not)")


def claim_path(path: str) -> str:
    """``<path>.lia-claim``: the record that ``path`` is a folder a lia_spark run made."""
    return f"{path.rstrip('/')}{CLAIM_SUFFIX}"


def _claim_record(path: str, **extra: str) -> dict[str, Any]:
    """What a claim of ``path`` records: the path, this host, this process and now, and ``extra``
    (:data:`REPLACES_KEY`)."""
    return {"path": path.rstrip("/"), "host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
            **extra}


@contextlib.contextmanager
def claimed(spark: SparkSession, path: str) -> Iterator[str]:
    """Record ``path`` as this run's (``<path>.lia-claim``: host, process id, start time) for the ``with`` block, so
    an interrupted run's folder can be swept later and nobody else's ever is (:func:`swept_leftover`). On an
    exception ``path`` is deleted; at the end the claim is removed (the folder was committed, deleted or is
    scratch the caller removes)."""
    files = files_for(spark, path)
    files.write_text(claim_path(path), json.dumps(_claim_record(path), sort_keys=True))
    try:
        yield path
    except BaseException as error:
        if is_no_space(error) and hasattr(error, "add_note"):
            written = sum(visible_files(spark, path).values()) if files.exists(path) else 0
            error.add_note(f"{WRITING_NOTE}{path.rstrip('/').rpartition('/')[0] or path} ({written / 1e6:,.1f} MB "
                           "written)")
        files.delete(path)
        files.delete(claim_path(path))
        raise
    files.delete(claim_path(path))


@contextlib.contextmanager
def scratch_folder(spark: SparkSession, path: str) -> Iterator[str]:
    """A claimed scratch folder at ``path`` for the ``with`` block, deleted (with its claim) at the end."""
    try:
        with claimed(spark, path):
            yield path
    finally:
        files_for(spark, path).delete(path)


def _read_claim(spark: SparkSession, claim: str) -> dict[str, Any]:
    """The record of claim file ``claim`` ({} when it cannot be read as a JSON object)."""
    try:
        record = json.loads(read_text(spark, claim))
    except (json.JSONDecodeError, UnicodeDecodeError) + file_errors():
        return {}
    return record if isinstance(record, dict) else {}


def swept_leftover(spark: SparkSession, claim: str) -> str:
    """The folder claim file ``claim`` records, when it is an interrupted run's: its recording process no longer
    runs on this host, or it ran on another host (whose runs a holder of the output folder's lock excludes); ""
    while the recording process still runs, or when the claim is not a lia_spark claim of its sibling."""
    record = _read_claim(spark, claim)
    try:
        path, host, pid = str(record["path"]), str(record["host"]), int(record["pid"])
    except (KeyError, TypeError, ValueError):
        return ""
    if path.rsplit("/", 1)[-1] != claim.rstrip("/").rsplit("/", 1)[-1][:-len(CLAIM_SUFFIX)]:
        return ""
    if host == socket.gethostname() and pid != os.getpid() and process_exists(pid):
        return ""
    return claim[:-len(CLAIM_SUFFIX)]


def clear_leftover(spark: SparkSession, path: str) -> None:
    """Remove the interrupted run's folder ``path`` (:func:`swept_leftover`) and its claim, logging it; but a
    committed output an interrupted commit had moved aside (its claim names the folder it replaces,
    :func:`replace_folder`) is moved back when that folder is absent, and kept (with a warning) when something
    other than a committed output stands there."""
    files = files_for(spark, path)
    replaces = str(_read_claim(spark, claim_path(path)).get(REPLACES_KEY, ""))
    if replaces and files.exists(path) and not files.exists(replaces):
        logger.warning("restoring %s from %s, where an interrupted run had moved it aside to replace it", replaces,
                       path)
        _renamed(files, path, replaces)
    elif replaces and files.exists(path) and not is_complete(spark, replaces):
        logger.warning("keeping %s, a committed output an interrupted run had moved aside: %s is not a committed "
                       "output; compare the two and remove one", path, replaces)
        return
    else:
        logger.warning("removing %s, left by an interrupted run", path)
        files.delete(path)
    files.delete(claim_path(path))


def process_exists(pid: int) -> bool:
    """True when process ``pid`` runs on this host (or exists but belongs to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def visible_files(spark: SparkSession, folder: str) -> dict[str, int]:
    """Relative name -> size of every file below ``folder`` but hidden ones and lia_spark's own (names starting
    with "." or "_LIA" at any level: Hadoop's checksums, the marker), sorted by name."""
    return dict(sorted((name.lstrip("/"), size) for name, size, _ in files_for(spark, folder).list_files(folder)
                       if not any(part.startswith((".", "_LIA")) for part in name.lstrip("/").split("/"))))


def written_files(spark: SparkSession, folder: str) -> dict[str, list[Any]]:
    """:func:`visible_files` with a digest each: relative name -> [size, SHA-256 hex], the digest "" for Parquet
    files (their pages carry CRCs that every read verifies) and for files above :data:`DIGESTED_SIZE`."""
    files = files_for(spark, folder)
    return {name: [size, files.digest(f"{folder.rstrip('/')}/{name}")
                   if not name.endswith(".parquet") and size <= DIGESTED_SIZE else ""]
            for name, size in visible_files(spark, folder).items()}


def damaged_files(spark: SparkSession, folder: str, marker: dict[str, Any]) -> list[str]:
    """How the files below ``folder`` differ from those its marker lists ("name: missing", "name: 10 bytes, the
    marker says 12", "name: content changed", "name: not written by the stage"); ["the marker lists no files"] for a
    marker without a list (written before lia_spark verified files)."""
    recorded = marker.get(FILES_KEY)
    if not isinstance(recorded, dict):
        return ["the marker lists no files"]
    present = visible_files(spark, folder)
    problems = [f"{name}: not written by the stage" for name in sorted(set(present) - set(recorded))]
    for name, (size, digest) in recorded.items():
        if name not in present:
            problems.append(f"{name}: missing")
        elif present[name] != size:
            problems.append(f"{name}: {present[name]} bytes, the marker says {size}")
        elif digest and _digest_or_error(spark, f"{folder.rstrip('/')}/{name}") != digest:
            problems.append(f"{name}: content changed")
    return problems


def _digest_or_error(spark: SparkSession, path: str) -> str:
    """SHA-256 of file ``path``, or the reason it cannot be read (e.g. Hadoop's checksum of the file fails)."""
    try:
        return files_for(spark, path).digest(path)
    except file_errors() as error:
        return f"unreadable: {error_reason(error).splitlines()[0]}"


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
            (:func:`lia_spark.engine.spark.filesystem.files_for`).
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
