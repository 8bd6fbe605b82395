"""File operations on stage folders: through Hadoop's FileSystem on classic sessions (any scheme Spark can write:
local, HDFS, object stores, DBFS), with Python's own file functions over Spark Connect.

A Spark Connect client has no JVM, so it cannot reach Hadoop's FileSystem. Over Connect a folder must therefore
be one the driver process sees as local files and the Spark server writes at the same path: a local folder when
the server runs on this machine, and on Databricks a Unity Catalog volume (``/Volumes/<catalog>/<schema>/
<volume>/...``) or a workspace folder, which Databricks mounts into the driver's file system.

Two operations need more than Hadoop's API offers on a local disk, so on a local file system (a plain path or a
``file:`` URI, also when Hadoop's local file system serves it: the driver sees the same files) they use the
operating system's own: :func:`exchange_local` swaps two folders in one step (a committed output is replaced
without a moment of absence), and an exclusive create (``O_EXCL``) makes the run lock (Hadoop's local
``create(overwrite=false)`` is a check, then a write).
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import functools
import hashlib
import os
import re
import shutil
import uuid
from typing import Any, Callable, Iterator

from pyspark.sql import SparkSession

from lia_spark.engine.spark.session import is_connect
from lia_spark.run.checks import local_path as local_folder  # the name the engine's modules use


@dataclasses.dataclass(frozen=True)
class Entry:
    """One item of a folder listing: its name, full path, size in bytes and whether it is a folder."""

    name: str
    path: str
    size: int
    is_folder: bool


_AT_FDCWD = -100  # renameat2: paths relative to the working directory (linux/fcntl.h)
_RENAME_EXCHANGE = 2  # renameat2: swap the two paths atomically (linux/fs.h)
_NO_EXCHANGE = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)  # the file system (FUSE, ...) or kernel lacks it


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """glibc's ``renameat2`` (Linux, glibc >= 2.28), None elsewhere."""
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), "renameat2")
    except (OSError, AttributeError):
        return None


def exchange_local(first: str, second: str) -> bool:
    """Swap the local paths ``first`` and ``second`` (both exist) in one atomic step: Linux ``renameat2`` with
    ``RENAME_EXCHANGE``, so whoever opens either path finds one whole folder, never none. False (nothing changed)
    where the system or the file system cannot (another OS, an old kernel or glibc, some FUSE mounts).

    Raises:
        OSError: the swap failed for another reason (a path missing, no permission), with the system's errno.
    """
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _NO_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), first, None, second)


