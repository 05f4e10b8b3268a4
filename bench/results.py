"""bench/RESULTS.md: one section a benchmark, each rewritten in place by its own benchmark."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SECTION = "\n## "  # what starts a section (a "### " table heading inside one does not)


def write_section(section: str, path: Path = RESULTS) -> None:
    """Put `section` (its "## " heading line first) in place of the section with that heading,
    or at the end: read just before writing, every other section left as it was. Copies of the
    heading further down (an older benchmark appended instead of replacing) are dropped."""
    current = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    heading, _, _ = section.removeprefix("## ").partition("\n")
    new = section.removeprefix("## ").rstrip("\n") + "\n"
    head, *sections = current.split(SECTION)
    kept: list[str] = []
    placed = False
    for part in sections:
        if part.partition("\n")[0].strip() != heading.strip():
            kept.append(part)
        elif not placed:
            kept.append(new)
            placed = True
    if not placed:
        kept.append(new)
    kept = [part if part.endswith("\n") else part + "\n" for part in kept]
    path.write_text(SECTION.join([head if head.endswith("\n") else head + "\n", *kept]), encoding="utf-8")


def machine(*more: str) -> str:
    """The machine a result was measured on, for its section: CPUs, memory, Python, the system,
    then `more` (SQLite's version, the load average, ...)."""
    cpu, gib = platform.processor() or "unknown CPU", 0.0
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
        memory = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
        gib = int(memory.split()[1]) / 1024 / 1024
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    parts = [f"{os.cpu_count()} CPUs ({cpu})", f"{gib:.0f} GB RAM", f"Python {platform.python_version()}",
             f"{platform.system()} {platform.release()}", *more]
    return ", ".join(parts)


def median_seconds(work: Callable[[], object], runs: int) -> float:
    """The median wall time, in seconds, of `runs` calls of `work`."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
