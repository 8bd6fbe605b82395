"""One line per failure: "<field or resource>: <what is wrong>, got <value>; <what to do>" and its exit code.

Commands print this line on stderr (the traceback goes to the log). One rule decides the exit code:

- 2, the configuration or the input is wrong, wherever that is found (before any stage or inside one): a
  :class:`lia_spark.run.checks.ConfigError`, or a ``ValueError`` whose message starts with a config field
  (``section.key: ...``, this package's convention), anywhere in the cause chain; and a module that the driver or an
  executor cannot import (lia_spark itself, xgboost, catboost), with how to get it;
- 1, a runtime failure: a full disk or a refused write, raised by Python (``OSError`` ENOSPC / EACCES / EPERM /
  EROFS) or by Hadoop inside a Spark call (``FSError``, ``AccessControlException``, ``AccessDeniedException``,
  "Permission denied", "No space left on device", "Mkdirs failed"), is a resource error naming the path; anything
  else is reported by the first line of the outermost error that names a config field, else of its innermost cause.
"""
from __future__ import annotations

import dataclasses
import errno
import re
from typing import Iterator

from lia_spark import __version__
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config

CONFIG_SECTIONS = frozenset(field.name for field in dataclasses.fields(Config))

USAGE_EXIT = 2
RUNTIME_EXIT = 1

NO_SPACE = ("no space left on the device", "free space there or choose another run.output_dir")
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
_FIELD = re.compile(r"\s*[a-z_]+\.[a-z_]+[^\s:]*: ")  # "section.key: what is wrong ..."
_JAVA_PATH = re.compile(r"((?:file|hdfs|s3a?|abfss?|gs|dbfs):/+[^\s:,)'\"]+|(?<![\w.])/[^\s:,)'\"]+)")


def failure_line(error: BaseException) -> tuple[str, int]:
    """The one line a command prints for ``error`` (without the ``lia-spark:`` prefix) and its exit code."""
    chain = list(_causes(error))
    usage = next((cause for cause in chain if isinstance(cause, ConfigError) or _names_config(cause)), None)
    if usage is not None:
        return _first_line(str(usage)), USAGE_EXIT
    missing = missing_module(chain)
    if missing is not None:
        return missing, USAGE_EXIT
    for cause in chain:
        resource = resource_problem(cause)
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


def resource_problem(error: BaseException) -> str | None:
    """The resource line for a full disk or a refused write, naming the path; None for any other error."""
    if isinstance(error, OSError) and error.errno in _ERRNO_PROBLEMS:
        return _resource_line(str(error.filename or "the output device"), _ERRNO_PROBLEMS[error.errno], error)
    for text in _java_messages(error):
        for needle, problem in _JAVA_PROBLEMS:
            if needle in text:
                found = _JAVA_PATH.search(text.split(needle, 1)[1] if needle == "Mkdirs failed to create" else text)
                return _resource_line(found.group(1) if found else "the output folder", problem, text)
    return None


def _resource_line(path: str, problem: tuple[str, str], cause: object) -> str:
    what, fix = problem
    return f"{path}: {what} ({_first_line(str(cause))}), got {path!r}; {fix}"


def _causes(error: BaseException) -> Iterator[BaseException]:
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
    messages = []
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
