"""The `sentient serve` of this vault, as a command on this machine reaches it: where it listens
(`.sentient/server.json`, written by `advertise` while it serves), whether its process runs,
its token (`.sentient/token`), and one question asked of it.

One HTTP/1.0 request on a plain socket (not httpx, nor http.client, which bring email parsing
and ssl): a command that asks the server a question is one that wants to start in a few tens of
milliseconds. HTTP/1.0, so that the answer is the bytes up to the end of the connection (no
chunks). Any failure to answer (no server,
a stale file, a server stopping or serving another vault, a token that differs, an error)
is None, and the command does the work itself."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

SERVER_FILE = "server.json"  # in .sentient/: where a server of this vault listens
TOKEN_FILE = "token"  # in .sentient/: the bearer token it checks (sentient.api.auth)
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})  # the names of this machine a command asks at
ANSWER_WITHIN = 2.0  # seconds to connect, and then for each read, before the command does the work itself

@contextmanager
def advertise(state_dir: Path, url: str) -> Iterator[None]:
    """Say, while serving, where this vault's server listens (`.sentient/server.json`: its URL
    and process id), so that a command such as `sentient task run` or `sentient search` hands
    its work to it."""
    path = state_dir / SERVER_FILE
    mine = json.dumps({"url": url, "pid": os.getpid()})
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(mine)
    except OSError as exc:
        import logging

        logging.getLogger("sentient.api").warning("%s could not be written (%s): commands will do their work "
                                                  "themselves", path, exc)
    try:
        yield
    finally:
        with suppress(OSError):
            if path.read_text() == mine:  # not another server's, started since
                path.unlink()


def recorded(state_dir: Path) -> tuple[str, str] | None:
    """(url, token) of the server `state_dir/server.json` names, if its process runs and the
    token file is there; None otherwise. Asks the server nothing."""
    try:
        found = json.loads((state_dir / SERVER_FILE).read_text(encoding="utf-8"))
        os.kill(int(found["pid"]), 0)
        url = str(found["url"])
        token = (state_dir / TOKEN_FILE).read_text(encoding="utf-8").strip()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (url, token) if token else None


def ask(state_dir: Path, vault: Path, path: str, params: dict[str, str]) -> dict[str, Any] | None:
    """The JSON object the server answers to GET `path`?`params`, when it says in it that it
    serves `vault` (an error's body never does: a refused token, a bad request, a failure);
    None for any other outcome."""
    server = recorded(state_dir)
    if server is None:
        return None
    import socket
    from urllib.parse import urlencode, urlsplit

    url, token = server
    try:
        where = urlsplit(url)
        address = (where.hostname or "", where.port or 80)
    except ValueError:  # a port that is not one
        return None
    if where.scheme != "http" or where.hostname not in LOOPBACK:
        return None  # a server that listens on another address is not asked: the token stays on this machine
    request = (f"GET {path}?{urlencode(params)} HTTP/1.0\r\nHost: {where.netloc}\r\nAuthorization: Bearer {token}\r\n"
               "Accept: application/json\r\n\r\n")
    try:
        with socket.create_connection(address, timeout=ANSWER_WITHIN) as connection:
            connection.sendall(request.encode("utf-8"))
            received = []
            while chunk := connection.recv(1 << 16):
                received.append(chunk)
        answer = json.loads(b"".join(received).partition(b"\r\n\r\n")[2])  # the body, after the headers
    except (OSError, ValueError, UnicodeError):
        return None
    if not isinstance(answer, dict) or answer.get("vault") != str(vault.resolve()):
        return None  # an error, or another vault's server (its files copied here?): not this vault's answer
    return answer
