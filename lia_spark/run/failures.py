"""One line per failure: "<field or resource>: <what is wrong>, got <value>; <what to do>" and its exit code.

Commands print this line on stderr (the traceback goes to the log). One rule decides the exit code:

- 2, the configuration or the input is wrong, wherever that is found (before any stage or inside one): a
  :class:`lia_spark.run.checks.ConfigError`, or a ``ValueError`` whose message starts with a config field
  (``section.key: ...``, this package's convention), anywhere in the cause chain; and a module that the driver or an
  executor cannot import (lia_spark itself, xgboost, catboost), with how to get it;
- 1, a runtime failure: a full disk or a refused write, raised by Python (``OSError`` ENOSPC / EACCES / EPERM /
  EROFS) or by Hadoop inside a Spark call (``FSError``, ``AccessControlException``, ``AccessDeniedException``,
  "Permission denied", "No space left on device", "Mkdirs failed"), is a resource error naming the path; a Parquet
  file whose bytes changed since they were written (page CRC, Hadoop checksum; read by Spark, or by pyarrow on the
  driver or in a Spark Python worker: :class:`DamagedFileError`) names the file, its table and run.force; anything
  else is reported by the first line of the outermost error that names a config field, else of its innermost cause.
"""
from __future__ import annotations

import dataclasses
import errno
import os
import re
import shutil
from typing import Iterator, Sequence

from lia_spark import __version__
from lia_spark.run.checks import ConfigError, unwrapped_file_uri
from lia_spark.run.config import Config

CONFIG_SECTIONS = frozenset(field.name for field in dataclasses.fields(Config))

USAGE_EXIT = 2
RUNTIME_EXIT = 1

NO_SPACE = ("no space left on the device", "free space there (at least what the attempt had written) or choose "
            "another run.output_dir; the same command then resumes")
# "<note><folder> (<size> written)": lia_spark.engine.runtime.outputs.claimed's note
WRITING_NOTE = "lia-spark: writing "
NOT_WRITABLE = ("cannot be written (permission denied or a read-only file system)",
                "make it writable for this user or choose another run.output_dir")
_ERRNO_PROBLEMS = {errno.ENOSPC: NO_SPACE, errno.EDQUOT: NO_SPACE, errno.EACCES: NOT_WRITABLE,
                   errno.EPERM: NOT_WRITABLE, errno.EROFS: NOT_WRITABLE}
_JAVA_PROBLEMS = (("No space left on device", NO_SPACE), ("AccessControlException", NOT_WRITABLE),
                  ("AccessDeniedException", NOT_WRITABLE), ("Permission denied", NOT_WRITABLE),
                  ("Read-only file system", NOT_WRITABLE), ("Mkdirs failed to create", NOT_WRITABLE))
SHIP_PACKAGE = ("ship it with `--py-files dist/lia_spark-{version}.zip` (`make zip`; executors with the dependencies) "
                "or a packed environment (`make env`; `--archives dist/lia_spark-env.tar.gz#environment` with "
                "PYSPARK_PYTHON=./environment/bin/python), see the README, \"Running with spark-submit\"")
# Modules a run may lack (in the driver's or a Python worker's environment) and how to get each.
MODULE_FIXES = {"lia_spark": SHIP_PACKAGE,
                "xgboost": "install it: `pip install 'lia-spark[xgboost]'` (its CPU build) or any xgboost >= 2.1",
                "catboost": "install it: `pip install 'lia-spark[catboost]'`, or set models.library=xgboost"}
_DAMAGED_FILE = re.compile(r"(?:Encountered error while reading file|Checksum error:) (\S+\.parquet)")
DAMAGED_FIX = ("recompute the stage that wrote it: the command that ran it, with run.force=true (e.g. `lia-spark run "
               "--conf <your conf> run.force=true`), or write your own table again")
_WORKER_DAMAGE = re.compile(rf"DamagedFileError: (.+?{re.escape(DAMAGED_FIX)})")  # a Python worker's, in its traceback
_DAMAGE_SIGNS = ("CRC checksum verification failed", "ChecksumException", "could not verify page integrity",
                 "is not a Parquet file", "ParquetDecodingException", "Can not read value at")
