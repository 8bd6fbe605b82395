"""Measured scaling of the whole pipeline: per-stage wall, CPU and peak memory of `lia-spark run` at a given size.

    .venv/bin/python benchmarks/bench_scaling.py [--rows-per-day 5000000] [--days 2] [--master local[2]]
        [--stages data,posteriors] [--output /tmp/bench_scaling/run] [--render-only]

Runs ``python -m lia_spark.cli.main run --conf conf/demo.yaml synthetic.rows_per_day=N synthetic.days=D`` as a
subprocess (MLflow in a sqlite file of the output folder, Spark's event log beside it) and samples its process
tree every 0.5 s with psutil: the resident memory of the driver JVM, the driver Python, the largest Python
worker (pyspark.daemon and its forks) and, on ``local-cluster``, the largest executor JVM, attributed to the
pipeline stage running at that moment (from the pipeline's ``pipeline: <step> ... started`` / ``... in N s``
log lines); the CPU seconds of the whole tree at each stage boundary. After the run the event log gives the
shuffle bytes written per stage (Spark's task metrics). Each run is appended to benchmarks/scaling_runs.json;
the ``scaling`` section of BENCHMARKS.md is rendered from all recorded runs, with a projection to one Criteo
week (1.3B rows) and the full set (4.4B rows) on 100 and 1,000 cores from the measured per-core rates.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import SeenProcessesCpu, machine_cpu_seconds, write_section  # noqa: E402
from lia_spark.kernels.mechanisms import ROWS_PER_BAGGING_UNIT, bagging_unit_bits  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RUNS_FILE = Path(__file__).resolve().parent / "scaling_runs.json"
SAMPLE_SECONDS = 0.5
STARTED = re.compile(r"pipeline: (\w+) \(\w[\w-]*\) started")
FINISHED = re.compile(r"pipeline: (\w+) (ran|reused|failed) in ([0-9.]+) s")
ROLES = ("driver_jvm", "driver_python", "python_worker", "executor_jvm")
BEFORE_STAGES = "startup"
STEPS_FIXED = ("train", "utility", "audit", "report")
TRAINING_DAYS = 2  # the proxy day and the target day, scanned by the STEPS_FIXED to draw their day samples
PROJECTED_SETS = (("one Criteo week", 1_300_000_000, 7), ("the full set", 4_400_000_000, 24))
PROJECTED_CORES = (100, 1000)
INGEST_RATES_FILE = Path(__file__).resolve().parent / "ingest_gzip.json"  # bench_ingest.py --part gzip writes it
PARALLEL_FITS = "spark tasks"  # UtilityResult.fits_where of a run whose utility fits ran as parallel tasks
PATE_TEACHERS = 100  # pate.teachers of the demo grid: PATE's teachers' job has at most this many tasks
RECOMMENDED_ROWS_PER_BAGGING_UNIT = 65_536  # 2,048 units (tasks) per released Criteo day of ~186M rows


def run_command(rows_per_day: int, days: int, master: str, output: Path, stages: str = "") -> list[str]:
    """The measured command: the demo config at the given size (``stages``: a comma-separated run.stages, "" = all),
    tracked into the output folder."""
    extra = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file://{output / 'eventlog'}",
             "spark.eventLog.compress": "false"}
    if master.startswith("local-cluster"):  # half the worker's MB for the JVM heap, the rest for the Python workers
        extra["spark.executor.memory"] = f"{int(master.rstrip(']').split(',')[-1]) // 2}m"
    return [sys.executable, "-m", "lia_spark.cli.main", "run", "--conf", str(REPO / "conf" / "demo.yaml"),
            f"synthetic.rows_per_day={rows_per_day}", f"synthetic.days={days}", f"run.output_dir={output}",
            "run.name=scaling", f"spark.master={master}", f"spark.extra={json.dumps(extra)}",
            f"tracking.tracking_uri=sqlite:///{output / 'mlflow.db'}", "tracking.experiment=lia-spark-scaling",
            *([f"run.stages=[{stages}]"] if stages else [])]


def process_role(process: psutil.Process, driver_pid: int) -> str | None:
    """Which of :data:`ROLES` a process of the run's tree plays (None: not one we report)."""
    if process.pid == driver_pid:
        return "driver_python"
    name = process.name()
    if name == "java":
        return "executor_jvm" if "CoarseGrainedExecutorBackend" in " ".join(process.cmdline()) else "driver_jvm"
    return "python_worker" if name.startswith("python") else None


def sample_tree(driver: psutil.Process) -> dict[str, float]:
    """Largest resident memory (MB) per role among the live processes of the run's tree."""
    peaks = dict.fromkeys(ROLES, 0.0)
    for process in [driver, *driver.children(recursive=True)]:
        try:
            role = process_role(process, driver.pid)
            if role is not None:
                peaks[role] = max(peaks[role], process.memory_info().rss / 1e6)
        except psutil.Error:
            continue
    return peaks


CPU_ACCOUNTING = "seen processes"  # runs recorded before this field used the live process tree only


