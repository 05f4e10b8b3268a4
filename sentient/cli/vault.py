"""`sentient init`, `index`, `search` and `doctor`: make a vault, index it, search it, examine it."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sentient.cli.common import Progress, count_in, plural, utf8_argument
from sentient.search import MODES
from sentient.vault import KIND_NAMES

if TYPE_CHECKING:
    from sentient.config import Settings
    from sentient.threats import PatternSet
    from sentient.workspace import Workspace

# The fields of a hit `sentient search --json` prints (GET /api/search has two more: allowed, ref).
JSON_FIELDS = ("kind", "id", "path", "title", "snippet", "score", "flagged", "withheld", "patterns")


def add_parser(sub: Any) -> None:
    init = sub.add_parser("init", help="make a new vault (git-ready)")
    init.add_argument("path", help="folder for the new vault")
    init.set_defaults(handler=None)

    index = sub.add_parser("index", help="bring the search index up to date")
    index.add_argument("--rebuild", action="store_true", help="redo the index from the files")
    index.set_defaults(handler=cmd_index)

    search = sub.add_parser("search", help="search the vault: what it knows first, then chat sessions")
    search.add_argument("query", nargs="+", help="words to look for")
    search.add_argument("--kind", choices=sorted(KIND_NAMES), help="only this kind of file (session: chats)")
    search.add_argument("--limit", type=count_in(1, 100), default=10, help="how many hits, 1-100 (default 10)")
    search.add_argument("--json", action="store_true", help="print JSON")
    search.add_argument("--mode", choices=MODES,
                        help="rank by words (bm25), by meaning (vector) or both fused (hybrid: the default when "
                             "the embedding model loads, else bm25)")
    search.set_defaults(handler=cmd_search)

    doctor = sub.add_parser("doctor", help="report unreadable and flagged files and what to do")
    doctor.add_argument("--no-models", action="store_true", help="skip asking each model for a one-token answer")
    doctor.add_argument("--record", action="store_true",
                        help="write the current revision and threat judgment into files edited outside Sentient")
    doctor.set_defaults(handler=cmd_doctor)


def cmd_init(args: argparse.Namespace) -> int:
    from sentient.vault.layout import init_vault
    for step in init_vault(Path(args.path)):
        print(step)
    print(f"next: cd {args.path} && sentient doctor")
    return 0


def cmd_index(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.embedding import threads as embedding_threads

    progress = Progress("indexing")
    index = workspace.index
    report = index.rebuild(progress) if args.rebuild else index.sync(progress)
    progress.finish()
    embedding = Progress("embedding")
    start, threads = time.perf_counter(), embedding_threads()
    embedded = index.embed(embedding, threads=threads)
    embedding.finish()
    counts = index.counts()
    held = ", ".join(plural(counts[k], k) for k in KIND_NAMES if counts.get(k))
    print(f"{workspace.vault.root}: {held or 'nothing yet'}")
    problems = f"; {report.problems} unreadable (see `sentient doctor`)" if report.problems else ""
    print(
        f"indexed in {report.elapsed:.2f} s: {report.added} added, {report.updated} updated, "
        f"{report.removed} removed, {report.unchanged} unchanged{problems}"
    )
    if embedded:
        took = time.perf_counter() - start
        print(f"embedded {plural(embedded, 'document')} in {took:.2f} s ({embedded / took:.0f} a second)")
    elif (off := workspace.semantic_problem(load=False)) is not None:  # not loaded to say nothing is wrong
        print(off)
    return 0


def cmd_search(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.search import show

    query = utf8_argument(" ".join(args.query), "the query")
    return print_found(args, show(workspace, query, kind=args.kind, limit=args.limit, mode=args.mode).as_dict())


def search_on_server(args: argparse.Namespace, settings: Settings) -> int | None:
    """The search asked of a running `sentient serve` of this vault, printed as cmd_search
    prints it; None when no server answers (none runs, it is stopping, it serves another vault,
    the token differs): then the command searches itself. The server's watcher keeps its index
    current, its model and vectors are loaded: this process loads neither the index nor numpy."""
    from sentient import served

    query = utf8_argument(" ".join(args.query), "the query")
    params = {"q": query, "limit": str(args.limit), **({"kind": args.kind} if args.kind else {}),
              **({"mode": args.mode} if args.mode else {})}
    answer = served.ask(settings.state_dir, settings.vault, "/api/search", params)
    return None if answer is None else print_found(args, answer)


def print_found(args: argparse.Namespace, found: dict[str, Any]) -> int:
    """Print a search's answer (sentient.search.Shown.as_dict, here or from a server)."""
    if found["problem"]:
        print(found["problem"], file=sys.stderr)
    if waiting := found.get("waiting"):  # (a server of an older version does not say)
        print(f"{waiting:,} {'document is' if waiting == 1 else 'documents are'} not embedded yet, found by "
              "their words alone: `sentient index` embeds them (a running `sentient serve` does by itself)",
              file=sys.stderr)
    hits: list[dict[str, Any]] = found["hits"]
    if args.json:
        print(json.dumps([{field: hit[field] for field in JSON_FIELDS} for hit in hits], ensure_ascii=False, indent=2))
        return 0
    if not hits:
        print("no matches")
        return 0
    from sentient.search import snippet_line

    for rank, hit in enumerate(hits, 1):  # one line a hit
        mark = "!" if hit["withheld"] else ("~" if hit["flagged"] else " ")
        line = f"{rank:>2}.{mark}[{hit['kind']}] {hit['id']}  {hit['title']}"
        if hit["flagged"]:
            state = "allowed by you at this revision" if hit["allowed"] else "flagged: withheld from the model"
            line += f"  ({state} ({', '.join(hit['patterns'])}); see `sentient memory show {hit['ref']}`)"
        elif snippet := snippet_line(hit["snippet"], hit["title"]):
            line += f"  — {snippet}"
        print(line)
    if found["more_chats"]:
        print(f"more in chat sessions: sentient search --kind session {' '.join(args.query)}")
    return 0


