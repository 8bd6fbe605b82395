"""The fault matrix: what a careless or hostile user can do to a run, and how lia-spark must end.

    .venv/bin/python benchmarks/fault_matrix.py [--root /tmp/lia-faults] [--keep] [--only NAME ...]

Every case runs the real command line (``python -m lia_spark.cli.main``, its own Spark session) on a small twin in
a fresh folder below ``--root`` and prints one row: case | expected | observed | ok | seconds (the case's wall time:
how fast a refusal comes is reported here, never asserted by the tests). The exit code is the number of
cases whose observation differs from the expectation, so a re-run after any change is one command. Cases that need
what this machine cannot give (a tmpfs mount for a full disk) say "skipped" and why. Takes about 6 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from parquet_pages import flip_in_column  # noqa: E402 - the tests' page locator, beside this file's repository

SMALL = {"run": {"name": "faults", "stages": ["data", "train"]}, "spark": {"master": "local[2]"},
         "synthetic": {"rows_per_day": 2000, "days": 2},
         "models": {"n_estimators": 5, "early_stopping_rounds": 0, "hash_buckets": 1024},
         "tracking": {"enabled": False}}
SMALL_GRID = {"epsilons": [2.0], "bag_sizes": [8]}  # the posteriors stage's grid in the cases that run it


@dataclasses.dataclass
class Outcome:
    """What a command did: exit code, wall seconds, its last stderr line (the failure line), the whole stderr."""

    code: int
    seconds: float
    line: str
    stderr: str


@dataclasses.dataclass(frozen=True)
class Case:
    """One fault: its name, what must happen, and the function that provokes it in a fresh folder and returns
    (observed, ok)."""

    name: str
    expected: str
    run: Callable[[Path], tuple[str, bool]]


def conf(folder: Path, **changes: dict) -> Path:
    """A small config (2 days x 2,000 rows) writing to ``folder/out``."""
    values = {section: dict(items) for section, items in SMALL.items()}
    values["run"]["output_dir"] = str(folder / "out")
    for section, update in changes.items():
        values.setdefault(section, {}).update(update)
    path = folder / "conf.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def lia(config: Path, *arguments: str, command: str = "run", signal_after: tuple[str, int] | None = None,
        through: tuple[str, ...] = (), path_first: Path | None = None) -> Outcome:
    """Run ``lia-spark <command> --conf config arguments``; with ``signal_after`` = (log text, signal), send the
    signal 2 s after the text appears on stderr; ``through``: the script (and its arguments) that runs the command
    line instead of ``-m lia_spark.cli.main``; with ``path_first``, that folder first on PYTHONPATH."""
    started = time.monotonic()
    process, log = launch(config, *arguments, command=command, through=through, path_first=path_first)
    if signal_after is not None:
        text, signum = signal_after
        while text not in log.read_text(encoding="utf-8") and process.poll() is None:
            time.sleep(0.5)
        time.sleep(2)
        process.send_signal(signum)
    return finished(process, log, started)


def launch(config: Path, *arguments: str, command: str = "run", through: tuple[str, ...] = (),
           path_first: Path | None = None) -> tuple[subprocess.Popen, Path]:
    """Start ``lia-spark <command> --conf config arguments`` (see :func:`lia`): the process and its stderr file."""
    log = config.parent.with_name(f"{config.parent.name}-stderr-{time.monotonic_ns()}.txt")  # beside the case's folder
    environment = None if path_first is None else {
        **os.environ, "PYTHONPATH": os.pathsep.join([str(path_first), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with log.open("w") as stderr:
        process = subprocess.Popen([sys.executable, *(through or ("-m", "lia_spark.cli.main")), command, "--conf",
                                    str(config), *arguments], cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr,
                                   env=environment)
    return process, log


def finished(process: subprocess.Popen, log: Path, started: float) -> Outcome:
    """The outcome of a command :func:`launch` started at ``started`` (monotonic seconds), once it ends."""
    code = process.wait(timeout=1800)
    output = log.read_text(encoding="utf-8")
    lines = output.strip().splitlines()
    return Outcome(code, time.monotonic() - started, lines[-1] if lines else "", output)


def listing(*roots: Path) -> dict[str, bytes]:
    """Every file below ``roots`` with its bytes."""
    return {str(path): path.read_bytes() for root in roots for path in sorted(root.rglob("*")) if path.is_file()}


def documents(*folders: Path) -> None:
    """Folders holding a user's file each."""
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "precious.txt").write_text("somebody's work\n", encoding="utf-8")


def observed(outcome: Outcome, extra: str = "") -> str:
    """``exit N in S s: <line>`` (the line cut at 160 characters)."""
    line = outcome.line if len(outcome.line) <= 160 else outcome.line[:157] + "..."
    return f"exit {outcome.code} in {outcome.seconds:.0f} s{extra}: {line}"


