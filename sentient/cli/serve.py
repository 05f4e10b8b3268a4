"""`sentient serve`: the socket, opened first, then the API and the watcher behind it."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from sentient.errors import SentientError
from sentient.served import LOOPBACK

if TYPE_CHECKING:
    import socket

    from sentient.config import Settings
    from sentient.workspace import Workspace


def add_parser(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run the local API (chat, /v1, memory, sessions, /mcp) and the file watcher")
    serve.add_argument("--host", help="address to listen on (default api.host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port, 1-65535 (default api.port, 8765; 0 picks a free one)")
    serve.set_defaults(handler=cmd_serve)


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (port 0: any free one), or a SentientError saying why not."""
    import socket  # here: only `serve` listens

    if not 0 <= port <= 65535:
        raise SentientError(f"--port {port}: a port is 1-65535, or 0 for any free port")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise SentientError(f"--host {host}: not an address to listen on ({exc}); use 127.0.0.1 (the default) "
                            "or an address of this machine") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)  # now: until it listens, a second server could bind the same port
    except OSError as exc:
        sock.close()
        fix = "choose another --port, or stop what listens there" if exc.errno == errno.EADDRINUSE else \
            "use 127.0.0.1 (the default), an address of this machine, or a port above 1023"
        raise SentientError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); {fix}") from None
    return sock


def bind(args: argparse.Namespace, settings: Settings) -> socket.socket:
    """The socket `serve` listens on, opened before the vault and its patterns load: a bad host
    or port, or one in use, is the first error (and the address printed is the real one)."""
    return listen(args.host or settings.api.host, settings.api.port if args.port is None else args.port)


def cmd_serve(args: argparse.Namespace, workspace: Workspace) -> int:
    import uvicorn

    from sentient.api.app import advertise, create_app
    from sentient.api.auth import load_or_create_token

    settings = workspace.settings
    host = args.host or settings.api.host
    sock: socket.socket = args.socket  # bound by `run` before anything else (see `bind`)
    port = sock.getsockname()[1]
    if host not in LOOPBACK:
        print(f"warning: listening on {host}, not only this machine: anyone who can reach it and has the "
              "token can read and change your vault", file=sys.stderr)
    token, created = load_or_create_token(settings.state_dir)
    shown_host = f"[{host}]" if ":" in host else host
    print(f"Sentient serves {settings.vault} at http://{shown_host}:{port}  (API docs: /docs?token=...)")
    if created:
        print(f"token (shown once; kept in {settings.state_dir / 'token'}): {token}")
    else:
        print(f"token: in {settings.state_dir / 'token'}")
    sys.stdout.flush()
    app = create_app(settings, environ=os.environ, announce=lambda line: print(line, flush=True), host=host)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    local = "127.0.0.1" if host in ("0.0.0.0", "", "::") else shown_host  # where a command on this machine reaches it
    with sock, advertise(settings.state_dir, f"http://{local}:{port}"), suppress(KeyboardInterrupt):
        server.run(sockets=[sock])  # Ctrl-C: uvicorn has stopped gracefully, then raises it again
    return 0 if server.started else 3  # 3: the app did not start (uvicorn logged why)
