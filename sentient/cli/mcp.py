"""`sentient mcp`: the vault as an MCP server over stdio, for a client that starts it (a desktop
chat app, an editor, a terminal agent). stdout carries the protocol alone; anything said for a
person goes to stderr. The index is synced once at start and kept current by the watcher, as
in `serve`. A task run is handed to the server serving this vault (as `sentient task run` does);
with none, the tool says to start `sentient serve`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from sentient.cli.task import running_server, start_on
from sentient.errors import SentientError

if TYPE_CHECKING:
    from sentient.workspace import Workspace

POLICIES = ("read-write", "read-only", "off")


def add_parser(sub: Any) -> None:
    mcp = sub.add_parser("mcp", help="serve the vault to an MCP client over stdio (docs/mcp.md)")
    mcp.add_argument("--client", help="the client's name, for its policy (mcp.clients) and as the provenance of "
                     "what it saves (default: the name the client gives)")
    mcp.add_argument("--policy", choices=POLICIES, help="what the client may do, instead of what mcp.clients "
                     "says: read-write, read-only, or off (no memory, no writes)")
    mcp.add_argument("--persona", help="a persona (personas/<id>.md) whose prompt the client is given as the "
                     "server's instructions")
    mcp.set_defaults(handler=cmd_mcp)


def cmd_mcp(args: argparse.Namespace, workspace: Workspace) -> int:
    import logging

    import anyio
    from mcp.server.stdio import stdio_server

    from sentient.agent.turn import open_agent
    from sentient.api.mcp import build_server, client_name
    from sentient.api.mcp_tools import Backend
    from sentient.personas import get_persona, prompt_of
    from sentient.watcher import Watcher

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="sentient mcp: %(message)s")
    persona = None
    if args.persona is not None:
        get_persona(workspace, args.persona, "--persona")  # an unknown one is refused, naming the known ones
        persona = prompt_of(workspace, args.persona)
    workspace.index.sync()
    agent = open_agent(workspace, os.environ)
    backend = Backend(agent, start_run=lambda task: hand_run(workspace, task))
    server = build_server(lambda: backend, client=client_name(args.client) if args.client else None,
                          policy=args.policy, persona=persona)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        with Watcher(workspace):
            anyio.run(serve)
    finally:
        agent.close()
    return 0


def hand_run(workspace: Workspace, task: str) -> str:
    """Start a run on the server that serves this vault; its run id. SentientError when none does."""
    server = running_server(workspace)
    if server is None:
        raise SentientError("no `sentient serve` serves this vault; start it, and task_run hands runs to it")
    return start_on(server, task)
