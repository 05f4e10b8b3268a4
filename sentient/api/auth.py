"""The bearer token every route needs: made on first start, kept in .sentient/token (mode
0600, inside the git-ignored state folder, never in the vault's history)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from fastapi import HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sentient.served import TOKEN_FILE

BEARER = "bearer"  # the security scheme's name in /openapi.json
# Declares the scheme in the OpenAPI schema, so that clients and the /docs page send the token.
bearer = HTTPBearer(scheme_name=BEARER, auto_error=False,
                    description="the token `sentient serve` made on its first start (in the vault's .sentient/token)")


def load_or_create_token(state_dir: Path) -> tuple[str, bool]:
    """(token, created now). The file is created with mode 0600 before anything is written."""
    path = state_dir / TOKEN_FILE
    if path.exists():
        token = path.read_text(encoding="utf-8").strip()
        if token:
            return token, False
    state_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)
    return token, True


def presented_token(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str | None:
    if credentials is not None and credentials.credentials.strip():
        return credentials.credentials.strip()
    path = request.url.path
    if path in ("/docs", "/openapi.json") or path.startswith("/docs/"):  # a browser cannot send the header
        return request.query_params.get("token")
    return None


REFUSED = "missing or wrong token: send 'Authorization: Bearer <token>' (the token is in .sentient/token)"


def token_matches(given: str | None, expected: str) -> bool:
    # compared as bytes: compare_digest refuses str holding non-ASCII characters (a 500 before)
    return given is not None and secrets.compare_digest(given.encode("utf-8", "surrogatepass"),
                                                        expected.encode("utf-8"))


def require_token(request: Request,
                  credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]) -> None:
    """FastAPI dependency: 401 unless the request carries the server's token."""
    if not token_matches(presented_token(request, credentials), request.app.state.token):
        raise HTTPException(status_code=401, detail=REFUSED, headers={"WWW-Authenticate": "Bearer"})


class TokenGate:
    """The same check for an ASGI app mounted beside the routes (the MCP endpoint), which no
    route dependency reaches: 401 unless `Authorization: Bearer <token>` is the server's token."""

    def __init__(self, app: ASGIApp, token: str, error_body: Callable[[int, str], dict[str, object]]) -> None:
        self.app = app
        self.token = token
        self.error_body = error_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        scheme, _, given = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and token_matches(given.strip() or None, self.token):
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            refusal = JSONResponse(self.error_body(401, REFUSED), 401, headers={"WWW-Authenticate": "Bearer"})
            await refusal(scope, _no_receive, send)
        else:  # a websocket: closed before it opens
            await send({"type": "websocket.close", "code": 1008})


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
