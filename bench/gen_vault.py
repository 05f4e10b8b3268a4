"""Generate a realistic vault for benchmarks: `python bench/gen_vault.py N OUT_DIR [--seed S]`.

N memory entries (varied titles, categories and scopes, a third of them in subfolders, bodies of
1-3 short paragraphs) and N/20 chat sessions with short transcripts. Words follow a Zipf
distribution over a vocabulary of common English words and made-up words, so some search terms
match thousands of entries and most match a few. Deterministic for a given seed. Files are
rendered by `Document.render()`, exactly as the app writes them.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sentient.vault.document import Document, slugify
from sentient.vault.kinds import kind
from sentient.vault.transcript import Message

COMMON = """time person year way day thing man world life hand part child eye woman place work week case point
government company number group problem fact school house garden kitchen train station market doctor teacher
family friend mother father sister brother birthday dinner lunch breakfast recipe rice dal curry mango tea coffee
meeting project deadline report budget invoice tax bank loan rent insurance passport visa flight hotel trip beach
mountain river temple museum book novel poem song music guitar piano concert film series game football cricket
bike car bus road repair battery phone laptop server database backup deploy release test bug feature design
idea plan goal habit sleep exercise walk run yoga diet medicine allergy dentist appointment vaccine hospital
weather rain monsoon summer winter spring autumn morning evening night weekend holiday festival diwali wedding
gift letter email message call address password account subscription shop order delivery package price discount
language hindi kannada german english lesson course exam grade homework library notebook pen paper printer
plant tree flower seed soil water sun compost tomato chilli basil tulsi jasmine neem coconut banana lemon
remember prefer like dislike need want buy sell cook clean fix call visit learn teach read write pay send""".split()
SYLLABLES = "ka ri mo su ta ne vi lo ra shi an de pu ge ya ma no ti ko ha be lu sa ve ru mi".split()
CATEGORIES = ["family", "work", "health", "travel", "money", "hobby", "recipes", "people", "ideas", "reading"]
SCOPES = ["global"] * 6 + ["sentient", "garden", "house", "thesis"]
START = datetime(2024, 1, 1, tzinfo=UTC)


def vocabulary(rng: random.Random, size: int = 6000) -> list[str]:
    """Common words first (most frequent), then made-up names of 2-4 syllables."""
    words = list(dict.fromkeys(COMMON))
    seen = set(words)
    while len(words) < size:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


class Writer:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(self.rng)
        self.cumulative = list(itertools.accumulate(1.0 / (rank + 20) for rank in range(len(self.words))))

    def pick(self, count: int) -> list[str]:
        return self.rng.choices(self.words, cum_weights=self.cumulative, k=count)

    def sentence(self) -> str:
        text = " ".join(self.pick(self.rng.randint(6, 14)))
        return text[0].upper() + text[1:] + "."

    def paragraphs(self) -> str:
        return "\n\n".join(
            " ".join(self.sentence() for _ in range(self.rng.randint(1, 4))) for _ in range(self.rng.randint(1, 3))
        )

    def moment(self) -> str:
        return (START + timedelta(seconds=self.rng.randint(0, 3 * 365 * 86400))).strftime("%Y-%m-%dT%H:%M:%SZ")


def memory_entry(writer: Writer, number: int, root: Path) -> tuple[Path, str]:
    rng = writer.rng
    title = " ".join(writer.pick(rng.randint(3, 8))).capitalize()
    key = f"{slugify(title)[:50].strip('-')}-{number:x}"
    category = rng.choice(CATEGORIES)
    folder = root / "memory"
    if rng.random() < 0.35:
        folder = folder / category
        if rng.random() < 0.3:
            folder = folder / rng.choice(["2024", "2025", "archive", "inbox"])
    created = writer.moment()
    meta = {"id": key, "title": title, "category": category, "scope": rng.choice(SCOPES),
            "source": rng.choice(["user", f"session:2026-11/s{number:x}", "url:https://example.org/page"]),
            "untrusted": rng.random() < 0.05, "created": created, "updated": max(created, writer.moment())}
    document = Document("memory", key, folder / f"{key}.md", meta, writer.paragraphs() + "\n", kind("memory").fields)
    meta["revision"] = document.revision
    return document.path, document.replace(meta).render()


def session(writer: Writer, number: int, root: Path) -> tuple[Path, str]:
    rng = writer.rng
    created = writer.moment()
    key = f"s{number:05x}"
    messages = []
    moment = datetime.fromisoformat(created)
    for turn in range(rng.randint(2, 5)):
        moment += timedelta(seconds=rng.randint(20, 600))
        messages.append(Message("user", moment.strftime("%Y-%m-%dT%H:%M:%SZ"), writer.sentence()).render())
        calls: tuple[dict[str, object], ...] = ()
        if rng.random() < 0.3:
            calls = ({"id": f"call_{turn}", "name": "memory_recall", "arguments": {"query": " ".join(writer.pick(2))}},)
        moment += timedelta(seconds=rng.randint(2, 30))
        stamp = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        messages.append(Message("assistant", stamp, writer.paragraphs(), tool_calls=calls).render())
    meta = {"id": key, "title": writer.sentence()[:60].strip(), "scope": rng.choice(SCOPES), "channel": "chat",
            "pins": [], "created": created,
            "updated": moment.strftime("%Y-%m-%dT%H:%M:%SZ")}
    path = root / "sessions" / created[:7] / f"{key}.md"
    return path, Document("session", key, path, meta, "\n".join(messages), kind("session").fields).render()


def generate(count: int, root: Path, seed: int = 7) -> int:
    """Write the vault; returns the number of files written."""
    writer = Writer(seed)
    made = [memory_entry(writer, number, root) for number in range(count)]
    made += [session(writer, number, root) for number in range(count // 20)]
    for folder in {path.parent for path, _ in made}:
        folder.mkdir(parents=True, exist_ok=True)
    for path, text in made:
        path.write_text(text, encoding="utf-8")
    (root / "sentient.yaml").write_text("# benchmark vault\n")
    return len(made)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("count", type=int, help="number of memory entries")
    parser.add_argument("out", type=Path, help="vault folder to create (must not exist)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"{args.out} already exists; choose a new folder", file=sys.stderr)
        return 1
    start = time.perf_counter()
    written = generate(args.count, args.out, args.seed)
    print(f"wrote {written} files to {args.out} in {time.perf_counter() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