class StageClock:
    """Follows the pipeline's log lines: the running step, each step's wall seconds, start/end epochs and, at its
    boundaries, the run's CPU seconds (:class:`benchmarks._report.SeenProcessesCpu`) and the machine's."""

    def __init__(self, root_pid: int):
        self.cpu = SeenProcessesCpu(root_pid)
        self.driver = psutil.Process(root_pid)
        self.current = BEFORE_STAGES
        self.steps: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def feed(self, line: str) -> None:
        """Update the running step from one log line."""
        started, finished = STARTED.search(line), FINISHED.search(line)
        if started:
            with self.lock:
                self.current = started.group(1)
                self.steps[self.current] = {"start": time.time(), "cpu_start": self.cpu.update(),
                                            "machine_cpu_start": machine_cpu_seconds(),
                                            "driver_cpu_start": self.driver_cpu()}
        elif finished and finished.group(1) in self.steps:
            with self.lock:
                step = self.steps[finished.group(1)]
                step.update(end=time.time(), status=finished.group(2), wall_s=float(finished.group(3)),
                            cpu_s=self.cpu.update() - step["cpu_start"],
                            machine_cpu_s=machine_cpu_seconds() - step["machine_cpu_start"],
                            driver_python_cpu_s=self.driver_cpu() - step["driver_cpu_start"])
                self.current = f"after {finished.group(1)}"

    def driver_cpu(self) -> float:
        """CPU seconds (user + system) of the driver's Python process itself (its threads, not its children)."""
        times = self.driver.cpu_times()
        return times.user + times.system


def follow_log(stream: IO[str], log_path: Path, clock: StageClock) -> None:
    """Copy the run's stderr to a file and feed every line to the clock."""
    with open(log_path, "w", encoding="utf-8") as log:
        for line in stream:
            log.write(line)
            clock.feed(line)


