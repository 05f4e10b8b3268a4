"""`sentient memory list|show|add|forget|allow|history|revert`: only where memory exists in the process."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from sentient.cli.common import entry_text, plural, read_stdin, utf8_argument

if TYPE_CHECKING:
    from sentient.workspace import Workspace


def add_parser(sub: Any) -> None:
    memory = sub.add_parser("memory", help="list, show, add, forget and allow memory entries")
    verbs = memory.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="every entry, flagged ones marked")
    listing.add_argument("--category")
    listing.add_argument("--scope")
    listing.add_argument("--flagged", action="store_true", help="only flagged entries")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_memory_list)
    show = verbs.add_parser("show", help="one entry in full, with its judgment")
    show.add_argument("id", help="a memory entry's id, or note:ID, plan:ID, skill:ID ... or a path in the vault")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cmd_memory_show)
    add = verbs.add_parser("add", help="write a new entry")
    add.add_argument("title")
    add.add_argument("text", type=entry_text, help="the entry's text, or - to read it from stdin")
    add.add_argument("--id", help="its id (default: made from the title)")
    add.add_argument("--category", default="general")
    add.add_argument("--scope", default="global")
    add.set_defaults(handler=cmd_memory_add)
    forget = verbs.add_parser("forget", help="remove an entry's file")
    forget.add_argument("id")
    forget.set_defaults(handler=cmd_memory_forget)
    allow = verbs.add_parser("allow", help="let exactly this revision of a flagged entry through")
    allow.add_argument("id", help="a memory entry's id, or note:ID, plan:ID, skill:ID ... or a path in the vault")
    allow.add_argument("--revision", help="the revision you looked at (refused if it changed since)")
    allow.set_defaults(handler=cmd_memory_allow)
    history = verbs.add_parser("history", help="an entry's revisions in the vault's git history, or one of them")
    history.add_argument("id")
    history.add_argument("--show", metavar="REV", help="print the entry as this revision left it")
    history.add_argument("--limit", type=int, default=50, help="how many revisions at most (default 50)")
    history.add_argument("--json", action="store_true")
    history.set_defaults(handler=cmd_memory_history)
    revert = verbs.add_parser("revert", help="bring back an entry as one of its revisions had it (a new change)")
    revert.add_argument("id")
    revert.add_argument("rev", help="a commit from `sentient memory history ID`")
    revert.add_argument("--revision", help="the entry's current revision you read (refused if it changed since)")
    revert.set_defaults(handler=cmd_memory_revert)


def cmd_memory_list(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.memory import list_entries
    entries = list_entries(workspace, category=args.category, scope=args.scope, flagged_only=args.flagged)
    if args.json:
        print(json.dumps([e.as_dict() for e in entries], ensure_ascii=False, indent=2))
        return _not_listed(workspace)
    for entry in entries:
        mark = "!" if entry.withheld else ("~" if entry.flagged else " ")
        print(f"{mark} {entry.id:<32} {entry.title}")
        if entry.flagged:
            state = "allowed at this revision" if entry.allowed else "flagged, withheld from the model"
            print(f"    {state}: {', '.join(entry.patterns)}  ({entry.path})")
    flagged, withheld = sum(e.flagged for e in entries), sum(e.withheld for e in entries)
    print(f"{len(entries)} entries" + (f", {flagged} flagged ({withheld} withheld from the model, {flagged - withheld} "
                                       "allowed by you; see `sentient memory show ID`)" if flagged else ""))
    return _not_listed(workspace)


def _not_listed(workspace: Workspace) -> int:
    """Warn on stderr of the memory `memory list` left out: each folder that cannot be listed,
    then how many files cannot be read (doctor tells why, file by file). 1 if any, else 0."""
    from sentient.memory import unreadable_memory
    missing = unreadable_memory(workspace)
    for problem in missing:
        print(f"warning: {problem} (the entries in it are not listed)", file=sys.stderr)
    unread = sum(problem.kind == "memory" and problem not in missing for problem in workspace.index.problems())
    if unread:
        print(f"warning: {plural(unread, 'memory file')} could not be read, so not listed; "
              "`sentient doctor` says why and how to fix each", file=sys.stderr)
    return 1 if missing or unread else 0


def cmd_memory_show(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.memory import get_entry
    entry = get_entry(workspace, args.id)
    if args.json:
        print(json.dumps(entry.as_dict(body=True), ensure_ascii=False, indent=2))
        return 0
    print(entry.title)
    print(f"{entry.path} · {entry.category or '-'} · {entry.scope or '-'} · source {entry.source or '-'}")
    print(f"revision {entry.revision}" + ("  (edited outside the app)" if entry.edited_outside else ""))
    if entry.guard is not None and str(entry.guard.get("checked")).lower() != "true":
        print(f"{entry.guard.get('note')}: {entry.guard.get('reason')}")
    if entry.flagged:
        print(f"allow revision {entry.allow_revision} (of its title, text, category and source; for --revision)")
    if entry.flagged:
        state = "allowed by you at this revision" if entry.allowed else "WITHHELD from the model"
        print(f"! reads like instructions: {state}")
        for match in entry.matches:
            print(f"    {match}")
        if entry.withheld:
            print(f"  fine after all? allow it: sentient memory allow {entry.ref}")
    print()
    print(entry.body, end="" if entry.body.endswith("\n") else "\n")
    return 0


def cmd_memory_add(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.memory import create_entry
    title = utf8_argument(args.title, "the title")
    body = read_stdin() if args.text == "-" else utf8_argument(args.text, "the text")
    meta = {"category": utf8_argument(args.category, "--category"), "scope": utf8_argument(args.scope, "--scope")}
    entry = create_entry(workspace, title=title, body=body, id=args.id, meta=meta)
    print(f"saved memory {entry.id} ({entry.path})")
    if entry.flagged:
        print(f"! it reads like instructions ({', '.join(entry.patterns)}): kept, but withheld from the model")
    return 0


def cmd_memory_forget(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.memory import forget_entry
    print(f"forgot memory {args.id} (removed {forget_entry(workspace, args.id)})")
    return 0


def cmd_memory_allow(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.memory import allow_entry
    entry = allow_entry(workspace, args.id, args.revision)
    print(f"allowed {entry.kind} {entry.id} ({entry.path}) at {entry.allow_revision}; an edit will judge it again")
    return 0


def cmd_memory_history(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.versions import entry_history, entry_version
    if args.show:
        version = entry_version(workspace, args.id, args.show)
        if args.json:
            print(json.dumps(version.as_dict(workspace), ensure_ascii=False, indent=2))
            return 0
        revision = version.revision
        print(f"{revision.short} {revision.date} {'app' if revision.by_app else revision.author}: {revision.subject}")
        print(revision.path)
        print()
        print("(forgotten in this commit)" if version.text is None else version.text, end="")
        return 0
    found = entry_history(workspace, args.id, limit=args.limit)
    if args.json:
        print(json.dumps([revision.as_dict() for revision in found], ensure_ascii=False, indent=2))
        return 0
    for revision in found:
        who = "app" if revision.by_app else f"person ({revision.author})"
        source = f"  [{revision.source}]" if revision.source and revision.source not in revision.subject else ""
        print(f"{revision.short}  {revision.date}  {who:<16} {revision.subject}{source}")
    print(f"{plural(len(found), 'revision')} of memory {args.id}" + (
        f"; see one: sentient memory history {args.id} --show REV" if found else " committed yet"))
    return 0


def cmd_memory_revert(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.versions import revert_entry
    entry = revert_entry(workspace, args.id, args.rev, expected_revision=args.revision)
    print(f"restored memory {entry.id} ({entry.path}) as {args.rev} had it; now at {entry.revision}")
    if entry.flagged:
        print(f"! it reads like instructions ({', '.join(entry.patterns)}): kept, but withheld from the model")
    return 0