def create_local(path: str, text: str) -> bool:
    """Create the local file ``path`` holding ``text``, atomically only if it does not exist yet (``O_EXCL``); False
    (nothing written) when it exists."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
        stream.write(text)
    return True


def file_errors() -> tuple[type[BaseException], ...]:
    """The errors a failed file operation raises: OSError (Python's files), Py4JJavaError (Hadoop's)."""
    try:
        from py4j.protocol import Py4JJavaError
    except ImportError:  # a Spark Connect client without the JVM bridge
        return (OSError,)
    return (OSError, Py4JJavaError)


def error_reason(error: BaseException) -> str:
    """The file system's own reason for ``error`` (the Java exception for Hadoop's errors)."""
    java = getattr(error, "java_exception", None)
    return str(java.toString()) if java is not None else str(error)


class HadoopFiles:
    """Paths on any Hadoop file system, through the session's JVM (classic sessions only)."""

    def __init__(self, spark: SparkSession):
        if spark.sparkContext._jvm is None:
            raise ValueError("a running SparkContext has its JVM gateway (a classic session)")
        self._jvm = spark.sparkContext._jvm
        self._configuration = spark.sparkContext._jsc.hadoopConfiguration()

    def _resolve(self, path: str) -> tuple[Any, Any]:
        """(Hadoop FileSystem, Path) of ``path``.

        Raises:
            ValueError: no FileSystem of this Spark serves the path's scheme (``s3://`` without a connector).
        """
        hadoop_path = self._jvm.org.apache.hadoop.fs.Path(path)
        try:
            return hadoop_path.getFileSystem(self._configuration), hadoop_path
        except file_errors() as error:
            reason = error_reason(error)
            if "UnsupportedFileSystemException" not in reason:
                raise
            raise ValueError(f"no Hadoop file system of this Spark serves the scheme of {path!r} "
                             f"({reason.splitlines()[0]}); use a scheme whose connector the cluster has (s3a://, "
                             "abfss://, gs://, hdfs://, dbfs:/) or add the connector's jars") from None

    def _local(self, path: str) -> str | None:
        """The absolute local path of ``path`` when Hadoop's local file system serves it (as the JVM resolves it:
        a relative path is relative to the JVM's working directory), else None."""
        filesystem, hadoop_path = self._resolve(path)
        if str(filesystem.getScheme()) != "file":
            return None
        return str(filesystem.makeQualified(hadoop_path).toUri().getPath())

    def exists(self, path: str) -> bool:
        filesystem, hadoop_path = self._resolve(path)
        return bool(filesystem.exists(hadoop_path))

    def is_folder(self, path: str) -> bool:
        filesystem, hadoop_path = self._resolve(path)
        return bool(filesystem.getFileStatus(hadoop_path).isDirectory())

    def delete(self, path: str) -> None:
        """Remove ``path`` recursively if it exists."""
        filesystem, hadoop_path = self._resolve(path)
        if filesystem.exists(hadoop_path):
            filesystem.delete(hadoop_path, True)

    def make_folders(self, path: str) -> None:
        filesystem, hadoop_path = self._resolve(path)
        filesystem.mkdirs(hadoop_path)

    def make_parent_folders(self, path: str) -> None:
        filesystem, hadoop_path = self._resolve(path)
        filesystem.mkdirs(hadoop_path.getParent())

    def rename(self, source: str, target: str) -> bool:
        filesystem, source_path = self._resolve(source)
        return bool(filesystem.rename(source_path, self._resolve(target)[1]))

    def exchange(self, first: str, second: str) -> bool:
        """Swap the existing paths ``first`` and ``second`` atomically (:func:`exchange_local`) when Hadoop's local
        file system serves them; False (nothing changed) on any other file system, which has no such operation."""
        local_first, local_second = self._local(first), self._local(second)
        return local_first is not None and local_second is not None and exchange_local(local_first, local_second)

    def read_text(self, path: str) -> str:
        filesystem, hadoop_path = self._resolve(path)
        stream = filesystem.open(hadoop_path)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_text(self, path: str, text: str, *, overwrite: bool = True) -> bool:
        """Write ``text`` to ``path``; False (nothing written) when it exists and ``overwrite`` is false: an atomic
        check-and-create on a local disk (:func:`create_local`), on HDFS and on object stores with conditional
        writes (the file system's own ``create(path, overwrite=false)``)."""
        from py4j.protocol import Py4JJavaError

        filesystem, hadoop_path = self._resolve(path)
        local = None if overwrite else self._local(path)
        if local is not None:
            created = create_local(local, text)
            if created:  # the checksum file of an earlier file of this name (removed by hand) would fail its reads
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(os.path.dirname(local), f".{os.path.basename(local)}.crc"))
            return created
        try:
            stream = filesystem.create(hadoop_path, overwrite)
        except Py4JJavaError as error:
            if not overwrite and "FileAlreadyExistsException" in error_reason(error):
                return False
            raise
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        return True

    def read_bytes(self, path: str, offset: int, count: int) -> bytes:
        filesystem, hadoop_path = self._resolve(path)
        stream = filesystem.open(hadoop_path)
        try:
            stream.seek(offset)
            return bytes(stream.read() & 0xFF for _ in range(count))
        finally:
            stream.close()

    def read_chunks(self, path: str, size: int = 1 << 20) -> Iterator[bytes]:
        """The bytes of file ``path`` in order, at most ``size`` at a time (``InputStream.readNBytes``: Py4J hands
        the returned Java array over as bytes)."""
        filesystem, hadoop_path = self._resolve(path)
        stream = filesystem.open(hadoop_path)
        try:
            while chunk := bytes(stream.readNBytes(size)):
                yield chunk
        finally:
            stream.close()

    def digest(self, path: str) -> str:
        """SHA-256 (hex) of file ``path``, streamed inside the JVM (the bytes never reach Python)."""
        filesystem, hadoop_path = self._resolve(path)
        stream = filesystem.open(hadoop_path)
        try:
            return str(self._jvm.org.apache.commons.codec.digest.DigestUtils.sha256Hex(stream))
        finally:
            stream.close()

    def list_folder(self, path: str) -> list[Entry]:
        """The entries of folder ``path`` (``[path]`` itself for a file), with fully qualified paths."""
        filesystem, hadoop_path = self._resolve(path)
        return [Entry(str(status.getPath().getName()), str(status.getPath().toString()), int(status.getLen()),
                      bool(status.isDirectory())) for status in filesystem.listStatus(hadoop_path)]

    def list_files(self, path: str) -> list[tuple[str, int, int]]:
        """(name relative to ``path``, size, modification time in ms) of every file below folder ``path``."""
        filesystem, hadoop_path = self._resolve(path)
        root = str(filesystem.getFileStatus(hadoop_path).getPath().toString())
        files, listing = [], filesystem.listFiles(hadoop_path, True)
        while listing.hasNext():
            status = listing.next()
            files.append((str(status.getPath().toString())[len(root):], int(status.getLen()),
                          int(status.getModificationTime())))
        return files

    def copy_from_local(self, local_path: str, path: str) -> None:
        filesystem, target = self._resolve(path)
        filesystem.copyFromLocalFile(False, True, self._jvm.org.apache.hadoop.fs.Path(
            f"file://{os.path.abspath(local_path)}"), target)

    def copy_to_local(self, path: str, local_path: str) -> None:
        """Copy file or folder ``path`` to ``local_path`` (raw local file system: no .crc files beside it)."""
        filesystem, source = self._resolve(path)
        filesystem.copyToLocalFile(False, source, self._jvm.org.apache.hadoop.fs.Path(f"file://{local_path}"), True)

    def local_path(self, path: str) -> str | None:
        """The driver's own path of ``path`` when Hadoop resolves it to the local file system (a plain path without
        another default file system, a ``file:`` URI), else None."""
        filesystem, hadoop_path = self._resolve(path)
        if str(filesystem.getScheme()) != "file":
            return None
        return str(filesystem.makeQualified(hadoop_path).toUri().getPath())

    def create_private(self, path: str, text: str) -> bool:
        """Create file ``path`` holding ``text`` with owner-only permissions (FsPermission 600), unless it exists
        (False, nothing written): written whole under a temporary sibling name, then renamed to ``path``, which
        Hadoop refuses when ``path`` exists (atomic on HDFS). Object stores ignore the permission."""
        filesystem, hadoop_path = self._resolve(path)
        if filesystem.exists(hadoop_path):
            return False
        fs = self._jvm.org.apache.hadoop.fs
        permission = fs.permission.FsPermission("600")
        temporary = fs.Path(f"{path.rstrip('/')}.{uuid.uuid4().hex[:12]}.tmp")
        filesystem.mkdirs(hadoop_path.getParent())
        stream = filesystem.createFile(temporary).permission(permission).overwrite(False).build()
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        moved = False
        try:
            filesystem.setPermission(temporary, permission)
            moved = bool(filesystem.rename(temporary, hadoop_path))
        finally:
            if not moved:
                filesystem.delete(temporary, False)
        return moved

    def permission(self, path: str) -> tuple[str, int]:
        """(the scheme of ``path``'s file system, its permission bits, e.g. 0o600) as Hadoop reports them."""
        filesystem, hadoop_path = self._resolve(path)
        return str(filesystem.getScheme()), int(filesystem.getFileStatus(hadoop_path).getPermission().toShort())

    def concatenate(self, sources: list[str], target: str) -> None:
        """Write the bytes of ``sources`` one after another to ``target`` (the bytes stay in the JVM)."""
        filesystem, target_path = self._resolve(target)
        stream = filesystem.create(target_path, True)
        try:
            for path in sources:
                source = filesystem.open(self._resolve(path)[1])
                try:
                    self._jvm.org.apache.hadoop.io.IOUtils.copyBytes(source, stream, self._configuration, False)
                finally:
                    source.close()
        finally:
            stream.close()


