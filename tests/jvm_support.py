"""The options of every JVM the tests start: the C1 compiler only, the serial collector and a class-data sharing
archive of the classes a Spark JVM loads. Not a production setting: the product's JVMs live long at scale, where the
C2 compiler and the parallel collector pay.

The end-to-end tier starts dozens of short JVMs on small data (the CLI's sessions, spark-submit drivers,
local-cluster executors, Connect servers) and is CPU-bound on their start-up. C1 alone and the serial collector cut
a 5k-rows pipeline from 148 to 95 CPU-seconds; the archive (the JVM maps the parsed and verified classes instead of
loading ~10k classes from Spark's jars) cut a local session's start and first job from 13.4 to 8.0 s wall and 8.7 to
4.6 JVM CPU-seconds; on a loaded machine, A/B interleaved, tests/test_run_outputs.py (CLI subprocesses) went from
75-77 s to 65-71 s, test_reuse_spark.py + test_notebooks.py (mostly the shared in-process session) from 263 to 254 s.

The options reach every JVM through ``SPARK_SUBMIT_OPTS``, which spark-class gives the spark-submit JVM (the driver
in client mode, the CLI's session, a Connect server); its ``-Dspark.executor.extraJavaOptions`` enters the driver's
SparkConf and so the executors' command lines. The archive is built once per Python environment and Spark
installation (``python tests/jvm_support.py`` runs a small workload in a JVM started with
``-XX:ArchiveClassesAtExit``, which writes it as it exits), the first time a selection of tests holds one that
starts a JVM (parallel test workers take a lock: one builds it, the others start their JVMs without it meanwhile,
as waiting would leave their cores idle for the ~30 s of the build). Spark's conf directory leads the JVM's class
path and the JVM neither writes nor maps an archive whose class path holds a non-empty directory, so with a
non-empty ``SPARK_CONF_DIR`` (or ``$SPARK_HOME/conf``) the tests run without it; a JVM that cannot map it starts
without it, silently (``-Xlog:cds*=off``). ``LIA_TESTS_CLASS_ARCHIVE=off`` runs them
without it too: the oldest-stack tier (one session, a few commands) saves less than the build's ~30 s.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

COMPILER_AND_COLLECTOR = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
ARCHIVE_FOLDER = Path(sys.prefix) / "lia-spark-test-jvm"  # inside the environment whose pyspark it serves
ARCHIVE_BUILD_SECONDS = 600
ARCHIVE_SWITCH = "LIA_TESTS_CLASS_ARCHIVE"  # "off": no archive


def submit_options(archive: Path | None) -> str:
    """``SPARK_SUBMIT_OPTS`` for the driver and, through ``spark.executor.extraJavaOptions``, the executors."""
    options = COMPILER_AND_COLLECTOR if archive is None else (
        f"{COMPILER_AND_COLLECTOR} -XX:SharedArchiveFile={archive} -Xlog:cds*=off")
    return f"{options} -Dspark.executor.extraJavaOptions='{options}'"


def _spark_home() -> Path:
    """The Spark installation spark-submit runs: ``SPARK_HOME``, else pyspark's own folder (a pip install)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return Path(pyspark.__file__).parent


def _java() -> Path | None:
    """The java binary spark-class starts: ``$JAVA_HOME/bin/java``, else the first on PATH."""
    found = (str(Path(os.environ["JAVA_HOME"]) / "bin" / "java") if os.environ.get("JAVA_HOME")
             else shutil.which("java"))
    return Path(found).resolve() if found and Path(found).exists() else None


