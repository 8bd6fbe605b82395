"""Write one benchmark's results into its own marked section of BENCHMARKS.md (other sections untouched)."""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path

BENCHMARKS_FILE = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"
HEADER = "# Benchmarks\n\nEach section is rewritten by the script named in it (`make bench` runs them all).\n"


def machine_line() -> str:
    """One line naming the machine the numbers were measured on."""
    load = os.getloadavg()[0]
    return (f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, "
            f"{platform.processor() or platform.machine()}, Python {platform.python_version()}; "
            f"1-minute load average {load:.1f} when the section was written (above the core count = shared, noisy).")


def write_section(name: str, markdown: str) -> None:
    """Replace (or append) the section delimited by ``<!-- begin:name -->`` / ``<!-- end:name -->``."""
    begin, end = f"<!-- begin:{name} -->", f"<!-- end:{name} -->"
    block = f"{begin}\n{markdown.strip()}\n\n{machine_line()}\n{end}"
    text = BENCHMARKS_FILE.read_text(encoding="utf-8") if BENCHMARKS_FILE.exists() else HEADER
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    BENCHMARKS_FILE.write_text(text, encoding="utf-8")


def process_tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds (user + system) of a process and its live descendants (Spark's JVM, its Python workers), each
    with its ended and reaped children (a Python worker that exits leaves its time in its parent's), from /proc:
    the steadier cost figure on a shared machine, where wall times depend on other jobs."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[tuple[int, float]]] = {}
    own = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu = sum(int(value) for value in fields[11:15]) / ticks  # utime, stime, cutime, cstime
        own[int(entry)] = cpu
        children.setdefault(int(fields[1]), []).append((int(entry), cpu))
    root = root or os.getpid()
    total, pending = own.get(root, 0.0), [root]
    while pending:
        for pid, cpu in children.get(pending.pop(), []):
            total += cpu
            pending.append(pid)
    return total

