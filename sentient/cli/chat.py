"""`sentient chat`: the agent in the terminal, with line editing and history where there is readline."""

from __future__ import annotations

import argparse
import os
from contextlib import suppress
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sentient.workspace import Workspace

def add_parser(sub: Any) -> None:
    chat = sub.add_parser("chat", help="chat with the agent in the terminal")
    chat.add_argument("--user", help="who is chatting (an id such as maya): with --persona, their facts are "
                      "told and kept (docs/facts.md)")
    chat.add_argument("--persona", help="talk to this persona (personas/<id>.md)")
    chat.set_defaults(handler=cmd_chat)


def cmd_chat(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.agent.turn import open_agent
    from sentient.chat import repl

    try:
        import readline  # here: importing it costs every other command a few milliseconds
    except ImportError:  # not on every platform; the chat works without line editing
        readline = None  # type: ignore[assignment]
    history = workspace.vault.state_dir / "chat_history"
    if readline is not None:
        with suppress(OSError):
            history.parent.mkdir(parents=True, exist_ok=True)
            readline.read_history_file(history)
    agent = open_agent(workspace, os.environ, announce=lambda line: print(line, flush=True))
    try:
        agent.check_caller(args.user, args.persona, ("--user", "--persona"))  # refused before the first line
        if agent.facts is not None:
            agent.facts.resume()  # extractions a process scheduled and did not run
        return repl(agent, input, print, user=args.user, persona=args.persona)
    finally:
        agent.close()
        if readline is not None:
            with suppress(OSError):
                readline.write_history_file(history)
