"""The audit key K (docs/math.md §5.9): 256 random bits that key every draw the audit's attacker guesses (the injected
canaries' coins and counterfactuals, the shadows' and extra runs' coins, the membership baseline's members, and the
training mechanism's randomness of those fits), kept in one file that only its owner may read, and nowhere else.

The file is audit.key_path, else ``<run.output_dir>/audit_key`` (:func:`lia_spark.run.layout.audit_key_path`); it
holds the key as 64 hex digits (:func:`lia_spark.kernels.hashing.key_text`). When it exists it is read and checked
(a folder, a file of another content, or one that others than its owner may read or write is refused, naming
audit.key_path and the file). When it does not, a key is drawn with :mod:`secrets` (:func:`stage_key`), kept in this
process until the stage that draws the canaries writes it (:func:`kept`: owner-only permissions, created
exclusively, so a concurrent run that wrote one first wins and this one stops), and the fingerprint of every stage
whose output depends on the coins holds the key's identifier (:func:`key_values`), never the key. ``run.force`` does
not redraw the key; deleting the file does. Local files (and every file over Spark Connect) are written with
``os.open(..., O_EXCL, 0o600)`` and linked into place; other file systems through Hadoop with ``FsPermission`` 600
(object stores ignore permissions: their bucket policy decides who reads the file).
"""
from __future__ import annotations

import contextlib
import logging
import os
import stat
import uuid

from pyspark.sql import SparkSession

from lia_spark.engine.spark.filesystem import HadoopFiles, LocalFiles, error_reason, file_errors, files_for
from lia_spark.kernels.hashing import AuditKey, key_text, parsed_key
from lia_spark.run import layout
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config

logger = logging.getLogger(__name__)

KEY_FIELD = "audit.key_path"
KEY_IDENTIFIER = "audit.key_identifier"  # the fingerprint's entry: the key's identifier, which does not reveal it
MAX_KEY_FILE_BYTES = 4096  # a key file is 65 bytes; anything this large is not one (and is never read whole)
OTHERS_BITS = 0o077  # group and other permission bits: a key file with any of them set is refused
PERMISSION_SCHEMES = frozenset({"file", "hdfs", "viewfs", "webhdfs", "swebhdfs"})  # file systems that keep them
NEW_KEY_FIX = ("delete it to draw a new key: every stage whose output depends on the coins then recomputes, and a "
               "model trained on an export made with the old key must be trained again")
_drawn: dict[str, AuditKey] = {}  # keys this process drew and has not yet written, by file


class AuditKeyError(ConfigError):
    """The audit key's file cannot be used (message: ``audit.key_path: ...``, naming the file and the fix)."""


def draws_from_key(config: Config) -> bool:
    """True when the train stage draws from the audit key: the injected design and the membership baseline (the
    observational game draws nothing before training)."""
    return config.audit.audit_design.keyed


def _refusal(config: Config, path: str, problem: str, fix: str) -> AuditKeyError:
    """The refusal "audit.key_path: the audit key file <path> <problem>, got <value>; <fix>"."""
    given = repr(config.audit.key_path) if config.audit.key_path else "'' (the default, <run.output_dir>/audit_key)"
    return AuditKeyError(f"{KEY_FIELD}: the audit key file {path} {problem}, got {given}; {fix}")



def _checked_mode(config: Config, path: str, scheme: str, mode: int) -> None:
    """Refuse a key file that others than its owner may read or write, where the file system keeps permissions."""
    if scheme in PERMISSION_SCHEMES and mode & OTHERS_BITS:
        raise _refusal(config, path, f"may be read or written by others than its owner (mode {mode & 0o777:04o}): "
                       "whoever reads it can recompute every coin and game the audit",
                       f"if nobody else read it, `chmod 600 {path}`; else {NEW_KEY_FIX}")


def _parsed(config: Config, path: str, content: bytes) -> AuditKey:
    """The key of a key file's bytes, or the refusal saying how they differ from one (never showing them)."""
    try:
        text = content.decode("ascii")
    except UnicodeDecodeError:
        problem = "holds bytes that are not text"
    else:
        try:
            return parsed_key(text)
        except ValueError as error:
            problem = str(error)
    raise _refusal(config, path, f"is damaged: it {problem}",
                   f"restore it from a copy (with it the coins are the same), or {NEW_KEY_FIX}")


def _reached(spark: SparkSession, path: str) -> str | HadoopFiles:
    """The driver's own path of the key file ``path`` when it is a local file, else the Hadoop files that reach it."""
    files = files_for(spark, path)
    if isinstance(files, LocalFiles):
        return files.local_path(path)
    local = files.local_path(path)
    return files if local is None else local


def _read_local(config: Config, path: str) -> AuditKey | None:
    """The key in the driver's file ``path`` (None when there is none), checked."""
    try:
        status = os.stat(path)
        if not stat.S_ISREG(status.st_mode):
            raise _refusal(config, path, "is not a file", f"remove it or set {KEY_FIELD} to a file")
        if status.st_size > MAX_KEY_FILE_BYTES:
            raise _refusal(config, path, f"is damaged: it holds {status.st_size:,} bytes, not a key",
                           f"restore it from a copy, or {NEW_KEY_FIX}")
        with open(path, "rb") as stream:
            content = stream.read(MAX_KEY_FILE_BYTES)
    except (FileNotFoundError, NotADirectoryError):  # none there (a parent that is a file holds none either)
        return None
    except OSError as error:
        raise _refusal(config, path, f"cannot be read ({error.strerror or error})",
                       "run as the user who owns it, or set audit.key_path to a key this user can read") from None
    key = _parsed(config, path, content)
    _checked_mode(config, path, "file", status.st_mode)
    return key


