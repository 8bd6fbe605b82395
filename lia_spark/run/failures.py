"""One line per failure: "<field or resource>: <what is wrong>, got <value>; <what to do>" and its exit code.

Commands print this line on stderr (the traceback goes to the log): a :class:`lia_spark.run.checks.ConfigError`
anywhere in the cause chain is a usage error (exit 2); a full disk or a refused write, raised by Python
(``OSError`` ENOSPC / EACCES / EPERM / EROFS) or by Hadoop inside a Spark call (``FSError``,
``AccessControlException``, ``AccessDeniedException``, "Permission denied", "No space left on device",
"Mkdirs failed"), is a resource error naming the path (exit 1); anything else is reported by the first line
of the outermost error that names a config field (``section.key: ...``, this package's convention), else of
its innermost cause (exit 1).
"""
from __future__ import annotations

import errno
import re
from typing import Iterator

from lia_spark.run.checks import ConfigError

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
_FIELD = re.compile(r"\s*[a-z_]+\.[a-z_]+[^\s:]*: ")  # "section.key: what is wrong ..."
_JAVA_PATH = re.compile(r"((?:file|hdfs|s3a?|abfss?|gs|dbfs):/+[^\s:,)'\"]+|(?<![\w.])/[^\s:,)'\"]+)")


def failure_line(error: BaseException) -> tuple[str, int]:
    """The one line a command prints for ``error`` (without the ``lia-spark:`` prefix) and its exit code."""
    chain = list(_causes(error))
    usage = next((cause for cause in chain if isinstance(cause, ConfigError)), None)
    if usage is not None:
        return _first_line(str(usage)), USAGE_EXIT
    for cause in chain:
        resource = resource_problem(cause)
        if resource is not None:
            return resource, RUNTIME_EXIT
    named = next((cause for cause in chain if not _java_messages(cause) and _FIELD.match(str(cause))), None)
    return _first_line(_describe(named if named is not None else chain[-1])), RUNTIME_EXIT


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


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