def shuffle_bytes_by_step(event_dir: Path, steps: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Shuffle bytes written and read by the tasks that finished during each step (Spark's event log)."""
    totals = {name: {"shuffle_write_bytes": 0.0, "shuffle_read_bytes": 0.0, "tasks": 0} for name in steps}
    for path in sorted(item for item in event_dir.rglob("*") if item.is_file()):  # Spark 4: a folder per app
        with open(path, encoding="utf-8") as events:
            for line in events:
                if '"SparkListenerTaskEnd"' not in line:
                    continue
                event = json.loads(line)
                finished = event["Task Info"]["Finish Time"] / 1000.0
                metrics = event.get("Task Metrics") or {}
                for name, step in steps.items():
                    if step["start"] <= finished <= step.get("end", float("inf")):
                        totals[name]["shuffle_write_bytes"] += metrics.get("Shuffle Write Metrics", {}).get(
                            "Shuffle Bytes Written", 0)
                        read = metrics.get("Shuffle Read Metrics", {})
                        totals[name]["shuffle_read_bytes"] += (read.get("Remote Bytes Read", 0)
                                                               + read.get("Local Bytes Read", 0))
                        totals[name]["tasks"] += 1
    return totals


def sample_until_exit(child: subprocess.Popen, clock: StageClock) -> tuple[dict[str, dict[str, float]], list[float]]:
    """Every :data:`SAMPLE_SECONDS` until the run ends: the run's CPU reading, the largest resident memory per role,
    kept per running step, and the 1-minute load average."""
    driver = psutil.Process(child.pid)
    peaks: dict[str, dict[str, float]] = {}
    loads = []
    while child.poll() is None:
        clock.cpu.update()
        sample = sample_tree(driver)
        with clock.lock:
            step_peaks = peaks.setdefault(clock.current, dict.fromkeys(ROLES, 0.0))
        for role, value in sample.items():
            step_peaks[role] = max(step_peaks[role], value)
        loads.append(os.getloadavg()[0])
        time.sleep(SAMPLE_SECONDS)
    return peaks, loads


def measure(rows_per_day: int, days: int, master: str, output: Path, stages: str = "", *,
            keep_output: bool = False) -> dict[str, Any]:
    """Run the pipeline once and return its per-step record. ``keep_output``: the earlier run's outputs in
    ``output`` stay (the pipeline reuses the complete ones, e.g. the data of a run of ``--stages data,posteriors``)."""
    shutil.rmtree(output if not keep_output else output / "eventlog", ignore_errors=True)
    (output / "eventlog").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    load_before = os.getloadavg()
    started = time.time()
    with open(output / "stdout.txt", "w", encoding="utf-8") as stdout:
        child = subprocess.Popen(run_command(rows_per_day, days, master, output, stages), cwd=output, env=env,
                                 stdout=stdout, stderr=subprocess.PIPE, text=True)
        clock = StageClock(child.pid)
        reader = threading.Thread(target=follow_log, args=(child.stderr, output / "run.log", clock), daemon=True)
        reader.start()
        peaks, loads = sample_until_exit(child, clock)
        reader.join()
    (output / "samples.json").write_text(json.dumps({"steps": clock.steps, "peaks": peaks, "loads": loads}))
    if child.returncode != 0:
        raise RuntimeError(f"the run failed (exit {child.returncode}); see {output / 'run.log'}")
    shuffle = shuffle_bytes_by_step(output / "eventlog", clock.steps)
    pipeline = json.loads((output / "results" / "pipeline.json").read_text(encoding="utf-8"))
    return {"rows_per_day": rows_per_day, "days": days, "master": master, "cores": cluster_cores(master),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "total_wall_s": round(time.time() - started, 1), "cpu_accounting": CPU_ACCOUNTING,
            "load_average": {"before": round(load_before[0], 1), "mean": round(sum(loads) / max(len(loads), 1), 1),
                             "max": round(max(loads, default=0.0), 1)},
            "steps": {name: {"status": step.get("status", "?"), "wall_s": step.get("wall_s", 0.0),
                             "cpu_s": round(step.get("cpu_s", 0.0), 1),
                             "machine_cpu_s": round(step.get("machine_cpu_s", 0.0), 1),
                             "driver_python_cpu_s": round(step.get("driver_python_cpu_s", 0.0), 1),
                             "peak_rss_mb": {role: round(value) for role, value in peaks.get(name, {}).items()},
                             **shuffle.get(name, {})}
                      for name, step in clock.steps.items()},
            "metrics": pipeline_metrics(pipeline)}


def pipeline_metrics(pipeline: dict[str, Any]) -> dict[str, Any]:
    """Row counts and setting counts reported by the stages (their results' scalar fields); for the utility step
    also where its fits ran and their seconds (sum, longest: one thread each when they ran as Spark tasks); for the
    train step with shadow fits (the target and its shadows run as parallel Spark tasks) their seconds (sum, and the
    target's as the longest: each shadow repeats its fit)."""
    found = {}
    for step in pipeline.get("steps", []):
        result = step.get("result") or {}
        for key, value in result.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and ("rows" in key or "settings" in key
                                                                                     or "canaries" in key):
                found[f"{step['step']}.{key}"] = value
        if step["step"] == "utility" and result.get("fits_where"):
            fits = [row["fit_seconds"] for row in result.get("table", [])]
            found.update({"utility.fits_where": result["fits_where"], "utility.fit_seconds_sum": round(sum(fits), 1),
                          "utility.fit_seconds_max": round(max(fits), 1),
                          **{f"utility.phase.{name}": value
                             for name, value in result.get("phase_seconds", {}).items()}})
        seconds = result.get("seconds") or {}
        if step["step"] == "train" and seconds.get("fit_shadows"):
            found.update({"train.fit_seconds_sum": round(seconds["fit_target"] + seconds["fit_shadows"], 1),
                          "train.fit_seconds_max": round(seconds["fit_target"], 1)})
    return found


def cluster_cores(master: str) -> int:
    """Cores of a ``local[N]`` or ``local-cluster[workers, cores, memory]`` master."""
    numbers = [int(value) for value in re.findall(r"\d+", master)]
    if master.startswith("local-cluster"):
        return numbers[0] * numbers[1]
    return numbers[0] if numbers else os.cpu_count() or 1


def twin_rows(run: dict[str, Any]) -> int:
    """Rows of the synthetic twin the run generated."""
    return run["rows_per_day"] * run["days"]


def measured_table(runs: list[dict[str, Any]]) -> str:
    """One line per run and step: wall, CPU, rates, peak resident memory per role, shuffle bytes."""
    lines = ["| master | twin rows | step | wall s | CPU s | machine CPU s | twin rows/s per core | "
             "CPU s per 1M twin rows "
             "| peak RSS MB: driver JVM / driver Python / largest Python worker / largest executor JVM | "
             "shuffle written MB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        rows = twin_rows(run)
        for name, step in run["steps"].items():
            peak = step["peak_rss_mb"]
            memory = " / ".join(f"{peak[role]:,}" if peak.get(role) else "-" for role in ROLES)
            rate = rows / step["wall_s"] / run["cores"] if step["wall_s"] else 0.0
            machine = f"{step['machine_cpu_s']:,.1f}" if "machine_cpu_s" in step else "-"
            lines.append(f"| {run['master']} | {rows:,} | {name} | {step['wall_s']:,.1f} | {step['cpu_s']:,.1f} | "
                         f"{machine} | {rate:,.0f} | {step['cpu_s'] / rows * 1e6:,.1f} | {memory} | "
                         f"{step.get('shuffle_write_bytes', 0) / 1e6:,.1f} |")
    return "\n".join(lines)


def growing(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs that measured the steps growing with the rows (data and posteriors)."""
    return [run for run in runs if {"data", "posteriors"} <= set(run["steps"])]


def linearity_table(runs: list[dict[str, Any]]) -> str:
    """The steps that grow with the rows, per size: CPU per row, shuffle per row and peak memory should stay flat."""
    lines = ["| master | twin rows | released rows | data: CPU s per 1M twin rows | posteriors: CPU s per 1M released "
             "rows | posteriors: shuffle bytes per released row | largest Python worker MB | driver JVM MB |",
             "|---|---|---|---|---|---|---|---|"]
    for run in growing(runs):
        data, posteriors = run["steps"]["data"], run["steps"]["posteriors"]
        released = run["metrics"]["posteriors.input_rows"]
        workers = max(step["peak_rss_mb"].get("python_worker", 0) for step in (data, posteriors))
        jvm = max(step["peak_rss_mb"].get("driver_jvm", 0) for step in (data, posteriors))
        lines.append(f"| {run['master']} | {twin_rows(run):,} | {released:,} | "
                     f"{data['cpu_s'] / twin_rows(run) * 1e6:.1f} | {posteriors['cpu_s'] / released * 1e6:.1f} | "
                     f"{posteriors.get('shuffle_write_bytes', 0) / released:.1f} | {workers:,} | {jvm:,} |")
    return "\n".join(lines)


def linearity_summary(runs: list[dict[str, Any]]) -> str:
    """Smallest vs largest local[N] run of the current CPU accounting (on an idle machine): CPU per row of the
    growing steps; the Python workers' peak over all local[N] runs."""
    local = sorted((run for run in growing(runs) if run["master"].startswith("local[")), key=twin_rows)
    current = [run for run in local if run.get("cpu_accounting") == CPU_ACCOUNTING]
    if len(current) < 2:
        return ""
    small, large = current[0], current[-1]

    def per_row(run: dict[str, Any], step: str) -> float:
        rows = twin_rows(run) if step == "data" else run["metrics"]["posteriors.input_rows"]
        return run["steps"][step]["cpu_s"] / rows * 1e6

    def worker_peak(run: dict[str, Any], steps: set[str]) -> int:
        return max(step["peak_rss_mb"].get("python_worker", 0) for name, step in run["steps"].items() if name in steps)

    streaming = [worker_peak(run, {"data", "posteriors"}) for run in local]
    fitting = [worker_peak(run, {"utility"}) for run in local if parallel_fits(run)]
    return (f"From {twin_rows(small):,} to {twin_rows(large):,} twin rows ({twin_rows(large) / twin_rows(small):.0f}x, "
            f"both runs on an idle machine) the CPU per row went from {per_row(small, 'data'):.1f} to "
            f"{per_row(large, 'data'):.1f} CPU s per 1M twin rows (data) and from {per_row(small, 'posteriors'):.1f} "
            f"to {per_row(large, 'posteriors'):.1f} per 1M released rows (posteriors): linear in rows plus a fixed "
            "part that the larger run amortizes (runs on other days of this shared machine spread by 30-50% around "
            "these: compare runs of one session only). The largest Python worker of the data and posteriors steps "
            f"stayed at {min(streaming):,}-{max(streaming):,} MB in every local run"
            + (f", and one that fits a utility target on the broadcast 1M-row sample peaked at {min(fitting):,}-"
               f"{max(fitting):,} MB whatever the rows" if fitting else "")
            + "; the driver JVM grows lazily toward its heap cap (`spark.driver_memory: 4g`, plus off-heap Arrow and "
            "shuffle buffers), not with the rows.")


def executor_pair(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The latest local[C] and local-cluster run of C cores of the same size and steps, both with the current CPU
    accounting: the same work in one JVM vs in separate executor JVMs."""
    current = [run for run in runs if run.get("cpu_accounting") == CPU_ACCOUNTING]
    pairs = [(local, cluster) for local in current if local["master"].startswith("local[")
             for cluster in current if cluster["master"].startswith("local-cluster[")
             and run_key(cluster)[:2] == run_key(local)[:2] and set(cluster["steps"]) == set(local["steps"])
             and cluster["cores"] == local["cores"]]
    return max(pairs, key=lambda pair: pair[1]["date"]) if pairs else None


def executor_overhead(runs: list[dict[str, Any]]) -> float:
    """CPU seconds of the steps that grow with the rows (data, posteriors) with separate executors over local mode
    (:func:`executor_pair`); 1 without such a pair."""
    pair = executor_pair(runs)
    if pair is None:
        return 1.0
    local, cluster = pair
    return (sum(cluster["steps"][step]["cpu_s"] for step in ("data", "posteriors"))
            / sum(local["steps"][step]["cpu_s"] for step in ("data", "posteriors")))


def executor_table(runs: list[dict[str, Any]]) -> str:
    """Each step of :func:`executor_pair`: wall and CPU in one JVM and with separate executors, and their ratio."""
    pair = executor_pair(runs)
    if pair is None:
        return ""
    local, cluster = pair
    lines = [f"Separate executors against local mode ({twin_rows(local):,} twin rows, {local['cores']} cores; "
             f"{local['master']} started {local['date']}, {cluster['master']} {cluster['date']}):", "",
             "| step | local wall s / CPU s | local-cluster wall s / CPU s | CPU ratio | shuffle written MB |",
             "|---|---|---|---|---|"]
    for name, step in local["steps"].items():
        other = cluster["steps"][name]
        lines.append(f"| {name} | {step['wall_s']:,.1f} / {step['cpu_s']:,.1f} | {other['wall_s']:,.1f} / "
                     f"{other['cpu_s']:,.1f} | {other['cpu_s'] / max(step['cpu_s'], 1e-9):.2f} | "
                     f"{other.get('shuffle_write_bytes', 0) / 1e6:,.1f} |")
    return "\n".join(lines) + (
        f"\n\nThe steps that grow with the rows took {executor_overhead(runs):.2f}x the CPU seconds with separate "
        "executor JVMs (each with its own JIT warm-up and garbage collector; task results, broadcasts and the "
        "shuffle between processes over the loopback network), for the same shuffle bytes; the projection below "
        "multiplies every parallel part by that ratio.")


def run_notes(runs: list[dict[str, Any]]) -> str:
    """When each run started, its total wall time and the machine's load average during it."""
    return "\n".join(f"- {run['master']}, {run['days']} days x {run['rows_per_day']:,} rows: started {run['date']}, "
                     f"{run['total_wall_s']:,.0f} s in all (Spark start and MLflow included); 1-minute load average "
                     f"{run['load_average']['before']} at the start, mean {run['load_average']['mean']}, "
                     f"max {run['load_average']['max']} during the run"
                     + ("." if run.get("cpu_accounting") == CPU_ACCOUNTING else
                        "; CPU s of the live process tree only (undercounts a step after Spark stops a Python daemon)")
                     for run in runs)


def bagging_units(rows: float, rows_per_unit: int) -> int:
    """Bagging units (= posteriors tasks) of a release of ``rows`` rows."""
    return 2 ** bagging_unit_bits(int(rows), rows_per_unit)


@dataclasses.dataclass(frozen=True)
class IngestRates:
    """The ingest_gzip section's rates: step 0's serial decode of one .gz day (lines/s of the whole one-task job, by
    ISA-L and by Spark's codec; ISA-L's also inside the task, with the job's fixed seconds apart) and the parallel rest
    (core-seconds per line: wall x cores after the decode)."""

    measured: str
    lines: int
    isal_decode_lines_per_second: float
    isal_decode_task_lines_per_second: float
    decode_job_fixed_seconds: float
    spark_codec_lines_per_second: float
    parallel_core_seconds_per_line: float

    def decode_seconds(self, lines: float) -> float:
        """Step 0 on one file of ``lines`` lines by ISA-L: the job's fixed seconds plus the task's decode (and copy)
        at its own rate; the measured day's job time is this at its size, a Criteo day's ~186M lines weigh the
        fixed part ~90x less."""
        return self.decode_job_fixed_seconds + lines / self.isal_decode_task_lines_per_second

    @classmethod
    def load(cls) -> "IngestRates":
        if not INGEST_RATES_FILE.exists():
            raise SystemExit(f"{INGEST_RATES_FILE} is missing: run benchmarks/bench_ingest.py --part gzip first")
        values = json.loads(INGEST_RATES_FILE.read_text(encoding="utf-8"))
        return cls(**{field.name: values[field.name] for field in dataclasses.fields(cls)})


def ingest_wall(rows: float, files: int, cores: int, rates: IngestRates) -> float:
    """Ingest of ``files`` gzip days with data.split_gzip: each file decoded once in one task (serial per file,
    ceil(files / cores) waves), then the plain copies parsed in parallel blocks on all cores."""
    decode = math.ceil(files / cores) * rates.decode_seconds(rows / files)
    return decode + rows * rates.parallel_core_seconds_per_line / cores


def posteriors_wall(result_rows: float, *, cpu_per_result_row: float, cores: int, units: int) -> float:
    """The posteriors pass with one task per bagging unit: its CPU seconds spread over min(cores, units) cores."""
    return result_rows * cpu_per_result_row / min(cores, units)


def duration(seconds: float) -> str:
    """Seconds as s, min or h."""
    if seconds < 120:
        return f"{seconds:,.0f} s"
    return f"{seconds / 60:,.0f} min" if seconds < 7200 else f"{seconds / 3600:,.1f} h"


def training_day_rows(run: dict[str, Any]) -> int:
    """Rows of the proxy and target days, which the train, utility and audit steps scan."""
    return run["rows_per_day"] * min(run["days"], TRAINING_DAYS)


def sample_step_runs(runs: list[dict[str, Any]], base: dict[str, Any], step: str) -> list[dict[str, Any]]:
    """The local[N] runs of ``base``'s grid (its utility settings), CPU accounting and utility execution (parallel
    fits or not) that measured ``step``."""
    return [run for run in runs if run["master"].startswith("local[") and step in run["steps"]
            and run["metrics"].get("utility.settings") == base["metrics"].get("utility.settings")
            and run.get("cpu_accounting") == base.get("cpu_accounting") and parallel_fits(run) == parallel_fits(base)]


@dataclasses.dataclass(frozen=True)
class StepCost:
    """A sample step's CPU seconds: ``serial`` in the driver's Python process (the in-memory fits on the day samples,
    pandas and numpy: it neither grows with the rows nor shrinks with executor cores), ``parallel`` the rest of its
    fixed part (Spark's work on the samples) and ``per_row`` per row of the proxy and target days (the scans), both
    spread over the cores."""

    serial: float
    parallel: float
    per_row: float

    def wall(self, *, day_rows: float, cores: int) -> float:
        """Seconds on ``cores`` cores for days of ``day_rows`` rows."""
        return self.serial + (self.parallel + self.per_row * TRAINING_DAYS * day_rows) / cores


def sample_step_costs(runs: list[dict[str, Any]], base: dict[str, Any]) -> dict[str, StepCost]:
    """Per step of :data:`STEPS_FIXED`, its :class:`StepCost`: the serial part is the driver Python's CPU seconds in
    the step (the mean over :func:`sample_step_runs` that measured it; it does not depend on the rows: the driver
    only sees the 1M-row samples), the rest the least-squares line through the runs' remaining CPU seconds against
    the rows of the proxy and target days. One run, or a falling line (noise), gives (mean, 0)."""
    costs = {}
    for name in STEPS_FIXED:
        chosen = sample_step_runs(runs, base, name)
        driver = [run["steps"][name]["driver_python_cpu_s"] for run in chosen
                  if "driver_python_cpu_s" in run["steps"][name]]
        serial = float(np.mean(driver)) if driver else 0.0
        rows, cpu = (np.array(values, dtype=float) for values in zip(*[
            (training_day_rows(run), run["steps"][name]["cpu_s"] - serial) for run in chosen]))
        slope = max(float(np.polyfit(rows, cpu, 1)[0]) if len(set(rows)) > 1 else 0.0, 0.0)
        fixed = max(float(np.mean(cpu - slope * rows)), 0.0)
        # runs recorded before the driver's own CPU was measured: their whole fixed part counts as serial
        costs[name] = StepCost(serial, fixed, slope) if driver else StepCost(fixed, 0.0, slope)
    return costs


def parallel_fits(run: dict[str, Any]) -> bool:
    """True when ``run``'s utility fits ran as parallel Spark tasks."""
    return run["metrics"].get("utility.fits_where") == PARALLEL_FITS


def fits_wall(run: dict[str, Any], step: str, cost: StepCost, *, day_rows: float, cores: int) -> float:
    """The utility or train step on ``cores`` cores: :meth:`StepCost.wall`, except that fits run as parallel Spark
    tasks (one thread each: the utility grid, the train step's target and shadows) never take less than the longest
    of them."""
    wall = cost.wall(day_rows=day_rows, cores=cores)
    metrics = run["metrics"]
    if f"{step}.fit_seconds_max" not in metrics or (step == "utility" and not parallel_fits(run)):
        return wall
    return wall + max(0.0, metrics[f"{step}.fit_seconds_max"] - metrics[f"{step}.fit_seconds_sum"] / cores)


def projection(run: dict[str, Any], runs: list[dict[str, Any]], rates: IngestRates) -> str:
    """Stage-by-stage wall time of one Criteo week and the full set on 100 and 1,000 cores, from ``run``'s
    measured per-core rates and the sample steps' costs fitted over ``runs`` (see the assumptions written with
    it)."""
    steps, metrics = run["steps"], run["metrics"]
    released_rows = metrics["posteriors.input_rows"]
    settings = metrics["posteriors.settings"]
    overhead = max(1.0, executor_overhead(runs))  # separate executors are never assumed cheaper than one JVM
    cpu_per_result_row = overhead * steps["posteriors"]["cpu_s"] / (released_rows * settings)
    shuffle_per_row = steps["posteriors"].get("shuffle_write_bytes", 0) / released_rows
    rates = dataclasses.replace(rates, parallel_core_seconds_per_line=overhead * rates.parallel_core_seconds_per_line)
    costs = {name: dataclasses.replace(cost, parallel=overhead * cost.parallel, per_row=overhead * cost.per_row)
             for name, cost in sample_step_costs(runs, run).items()}
    cases = [(label, rows, files, cores) for label, rows, files in PROJECTED_SETS for cores in PROJECTED_CORES]
    header = "| stage | cost model | " + " | ".join(f"{rows / 1e9:.1f}B rows, {cores:,} cores"
                                                   for _, rows, _, cores in cases) + " |"
    lines = [header, "|---|---|" + "---|" * len(cases)]

    def row(stage: str, model: str, walls: list[float]) -> None:
        lines.append(f"| {stage} | {model} | " + " | ".join(duration(wall) for wall in walls) + " |")

    ingest = [ingest_wall(rows, files, cores, rates) for _, rows, files, cores in cases]
    row("data (ingest of the .gz days)", f"decode {rates.isal_decode_task_lines_per_second:,.0f} lines/s per file "
        f"(serial) + {rates.decode_job_fixed_seconds:.1f} s per decode job, then "
        f"{rates.parallel_core_seconds_per_line * 1e6:.1f} core-s per 1M rows", ingest)
    sample_walls = {name: [costs[name].wall(day_rows=rows / files, cores=cores) for _, rows, files, cores in cases]
                    for name in STEPS_FIXED}
    for name in ("train", "utility"):
        sample_walls[name] = [fits_wall(run, name, costs[name], day_rows=rows / files, cores=cores)
                              for _, rows, files, cores in cases]

    def sample_model(name: str, work: str) -> str:
        cost = costs[name]
        scans = (f" + {cost.per_row * 1e6:.2f} CPU s per 1M rows of the proxy and target days (scans)"
                 if cost.per_row * 1e6 >= 0.005 else "")
        return (f"{cost.serial:,.0f} CPU s in the driver's Python ({work}); on all cores {cost.parallel:,.0f} CPU s "
                f"of Spark work on the samples{scans}")

    train_longest = metrics.get("train.fit_seconds_max", 0.0)
    row("train", sample_model("train", "XGBoost proxy and target on the 1M-row day samples") if not train_longest
        else sample_model("train", "the XGBoost proxy on the 1M-row day sample, the predictions of every model")
        + f"; the target and its label-blind shadows ({metrics['train.fit_seconds_sum']:,.0f} CPU s of fits) are "
        f"parallel Spark tasks, never faster than the longest ({train_longest:,.0f} s)", sample_walls["train"])
    one_day = [posteriors_wall(rows / files * settings, cpu_per_result_row=cpu_per_result_row, cores=cores,
                               units=bagging_units(rows / files, RECOMMENDED_ROWS_PER_BAGGING_UNIT))
               for _, rows, files, cores in cases]
    row(f"posteriors, one released day ({settings} settings)", f"{cpu_per_result_row * 1e6:.2f} CPU s per 1M "
        f"result rows on min(cores, bagging units) cores", one_day)
    row(f"posteriors, every day released ({settings} settings)", "same rate, one release of all rows",
        [posteriors_wall(rows * settings, cpu_per_result_row=cpu_per_result_row, cores=cores,
                         units=bagging_units(rows, RECOMMENDED_ROWS_PER_BAGGING_UNIT)) for _, rows, _, cores in cases])
    longest = metrics.get("utility.fit_seconds_max", 0.0) if parallel_fits(run) else 0.0
    row("utility", sample_model("utility", "the table, the plots") + (
        f"; its {metrics['utility.settings']} fits ({metrics['utility.fit_seconds_sum']:,.0f} CPU s) are parallel "
        f"Spark tasks, never faster than the longest ({longest:,.0f} s)" if parallel_fits(run) else ""),
        sample_walls["utility"])
    for name in ("audit", "report"):
        row(name, sample_model(name, "the day sample"), sample_walls[name])
    totals = [sum(parts) for parts in zip(ingest, one_day, *sample_walls.values())]
    row("**whole pipeline, one released day**", "", totals)
    lines.append("| (the same, in seconds) | | " + " | ".join(f"{total:,.0f} s" for total in totals) + " |")
    largest_file = max(rows / files for _, rows, files in PROJECTED_SETS)
    decode = rates.decode_seconds(largest_file)
    driver = sum(cost.serial for cost in costs.values()) + longest + train_longest
    floor = (f"What does not scale with cores: the gzip decode of one day file ({duration(decode)} by ISA-L, one task "
             f"per file; {duration(largest_file / rates.spark_codec_lines_per_second)} "
             "by Spark's codec where the files are not on a local path or mount), the driver's own work on the "
             "1M-row samples ("
             + ", ".join(f"{name} {costs[name].serial:,.0f} s" for name in STEPS_FIXED)
             + f" of CPU in its Python process) and the longest utility fit ({longest:,.0f} s)"
             + (f" and train fit ({train_longest:,.0f} s)" if train_longest else "") + ": about "
             f"{decode + driver:,.0f} s ({(decode + driver) / 60:.1f} min) whatever the cluster. In local mode the "
             "driver's JVM is also the executor, so its own serial work (collecting results, scheduling) is counted "
             "with the parallel part here.")
    return "\n".join(lines) + "\n\n" + floor + "\n\n" + assumptions(run, runs, rates,
                                                                                 shuffle_per_row=shuffle_per_row,
                                                                                 overhead=overhead)


def assumptions(run: dict[str, Any], runs: list[dict[str, Any]], rates: IngestRates, *,
                shuffle_per_row: float, overhead: float) -> str:
    """The assumptions behind :func:`projection`, with the measured figures they rest on."""
    peaks = {role: max(step["peak_rss_mb"].get(role, 0) for step in run["steps"].values()) for role in ROLES}
    day_rows = {label: rows / files for label, rows, files in PROJECTED_SETS}
    return "\n".join([
        f"Assumptions (rates from the {run['master']} run of {twin_rows(run):,} twin rows above):",
        "- Parallel parts cost their measured CPU seconds (driver, JVM and Python workers, from /proc) times "
        f"{overhead:.2f}, what separate executor JVMs cost over local mode (the table above: "
        f"{executor_overhead(runs):.2f} on data and posteriors; below 1 it is taken as 1), spread over the cores: "
        "CPU seconds are steadier than wall times on this shared machine; a real cluster adds network latency and "
        "stragglers beyond the loopback shuffle measured here, so read the parallel figures as lower bounds.",
        "- Sample steps (train, utility, audit, report): the CPU seconds of the driver's own Python process in the "
        "step (the in-memory fits with XGBoost's threads, pandas and numpy on the seeded 1M-row sample per day, "
        "`models.sample_rows_per_day: 1000000`) are serial: they neither grow with the rows nor shrink with executor "
        "cores, so they are carried over at their CPU seconds, i.e. their wall time on one dedicated core (a "
        "dedicated 8-16 core driver runs XGBoost faster). The rest of the step's CPU (Spark's JVM and Python workers: "
        "the features of the samples, PATE's teachers, the utility grid's fits, and the scans of the two days that "
        "count them and draw the samples) spreads over all cores: a fixed part plus a part proportional to the rows "
        "of the proxy and target days, fitted by least squares over the local runs of "
        + ", ".join(dict.fromkeys(f"{twin_rows(item) / 1e6:,.0f}M"
                                  for item in sorted(sample_step_runs(runs, run, "train"), key=twin_rows)))
        + " twin rows with the same grid and code (rows of two days each); it grows with the size of a day (~186M "
        "Criteo rows), not with the number of days. Not measured here: on Criteo data the train stage also scores "
        "every row of the released day with the proxy on the executors (`models/priors`, the attacker's prior; the "
        "twin uses its true eta instead), a parallel part that grows with the rows."
        + (" The utility step's fits run as parallel Spark tasks (`spark.parallel_fits`, the default; "
           f"{run['metrics']['utility.fit_seconds_sum']:,.0f} CPU s for {run['metrics']['utility.settings']} fits, "
           "one thread each), never faster than the longest fit." if parallel_fits(run) else ""),
        f"- Data: Criteo's .gz days (~{day_rows[PROJECTED_SETS[0][0]] / 1e6:,.0f}M rows each), ingested with "
        f"`data.split_gzip: true`: each file decoded once in one task at "
        f"{rates.isal_decode_task_lines_per_second:,.0f} "
        "lines/s inside the task plus the one-task job's fixed "
        f"{rates.decode_job_fixed_seconds:.1f} s (ISA-L, for files on a local path or a mount the executors share "
        "such as /dbfs or /Volumes; the task's rate is the decode and copy timed in one process on the measured day, "
        f"the fixed part its job's time minus that: the whole job ran at {rates.isal_decode_lines_per_second:,.0f} "
        f"lines/s on its {rates.lines:,}-line day; {rates.spark_codec_lines_per_second:,.0f} lines/s by Spark's codec "
        "on HDFS "
        "or object stores, its whole job's rate) "
        f"(~{rates.decode_seconds(day_rows[PROJECTED_SETS[0][0]]):,.0f} s per day, all days at once "
        "when there are at least as many cores as files: this part does not scale with cores), then parsed in "
        f"parallel blocks at {rates.parallel_core_seconds_per_line * 1e6:.1f} core-seconds per 1M rows (wall x cores "
        f"of the ingest_gzip section, measured {rates.measured}: the tasks read and write the files themselves, "
        "`data.task_io`). "
        "The twin's generation (the data step measured above) is not part of a Criteo run.",
        f"- Posteriors: one Spark task per bagging unit, 2^b units of about `mechanisms.rows_per_bagging_unit` "
        f"rows, at most that many cores busy (the table uses min(cores, units)). At the default "
        f"{ROWS_PER_BAGGING_UNIT:,} a released Criteo day has "
        f"{bagging_units(day_rows[PROJECTED_SETS[0][0]], ROWS_PER_BAGGING_UNIT):,} units, which leaves half of "
        f"1,000 cores idle; the table uses {RECOMMENDED_ROWS_PER_BAGGING_UNIT:,} "
        f"({bagging_units(day_rows[PROJECTED_SETS[0][0]], RECOMMENDED_ROWS_PER_BAGGING_UNIT):,} units per day, "
        "a quarter of the memory per task). Shuffle: "
        f"{shuffle_per_row:,.0f} bytes written per released row (data and prior blobs to the unit tasks, measured "
        "from the event log's task metrics), i.e. "
        + ", ".join(f"{shuffle_per_row * rows / 1e9:,.0f} GB for {label}" for label, rows in day_rows.items())
        + " per released day; the cost grows linearly with the number of settings (the demo grid's "
        f"{run['metrics']['posteriors.settings']}).",
        f"- Memory (peaks measured over the whole run): driver JVM {peaks['driver_jvm']:,} MB, driver Python "
        f"{peaks['driver_python']:,} MB (the day samples and the models), largest Python worker "
        f"{peaks['python_worker']:,} MB (one utility fit on the broadcast 1M-row day sample, one bagging unit or "
        "one input batch: it does not grow with the rows)"
        + (f", largest executor JVM {peaks['executor_jvm']:,} MB" if peaks["executor_jvm"] else "")
        + ". Executors need the JVM heap for shuffle blocks plus one Python worker per core outside the heap.",
    ])


def recommended_config() -> str:
    """The configuration the projection assumes for 100-1,000 cores."""
    return "\n".join([
        "```yaml",
        "data:",
        "  source: criteo",
        "  split_gzip: true               # one decode task per .gz file, then parallel parsing",
        "models:",
        "  execution: in_memory",
        "  sample_rows_per_day: 1000000   # the paper's protocol: models fitted on the samples, constant in rows",
        "mechanisms:",
        f"  rows_per_bagging_unit: {RECOMMENDED_ROWS_PER_BAGGING_UNIT}   # 2,048 units per released day: enough "
        "tasks for 1,000 cores",
        "spark:",
        "  shuffle_partitions: 0          # 4 x cores",
        "  driver_memory: 8g              # the 1M-row day samples and the models live on the driver",
        "  extra:                         # 4-core executors: the heap for shuffle blocks, one Python worker",
        "    spark.executor.cores: 4      # per core outside it (~1.5 GB while it fits a model on the broadcast",
        "    spark.executor.memory: 4g    # 1M-row day sample, ~0.7 GB for a bagging unit)",
        "    spark.executor.memoryOverhead: 6g",
        "    spark.driver.maxResultSize: 2g",
        "```",
    ])


def render(runs: list[dict[str, Any]]) -> str:
    """The scaling section: the measured runs, then the projection from the largest local[N] run of every step."""
    complete = [run for run in growing(runs) if set(STEPS_FIXED) <= set(run["steps"])]
    local = [run for run in complete if run["master"].startswith("local[")] or complete
    base = max([run for run in local if parallel_fits(run)] or local, key=twin_rows)
    return "\n\n".join([
        "## Scaling of the whole pipeline (`benchmarks/bench_scaling.py`)",
        "`python -m lia_spark.cli.main run --conf conf/demo.yaml synthetic.rows_per_day=N synthetic.days=D` (the demo "
        f"grid: {base['metrics']['posteriors.settings']} posterior settings, {base['metrics']['utility.settings']} "
        "utility targets, every other setting at its default, MLflow in sqlite), its process tree sampled every "
        "0.5 s; the notes under the table give the machine's load during each run (runs on 2026-11-23 shared it "
        "with other sessions' work). CPU s = CPU seconds of every process the run started, during the step "
        "(`benchmarks/_report.py` SeenProcessesCpu); machine CPU s = the whole machine's busy CPU seconds, a check "
        "that matches it on an idle machine; peak RSS per role, sampled while the step ran; shuffle from Spark's "
        "event log.",
        measured_table(runs),
        run_notes(runs),
        "The steps that grow with the rows (data; posteriors over the one released day; memory over both steps). "
        "The local-cluster runs have separate executor JVMs (`spark.executor.memory` = half the worker's memory) "
        "and Python workers; in the smallest ones fixed costs (executor start, Python worker start, plots) dominate "
        "the per-row figures.",
        linearity_table(runs),
        linearity_summary(runs),
        executor_table(runs),
        "### Projection to the Criteo data on 100 and 1,000 cores",
        projection(base, runs, IngestRates.load()),
        "Configuration to use:",
        recommended_config(),
    ])


def run_key(run: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two recorded runs the same measurement: size, master and steps run."""
    return run["rows_per_day"], run["days"], run["master"], tuple(run["steps"])


def record(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Append a run to :data:`RUNS_FILE` (replacing an earlier run of the same size, master and steps); all runs."""
    runs = json.loads(RUNS_FILE.read_text(encoding="utf-8")) if RUNS_FILE.exists() else []
    runs = [old for old in runs if run_key(old) != run_key(run)] + [run]
    runs.sort(key=lambda item: (item["master"], item["rows_per_day"] * item["days"]))
    RUNS_FILE.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-day", type=int, default=5_000_000)
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--master", default="local[2]", help="local[N] or local-cluster[workers,cores,MB]")
    parser.add_argument("--output", default="/tmp/bench_scaling/run", help="the run's output folder (replaced)")
    parser.add_argument("--stages", default="", help="comma-separated run.stages, e.g. data,posteriors (default all)")
    parser.add_argument("--keep-output", action="store_true",
                        help="keep the output folder: measure the other --stages on an earlier run's data")
    parser.add_argument("--render-only", action="store_true", help="rewrite the section from the recorded runs")
    args = parser.parse_args(argv)
    if args.render_only:
        runs = json.loads(RUNS_FILE.read_text(encoding="utf-8"))
    else:
        run = measure(args.rows_per_day, args.days, args.master, Path(args.output), args.stages,
                      keep_output=args.keep_output)
        print(json.dumps(run, indent=1))
        runs = record(run)
    write_section("scaling", render(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

