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