def _archive_key(java: Path, spark_home: Path) -> str:
    """What an archive depends on: the JVM binary, the jars on the class path, the options and this workload."""
    def identity(path: Path) -> list[str]:
        status = path.stat()
        return [str(path), str(status.st_size), str(status.st_mtime_ns)]

    parts = [*identity(java), str(spark_home.resolve()), COMPILER_AND_COLLECTOR,
             hashlib.sha256(Path(__file__).read_bytes()).hexdigest()]
    for jar in sorted((spark_home / "jars").glob("*.jar")):
        parts += identity(jar)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def class_archive() -> tuple[Path | None, str]:
    """The archive for this environment's Spark, built if missing, and a line saying why there is none (or "")."""
    if os.environ.get(ARCHIVE_SWITCH, "on") == "off":
        return None, f"{ARCHIVE_SWITCH}=off"
    java, spark_home = _java(), _spark_home()
    if java is None:
        return None, "no java found"
    conf = Path(os.environ.get("SPARK_CONF_DIR") or spark_home / "conf")
    if conf.is_dir() and any(conf.iterdir()):
        return None, f"the JVM's class path holds the non-empty Spark conf directory {conf}"
    archive = ARCHIVE_FOLDER / f"spark-classes-{_archive_key(java, spark_home)}.jsa"
    if any(character.isspace() or character in "'\"" for character in str(archive)):
        return None, f"its path {archive} holds a space or a quote"
    if archive.is_file():  # complete: a build renames it into place
        return archive, ""
    try:
        ARCHIVE_FOLDER.mkdir(exist_ok=True)
        lock = open(ARCHIVE_FOLDER / "build.lock", "w", encoding="utf-8")
    except OSError as error:
        return None, f"its folder cannot be written: {error}"
    with lock:  # the lock is released when the file closes
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # waiting (~30 s) would leave this worker's core idle: it goes on without it
            return None, "another test worker is building it"
        return (archive, "") if archive.is_file() else _build_archive(archive)


def _build_archive(archive: Path) -> tuple[Path | None, str]:
    """Write ``archive`` by running this module's workload in a JVM that dumps the classes it loaded as it exits."""
    building = archive.with_suffix(f".{os.getpid()}.building")
    log = archive.with_suffix(".log")
    environment = {**os.environ, "SPARK_SUBMIT_OPTS": f"{COMPILER_AND_COLLECTOR} -XX:ArchiveClassesAtExit={building}",
                   "PYSPARK_PYTHON": sys.executable}
    try:
        with open(log, "w", encoding="utf-8") as output:
            subprocess.run([sys.executable, __file__], env=environment, stdout=output, stderr=subprocess.STDOUT,
                           timeout=ARCHIVE_BUILD_SECONDS, check=True)
        if not building.is_file():
            return None, f"the JVM wrote no archive ({log})"
        for stale in ARCHIVE_FOLDER.glob("spark-classes-*.jsa"):  # ~190 MB each: one per environment is enough
            stale.unlink()
            stale.with_suffix(".log").unlink(missing_ok=True)
        os.replace(building, archive)
    except (subprocess.SubprocessError, OSError) as error:
        building.unlink(missing_ok=True)
        return None, f"building it failed: {error} ({log})"
    return archive, ""


def _load_classes() -> None:
    """The archive's workload: what the tests' JVMs do (Parquet and text I/O, shuffles, windows, joins, Arrow and
    pandas through the Python workers, collects to pandas and Arrow) on a few rows."""
    import tempfile

    import pandas as pd
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    with tempfile.TemporaryDirectory() as folder:
        frame = spark.range(20_000).withColumn("group", F.col("id") % 7).withColumn("hash", F.xxhash64("id"))
        frame.write.parquet(f"{folder}/rows")
        rows = spark.read.parquet(f"{folder}/rows")
        rows.groupBy("group").agg(F.count("*"), F.avg("hash")).collect()
        ranked = rows.withColumn("rank", F.row_number().over(Window.partitionBy("group").orderBy("hash")))
        ranked.where("rank < 3").toPandas()
        rows.mapInArrow(lambda batches: batches, rows.schema).count()
        rows.mapInPandas(lambda frames: frames, rows.schema).write.parquet(f"{folder}/copy")
        copy = spark.read.parquet(f"{folder}/copy")
        copy.join(rows, "id").select(F.sum(rows["group"])).collect()
        rows.selectExpr("cast(id as string) as value").write.text(f"{folder}/text")
        spark.read.text(f"{folder}/text").count()
        spark.createDataFrame(pd.DataFrame({"x": [1.0, 2.0]})).toArrow()
    jvm = spark.sparkContext._gateway.proc  # the spark-submit JVM: it writes the archive as it exits
    spark.stop()
    jvm.stdin.close()  # the gateway JVM exits when its standard input closes
    sys.exit(jvm.wait(timeout=ARCHIVE_BUILD_SECONDS))


if __name__ == "__main__":
    _load_classes()
