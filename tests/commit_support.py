"""The processes of tests/test_commit.py: a reader polling a committed folder, a commit killed at one of its steps,
and a contender for a run lock. Each is this file run as a script with its own Python (and, but the reader, its
own Spark session):

    python tests/commit_support.py read FOLDER STOP_FILE          polls FOLDER until STOP_FILE exists, prints counts
    python tests/commit_support.py commit FOLDER GENERATION STEP [TABLE=LOCAL_URI]
    python tests/commit_support.py lock                            takes locks as stdin says ("take FOLDER", "release")
    python tests/commit_support.py cli STEP COMMAND [ARGUMENTS]    lia-spark COMMAND, SIGKILLed at STEP of a commit

``commit`` commits generation GENERATION of a small folder (:func:`commit_generation`) through
:func:`lia_spark.engine.runtime.outputs.committed_output` and SIGKILLs itself at STEP (:data:`STEPS`, the first
commit that replaces a folder), by wrapping the file system function that step calls (``cli`` does the same to a
command of the command line, for benchmarks/fault_matrix.py); ``TABLE=LOCAL_URI`` mounts LOCAL_URI as
``viewfs://TABLE/lia``, a Hadoop file system other than the local one (no atomic swap: the commit renames through
a claimed sibling).
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

MARKER = "_LIA_COMPLETE"
FILES = ("a.txt", "b.txt", "nested/c.txt")  # each holds the generation that wrote it


def commit_generation(spark: Any, final: str, generation: int) -> None:
    """Commit ``final`` holding :data:`FILES`, each with the text of ``generation``, which the marker records too."""
    from lia_spark.engine.runtime.outputs import committed_output
    from lia_spark.engine.spark.filesystem import files_for

    with committed_output(spark, final, {"generation": generation}) as staging:
        for name in FILES:
            files_for(spark, staging).write_text(f"{staging}/{name}", str(generation))


def folder_state(folder: Path) -> tuple[str, int | None]:
    """What a reader finds at ``folder``, opened once and read relative to that handle (one folder, even when it is
    replaced meanwhile), and the marker's ``generation`` (None when it has none): "ok" for a marker whose file list
    the files match (names, sizes, the digests it records); "absent" when the path or the marker does not exist or
    a file of the folder still at the path is missing; "mixed" when files and marker differ; "replaced" when the
    opened folder was moved away from the path and (partly) deleted while it was read (a newer folder stands there:
    read it again)."""
    try:
        handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return "absent", None
    try:
        def read(name: str) -> bytes:
            with open(name, "rb", opener=lambda path, flags: os.open(path, flags, dir_fd=handle)) as stream:
                return stream.read()

        marker = json.loads(read(MARKER))
        listed, found = marker.get("lia_files", {}), _files_below(handle)
        intact = sorted(listed) == sorted(found) and all(
            found[name] == size and (not digest or hashlib.sha256(read(name)).hexdigest() == digest)
            for name, (size, digest) in listed.items())
        if not intact:
            return ("replaced" if _moved_away(folder, handle) else "mixed"), marker.get("generation")
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return ("replaced" if _moved_away(folder, handle) else "absent"), None
    finally:
        os.close(handle)
    return "ok", marker.get("generation")


def _files_below(handle: int) -> dict[str, int]:
    """Relative name -> size of the files below the open folder ``handle``, but hidden ones and lia_spark's own
    (as the marker lists them)."""
    sizes = {}
    for root, _, files, root_handle in os.fwalk(".", dir_fd=handle):
        for name in files:
            relative = os.path.normpath(os.path.join(root, name))
            if not any(part.startswith(("_LIA", ".")) for part in relative.split("/")):
                sizes[relative] = os.stat(name, dir_fd=root_handle).st_size
    return sizes


def _moved_away(folder: Path, handle: int) -> bool:
    """True when the open folder ``handle`` no longer stands at ``folder`` (another does, or none)."""
    try:
        return os.stat(folder).st_ino != os.fstat(handle).st_ino
    except FileNotFoundError:
        return False


def poll(folder: Path, stop: Path) -> dict[str, int]:
    """Read ``folder`` as fast as possible until ``stop`` exists: the polls, what :func:`folder_state` found
    (counts by state), the reads of its marker by path that failed (``marker_absent``) and the different markers
    read (``versions``: the commits the reader saw)."""
    counts = {"polls": 0, "ok": 0, "absent": 0, "mixed": 0, "replaced": 0, "marker_absent": 0}
    markers = set()
    print("polling", flush=True)
    while not stop.exists():
        counts["polls"] += 1
        try:
            markers.add(hashlib.sha256((folder / MARKER).read_bytes()).hexdigest())
        except FileNotFoundError:
            counts["marker_absent"] += 1
        counts[folder_state(folder)[0]] += 1
    return {**counts, "versions": len(markers)}


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _around(owner: Any, name: str, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    setattr(owner, name, wrapper(getattr(owner, name)))


def _at_call(number: int, *, before: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A wrapper that SIGKILLs the process at the ``number``-th call, before or after it runs."""
    calls = []

    def wrapper(function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls.append(args)
            if len(calls) == number and before:
                _kill()
            result = function(*args, **kwargs)
            if len(calls) == number:
                _kill()
            return result
        return wrapped
    return wrapper


def _halfway_deletion(function: Callable[..., Any]) -> Callable[..., Any]:
    """A wrapper of HadoopFiles.delete that, asked to delete the replaced output (the staging name after a swap,
    or the sibling it was moved to), deletes half its files (the marker first) and then SIGKILLs the process."""
    def wrapped(self: Any, path: str) -> None:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if ("._tmp-" not in name and "._old-" not in name) or name.endswith(".lia-claim"):
            return function(self, path)
        names = sorted(name for name, _, _ in self.list_files(path))
        for name in names[:len(names) // 2]:
            function(self, f"{path.rstrip('/')}{name}")
        _kill()
    return wrapped


STEPS: dict[str, tuple[str, Callable[..., Any]]] = {
    # a local folder: the atomic swap, then the deletion of the old folder
    "before-exchange": ("lia_spark.engine.spark.filesystem:exchange_local", _at_call(1, before=True)),
    "after-exchange": ("lia_spark.engine.spark.filesystem:exchange_local", _at_call(1, before=False)),
    "during-deletion": ("lia_spark.engine.spark.filesystem:HadoopFiles.delete", _halfway_deletion),
    # another Hadoop file system: final -> aside, staging -> final, then the deletion of the aside folder
    "before-aside": ("lia_spark.engine.spark.filesystem:HadoopFiles.rename", _at_call(1, before=True)),
    "after-aside": ("lia_spark.engine.spark.filesystem:HadoopFiles.rename", _at_call(1, before=False)),
    "after-rename": ("lia_spark.engine.spark.filesystem:HadoopFiles.rename", _at_call(2, before=False)),
}


def _install(step: str) -> None:
    """Wrap the function of ``step`` (:data:`STEPS`) so that the process dies there."""
    import importlib

    target, wrapper = STEPS[step]
    module, _, attribute = target.partition(":")
    owner: Any = importlib.import_module(module)
    *parents, name = attribute.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    _around(owner, name, wrapper)


def session(mounts: list[str]) -> Any:
    """A local Spark session of one core; ``mounts`` ("TABLE=LOCAL_URI") as viewfs mount tables."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    for mount in mounts:
        table, _, uri = mount.partition("=")
        builder = builder.config(f"spark.hadoop.fs.viewfs.mounttable.{table}.link./lia", uri)
    return builder.getOrCreate()


def contend(spark: Any) -> None:
    """Take run locks as stdin says, one line each way: ``take FOLDER`` -> ``won`` (holding it) or ``lost
    <message>``; ``release`` -> ``released`` (the lock, if held, deleted)."""
    from lia_spark.engine.runtime.lock import RunLockError, run_lock

    def say(text: str) -> None:
        sys.stdout.write(text.replace("\n", " ") + "\n")
        sys.stdout.flush()

    say("ready")
    while line := sys.stdin.readline():
        folder = line.strip().partition(" ")[2]
        try:
            with run_lock(spark, folder, command="lia-spark race", max_age_hours=1.0):
                say("won")
                sys.stdin.readline()
        except RunLockError as error:
            say(f"lost {error}")
            sys.stdin.readline()
        say("released")


def main(arguments: list[str]) -> None:
    command = arguments[0]
    if command == "read":
        started = time.monotonic()
        counts = poll(Path(arguments[1]), Path(arguments[2]))
        print(json.dumps({**counts, "seconds": round(time.monotonic() - started, 1)}), flush=True)
    elif command == "commit":
        final, generation, step = arguments[1], int(arguments[2]), arguments[3]
        spark = session(arguments[4:])
        _install(step)
        commit_generation(spark, final, generation)
        print("committed without being killed", flush=True)
    elif command == "lock":
        contend(session([]))
    elif command == "cli":
        from lia_spark.cli.main import main as cli

        _install(arguments[1])
        sys.exit(cli(arguments[2:]))


if __name__ == "__main__":
    main(sys.argv[1:])