_FIELD = re.compile(r"\s*[a-z_]+\.[a-z_]+[^\s:]*: ")  # "section.key: what is wrong ..."
_JAVA_PATH = re.compile(r"((?:file|hdfs|s3a?|abfss?|gs|dbfs):/+[^\s:,)'\"]+|(?<![\w.])/[^\s:,)'\"]+)")


def failure_line(error: BaseException) -> tuple[str, int]:
    """The one line a command prints for ``error`` (without the ``lia-spark:`` prefix) and its exit code."""
    chain = list(causes(error))
    usage = next((cause for cause in chain if isinstance(cause, ConfigError) or _names_config(cause)), None)
    if usage is not None:
        return _first_line(str(usage)), USAGE_EXIT
    missing = missing_module(chain)
    if missing is not None:
        return missing, USAGE_EXIT
    notes = [note for cause in chain for note in getattr(cause, "__notes__", ())]
    for cause in chain:
        resource = resource_problem(cause, notes) or damaged_file(cause)
        if resource is not None:
            return resource, RUNTIME_EXIT
    named = next((cause for cause in chain if not _java_messages(cause) and _FIELD.match(str(cause))), None)
    return _first_line(_describe(named if named is not None else chain[-1])), RUNTIME_EXIT


def _names_config(error: BaseException) -> bool:
    """Whether ``error`` is a ValueError that starts by naming a config field (``section.key: ...``): by this
    package's convention, the configuration or the input it points at is wrong, wherever that was found."""
    if not isinstance(error, ValueError) or _java_messages(error) or not _FIELD.match(str(error)):
        return False
    return str(error).strip().split(".", 1)[0] in CONFIG_SECTIONS


def missing_module(chain: list[BaseException]) -> str | None:
    """The line for a module of :data:`MODULE_FIXES` that the driver or an executor's Python worker cannot import
    (a worker's ``ModuleNotFoundError`` reaches the driver as text inside a Java error); None otherwise."""
    for cause in chain:
        for text in [str(cause), *_java_messages(cause)]:
            for module, fix in MODULE_FIXES.items():
                if f"No module named '{module}'" in text:
                    where = "a Spark Python worker" if "PythonException" in text or _java_messages(cause) else \
                        "this Python"
                    return f"{module}: {where} cannot import it (No module named '{module}'); " \
                           f"{fix.format(version=__version__)}"
    return None


def resource_problem(error: BaseException, notes: Sequence[str] = ()) -> str | None:
    """The resource line for a full disk or a refused write, naming the path (for a full disk the folder being
    written and its free space: ``notes`` of the failure's chain, :data:`WRITING_NOTE`); None for any other error.
    Hadoop's errors are read from their Java causes, a Python worker's (which reaches the driver as text, its
    traceback first) from the line of the error itself."""
    if isinstance(error, OSError) and error.errno in _ERRNO_PROBLEMS:
        return _resource_line(error.filename, _ERRNO_PROBLEMS[error.errno], str(error), notes)
    worker = "PythonException" in type(error).__name__
    for text in _java_messages(error) or ([str(error)] if worker else []):
        for needle, problem in _JAVA_PROBLEMS:
            line = next((line for line in text.splitlines() if needle in line), "")
            if line:
                found = _JAVA_PATH.search(line.split(needle, 1)[1]) or (
                    None if needle == "Mkdirs failed to create" else _JAVA_PATH.search(line))
                return _resource_line(found.group(1) if found else None, problem, line, notes)
    return None


def is_no_space(error: BaseException) -> bool:
    """Whether ``error`` or a cause of it is a full disk (ENOSPC, EDQUOT, Hadoop's or a Python worker's "No space
    left on device")."""
    return any((isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT))
               or any("No space left on device" in text for text in _java_messages(cause) or [str(cause)])
               for cause in causes(error))


