"""`sentient session list|knowledge|pin`: recent sessions, what one is told, and its pins."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from sentient.cli.common import count_in

if TYPE_CHECKING:
    from sentient.vault.document import Document
    from sentient.workspace import Workspace


def add_parser(sub: Any) -> None:
    session = sub.add_parser("session", help="list sessions, show what a session is told, set its pins")
    verbs = session.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="recent sessions")
    listing.add_argument("--limit", type=count_in(1, 500), default=20, help="how many, 1-500 (default 20)")
    listing.set_defaults(handler=cmd_session_list)
    knowledge = verbs.add_parser("knowledge", help="the knowledge block of a session and whether it is delivered")
    knowledge.add_argument("id")
    knowledge.set_defaults(handler=cmd_session_knowledge)
    pin = verbs.add_parser("pin", help="set a session's pins (none to clear)")
    pin.add_argument("id")
    pin.add_argument("pins", nargs="*", help="note:ID or plan:ID")
    pin.set_defaults(handler=cmd_session_pin)


def cmd_session_list(args: argparse.Namespace, workspace: Workspace) -> int:
    workspace.index.sync()
    sessions = sorted(workspace.index.documents("session"), key=lambda d: d.updated or "", reverse=True)
    for doc in sessions[: args.limit]:
        print(f"{doc.key:<28} {doc.updated or '':<21} {doc.title}")
    return 0


def cmd_session_knowledge(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.agent.turn import session_knowledge

    knowledge, delivered, problems = session_knowledge(workspace, args.id)
    if knowledge is None:
        told = "no pin it may be shown" if problems else "no pins"
        print(f"nothing to tell this session ({told}, and no memory index in it)")
        for problem in problems:
            print(f"left out: {problem}")
        return 0
    print(knowledge.text, end="")
    state = "delivered: the session already carries it" if delivered else "not delivered: the next message carries it"
    print(f"\n{knowledge.signature}\n{state}")
    for problem in knowledge.problems:
        print(f"left out: {problem}")
    return 0


def cmd_session_pin(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.agent.turn import check_pins
    from sentient.knowledge import KnowledgeBuilder, require_pins
    from sentient.prompts import Prompts

    def pin(document: Document) -> Document:
        pinned = document.meta.get("pins") or []
        return document.replace({"pins": require_pins(workspace.vault, check_pins(args.pins), pinned)})

    pins = [str(ref) for ref in workspace.vault.update("session", args.id, transform=pin).meta["pins"]]
    print(f"pins of {args.id}: {', '.join(pins) or 'none'}")
    for problem in KnowledgeBuilder(workspace, Prompts(workspace.vault.root)).pin_problems(pins):
        print(f"  note: {problem}")
    return 0
