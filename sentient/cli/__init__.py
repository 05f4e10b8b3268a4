"""The `sentient` command: parse, call one domain function, print.

One module per command group (`vault`: init, index, search, doctor; `scan`; `serve`; `mcp`;
`chat`; `session`; `task`; `people`; `git`: sync, resolve; `memory`), each adding its commands
with `add_parser(sub)`; the parser is put together here, and `run` opens the workspace a command
works on.

What a command needs beyond the workspace and the scanner is imported by that command, not
at the top of its module: the server (FastAPI, uvicorn) and the agent take most of a second to
import, and the model client, memory, doctor and knowledge modules another tenth, which every
`sentient scan` of one file would wait for. The workspace (the index, the pattern set, the
vault's store) is imported only by a command that opens it: `sentient search` asks a running
`sentient serve` of the vault first (sentient.served), and loads none of it when that answers.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from sentient.cli import chat, git, mcp, people, scan, serve, session, task, vault
from sentient.cli import memory as memory_commands
from sentient.cli.serve import bind, listen
from sentient.cli.vault import cmd_init, doctors_patterns, search_on_server
from sentient.config import NoVaultHere, Settings, load_settings
from sentient.errors import SentientError

if TYPE_CHECKING:
    from sentient.workspace import Workspace

__all__ = ["build_parser", "listen", "main", "run"]

Command = Callable[[argparse.Namespace, "Workspace"], int]
VAULT_HELP = ("the vault: a folder with a sentient.yaml (default: $SENTIENT_VAULT, else the nearest folder "
              "from the current one upwards that has a sentient.yaml)")
# The command groups, in the order `sentient --help` lists them (memory last, and only where
# memory exists in the process: see build_parser).
GROUPS = (vault, scan, serve, mcp, chat, session, task, people, git)


def accept_global_options(parser: argparse.ArgumentParser) -> None:
    """--vault after the command as well as before it (`sentient search --vault X tea`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.add_argument("--vault", type=Path, default=argparse.SUPPRESS, help=VAULT_HELP)
                accept_global_options(child)


class _Version(argparse.Action):
    """--version, the package's version looked up only when asked for (importlib.metadata costs
    every command 15 ms)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        from sentient import __version__

        print(f"sentient {__version__}")
        parser.exit()


def build_parser(*, memory: bool = True) -> argparse.ArgumentParser:
    """The command line. With memory absent from the process there is no `memory` command."""
    parser = argparse.ArgumentParser(
        prog="sentient",
        description="A personal knowledge agent whose memory is a vault of markdown files.",
    )
    parser.add_argument("--vault", type=Path, help=VAULT_HELP)
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add_parser(sub)
    if memory:
        memory_commands.add_parser(sub)
    accept_global_options(parser)
    return parser


def _settings_for(argv: list[str]) -> Settings:
    """Settings of the vault the arguments name, read before the full parse (memory may be
    absent from the process, and then so are its commands)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--vault", type=Path)
    known, _ = pre.parse_known_args(argv)
    return load_settings(known.vault, os.environ)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = run(argv)
        sys.stdout.flush()  # here, so that a reader gone away is noticed here and not at exit
        return code
    except BrokenPipeError:  # `sentient doctor | head -1`: the reader has what it wanted
        with suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so that the flush at exit fails no more
        return 128 + 13  # as a process killed by SIGPIPE


def run(argv: list[str]) -> int:
    try:
        settings: Settings | None = _settings_for(argv)
        failure: SentientError | None = None
    except SentientError as exc:  # reported below unless the command needs no vault (init, --help)
        settings, failure = None, exc
    parser = build_parser(memory=settings is None or settings.features.memory)
    args = parser.parse_args(argv)
    try:
        if args.command == "init":
            return cmd_init(args)
        if settings is not None and args.command == "search":
            answered = search_on_server(args, settings)  # None: no server of this vault answered
            if answered is not None:
                return answered
        from sentient.workspace import open_workspace

        if settings is None and args.command == "scan" and isinstance(failure, NoVaultHere):
            settings = Settings(vault=Path.cwd())  # scan needs no vault: the packaged patterns judge
        if settings is None:
            raise failure or SentientError("no vault")
        handler: Command = args.handler
        if args.command == "scan" and any(os.path.isdir(path) for path in args.paths):
            from sentient.threats import parallel

            parallel.warm_up()  # a folder may hold megabytes: helpers start while the patterns load
        if args.command == "doctor":
            args.patterns, args.patterns_error = doctors_patterns(settings)
            if args.patterns_error is None:
                with open_workspace(settings, args.patterns) as workspace:
                    return handler(args, workspace)
            import tempfile

            with tempfile.TemporaryDirectory(prefix="sentient-doctor-") as apart:  # an index of its own
                with open_workspace(settings, args.patterns, Path(apart) / "index.sqlite") as workspace:
                    return handler(args, workspace)
        if args.command != "serve":
            with open_workspace(settings) as workspace:
                return handler(args, workspace)
        with bind(args, settings) as args.socket, open_workspace(settings) as workspace:
            return handler(args, workspace)
    except SentientError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
