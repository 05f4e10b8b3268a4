"""/docs: Swagger UI served from an installed package (fastapi-offline's copy of swagger-ui-dist),
so the page works with no network, already authorised with the token it was opened with, so
"Try it out" sends `Authorization: Bearer <token>`. /openapi.json declares that scheme.

A browser cannot send the header when it opens a page, so /docs, its assets and /openapi.json
also take the token as `?token=` (auth.presented_token).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from sentient.api.auth import BEARER
from sentient.errors import NotFound

ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css", "favicon.png": "image/png"}

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Sentient API</title>
<link rel="icon" href="/docs/favicon.png?token={query}">
<link rel="stylesheet" href="/docs/swagger-ui.css?token={query}">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js?token={query}"></script>
<script>
const ui = SwaggerUIBundle({{
  url: "/openapi.json?token={query}",
  dom_id: "#swagger-ui",
  deepLinking: true,
  onComplete: () => ui.preauthorizeApiKey({scheme}, {token}),
}});
</script>
</body>
</html>
"""


def asset_folder() -> Path:
    """Where the installed Swagger UI files are (fastapi-offline ships them, with no CDN)."""
    return Path(str(resources.files("fastapi_offline") / "static"))


def _script_string(value: str) -> str:
    """A JS string literal that cannot close the <script> it stands in."""
    return json.dumps(value).replace("<", "\\u003c")


router = APIRouter(include_in_schema=False)


@router.get("/openapi.json")
def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/docs")
def docs(request: Request) -> HTMLResponse:
    token: str = request.app.state.token  # the page is only served to whoever presented it
    return HTMLResponse(PAGE.format(query=quote(token, safe=""), scheme=_script_string(BEARER),
                                    token=_script_string(token)))


@router.get("/docs/{name}")
def asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise NotFound(f"no /docs/{name}: the docs page is at /docs?token=<token>")
    return FileResponse(asset_folder() / name, media_type=ASSETS[name])
