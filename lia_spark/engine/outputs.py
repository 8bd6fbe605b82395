"""Atomic stage outputs: write to a temporary sibling path, then commit by rename plus a marker file.

A folder is *complete* only when it holds ``_LIA_COMPLETE`` (JSON with the stage's counts and
parameters). Readers and resumable pipelines check the marker, so a crashed job never leaves a
half-written output that looks finished. Works on any Hadoop file system Spark can write to.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import uuid
from typing import Any, Iterator

from pyspark.sql import SparkSession

from lia_spark.config import is_remote_path

logger = logging.getLogger(__name__)

MARKER = "_LIA_COMPLETE"


def hadoop_filesystem(spark: SparkSession, path: str):
    """(Hadoop FileSystem, Hadoop Path) for ``path`` on whatever file system its scheme names."""
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hadoop_path


def path_exists(spark: SparkSession, path: str) -> bool:
    """True when ``path`` exists on its file system."""
    filesystem, hadoop_path = hadoop_filesystem(spark, path)
    return bool(filesystem.exists(hadoop_path))


def delete_path(spark: SparkSession, path: str) -> None:
    """Remove ``path`` recursively if it exists."""
    filesystem, hadoop_path = hadoop_filesystem(spark, path)
    if filesystem.exists(hadoop_path):
        filesystem.delete(hadoop_path, True)


def read_marker(spark: SparkSession, path: str) -> dict[str, Any] | None:
    """The committed metadata of a complete output folder, or None when it is absent or incomplete."""
    marker = f"{path.rstrip('/')}/{MARKER}"
    if not path_exists(spark, marker):
        return None
    text = read_text(spark, marker)
    return json.loads(text) if text.strip() else {}


def reusable_marker(spark: SparkSession, path: str, *, force: bool, stage: str) -> dict[str, Any] | None:
    """The marker of ``path`` when the stage may re-use that complete output (logged), else None: absent,
    incomplete, or ``force`` (run.force) asks for a recomputation."""
    marker = None if force else read_marker(spark, path)
    if marker is not None:
        logger.info("%s: %s is complete, skipped", stage, path)
    return marker


def is_complete(spark: SparkSession, path: str) -> bool:
    """True when ``path`` was committed by :func:`committed_output`."""
    return read_marker(spark, path) is not None


@contextlib.contextmanager
def committed_output(spark: SparkSession, path: str, metadata: dict[str, Any] | None = None) -> Iterator[str]:
    """Yield a fresh temporary path; on success replace ``path`` by it and write the completion marker.

    ``metadata`` may be filled in by the caller inside the ``with`` block; it is written to the marker.
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
    filesystem, staging_path = hadoop_filesystem(spark, staging)
    if not filesystem.exists(staging_path):
        filesystem.mkdirs(staging_path)
    write_text(spark, f"{staging}/{MARKER}", json.dumps(metadata, sort_keys=True, default=str))
    delete_path(spark, final)
    _, final_path = hadoop_filesystem(spark, final)
    filesystem.mkdirs(final_path.getParent())
    if not filesystem.rename(staging_path, final_path):
        raise OSError(f"could not commit {staging} to {final}")


def read_text(spark: SparkSession, path: str) -> str:
    """Whole small file as text, through the Hadoop file system (textFile skips names starting with '_')."""
    filesystem, hadoop_path = hadoop_filesystem(spark, path)
    jvm = spark.sparkContext._jvm
    stream = filesystem.open(hadoop_path)
    try:
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Create (or overwrite) a small text file on any Hadoop file system."""
    filesystem, hadoop_path = hadoop_filesystem(spark, path)
    stream = filesystem.create(hadoop_path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def copy_from_local(spark: SparkSession, local_path: str, path: str) -> None:
    """Copy a local file to ``path`` on any Hadoop file system (overwriting)."""
    jvm = spark.sparkContext._jvm
    filesystem, target = hadoop_filesystem(spark, path)
    filesystem.copyFromLocalFile(False, True, jvm.org.apache.hadoop.fs.Path(f"file://{os.path.abspath(local_path)}"),
                                 target)


def local_output_path(path: str, *, writes: str) -> str:
    """Plain local path of an output folder (``file:`` URIs unwrapped) for stages that write files locally.

    Raises:
        ValueError: naming run.output_dir when ``path`` is on a remote file system; ``writes`` says what the
            stage writes locally (e.g. "posteriors writes its CSV and plots").
    """
    if path.startswith("file:"):
        return "/" + path[len("file:"):].lstrip("/")
    if is_remote_path(path):
        raise ValueError(f"run.output_dir: {writes} locally, got remote path {path!r}")
    return path


def marker_fields(result_type: type, payload: dict[str, Any]) -> dict[str, Any]:
    """The entries of a marker payload that are fields of the dataclass ``result_type`` (extra keys ignored)."""
    names = {field.name for field in dataclasses.fields(result_type)}
    return {key: value for key, value in payload.items() if key in names}

