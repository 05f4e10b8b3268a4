"""Building the session-knowledge block: a session with 20 pins in a vault of 10k memory
entries. Measures a cold build (first after start), warm builds (nothing changed: no file is
read for unchanged entries), and a build after one memory entry changed.

    .venv/bin/python bench/bench_knowledge.py [--entries 10000] [--pins 20] [--write]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gen_vault import generate  # noqa: E402
from bench.results import machine, write_section  # noqa: E402
from sentient.config import load_settings  # noqa: E402
from sentient.knowledge import KnowledgeBuilder  # noqa: E402
from sentient.prompts import Prompts  # noqa: E402
from sentient.workspace import open_workspace  # noqa: E402

TARGET_MS = 5.0




def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--pins", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="sentient-bench-knowledge-")) / "vault"
    try:
        generate(args.entries, folder)
        notes = folder / "pins" / "notes"
        notes.mkdir(parents=True, exist_ok=True)
        for number in range(args.pins):
            (notes / f"note-{number}.md").write_text(f"# Pinned note {number}\n\n" + "A line of the note.\n" * 20)
        workspace = open_workspace(load_settings(folder, {}))
        workspace.index.sync()
        builder = KnowledgeBuilder(workspace, Prompts(folder))
        pins = [f"note:note-{n}" for n in range(args.pins)]

        def build_ms() -> float:
            started = time.perf_counter()
            knowledge = builder.build(pins=pins, scope=None, memory_allowed=True)
            elapsed = (time.perf_counter() - started) * 1000
            assert knowledge is not None and len(knowledge.pins) == args.pins and knowledge.memory is not None
            return elapsed

        cold = build_ms()
        warm = sorted(build_ms() for _ in range(args.rounds))
        some_entry = next((folder / "memory").rglob("*.md"))
        changed = []
        for number in range(10):
            some_entry.write_text(some_entry.read_text() + f"\nedit {number}\n")
            workspace.index.update(some_entry)
            changed.append(build_ms())
        workspace.close()
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    p50 = statistics.median(warm)
    p95 = warm[int(len(warm) * 0.95) - 1]
    verdict = "met" if p50 < TARGET_MS else "missed"
    table = (
        f"`.venv/bin/python bench/bench_knowledge.py {' '.join(sys.argv[1:])}`".replace(" `", "`")
        + f" on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {machine()}; {args.entries:,} memory entries, "
        f"{args.pins} pinned notes; medians of {args.rounds} warm builds.\n\n"
        "| build | p50 | p95 |\n|---|---|---|\n"
        f"| cold (first after start: index read, every entry judged) | {cold:.1f} ms | |\n"
        f"| warm, nothing changed | {p50:.2f} ms | {p95:.2f} ms |\n"
        f"| after one entry changed (index update, re-list) | {statistics.median(changed):.1f} ms | "
        f"{max(changed):.1f} ms |\n\n"
        f"Target: warm p50 under {TARGET_MS:g} ms: **{verdict}**.\n"
    )
    print(table)
    if args.write:
        write_section(f"## Session knowledge (issue 5)\n\n{table}")


if __name__ == "__main__":
    main()
