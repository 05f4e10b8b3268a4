"""What the server refuses before any route runs: a request for another name than its own
(`Host:`), and a path holding a character that no route or id has.

A page on another site can make a browser send requests to this server by pointing a name of
its own at 127.0.0.1 (DNS rebinding); the request then carries that name in `Host:`. The server
answers only to loopback names and the host it was told to listen on, so such a page meets a
421 before it meets the token.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sentient.vault.document import ID_RULE

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})  # listening on every address of the machine


def host_name(header: str) -> str:
    """The name a `Host:` header asks for, without its port: `[::1]:8765` -> `::1`,
    `LocalHost.:80` -> `localhost`."""
    value = header.strip()
    if value.startswith("["):
        name = value[1:].partition("]")[0]
    elif value.count(":") == 1:
        name = value.partition(":")[0]
    else:
        name = value
    return name.rstrip(".").lower()


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback_ip(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_rule(listen_host: str) -> Callable[[str], bool]:
    """Whether a `Host:` name is one of this server's: a loopback name (localhost, 127.0.0.1,
    [::1], any 127.x address) or the host it listens on. Listening on every address (0.0.0.0),
    it also answers to any address given as numbers (no name, so nothing to rebind) and to the
    machine's own name."""
    configured = host_name(listen_host)
    names = set(LOOPBACK_NAMES) | ({configured} if configured not in WILDCARDS else set())
    every_address = configured in WILDCARDS
    if every_address:
        names.add(socket.gethostname().lower())

    def allowed(name: str) -> bool:
        return name in names or _is_loopback_ip(name) or (every_address and _is_ip(name))

    return allowed


def shown_names(listen_host: str) -> str:
    configured = host_name(listen_host)
    listed = ["localhost", "127.0.0.1", "[::1]"]
    if configured in WILDCARDS:
        listed.append(f"{socket.gethostname().lower()} or any address of this machine")
    elif configured not in LOOPBACK_NAMES:
        listed.append(f"[{configured}]" if ":" in configured else configured)
    return ", ".join(listed)


class RequestGuard:
    """ASGI middleware: 421 for a foreign `Host:`, 400 for a path holding a control character
    (a `%0A` the router would otherwise drop from the end of an id, answering for another id)."""

    def __init__(self, app: ASGIApp, listen_host: str,
                 error_body: Callable[[int, str], dict[str, object]]) -> None:
        self.app = app
        self.listen_host = listen_host
        self.allowed = host_rule(listen_host)
        self.error_body = error_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._host_refusal(scope.get("headers") or ()) or _path_refusal(scope.get("path", ""))
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        await JSONResponse(self.error_body(status, message), status)(scope, _no_receive, send)

    def _host_refusal(self, headers: Iterable[tuple[bytes, bytes]]) -> tuple[int, str] | None:
        hosts = [value for key, value in headers if key == b"host"]
        if not hosts:  # HTTP/1.0 without a Host: no browser sends that
            return None
        raw = hosts[0].decode("latin-1")
        if len(hosts) == 1 and self.allowed(host_name(raw)):
            return None
        shown = raw if raw.isprintable() and len(raw) <= 100 else repr(raw[:100])
        return 421, (f"Host '{shown}' is not a name of this server: it answers to {shown_names(self.listen_host)}. "
                     "Reach it by one of those (a web page that reaches it through a name of its own is refused, "
                     "against DNS rebinding); to serve under another name, start it with that name as --host "
                     "(or api.host in sentient.yaml)")


def _path_refusal(path: str) -> tuple[int, str] | None:
    """400 for a path holding a character that is not printable (a line break, a tab, NUL...):
    no route has one, and no id may (the router would take `/api/memory/x%0A` for `x`)."""
    if path.isprintable():
        return None
    bad = next(ch for ch in path if not ch.isprintable())
    return 400, (f"the path {path!r} holds U+{ord(bad):04X}, a character that no route or id has. Remove it: "
                 f"an id is {ID_RULE}")


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
