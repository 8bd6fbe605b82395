"""Run every benchmark script in turn (each rewrites its own section of BENCHMARKS.md).

Usage: ``python benchmarks/run_all.py [name ...]`` with names such as ``bounds`` or ``posteriors_spark``
(default: all). Benchmarks are throughput measurements, not tests: run them on an otherwise idle machine.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(names: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    chosen = [s for s in scripts if not names or s.stem.removeprefix("bench_") in names]
    unknown = set(names) - {s.stem.removeprefix("bench_") for s in scripts}
    if unknown:
        print(f"unknown benchmark(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    failed = []
    for script in chosen:
        started = time.monotonic()
        print(f"== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode != 0:
            failed.append(script.name)
        print(f"== {script.name}: {time.monotonic() - started:.0f} s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
