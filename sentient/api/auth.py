"""The bearer token every route needs: made on first start, kept in .sentient/token (mode
0600, inside the git-ignored state folder, never in the vault's history)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Annotated

from fastapi import HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

TOKEN_FILE = "token"
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


def require_token(request: Request,
                  credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]) -> None:
    """FastAPI dependency: 401 unless the request carries the server's token."""
    expected: str = request.app.state.token
    given = presented_token(request, credentials)
    # compared as bytes: compare_digest refuses str holding non-ASCII characters (a 500 before)
    if given is None or not secrets.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8")):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong token: send 'Authorization: Bearer <token>' (the token is in .sentient/token)",
            headers={"WWW-Authenticate": "Bearer"},
        )