def _resource_line(path: str | None, problem: tuple[str, str], cause: str, notes: Sequence[str]) -> str:
    """``<path>: <problem> (<cause>), got <path>; <fix>``; for a full disk the folder being written (from ``notes``,
    when the error names no path) with its free space and what the attempt had written."""
    what, fix = problem
    if problem is NO_SPACE:
        writing = next((note[len(WRITING_NOTE):] for note in notes if note.startswith(WRITING_NOTE)), "")
        folder, written = writing.split(" (", 1) if " (" in writing else (writing, "")
        path = path or folder or None
        written = written.rstrip(")") if written and not written.startswith("0.0 MB") else ""
        what = f"{what} ({free_space(path or '')}{', ' + written if written else ''})"
    if path is None:
        return f"the folder being written: {what} ({_first_line(cause).strip()}); {fix}"
    return f"{path}: {what} ({_first_line(cause).strip()}), got {path!r}; {fix}"


def free_space(path: str) -> str:
    """"12.0 MB free of 9.8 GB" for the local disk of ``path`` (its nearest existing folder), "free space unknown"
    on other file systems."""
    local = path[len("file:"):] if path.startswith("file:") else path
    folder = os.path.abspath("/" + local.lstrip("/")) if path.startswith("file:") or path.startswith("/") else ""
    while folder and not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not folder:
        return "free space unknown"
    usage = shutil.disk_usage(folder)
    return f"{_size(usage.free)} free of {_size(usage.total)}"


def _size(count: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1000
    return ""


class DamagedFileError(RuntimeError):
    """A committed file whose bytes no longer hold what was written: a Parquet file read by pyarrow (a page CRC that
    does not match, bytes that do not decode; its message is :func:`damaged_line`), or a file of a stage's input
    folder that differs from what the folder's marker lists (its message names the file, then :data:`DAMAGED_FIX`)."""


def damaged_line(path: str, reason: str) -> str:
    """The line for the Parquet file ``path`` whose bytes changed after they were written (``reason``: what the
    reader saw), naming the file (a local one by its plain path), its table (the folder above its partition folders)
    and the fix."""
    path = unwrapped_file_uri(path)
    return (f"{path}: damaged, its bytes changed after they were written ({reason}), got {path!r} in the table "
            f"{parquet_table(path)}; {DAMAGED_FIX}")


def parquet_table(path: str) -> str:
    """The table (folder) a Parquet file belongs to: its folder without the partition folders (``day=1``)."""
    folder = path.rstrip("/").rsplit("/", 1)[0]
    while "=" in folder.rsplit("/", 1)[-1]:
        folder = folder.rsplit("/", 1)[0]
    return folder


def damaged_file(error: BaseException) -> str | None:
    """The line for a Parquet file whose bytes changed after they were written (a page CRC or Hadoop's ``.crc``
    checksum does not match, or the file no longer decodes), read by Spark or by pyarrow (:class:`DamagedFileError`,
    on the driver or as the text of a Python worker's error), naming the file and the fix; None otherwise."""
    if isinstance(error, DamagedFileError):
        return str(error)
    texts = [str(error), *_java_messages(error)]
    worker = next((match.group(1) for text in texts for match in [_WORKER_DAMAGE.search(text)] if match), None)
    if worker is not None:
        return worker
    found = next((match for text in texts for match in [_DAMAGED_FILE.search(text)] if match), None)
    if found is None or not any(needle in text for text in texts for needle in _DAMAGE_SIGNS):
        return None
    reason = next(line.strip().removeprefix("Caused by: ") for text in reversed(texts) for line in text.splitlines()
                  if any(needle in line for needle in _DAMAGE_SIGNS))  # innermost first: the reader's own words
    return damaged_line(found.group(1).rstrip("."), reason)


def causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and its causes (explicit ``from`` or implicit context), outermost first."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def _java_messages(error: BaseException) -> list[str]:
    """``toString()`` of a Py4J Java error and of each of its Java causes (none for a Python error)."""
    throwable = getattr(error, "java_exception", None)
    messages: list[str] = []
    while throwable is not None and len(messages) < 20:
        messages.append(str(throwable.toString()))
        throwable = throwable.getCause()
    return messages


def _describe(error: BaseException) -> str:
    java = _java_messages(error)
    return java[-1] if java else f"{error}" or type(error).__name__


def error_first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, its type's name when it has none."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
