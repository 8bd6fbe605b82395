"""Write one benchmark's results into its own marked section of BENCHMARKS.md (other sections untouched)."""
from __future__ import annotations

import os
import platform
import threading
import time
from pathlib import Path

BENCHMARKS_FILE = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"
HEADER = "# Benchmarks\n\nEach section is rewritten by the script named in it (`make bench` runs them all).\n"


def machine_line() -> str:
    """One line naming the machine the numbers were measured on."""
    load = os.getloadavg()[0]
    return (f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, "
            f"{platform.processor() or platform.machine()}, Python {platform.python_version()}; "
            f"1-minute load average {load:.1f} when the section was written "
            f"({'above the core count: shared, noisy' if load > (os.cpu_count() or 1) else 'within the core count'}).")


def write_section(name: str, markdown: str, *, after: str | None = None) -> None:
    """Replace the section delimited by ``<!-- begin:name -->`` / ``<!-- end:name -->``; a new section goes right
    after the section called ``after`` when there is one, else at the end of the file. A section whose text is
    unchanged (re-rendered from kept results) keeps the machine line of the run that measured it."""
    begin, end = f"<!-- begin:{name} -->", f"<!-- end:{name} -->"
    body = markdown.strip()
    block = f"{begin}\n{body}\n\n{machine_line()}\n{end}"
    text = BENCHMARKS_FILE.read_text(encoding="utf-8") if BENCHMARKS_FILE.exists() else HEADER
    anchor = f"<!-- end:{after} -->" if after else None
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        old_block, tail = rest.split(end, 1)
        if old_block.strip().rpartition("\n\n")[0] == body:
            return
        text = head + block + tail
    elif anchor and anchor in text:
        head, rest = text.split(anchor, 1)
        text = head + anchor + "\n\n" + block + rest
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    BENCHMARKS_FILE.write_text(text, encoding="utf-8")


def publish(name: str, markdown: str, *, render: bool, after: str | None = None) -> None:
    """Print a section and, with ``render``, write it into BENCHMARKS.md (:func:`write_section`)."""
    print(markdown)
    if render:
        write_section(name, markdown, after=after)


def _process_stats() -> dict[int, list[str]]:
    """pid -> the fields of /proc/<pid>/stat after the command name (index 1 = ppid, 11/12 = utime/stime and 13/14 =
    reaped children's utime/stime in clock ticks, 19 = start time), for every live process."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as handle:
                    stats[int(entry)] = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
    return stats


def _tree(stats: dict[int, list[str]], root: int) -> list[int]:
    """The live processes of ``stats`` under ``root``, ``root`` included."""
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    found, pending = [], [root] if root in stats else []
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found


def process_tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds (user + system) of a process and its live descendants (Spark's JVM, its Python workers), each
    with its reaped children's time, from /proc: the steadier cost figure on a shared machine, where wall times
    depend on other jobs. An ended process's time is lost unless a live ancestor reaped it and collects reaped
    time, which PySpark's daemon does not: across a measurement where Python workers may end, sample
    :class:`SeenProcessesCpu` instead."""
    stats, ticks = _process_stats(), os.sysconf("SC_CLK_TCK")
    return sum(sum(int(value) for value in stats[pid][11:15]) / ticks for pid in _tree(stats, root or os.getpid()))


class SeenProcessesCpu:
    """CPU seconds (user + system) of every process ever seen in the tree under ``root``: each followed by pid and
    start time, its own time kept at its last reading after it ends. :func:`process_tree_cpu_seconds` loses an
    ended process's whole time when nobody alive in the tree accumulates it: PySpark's daemon does not collect its
    workers' time as reaped-children time, and a worker whose daemon Spark stops is re-parented to init. This misses
    the last sampling interval of each ended process and the processes that live shorter than one. Call
    :meth:`update` every sampling interval; it returns the total."""

    def __init__(self, root: int):
        self.root = root
        self.seen: dict[tuple[int, str], float] = {}  # (pid, start time) -> own CPU s at the last reading
        self.lock = threading.Lock()
        self.ticks = os.sysconf("SC_CLK_TCK")

    def update(self) -> float:
        """Add the tree's new processes, read every seen one still alive; the total CPU seconds."""
        stats = _process_stats()
        with self.lock:
            for pid in _tree(stats, self.root):
                self.seen.setdefault((pid, stats[pid][19]), 0.0)
            for pid, started in self.seen:
                fields = stats.get(pid)
                if fields is not None and fields[19] == started:
                    self.seen[pid, started] = (int(fields[11]) + int(fields[12])) / self.ticks
            return sum(self.seen.values())


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot (user, nice, system, irq, softirq, steal of /proc/stat): on
    an otherwise idle machine, a check of a process tree's CPU seconds."""
    with open("/proc/stat", encoding="ascii") as handle:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value)
                                                                   for value in handle.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
