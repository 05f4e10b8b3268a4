"""Where a cold `sentient index` keeps its memory, by phase (issues 23 and 24):
`python bench/bench_index_memory.py VAULT [--no-embed]`.

Runs `sentient index` in this process on VAULT (its `.sentient/` deleted first: a cold index),
sampling the resident set every 10 ms from a thread, and prints each phase's peak: anonymous
memory (the interpreter's and numpy's) and file-backed (libraries, and the embedding model's
weights, memory-mapped from the user's cache), and the pieces embedded per document kind.
Phases: the CLI's imports; the sync (files to rows); the model's loading; the embedding pass
(the vectors file is written at its end). Memory is not load-sensitive: run it on a busy machine.
Make a vault with `python bench/gen_vault.py N DIR`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def resident() -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of this process, in MB."""
    found: dict[str, int] = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            name = line.split(":")[0]
            if name in ("VmRSS", "RssAnon", "RssFile"):
                found[name] = int(line.split()[1]) // 1024
    return found


class Phases:
    """The peak resident set of each phase, taken by a sampling thread."""

    def __init__(self) -> None:
        self.now = "imports"
        self.peaks: dict[str, dict[str, int]] = {}
        self.started = time.perf_counter()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            sample, phase = resident(), self.now
            if sample["VmRSS"] > self.peaks.get(phase, {"VmRSS": -1})["VmRSS"]:
                self.peaks[phase] = sample
            time.sleep(0.01)

    def enter(self, phase: str) -> None:
        time.sleep(0.03)  # the last phase's peak taken
        self.now = phase
        print(f"{time.perf_counter() - self.started:7.1f} s  {phase}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("vault", type=Path)
    parser.add_argument("--no-embed", action="store_true", help="the sync alone")
    args = parser.parse_args(argv)
    if not (args.vault / "sentient.yaml").is_file():
        print(f"{args.vault} is not a vault (no sentient.yaml); make one with bench/gen_vault.py", file=sys.stderr)
        return 1
    shutil.rmtree(args.vault / ".sentient", ignore_errors=True)
    os.chdir(args.vault)
    phases = Phases()
    from sentient import embedding
    from sentient.cli import main as cli
    from sentient.index import vectors
    from sentient.index.index import Index

    kinds: Counter[str] = Counter()
    pieces: Counter[str] = Counter()
    sync, embed, load, cut = Index._sync, Index.embed, embedding._load, vectors.pieces

    def phase_sync(self: Index, *given: Any, **named: Any) -> Any:
        phases.enter("sync")
        return sync(self, *given, **named)

    def phase_embed(self: Index, *given: Any, **named: Any) -> Any:
        if args.no_embed:
            return 0
        phases.enter("model loading")
        return embed(self, *given, **named)

    def phase_pass() -> None:
        load()
        phases.enter("embedding pass, then the vectors file")

    def counted(kind: str, title: str, body: str) -> list[str]:
        made = cut(kind, title, body)
        kinds[kind] += 1
        pieces[kind] += len(made)
        return made

    Index._sync, Index.embed, embedding._load, vectors.pieces = (  # type: ignore[method-assign]
        phase_sync, phase_embed, phase_pass, counted)
    cli(["index"])
    phases.enter("done")
    print(f"\n{'phase':40} {'peak RSS':>9} {'anon':>6} {'file':>6}  (MB)")
    for phase, peak in phases.peaks.items():
        print(f"{phase:40} {peak['VmRSS']:9} {peak['RssAnon']:6} {peak['RssFile']:6}")
    for kind in kinds:
        print(f"{kind}: {kinds[kind]} documents, {pieces[kind]} pieces ({pieces[kind] / kinds[kind]:.1f} each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