def doctors_patterns(settings: Settings) -> tuple[PatternSet, str | None]:
    """(the vault's set, None), or (the shipped set, why the vault's own do not load): doctor
    reports a broken pattern as one problem and still examines everything else."""
    from sentient.errors import ConfigError
    from sentient.threats import PatternSet
    from sentient.workspace import load_patterns

    try:
        return load_patterns(settings), None
    except ConfigError as exc:
        return PatternSet.load(), exc.message


def cmd_doctor(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.cli.git import show_conflicts
    from sentient.doctor import allow_command, examine
    from sentient.llm import LLM
    from sentient.record import record, stale
    broken = getattr(args, "patterns_error", None)
    if broken:
        print(f"error: the vault's own threat patterns do not load: {broken}\n"
              "      until they do, `sentient serve` refuses to start, and this report judges with the "
              "shipped patterns alone" + (" (so --record writes nothing)" if args.record else ""), file=sys.stderr)
    if args.record and not broken:
        recorded = record(workspace)
        print(f"recorded the revision and judgment of {plural(len(recorded.written), 'file')}")
        for path in recorded.written:
            print(f"  {path}")
        for message in recorded.failed:
            print(f"  not recorded: {message}")
    llm = None if args.no_models else LLM(workspace.settings, os.environ)
    try:
        diagnosis = examine(workspace, llm)
    finally:
        if llm is not None:
            llm.close()
    held = ", ".join(plural(n, k) for k, n in diagnosis.counts.items() if n)
    print(f"vault {diagnosis.vault}: {held or 'empty'}")
    for note in diagnosis.notes:
        print(note)
    print(f"git: {diagnosis.git}")
    for check in diagnosis.models:
        state = "answers" if check.ok else "does NOT answer"
        print(f"model {check.model} ({', '.join(check.roles)}) {state}: {check.message}")
    if diagnosis.withheld:
        print(f"\n{len(diagnosis.withheld)} file(s) read like instructions; they are kept but never shown to "
              "the model:")
        for entry in diagnosis.withheld:
            print(f"  ! {entry.path}")
            for match in entry.matches:
                print(f"      {match}")
            print(f"      fine after all? allow it: {allow_command(entry, memory=workspace.settings.features.memory)}")
    if diagnosis.allowed:
        print(f"\n{len(diagnosis.allowed)} file(s) read like instructions but you allowed them at their current "
              "revision, so the model is shown them (an edit judges them again):")
        for entry in diagnosis.allowed:
            print(f"  ~ {entry.path}")
            for match in entry.matches:
                print(f"      {match}")
    if diagnosis.conflicts:
        show_conflicts(diagnosis.conflicts, f"\n{plural(len(diagnosis.conflicts), 'conflicting edit')} kept both ways "
                       "by `sentient sync`; neither side is shown to the model until you resolve it:")
    if diagnosis.kept_aside:
        print(f"\n{plural(len(diagnosis.kept_aside), 'save')} of yours kept aside, not lost: an editor saved while "
              "Sentient was writing the same file. Compare each with the file, keep what you want, then delete it:")
        for path in diagnosis.kept_aside:
            print(f"  {path.relative_to(workspace.vault.root)}")
    if diagnosis.problems:
        print(f"\n{len(diagnosis.problems)} file(s) could not be read and are left out:")
        for problem in diagnosis.problems:
            print(f"  {problem.path}")
            print(f"      {problem.reason}. {problem.fix}")
    else:
        print("every file reads fine")
    if not args.record and (edited := len(stale(workspace, unrecorded=False))):
        print(f"{plural(edited, 'file')} edited outside Sentient: the revision and threat judgment in their "
              "frontmatter are out of date (harmless: the index has the current ones); "
              "`sentient doctor --record` writes the current ones in")
    if broken:
        return 2
    return 0 if diagnosis.healthy else 1