class LocalFiles:
    """Local paths (plain or ``file:`` URIs) through Python's own file functions (Spark Connect sessions)."""

    @staticmethod
    def _local(path: str) -> str:
        return local_folder(path) or path

    def exists(self, path: str) -> bool:
        return os.path.exists(self._local(path))

    def is_folder(self, path: str) -> bool:
        return os.path.isdir(self._local(path))

    def delete(self, path: str) -> None:
        """Remove ``path`` recursively if it exists."""
        local = self._local(path)
        if os.path.isdir(local):
            shutil.rmtree(local)
        elif os.path.lexists(local):
            os.remove(local)

    def make_folders(self, path: str) -> None:
        os.makedirs(self._local(path), exist_ok=True)

    def make_parent_folders(self, path: str) -> None:
        os.makedirs(os.path.dirname(self._local(path).rstrip("/")) or ".", exist_ok=True)

    def rename(self, source: str, target: str) -> bool:
        os.rename(self._local(source), self._local(target))
        return True

    def exchange(self, first: str, second: str) -> bool:
        """Swap the existing paths ``first`` and ``second`` atomically (:func:`exchange_local`); False (nothing
        changed) where this system cannot."""
        return exchange_local(self._local(first), self._local(second))

    def read_text(self, path: str) -> str:
        with open(self._local(path), encoding="utf-8") as stream:
            return stream.read()

    def write_text(self, path: str, text: str, *, overwrite: bool = True) -> bool:
        """Write ``text`` to ``path``; False (nothing written) when it exists and ``overwrite`` is false (an
        atomic check-and-create: :func:`create_local`)."""
        local = self._local(path)
        if not overwrite:
            return create_local(local, text)
        os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
        with open(local, "w", encoding="utf-8") as stream:
            stream.write(text)
        return True

    def read_bytes(self, path: str, offset: int, count: int) -> bytes:
        with open(self._local(path), "rb") as stream:
            stream.seek(offset)
            return stream.read(count)

    def read_chunks(self, path: str, size: int = 1 << 20) -> Iterator[bytes]:
        """The bytes of file ``path`` in order, at most ``size`` at a time."""
        with open(self._local(path), "rb") as stream:
            while chunk := stream.read(size):
                yield chunk

    def digest(self, path: str) -> str:
        """SHA-256 (hex) of file ``path``."""
        digest = hashlib.sha256()
        with open(self._local(path), "rb") as stream:
            for block in iter(lambda: stream.read(2**20), b""):
                digest.update(block)
        return digest.hexdigest()

    def list_folder(self, path: str) -> list[Entry]:
        """The entries of folder ``path`` (``[path]`` itself for a file)."""
        local = self._local(path)
        if not os.path.isdir(local):
            return [Entry(os.path.basename(local), local, os.path.getsize(local), False)]
        return [Entry(item.name, item.path, item.stat().st_size, item.is_dir()) for item in os.scandir(local)]

    def list_files(self, path: str) -> list[tuple[str, int, int]]:
        """(name relative to ``path``, size, modification time in ms) of every file below folder ``path`` (of
        ``path`` itself, name "", when it is a file)."""
        root = self._local(path).rstrip("/")
        if os.path.isfile(root):
            status = os.stat(root)
            return [("", status.st_size, int(status.st_mtime * 1000))]
        files = []
        for folder, _, names in os.walk(root):
            for name in names:
                status = os.stat(os.path.join(folder, name))
                files.append((os.path.join(folder, name)[len(root):], status.st_size, int(status.st_mtime * 1000)))
        return files

    def copy_from_local(self, local_path: str, path: str) -> None:
        self.make_parent_folders(path)
        shutil.copyfile(local_path, self._local(path))

    def copy_to_local(self, path: str, local_path: str) -> None:
        os.makedirs(os.path.dirname(local_path), exist_ok=True)
        source = self._local(path)
        if os.path.isdir(source):
            shutil.copytree(source, local_path)
        else:
            shutil.copyfile(source, local_path)

    def local_path(self, path: str) -> str:
        """``path`` as a path of the driver's files (every path this class reaches is one)."""
        return self._local(path)

    def concatenate(self, sources: list[str], target: str) -> None:
        """Write the bytes of ``sources`` one after another to ``target``."""
        with open(self._local(target), "wb") as stream:
            for path in sources:
                with open(self._local(path), "rb") as source:
                    shutil.copyfileobj(source, stream)


