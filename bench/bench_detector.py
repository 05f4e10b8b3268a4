"""Benchmark the learned second stage beside the patterns alone (issue 25).

    python bench/bench_detector.py [--mb 4] [--repeat 5] [--write]

- Rates on the test split of train/corpus.py (texts no training step saw: `split()` puts each
  distinct text in train, validation or test by a hash of the text), per group: blunt direct
  attacks in English, attacks in Spanish, French and German (and Portuguese, Italian, Dutch),
  memory-like notes, benign texts full of trigger words; and on the project's held-out files
  (tests/fixtures/threats/holdout-*.yaml, never trained on), each for the patterns alone and
  for both stages.
- Throughput: about --mb megabytes of the benign corpus's notes, judged as an index sync does
  (`scan_many`, this process alone, no helpers) and one note at a time (`scan`), patterns alone
  and both stages in turn, the median of --repeat runs.

--write puts the tables under "## Learned detector (issue 25)" in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import median_seconds, write_section  # noqa: E402
from sentient.threats import PatternSet, scan, scan_many  # noqa: E402
from sentient.threats.learned import Detector  # noqa: E402
from train.corpus import FIXTURES, rows, split  # noqa: E402

HEADING = "## Learned detector (issue 25)"
GROUPS = [
    ("attack-en", "blunt direct attacks, English", ">= 90%"),
    ("attack-es", "attacks in Spanish", ">= 60%"),
    ("attack-fr", "attacks in French", ">= 60%"),
    ("attack-de", "attacks in German", ">= 60%"),
    ("attack-pt", "attacks in Portuguese", ""),
    ("attack-it", "attacks in Italian", ""),
    ("attack-nl", "attacks in Dutch", ""),
    ("memory", "memory-like notes (facts, preferences, to-dos; seven languages)", "<= 0.1%"),
    ("trigger", "benign texts full of trigger words", "<= 3%"),
]


def share(found: Sequence[list[object]]) -> str:
    flagged = sum(bool(item) for item in found)
    return f"{100 * flagged / max(len(found), 1):.1f}% ({flagged}/{len(found)})"


def rates(alone: PatternSet, both: PatternSet) -> list[str]:
    groups: dict[str, list[str]] = {}
    for text, _, group in rows():
        if split(text) == "test":
            groups.setdefault(group, []).append(text)
    lines = ["| test split (never trained on) | texts | bar | patterns alone | patterns + learned |",
             "|---|---|---|---|---|"]  # fmt: skip
    for group, name, bar in GROUPS:
        texts = groups.get(group, [])
        lines.append(f"| {name} | {len(texts)} | {bar} | {share(scan_many(texts, alone, helpers=False))} | "
                     f"{share(scan_many(texts, both, helpers=False))} |")  # fmt: skip
    lines += ["", "| the project's held-out files (written before, never trained on) | texts | patterns alone | "
              "patterns + learned |", "|---|---|---|---|"]  # fmt: skip
    for name in ("holdout-hostile", "holdout-benign", "benign"):
        texts = [item["text"] for item in yaml.safe_load((FIXTURES / f"{name}.yaml").read_text(encoding="utf-8"))]
        label = f"{name}.yaml" + (" (trained on: the false-alarm check of the corpus)" if name == "benign" else "")
        lines.append(f"| {label} | {len(texts)} | {share(scan_many(texts, alone, helpers=False))} | "
                     f"{share(scan_many(texts, both, helpers=False))} |")  # fmt: skip
    return lines


def throughput(alone: PatternSet, both: PatternSet, megabytes: float, repeat: int) -> list[str]:
    notes = [item["text"] for item in yaml.safe_load((FIXTURES / "benign.yaml").read_text(encoding="utf-8"))]
    texts: list[str] = []
    while sum(map(len, texts)) < megabytes * 1e6:
        texts.extend(notes)
    files = ["\n\n".join(texts[start : start + 40]) for start in range(0, len(texts), 40)]
    size, file_size = sum(map(len, texts)) / 1e6, sum(map(len, files)) / 1e6
    one = texts[:2000]
    sets = {"patterns alone": alone, "patterns + learned": both}
    for patterns in sets.values():  # warm: Hyperscan's databases, the detector's weights
        scan_many(texts[:50], patterns, helpers=False)
    found: dict[str, list[list[float]]] = {name: [[], [], []] for name in sets}
    for _ in range(repeat):  # in turn, so both see the same load on the machine
        for name, patterns in sets.items():
            found[name][0].append(median_seconds(lambda p=patterns: scan_many(texts, p, helpers=False), 1))
            found[name][1].append(median_seconds(lambda p=patterns: scan_many(files, p, helpers=False), 1))
            found[name][2].append(median_seconds(lambda p=patterns: [scan(text, p) for text in one], 1))
    lines = ["| way | entry-sized `scan_many` (as an index sync) | file-sized `scan_many` | `scan()` per note |",
             "|---|---|---|---|"]  # fmt: skip
    medians = {name: [statistics.median(runs) for runs in found[name]] for name in sets}
    for name, (entries, whole, each) in medians.items():
        lines.append(f"| {name} | {size / entries:.1f} MB/s | {file_size / whole:.1f} MB/s | "
                     f"{1e6 * each / len(one):.0f} µs |")  # fmt: skip
    base, new = medians["patterns alone"], medians["patterns + learned"]
    lines.append(f"| ratio | {new[0] / base[0]:.2f}x the time | {new[1] / base[1]:.2f}x | {new[2] / base[2]:.2f}x |")
    lines.append("")
    lines.append(f"{len(texts):,} notes ({size:.1f} MB), {len(files):,} files of ~4 KB; median of {repeat} runs each.")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=4.0, help="megabytes of text for the throughput rows")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each throughput row (the median is shown)")
    parser.add_argument("--write", action="store_true", help="write the tables into bench/RESULTS.md")
    args = parser.parse_args()
    started = datetime.now(UTC)
    load = os.getloadavg()
    alone, both = PatternSet.load(learned=None), PatternSet.load()
    detector = Detector.load()
    lines = [
        HEADING,
        "",
        f"`python bench/bench_detector.py --mb {args.mb:g} --repeat {args.repeat}` on "
        f"{started:%Y-%m-%d %H:%M} UTC; {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
        f"when it started. Detector `{detector.digest}` (n-grams {list(detector.ngrams)} bytes, "
        f"2^{detector.bits} buckets, threshold {detector.threshold:.3f}); pattern set {both.version}.",
        "",
        "### Detection",
        "",
        *rates(alone, both),
        "",
        "### Throughput (benign notes)",
        "",
        *throughput(alone, both, args.mb, args.repeat),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        write_section(text)


if __name__ == "__main__":
    main()