def trained(folder: Path) -> Path:
    """A finished data + train run in ``folder/out``; its config."""
    config = conf(folder)
    outcome = lia(config)
    if outcome.code != 0:
        raise RuntimeError(f"the setup run failed: {outcome.line}")
    return config


def foreign_output_dir(folder: Path) -> tuple[str, bool]:
    out = folder / "out"
    documents(out / "data", out / "report", out / "data._tmp-0123456789ab", out / "data.gunzip")
    config = conf(folder)
    before = listing(folder)
    outcome = lia(config, "run.force=true")
    kept = listing(folder) == before
    return (observed(outcome, f", every file kept: {kept}"),
            outcome.code == 2 and kept and outcome.line.startswith("lia-spark: run.output_dir:"))


def foreign_data_path(folder: Path) -> tuple[str, bool]:
    documents(folder / "docs", folder / "docs._tmp-0123456789ab", folder / "docs.gunzip")
    config = conf(folder, data={"parquet_path": str(folder / "docs")})
    before = listing(folder)
    outcome = lia(config)
    kept = listing(folder) == before
    return (observed(outcome, f", every file kept: {kept}"),
            outcome.code == 2 and kept and outcome.line.startswith("lia-spark: data.parquet_path:"))


def replace_foreign(folder: Path) -> tuple[str, bool]:
    out = folder / "out"
    documents(out / "data", out / "notes")
    outcome = lia(conf(folder), "run.replace_foreign=true")
    replaced, kept = not (out / "data" / "precious.txt").exists(), (out / "notes" / "precious.txt").exists()
    return (f"exit {outcome.code}; data/ replaced: {replaced}; notes/ kept: {kept}",
            outcome.code == 0 and replaced and kept)