def files_for(spark: SparkSession, path: str) -> HadoopFiles | LocalFiles:
    """The file operations that reach ``path`` from this session: Hadoop's on classic sessions, Python's over
    Spark Connect.

    Raises:
        ValueError: over Spark Connect for a URI (``s3://``, ``abfss://``, ``dbfs:``...), which only the server
            could reach.
    """
    if not is_connect(spark):
        return HadoopFiles(spark)
    if local_folder(path) is None:
        raise ValueError(f"over Spark Connect lia-spark reads and writes its folders as local files, so run.output_dir "
                         f"and the data paths must be local to the driver (on Databricks a volume such as "
                         f"/Volumes/<catalog>/<schema>/<volume>/lia_spark), got {path!r}")
    return LocalFiles()


_PART_INDEX = re.compile(r"^part-(\d+)")


def text_parts(files: HadoopFiles | LocalFiles, folder: str) -> list[tuple[int, str]]:
    """(partition index, path) of every part file Spark wrote into ``folder``, in partition order: concatenated in
    this order, the parts of an ordered DataFrame give its rows in order."""
    found = [(int(match.group(1)), entry.name, entry.path) for entry in files.list_folder(folder)
             if (match := _PART_INDEX.match(entry.name))]
    return [(index, path) for index, _, path in sorted(found)]
