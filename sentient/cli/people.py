"""`sentient people list|show|forget`: what is held about each caller, and forgetting it
(docs/facts.md)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sentient.workspace import Workspace



def add_parser(sub: Any) -> None:
    people = sub.add_parser("people", help="see and forget what is held about callers (their facts and sessions)")
    verbs = people.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="callers anything is held about: personas with facts, sessions")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=cmd_people_list)
    show = verbs.add_parser("show", help="everything held about a caller: facts per persona, sessions")
    show.add_argument("user")
    show.add_argument("--json", action="store_true", help="print JSON (as GET /api/people/{user})")
    show.set_defaults(handler=cmd_people_show)
    drop = verbs.add_parser("forget", help="delete a caller's fact files and sessions (all, or one persona's)")
    drop.add_argument("user")
    drop.add_argument("--persona", help="only what is held with this persona")
    drop.set_defaults(handler=cmd_people_forget)


def cmd_people_list(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.facts import callers
    rows = callers(workspace)
    if args.json:
        print(json.dumps({"people": rows}, ensure_ascii=False, indent=2))
        return 0
    if not rows:
        print("nothing is held about any caller (no people/ fact file, no session naming a user)")
    for row in rows:
        sessions = f"{row['sessions']} session{'s' if row['sessions'] != 1 else ''}"
        print(f"{row['user']:<24} {', '.join(row['personas']) or '(no facts)':<32} {sessions}")
    return 0


def cmd_people_show(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.facts import caller
    held = caller(workspace, args.user)
    if args.json:
        print(json.dumps(held, ensure_ascii=False, indent=2))
        return 0
    for facts in held["facts"]:
        print(f"{facts['persona']} ({facts['path']}):")
        if facts.get("problem"):
            print(f"  cannot be read: {facts['problem']}")
        for fact in facts["facts"]:
            mark = f"  WITHHELD ({', '.join(fact['patterns'])}): never told to the model" if fact["withheld"] else ""
            print(f"  - {fact['category']}: {fact['text']}{mark}")
        if not facts["facts"] and not facts.get("problem"):
            print("  (no facts)")
    print(f"sessions ({len(held['sessions'])}):")
    for session in held["sessions"]:
        print(f"  {session['id']:<28} {session['persona'] or '-':<16} {session['title']}")
    return 0


def cmd_people_forget(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.facts import forget
    done = forget(workspace, args.user, args.persona)
    about = f" with {args.persona}" if args.persona else ""
    print(f"forgot {args.user}{about}: {len(done['removed'])} files removed (git history keeps them)")
    for path in done["removed"]:
        print(f"  removed {path}")
    return 0