def flipped_bytes(folder: Path, *, keep_crc: bool) -> tuple[str, bool]:
    config = trained(folder)
    damaged = next((folder / "out" / "data" / "day=1").glob("*.parquet"))
    with damaged.open("r+b") as stream:
        stream.seek(damaged.stat().st_size // 2)
        data = stream.read(64)
        stream.seek(damaged.stat().st_size // 2)
        stream.write(bytes(byte ^ 0xFF for byte in data))
    if not keep_crc:
        for crc in (folder / "out" / "data").rglob(".*.crc"):
            crc.unlink()
    marker = (folder / "out" / "models" / "_LIA_COMPLETE").read_bytes()
    outcome = lia(config, "models.n_estimators=6", command="train")
    unused = (folder / "out" / "models" / "_LIA_COMPLETE").read_bytes() == marker
    return (observed(outcome, f", models unchanged: {unused}"),
            outcome.code == 1 and damaged.name in outcome.line and "run.force=true" in outcome.line and unused)


def changed_small_file(folder: Path) -> tuple[str, bool]:
    config = trained(folder)
    metrics = folder / "out" / "models" / "metrics.json"
    metrics.write_text(metrics.read_text(encoding="utf-8").replace("0", "1", 1), encoding="utf-8")
    outcome = lia(config)
    warning = next((line.split(": ", 2)[-1] for line in outcome.stderr.splitlines()
                    if "no longer holds the files" in line), "no warning")
    return (f"exit {outcome.code}: {warning[:150]}",
            outcome.code == 0 and "metrics.json: content changed" in warning and "train=ran" in outcome.stderr)


def impossible(folder: Path, *overrides: str) -> tuple[str, bool]:
    field = overrides[-1].split("=")[0]
    outcome = lia(conf(folder, synthetic={"rows_per_day": 20000, "days": 2}), *overrides)
    return observed(outcome), outcome.code == 2 and outcome.line.startswith(f"lia-spark: {field}:") and \
        outcome.seconds < 60


def interrupted(folder: Path, signum: int, code: int) -> tuple[str, bool]:
    config = conf(folder, run={"stages": ["data", "train", "posteriors"]}, synthetic={"rows_per_day": 60000})
    outcome = lia(config, signal_after=("pipeline: posteriors (posteriors) started", signum))
    left = sorted(path.name for path in (folder / "out").iterdir() if not path.name.startswith("."))
    resumed = lia(config)
    clean = left == ["data", "models", "truth"]
    return (f"exit {outcome.code}: {outcome.line}; left {left}; same command: exit {resumed.code}",
            outcome.code == code and clean and resumed.code == 0 and "posteriors=ran" in resumed.stderr)


def full_disk(folder: Path) -> tuple[str, bool]:
    disk = folder / "tiny"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        return f"skipped: cannot mount a 300 KB tmpfs here ({mounted.stderr.strip()[:80]})", True
    try:
        outcome = lia(conf(folder), f"run.output_dir={disk}/out")
    finally:
        subprocess.run(["umount", str(disk)], check=False)
    return observed(outcome), outcome.code == 1 and "no space left on the device" in outcome.line and \
        str(disk) in outcome.line


def locked(folder: Path) -> tuple[str, bool]:
    config = conf(folder)
    (folder / "out").mkdir()
    holder = {"host": socket.gethostname(), "pid": os.getpid(), "command": "lia-spark run", "started": time.time()}
    (folder / "out" / "_LIA_LOCK").write_text(json.dumps(holder), encoding="utf-8")
    outcome = lia(config)
    return observed(outcome), outcome.code == 1 and "another run holds" in outcome.line


def stale_lock(folder: Path) -> tuple[str, bool]:
    config = conf(folder)
    (folder / "out").mkdir()
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = {"host": socket.gethostname(), "pid": int(finished.stdout), "command": "lia-spark run",
              "started": time.time()}
    (folder / "out" / "_LIA_LOCK").write_text(json.dumps(holder), encoding="utf-8")
    outcome = lia(config)
    return observed(outcome), outcome.code == 1 and "stale lock" in outcome.line and \
        (folder / "out" / "_LIA_LOCK").exists()


def wrong_value(folder: Path) -> tuple[str, bool]:
    outcome = lia(conf(folder), "models.target_day=5")
    return observed(outcome), outcome.code == 2 and outcome.line.startswith("lia-spark: models.target_day:")


def leftovers(folder: Path) -> tuple[str, bool]:
    config = trained(folder)
    out = folder / "out"
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    claimed, unclaimed = out / "models._tmp-0123456789ab", out / "notes._tmp-0123456789ab"
    documents(claimed, unclaimed)
    (out / "models._tmp-0123456789ab.lia-claim").write_text(json.dumps(
        {"path": str(claimed), "host": socket.gethostname(), "pid": int(finished.stdout), "started": 0}))
    outcome = lia(config)
    swept, kept = not claimed.exists(), (unclaimed / "precious.txt").exists()
    return (f"exit {outcome.code}; claimed staging swept: {swept}; unclaimed look-alike kept: {kept}",
            outcome.code == 0 and swept and kept)



def flipped_page(folder: Path, table: str, column: str, *, crc: str, stage: str, after: str) -> tuple[str, bool]:
    """A run up to stage ``after``; then one bit flipped inside ``column``'s page of a committed ``table`` file (its
    size kept, Hadoop's .crc recomputed or removed: only the page's own CRC can tell) and ``run.stages=[stage]``."""
    stages = ["data", "train", "posteriors"]
    config = conf(folder, run={"stages": stages[:stages.index(after) + 1]}, mechanisms=SMALL_GRID,
                  utility={"epsilons": [4.0], "bag_sizes": [8]})
    if lia(config).code != 0:
        raise RuntimeError("the setup run failed")
    damaged = sorted((folder / "out" / table).rglob("*.parquet"))[-1]
    flip_in_column(damaged, column, crc=crc)
    output = folder / "out" / stage / "_LIA_COMPLETE"
    before = output.read_bytes() if output.exists() else b""
    outcome = lia(config, f"run.stages=[{stage}]")
    unused = (output.read_bytes() if output.exists() else b"") == before
    return (observed(outcome, f", {stage} output unchanged: {unused}"),
            outcome.code == 1 and outcome.line.startswith(f"lia-spark: {damaged}: damaged") and
            f"in the table {damaged.parent.parent if damaged.parent.name.startswith('day=') else damaged.parent};"
            in outcome.line and "run.force=true" in outcome.line and unused)


def gzip_day(folder: Path, change: Callable[[bytes], bytes], *, warns: bool = False) -> tuple[str, bool]:
    """The twin's day 1 as a Criteo gzip file changed by ``change`` (its bytes -> new bytes), ingested; the rows of
    day 1 must be the lines ``gzip -dc`` prints, with one trailing-garbage WARNING naming the file if ``warns``,
    else none."""
    twin = conf(folder, run={"stages": ["data"]}, synthetic={"write_tsv": True, "gzip": True})
    if lia(twin).code != 0:
        raise RuntimeError("the setup run failed")
    days = folder / "criteo"
    shutil.copytree(folder / "out" / "criteo", days)
    day = days / "day_1.gz"
    day.write_bytes(change(day.read_bytes()))
    expected = subprocess.run(["gzip", "-dc", str(day)], capture_output=True, check=False).stdout.count(b"\n")
    outcome = lia(conf(folder, run={"stages": ["data"], "output_dir": str(folder / "ingested")},
                       data={"source": "criteo", "criteo_paths": [str(days)]}))
    result = json.loads((folder / "ingested" / "results" / "pipeline.json").read_text(encoding="utf-8"))
    rows = result["steps"][0]["result"]["rows_per_day"].get("1") if outcome.code == 0 else None
    warnings = [line.split(": ", 2)[-1] for line in outcome.stderr.splitlines() if " WARNING " in line]
    garbage = next((line for line in warnings if "trailing garbage ignored" in line), "")
    seen = f"exit {outcome.code}; day 1: {rows} rows, gzip -dc: {expected} lines" + (
        f"; {garbage[:110]}" if garbage else f"; {len(warnings)} warnings")
    warned = [line for line in warnings if "trailing garbage ignored" in line]
    named = all(str(day) in line and "byte(s) after the last" in line for line in warned)
    return seen, outcome.code == 0 and rows == expected and len(warned) == int(warns) and named


def two_members(data: bytes) -> bytes:
    """The text of a gzip file as two members (its first third, then the rest)."""
    text = gzip.decompress(data)
    return gzip.compress(text[: len(text) // 3]) + gzip.compress(text[len(text) // 3:])
# issue 71: bad input
ALIAS_BOMB = "".join(f"    {name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n"
                     for previous, name in zip("abcdefg", "bcdefgh"))


def alias_bomb(folder: Path) -> tuple[str, bool]:
    config = conf(folder)
    values = yaml.safe_load(config.read_text(encoding="utf-8"))
    del values["spark"]
    text = yaml.safe_dump(values) + ("spark:\n  master: local[2]\n  extra:\n"
                                     f"    a: &a [{', '.join(['lol'] * 9)}]\n" + ALIAS_BOMB)
    config.write_text(text, encoding="utf-8")
    outcome = lia(config)
    return observed(outcome), outcome.code == 2 and outcome.line.startswith("lia-spark: spark.extra: ") and \
        str(config) in outcome.line and "100,000" in outcome.line


def not_utf8(folder: Path) -> tuple[str, bool]:
    config = conf(folder)
    config.write_bytes(("# réglages du test\n" + config.read_text(encoding="utf-8")).encode("cp1252"))
    outcome = lia(config)
    return observed(outcome), outcome.code == 2 and outcome.line.startswith(f"lia-spark: --conf: {config} is not "
                                                                            "UTF-8") and \
        "byte offset" in outcome.line and "Windows-1252" in outcome.line and "iconv -f WINDOWS-1252" in outcome.line


def out_of_range(folder: Path, override: str) -> tuple[str, bool]:
    field, value = override.split("=", 1)
    outcome = lia(conf(folder), override)
    return observed(outcome), outcome.code == 2 and outcome.line.startswith(f"lia-spark: {field}: ") and \
        value[:20] in outcome.line


def criteo_days(folder: Path, labels: dict[int, list[int]], malformed: int = 0) -> Path:
    """Criteo day files ``day_<d>`` with these labels (I1 tells the label a little), the first ``malformed`` lines of
    day 0 cut short."""
    generator = random.Random(7)
    files = folder / "criteo"
    files.mkdir()
    for day, day_labels in labels.items():
        lines = ["\t".join([str(label), *(str(generator.randrange(50) + 20 * label) for _ in range(13)),
                            *(f"{generator.randrange(40):08x}" for _ in range(26))]) for label in day_labels]
        if day == 0:
            lines[:malformed] = ["garbage\tline"] * malformed
        (files / f"day_{day}").write_text("".join(f"{line}\n" for line in lines), encoding="ascii")
    return files


def mixed_labels(rows: int = 2000, seed: int = 0) -> list[int]:
    """Labels with about 30% of 1s."""
    generator = random.Random(seed)
    return [int(generator.random() < 0.3) for _ in range(rows)]


def criteo_run(folder: Path, files: Path, *overrides: str) -> Outcome:
    return lia(conf(folder), "data.source=criteo", f"data.criteo_paths=[{files}]", *overrides)


def malformed_share(folder: Path) -> tuple[str, bool]:
    outcome = criteo_run(folder, criteo_days(folder, {0: mixed_labels(), 1: mixed_labels(seed=1)}, malformed=100))
    return observed(outcome), outcome.code == 2 and outcome.line.startswith(
        "lia-spark: data.max_malformed_share: 2.5000% of the input lines are malformed") and \
        "got 0.001" in outcome.line and str(folder / "out" / "quarantine") in outcome.line


def one_class_day(folder: Path, day: int, label: int, field: str) -> tuple[str, bool]:
    labels = {0: mixed_labels(), 1: mixed_labels(seed=1)}
    labels[day] = [label] * 2000
    outcome = criteo_run(folder, criteo_days(folder, labels))
    return observed(outcome), outcome.code == 2 and outcome.line.startswith(
        f"lia-spark: {field}: day {day} holds one class only") and not (folder / "out" / "models").exists()


def one_class_test_split(folder: Path) -> tuple[str, bool]:
    from lia_spark.kernels import criteo, features
    from lia_spark.run.config import Config

    ids = criteo.make_row_id([1] * 2000, list(range(2000)))
    test = features.split_codes(ids, seed=Config().run.seed, shares=Config().models.split) == 2
    labels = [0 if is_test else label for is_test, label in zip(test.tolist(), mixed_labels(seed=1))]
    outcome = criteo_run(folder, criteo_days(folder, {0: mixed_labels(), 1: labels}))
    warnings = [line.split(": ", 2)[-1] for line in outcome.stderr.splitlines()
                if " WARNING " in line and "holds one class only" in line]
    metrics = json.loads((folder / "out" / "models" / "metrics.json").read_text(encoding="utf-8")) \
        if outcome.code == 0 else {"test_metrics": {}}
    auc = metrics["test_metrics"].get("auc@target", "missing")
    return (f"exit {outcome.code}; {len(warnings)} warning(s): {warnings[0][:110] if warnings else ''}...; "
            f"auc@target {auc}", outcome.code == 0 and len(warnings) == 1 and "test split of day 1" in warnings[0]
            and "undefined" in warnings[0] and auc is None)


HOLD_EXCLUSIVE = """
import sqlite3, sys
database = sqlite3.connect(sys.argv[1], isolation_level=None)
database.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
database.execute("ROLLBACK")
"""


def locked_store(folder: Path) -> tuple[str, bool]:
    database = folder / "mlflow.db"
    subprocess.run([sys.executable, "-c", "import mlflow, sys; mlflow.MlflowClient(sys.argv[1]).search_experiments()",
                    f"sqlite:///{database}"], check=True, capture_output=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_EXCLUSIVE, str(database)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        outcome = lia(conf(folder), "tracking.enabled=true", f"tracking.tracking_uri=sqlite:///{database}")
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    return observed(outcome), outcome.code == 1 and outcome.line.startswith(
        f"lia-spark: tracking.tracking_uri: {database}: another process holds a write lock") and \
        "tracking.timeout_seconds" in outcome.line and "mlflow server" in outcome.line
# issue 71: commit, overlap, lock
COMMIT_SUPPORT = REPO / "tests" / "commit_support.py"  # a reader of committed folders, commits killed at a step
sys.path.insert(0, str(COMMIT_SUPPORT.parent))
from commit_support import MARKER, folder_state  # noqa: E402 - tests/ holds the reader the tests use too


def reader_during_reruns(folder: Path) -> tuple[str, bool]:
    config = trained(folder)
    models, stop = folder / "out" / "models", folder / "stop"
    reader = subprocess.Popen([sys.executable, str(COMMIT_SUPPORT), "read", str(models), str(stop)],
                              stdout=subprocess.PIPE, text=True)
    try:
        reader.stdout.readline()  # "polling"
        outcomes = [lia(config, "run.force=true", f"models.n_estimators={trees}", command="train")
                    for trees in (6, 7, 8)]
        stop.touch()
        counts = json.loads(reader.stdout.readline())
    finally:
        stop.touch()
        reader.wait(timeout=60)
    return (f"exits {[outcome.code for outcome in outcomes]}; {counts['polls']} polls of models/ saw "
            f"{counts['versions']} commits, {counts['absent'] + counts['marker_absent']} absent, {counts['mixed']} "
            f"mixed", all(outcome.code == 0 for outcome in outcomes) and counts["versions"] == 4
            and counts["absent"] == counts["marker_absent"] == counts["mixed"] == 0)


def _viewfs(folder: Path) -> tuple[str, dict]:
    """``viewfs://<table>/lia``, a Hadoop file system other than the local one mounting ``folder/mounted`` (no
    atomic swap: a commit renames through a moved-aside folder), and the spark section that mounts it."""
    table = f"faults{os.getpid()}{time.monotonic_ns() % 10**6}"
    (folder / "mounted").mkdir()
    return (f"viewfs://{table}/lia", {"extra": {f"spark.hadoop.fs.viewfs.mounttable.{table}.link./lia":
                                                (folder / "mounted").as_uri()}})


def killed_commits(folder: Path, steps: dict[str, str], *, remote: bool) -> tuple[str, bool]:
    """``lia-spark train run.force=true`` SIGKILLed at each step of its commit of models/ (tests/commit_support.py
    wraps the file system function of the step), then, the killed run's lock removed as the stale lock's message
    says (case stale_lock), the same command without the kill; ``steps``: step -> which models/ stands at its path
    when the kill comes (old, new or none)."""
    out = folder / "mounted" / "out" if remote else folder / "out"
    uri, spark = _viewfs(folder) if remote else ("", {})
    config = conf(folder, run={"output_dir": f"{uri}/out" if remote else str(out)}, spark=spark)
    if lia(config).code != 0:
        raise RuntimeError("the setup run failed")
    seen, ok = [], True
    for trees, (step, expected) in enumerate(steps.items(), start=6):
        marker = out / "models" / MARKER
        before = marker.read_bytes()
        killed = lia(config, "run.force=true", f"models.n_estimators={trees}", command="train",
                     through=(str(COMMIT_SUPPORT), "cli", step))
        standing = "none" if not marker.exists() else "new" if marker.read_bytes() != before else "old"
        (out / "_LIA_LOCK").unlink()
        resumed = lia(config, f"models.n_estimators={trees}", command="train")
        left = sorted(path.name for path in out.iterdir() if not path.name.startswith(".")
                      and ("._" in path.name or path.name.endswith((".lia-claim", "_LIA_LOCK"))))
        state = folder_state(out / "models")[0]
        seen.append(f"{step}: {standing} at the kill, resumed exit {resumed.code}, models {state}, left {left}")
        ok &= killed.code == -signal.SIGKILL and standing == expected and resumed.code == 0 and state == "ok" \
            and left == []
    return "; ".join(seen), ok


def overlapping(folder: Path, fields: tuple[str, str], *overrides: str) -> tuple[str, bool]:
    """A trained folder, then ``lia-spark run`` with ``overrides`` that place two paths at one (``{out}``: the
    output folder, ``{raw}``: a Criteo day file's folder); it must stop naming both ``fields``, the first first."""
    config = trained(folder)
    (folder / "raw").mkdir()
    (folder / "raw" / "day_0").write_text("1" + "\t" * 39 + "\n", encoding="utf-8")
    before = listing(folder / "out")
    outcome = lia(config, *(item.format(out=folder / "out", raw=folder / "raw") for item in overrides))
    kept = listing(folder / "out") == before
    named = outcome.line.startswith(f"lia-spark: {fields[0]}:") and fields[1] in outcome.line
    return observed(outcome, f", every file kept: {kept}"), outcome.code == 2 and kept and named

def racing_runs(folder: Path) -> tuple[str, bool]:
    config = conf(folder)
    started = time.monotonic()
    launched = [launch(config) for _ in range(2)]
    outcomes = sorted((finished(process, log, started) for process, log in launched), key=lambda item: item.code)
    loser = outcomes[1]
    return (f"exits {[outcome.code for outcome in outcomes]}: {loser.line[:140]}",
            [outcome.code for outcome in outcomes] == [0, 1] and "another run holds" in loser.line
            and "pid " in loser.line)


def future_lock(folder: Path) -> tuple[str, bool]:
    config = conf(folder)
    (folder / "out").mkdir()
    holder = {"host": "another-host", "pid": 4242, "command": "lia-spark run",
              "started": time.time() + 10 * 365.25 * 86400}
    (folder / "out" / "_LIA_LOCK").write_text(json.dumps(holder), encoding="utf-8")
    outcome = lia(config)
    return observed(outcome), outcome.code == 1 and "suspicious lock" in outcome.line and "`rm " in outcome.line \
        and "wait for it" not in outcome.line and (folder / "out" / "_LIA_LOCK").exists()
def tracked_run(folder: Path) -> tuple[Path, Outcome]:
    """A finished data + train run in ``folder/out`` tracked in an MLflow sqlite store in ``folder``: (its audit key
    file, its outcome)."""
    config = conf(folder, tracking={"enabled": True, "tracking_uri": f"sqlite:///{folder / 'mlflow.db'}",
                                    "experiment": "faults"})
    outcome = lia(config)
    if outcome.code != 0:
        raise RuntimeError(f"the setup run failed: {outcome.line}")
    return folder / "out" / "audit_key", outcome


def audit_key_private(folder: Path) -> tuple[str, bool]:
    key, outcome = tracked_run(folder)
    mode = key.stat().st_mode & 0o777
    secret = key.read_text(encoding="ascii").strip()
    stored = [folder / "mlflow.db", *(path for path in (folder / "mlruns").rglob("*") if path.is_file())]
    found = [str(path.relative_to(folder)) for path in stored
             if secret.encode() in path.read_bytes().lower() or bytes.fromhex(secret) in path.read_bytes()]
    printed = secret in outcome.stderr
    return (f"exit {outcome.code}; {key.name} mode {mode:04o}; in {len(stored)} files of the store: {found or 'none'}; "
            f"in the log: {printed}", outcome.code == 0 and mode == 0o600 and not found and not printed and
            len(stored) > 3)


def audit_key_group_readable(folder: Path) -> tuple[str, bool]:
    config = trained(folder)
    key = folder / "out" / "audit_key"
    key.chmod(0o640)
    outcome = lia(config)
    return (observed(outcome), outcome.code == 2 and outcome.line.startswith("lia-spark: audit.key_path:")
            and str(key) in outcome.line and "chmod 600" in outcome.line)


def audit_key_damaged(folder: Path) -> tuple[str, bool]:
    config = trained(folder)
    key = folder / "out" / "audit_key"
    secret = key.read_text(encoding="ascii").strip()
    key.write_text(secret[:40] + "\n", encoding="ascii")
    outcome = lia(config)
    return (observed(outcome), outcome.code == 2 and outcome.line.startswith("lia-spark: audit.key_path:")
            and str(key) in outcome.line and "damaged" in outcome.line and secret[:40] not in outcome.stderr)


def audit_key_forced_then_deleted(folder: Path) -> tuple[str, bool]:
    config = trained(folder)
    key = folder / "out" / "audit_key"
    before = key.read_bytes()
    forced = lia(config, "run.force=true")
    kept = key.read_bytes() == before
    key.unlink()
    redrawn = lia(config)
    change = next((line.split("other settings: ", 1)[-1] for line in redrawn.stderr.splitlines()
                   if "train: recomputing" in line), "no recomputation")
    return (f"run.force=true: exit {forced.code}, key kept: {kept}; key deleted: exit {redrawn.code}, train: {change}",
            forced.code == 0 and kept and redrawn.code == 0 and change.startswith("audit.key_identifier")
            and key.read_bytes() != before)
def _stale_pyspark(folder: Path, version: str) -> Path:
    """A Spark distribution's python/ folder of pyspark ``version`` (put first on PYTHONPATH, as its spark-submit
    does): a package that fails to import, so a refusal shows nothing of it was imported."""
    package = folder / "spark-python" / "pyspark"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('imported before the version check')\n")
    (package / "version.py").write_text(f"__version__: str = '{version}'\n")
    return package.parent


def stale_pyspark(folder: Path) -> tuple[str, bool]:
    outcome = lia(conf(folder), path_first=_stale_pyspark(folder, "3.4.1"))
    return observed(outcome), (outcome.code == 2 and outcome.line.startswith("lia-spark: pyspark: lia-spark runs with "
                               "pyspark >= 3.5, < 5, got 3.4.1;") and not (folder / "out").exists()
                               and "imported before" not in outcome.stderr)


def connect_on_spark_35(folder: Path) -> tuple[str, bool]:
    outcome = lia(conf(folder), "spark.remote=sc://localhost:15002", path_first=_stale_pyspark(folder, "3.5.9"))
    return observed(outcome), (outcome.code == 2 and outcome.line.startswith("lia-spark: spark.remote: a Spark "
                               "Connect session needs pyspark >= 4.0") and not (folder / "out").exists())


CASES = (
    Case("foreign_output_dir", "exit 2 naming run.output_dir, every file kept", foreign_output_dir),
    Case("foreign_data_path", "exit 2 naming data.parquet_path, every file kept", foreign_data_path),
    Case("replace_foreign", "exit 0; data/ replaced, other folders kept", replace_foreign),
    Case("flipped_bytes_with_crc", "exit 1 naming the file and run.force=true; not used",
         lambda folder: flipped_bytes(folder, keep_crc=True)),
    Case("flipped_bytes_without_crc", "exit 1 naming the file and run.force=true; not used",
         lambda folder: flipped_bytes(folder, keep_crc=False)),
    Case("changed_small_file", "exit 0; one WARNING naming the file; train recomputed", changed_small_file),
    Case("pate_teachers_100000", "exit 2 naming pate.teachers in < 60 s with Spark start",
         lambda folder: impossible(folder, "models.training_mechanism=pate", "pate.teachers=100000")),
    Case("pate_queries_1e8", "exit 2 naming pate.queries in < 60 s",
         lambda folder: impossible(folder, "models.training_mechanism=pate", "pate.queries=100000000")),
    Case("sigint_mid_stage", "exit 130, nothing half-written, lock released; same command resumes",
         lambda folder: interrupted(folder, signal.SIGINT, 130)),
    Case("sigterm_mid_stage", "exit 143, nothing half-written, lock released; same command resumes",
         lambda folder: interrupted(folder, signal.SIGTERM, 143)),
    Case("full_disk", "exit 1 naming the folder and 'no space left'", full_disk),
    Case("locked_folder", "exit 1 naming the holder", locked),
    Case("stale_lock", "exit 1 with the command that removes it; lock kept", stale_lock),
    Case("wrong_value", "exit 2 naming models.target_day", wrong_value),
    Case("leftovers", "exit 0; claimed staging swept, unclaimed look-alike kept", leftovers),
    # issue 71: verified reads
    Case("flipped_label_page_posteriors", "exit 1 naming the file, its table and run.force=true; not used",
         lambda folder: flipped_page(folder, "data", "label", crc="recompute", stage="posteriors", after="train")),
    Case("flipped_row_id_page_posteriors", "exit 1 naming the file, its table and run.force=true; not used",
         lambda folder: flipped_page(folder, "data", "row_id", crc="remove", stage="posteriors", after="train")),
    Case("flipped_posteriors_page_utility", "exit 1 naming the file, its table and run.force=true; not used",
         lambda folder: flipped_page(folder, "posteriors/summary", "mean_additive_advantage", crc="recompute",
                                     stage="utility", after="posteriors")),
    Case("gzip_zero_padding", "exit 0; every line gzip -d gives, no warning",
         lambda folder: gzip_day(folder, lambda data: data + b"\0" * 512)),
    Case("gzip_trailing_garbage", "exit 0; every line gzip -d gives, a WARNING naming the file and its bytes",
         lambda folder: gzip_day(folder, lambda data: data + b"trailing garbage\n" * 3, warns=True)),
    Case("gzip_two_members", "exit 0; every line gzip -d gives", lambda folder: gzip_day(folder, two_members)),
    # issue 71: bad input
    Case("yaml_alias_bomb", "exit 2 naming spark.extra, the file and the limit, at once", alias_bomb),
    Case("config_not_utf8", "exit 2 naming the file, the byte offset, Windows-1252 and iconv", not_utf8),
    Case("epsilon_1e400", "exit 2 naming models.epsilon and 1e400 (not inf)",
         lambda folder: out_of_range(folder, "models.epsilon=1e400")),
    Case("rows_per_day_beyond_int64", "exit 2 naming synthetic.rows_per_day, before Spark",
         lambda folder: out_of_range(folder, "synthetic.rows_per_day=99999999999999999999999")),
    Case("rows_per_day_beyond_row_ids", "exit 2 naming synthetic.rows_per_day and 2^40",
         lambda folder: out_of_range(folder, f"synthetic.rows_per_day={(1 << 40) + 1}")),
    Case("malformed_share", "exit 2 naming data.max_malformed_share, the share, the limit, the quarantine",
         malformed_share),
    Case("one_class_target_day", "exit 2 naming models.target_day, its day and class counts; no model fitted",
         lambda folder: one_class_day(folder, 1, 1, "models.target_day")),
    Case("one_class_proxy_day", "exit 2 naming models.proxy_day, its day and class counts; no model fitted",
         lambda folder: one_class_day(folder, 0, 0, "models.proxy_day")),
    Case("one_class_test_split", "exit 0; one WARNING naming day 1, AUC undefined; auc@target null",
         one_class_test_split),
    Case("locked_sqlite_store", "exit 1 naming the store's path, the write lock and the fix, after 10 s",
         locked_store),
    # issue 71: commit, overlap, lock
    Case("reader_during_reruns", "3 re-runs: the reader sees 4 commits of models/, 0 absent, 0 mixed",
         reader_during_reruns),
    Case("killed_commit_local", "at each step one models/ stands; the same command resumes, nothing left",
         lambda folder: killed_commits(folder, {"before-exchange": "old", "after-exchange": "new",
                                                "during-deletion": "new"}, remote=False)),
    Case("killed_commit_renames", "at each step (viewfs) one models/ stands after the resume, nothing left",
         lambda folder: killed_commits(folder, {"before-aside": "old", "after-aside": "none", "after-rename": "new",
                                                "during-deletion": "new"}, remote=True)),
    Case("quarantine_at_data", "exit 2 naming data.quarantine_path and data.parquet_path, every file kept",
         lambda folder: overlapping(folder, ("data.quarantine_path", "data.parquet_path"), "data.source=criteo",
                                    "data.criteo_paths=[{raw}]", "data.quarantine_path={out}/data")),
    Case("data_at_models", "exit 2 naming data.parquet_path and run.output_dir, every file kept",
         lambda folder: overlapping(folder, ("data.parquet_path", "run.output_dir"),
                                    "data.parquet_path={out}/models")),
    Case("racing_runs", "one exit 0, one exit 1 naming the holder", racing_runs),
    Case("future_lock", "exit 1: suspicious, with the command that removes it; lock kept", future_lock),
    # issue 71: audit key
    Case("audit_key_private", "exit 0; audit_key mode 0600; the key in no file of the MLflow store nor the log",
         audit_key_private),
    Case("audit_key_group_readable", "exit 2 naming audit.key_path and the file, chmod 600 as the fix",
         audit_key_group_readable),
    Case("audit_key_damaged", "exit 2 naming audit.key_path and the file; the key not printed", audit_key_damaged),
    Case("audit_key_forced_then_deleted", "run.force=true keeps the key; deleted: a new key, train recomputed "
         "naming audit.key_identifier", audit_key_forced_then_deleted),
    # issue 72, Spark 3.5 and 4.x (the SQLAlchemy 2.1 + MLflow 2 refusal needs MLflow < 3.9: make test-oldest)
    Case("stale_pyspark", "exit 2 naming pyspark 3.4.1 and the fix, before pyspark is imported", stale_pyspark),
    Case("connect_on_spark_35", "exit 2 naming spark.remote and pyspark 3.5.9, before Spark starts",
         connect_on_spark_35),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="", help="where the cases' folders go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the cases' folders")
    parser.add_argument("--only", nargs="*", default=[], help="run only these cases")
    args = parser.parse_args()
    root = Path(args.root or tempfile.mkdtemp(prefix="lia-faults-"))
    root.mkdir(parents=True, exist_ok=True)
    print("| case | expected | observed | ok | seconds |\n|---|---|---|---|---|", flush=True)
    wrong = 0
    for case in CASES:
        if args.only and case.name not in args.only:
            continue
        folder = root / case.name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        started = time.monotonic()
        try:
            seen, ok = case.run(folder)
        except Exception as error:  # noqa: BLE001 - a case that breaks is a row, not the end of the matrix
            seen, ok = f"the case itself failed: {type(error).__name__}: {error}", False
        wrong += not ok
        print(f"| {case.name} | {case.expected} | {seen.replace('|', '/')} | {'yes' if ok else 'NO'} | "
              f"{time.monotonic() - started:.1f} |", flush=True)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return wrong


if __name__ == "__main__":
    sys.exit(main())
