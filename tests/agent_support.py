"""Building agents on fixture vaults for tests: real vault, real index, scripted model."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from sentient.agent.turn import Agent, open_agent
from sentient.cli import main
from sentient.config import load_settings
from sentient.workspace import open_workspace

SCRIPTED = "scripted/test"


def configure(vault: Path, **sections: Any) -> None:
    """Merge settings into the vault's sentient.yaml (a test's own configuration)."""
    path = vault / "sentient.yaml"
    current = yaml.safe_load(path.read_text()) if path.exists() else {}
    current = current or {}
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(current.get(key), dict):
            current[key] = {**current[key], **value}
        else:
            current[key] = value
    path.write_text(yaml.safe_dump(current, sort_keys=False))


def agent_on(vault: Path, environ: Mapping[str, str] | None = None) -> Agent:
    settings = load_settings(vault, {"SENTIENT_MODEL": SCRIPTED, **(environ or {})})
    return open_agent(open_workspace(settings), {})


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 (a free port) for the duration: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def respond(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str = "application/json") -> None:
    """Answer a test server's request with `body`."""
    handler.send_response(status)
    handler.send_header("content-type", content_type)
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def refusing_model(status: int, error: str) -> type[BaseHTTPRequestHandler]:
    """A model server that answers every call with `status` and {"error": error}, at once."""

    class Refusing(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            respond(self, status, json.dumps({"error": error}).encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Refusing


def sentient(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run a `sentient` command in this process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
