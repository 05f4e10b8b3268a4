"""The `sentient` command: parse, call one domain function, print."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from sentient.config import Settings, load_settings
from sentient.doctor import examine
from sentient.errors import SentientError
from sentient.vault.kinds import KINDS
from sentient.vault.layout import init_vault
from sentient.workspace import Workspace, open_workspace

KIND_LABELS = {
    "memory": ("memory entry", "memory entries"),
    "note": ("pinned note", "pinned notes"),
    "plan": ("plan", "plans"),
    "skill": ("skill", "skills"),
    "session": ("session", "sessions"),
    "task": ("task", "tasks"),
    "notepad": ("notepad", "notepads"),
    "run": ("task run", "task runs"),
    "people": ("fact set", "fact sets"),
}


def _plural(count: int, kind: str) -> str:
    one, many = KIND_LABELS.get(kind, (kind, kind + "s"))
    return f"{count} {one if count == 1 else many}"


class Progress:
    """A one-line progress bar on stderr, drawn only for a terminal and only for long work."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < 500 or (done % 200 and done != total):
            return
        width = 30
        filled = width * done // max(total, 1)
        bar = "#" * filled + "." * (width - filled)
        print(f"\r{self.label} [{bar}] {done}/{total}", end="", file=self.stream, flush=True)
        self.drawn = True

    def finish(self) -> None:
        if self.drawn:
            print(file=self.stream)


# --- commands ---------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    for step in init_vault(Path(args.path)):
        print(step)
    print(f"next: cd {args.path} && sentient doctor")
    return 0


def cmd_index(args: argparse.Namespace, workspace: Workspace) -> int:
    progress = Progress("indexing")
    index = workspace.index
    report = index.rebuild(progress) if args.rebuild else index.sync(progress)
    progress.finish()
    counts: dict[str, int] = {}
    for doc in index.documents():
        counts[doc.kind] = counts.get(doc.kind, 0) + 1
    held = ", ".join(_plural(counts[k], k) for k in KINDS if counts.get(k))
    print(f"{workspace.vault.root}: {held or 'nothing yet'}")
    problems = f"; {report.problems} unreadable (see `sentient doctor`)" if report.problems else ""
    print(
        f"indexed in {report.elapsed:.2f} s: {report.added} added, {report.updated} updated, "
        f"{report.removed} removed, {report.unchanged} unchanged{problems}"
    )
    return 0


def cmd_search(args: argparse.Namespace, workspace: Workspace) -> int:
    workspace.index.sync()
    hits = workspace.index.search(" ".join(args.query), kind=args.kind, limit=args.limit)
    if args.json:
        rows = [
            {
                "kind": hit.kind,
                "id": hit.key,
                "path": str(hit.path),
                "title": hit.title,
                "snippet": hit.snippet,
                "score": round(hit.score, 4),
            }
            for hit in hits
        ]
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return 0
    if not hits:
        print("no matches")
        return 0
    for rank, hit in enumerate(hits, 1):
        print(f"{rank:>2}. [{hit.kind}] {hit.key}  {hit.title}  ({hit.score:.2f})")
        print(f"    {hit.path}")
        if hit.snippet:
            print(f"    {hit.snippet}")
    return 0


def cmd_doctor(args: argparse.Namespace, workspace: Workspace) -> int:
    diagnosis = examine(workspace)
    held = ", ".join(_plural(n, k) for k, n in diagnosis.counts.items() if n)
    print(f"vault {diagnosis.vault}: {held or 'empty'}")
    for note in diagnosis.notes:
        print(note)
    if diagnosis.problems:
        print(f"\n{len(diagnosis.problems)} file(s) could not be read and are left out:")
        for problem in diagnosis.problems:
            print(f"  {problem.path}")
            print(f"      {problem.reason}. {problem.fix}")
        return 1
    print("every file reads fine")
    return 0


# --- parser -----------------------------------------------------------------------------

Command = Callable[[argparse.Namespace, Workspace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sentient",
        description="A personal knowledge agent whose memory is a vault of markdown files.",
    )
    parser.add_argument("--vault", type=Path, help="the vault folder (default: $SENTIENT_VAULT or the current folder)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = sub.add_parser("init", help="make a new vault (git-ready)")
    init.add_argument("path", help="folder for the new vault")
    init.set_defaults(handler=None)

    index = sub.add_parser("index", help="bring the search index up to date")
    index.add_argument("--rebuild", action="store_true", help="redo the index from the files")
    index.set_defaults(handler=cmd_index)

    search = sub.add_parser("search", help="search the vault")
    search.add_argument("query", nargs="+", help="words to look for")
    search.add_argument("--kind", choices=sorted(KINDS), help="only this kind of file")
    search.add_argument("--limit", type=int, default=10, help="how many hits (default 10)")
    search.add_argument("--json", action="store_true", help="print JSON")
    search.set_defaults(handler=cmd_search)

    doctor = sub.add_parser("doctor", help="report unreadable files and what to do")
    doctor.set_defaults(handler=cmd_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "init":
            return cmd_init(args)
        settings: Settings = load_settings(args.vault, os.environ)
        handler: Command = args.handler
        with open_workspace(settings) as workspace:
            return handler(args, workspace)
    except SentientError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