def _read_hadoop(config: Config, files: HadoopFiles, path: str) -> AuditKey | None:
    """The key in file ``path`` of a Hadoop file system (None when there is none), checked."""
    try:
        if not files.exists(path):
            return None
        if files.is_folder(path):
            raise _refusal(config, path, "is not a file", f"remove it or set {KEY_FIELD} to a file")
        size = files.list_folder(path)[0].size
        if size > MAX_KEY_FILE_BYTES:
            raise _refusal(config, path, f"is damaged: it holds {size:,} bytes, not a key",
                           f"restore it from a copy, or {NEW_KEY_FIX}")
        content = files.read_text(path).encode("utf-8")
        scheme, mode = files.permission(path)
    except file_errors() as error:
        raise _refusal(config, path, f"cannot be read ({error_reason(error).splitlines()[0]})",
                       "give this job read access to it, or set audit.key_path to a key it can read") from None
    key = _parsed(config, path, content)
    _checked_mode(config, path, scheme, mode)
    return key


def stored_key(spark: SparkSession, config: Config) -> AuditKey | None:
    """The key in the key file (:func:`lia_spark.run.layout.audit_key_path`), checked, or None when there is none.

    Raises:
        AuditKeyError: the file is not a file, cannot be read, is damaged, or others than its owner may read or
            write it (on a file system that keeps permissions).
    """
    path = layout.audit_key_path(config)
    reached = _reached(spark, path)
    return _read_local(config, reached) if isinstance(reached, str) else _read_hadoop(config, reached, path)


def stage_key(spark: SparkSession, config: Config) -> AuditKey:
    """The audit key of ``config``: the stored one (:func:`stored_key`), else one drawn now (256 bits from
    :mod:`secrets`) and kept in this process until :func:`kept` writes it, so every fingerprint and draw of this
    process before then uses the same key."""
    path = layout.audit_key_path(config)
    found = stored_key(spark, config)
    if found is not None:
        _drawn.pop(path, None)
        return found
    return _drawn.setdefault(path, AuditKey.drawn())


def key_values(key: AuditKey) -> dict[str, str]:
    """What a stage's fingerprint holds of the key: its identifier (:attr:`AuditKey.identifier`), so another key
    recomputes the stage ("audit.key_identifier <old> -> <new>") and the fingerprint reveals nothing of it."""
    return {KEY_IDENTIFIER: key.identifier}


def _write_exclusive(path: str, text: str) -> None:
    """Create file ``path`` (O_EXCL, mode 0600) holding ``text``, flushed to disk.

    Raises:
        FileExistsError: ``path`` exists (nothing written).
    """
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as stream:
        stream.write(text)
        stream.flush()
        os.fsync(stream.fileno())


def new_local_key_file(path: str, key: AuditKey) -> bool:
    """Create the driver's file ``path`` holding ``key`` (:func:`lia_spark.kernels.hashing.key_text`), mode 0600,
    unless it exists (False, nothing written): a temporary sibling made with O_EXCL, written whole, then hard-linked
    to ``path`` (which fails if it exists), so no reader ever sees a partial key; where the file system has no hard
    links, ``path`` itself is created with O_EXCL."""
    text = key_text(key)
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        _write_exclusive(temporary, text)
        try:
            os.link(temporary, path)
            return True
        except FileExistsError:
            return False
        except OSError:  # no hard links here (some mounted file systems): create the file itself below
            pass
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    try:
        _write_exclusive(path, text)
    except FileExistsError:
        return False
    return True


def kept(spark: SparkSession, config: Config, key: AuditKey) -> None:
    """Make sure the key file holds ``key`` before any draw with it leaves this process: write it when
    :func:`stage_key` drew it (owner-only, exclusive, logged with its identifier only).

    Raises:
        AuditKeyError: another run wrote a different key to the file meanwhile (this run's fingerprints and draws
            would not match it), or the file cannot be used (:func:`stored_key`).
    """
    path = layout.audit_key_path(config)
    if _drawn.get(path) != key:
        stored = stored_key(spark, config)
        if stored != key:
            raise _refusal(config, path, "no longer holds the key this run started with (another run changed it)",
                           "run the command again: it uses the key the file holds")
        return
    reached = _reached(spark, path)
    try:
        created = (new_local_key_file(reached, key) if isinstance(reached, str)
                   else reached.create_private(path, key_text(key)))
    except file_errors() as error:
        raise OSError(f"{KEY_FIELD}: cannot create the audit key file {path} ({error_reason(error).splitlines()[0]}); "
                      "make its folder writable, or set audit.key_path to a file this job can create") from None
    del _drawn[path]
    if not created:
        kept(spark, config, key)  # another run created it first: this run may go on only if it holds the same key
        return
    logger.info("audit key %s drawn and written to %s (owner-only; keep it from whoever trains the audited model)",
                key.identifier, path)
