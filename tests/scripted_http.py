"""The scripted model over HTTP: an OpenAI-compatible server on 127.0.0.1, for a `sentient`
that runs in another process (an installed wheel, `run.py`), where the in-process `scripted/`
provider of tests/scripted.py cannot reach.

    with ScriptedServer() as server:
        server.queue(text("Anika teaches in Mysuru."))
        # sentient.yaml: models: {chat: {model: openai/scripted, api_base: <server.base_url>,
        #                                api_key_env: SCRIPTED_KEY}}  and SCRIPTED_KEY=anything
        ...
        assert server.requests[0]["messages"][-1]["content"] == "Who is Anika?"

It answers `POST .../chat/completions` (plain or streamed, tool calls included) with the queued
replies in order (the same `text(...)` / `call(...)` values as the in-process provider), and
NOTHING_QUEUED when none is left; `GET .../models` lists the one model. Every request body is
kept in `requests`. Standard library only, so it runs wherever the tests do.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from tests.scripted import NOTHING_QUEUED, STREAM_PIECE, ScriptedReply, text

MODEL = "scripted"


class ScriptedServer:
    def __init__(self, *, usage: bool = True) -> None:
        """`usage=False`: a server that never reports token counts (as some providers do not)."""
        self.usage = usage
        self._lock = threading.Lock()
        self._queue: deque[ScriptedReply] = deque()
        self.requests: list[dict[str, Any]] = []
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._http.serve_forever, name="scripted-http", daemon=True)

    @property
    def base_url(self) -> str:
        """What `api_base` says: http://127.0.0.1:<port>/v1."""
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def queue(self, *replies: ScriptedReply | str) -> ScriptedServer:
        with self._lock:
            self._queue.extend(text(r) if isinstance(r, str) else r for r in replies)
        return self

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._http.shutdown()
        self._http.server_close()

    def _next(self, body: dict[str, Any]) -> ScriptedReply:
        with self._lock:
            self.requests.append(body)
            return self._queue.popleft() if self._queue else text(NOTHING_QUEUED)


def _message(reply: ScriptedReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [
            {"id": c.id or f"call_{uuid.uuid4().hex[:12]}", "type": "function",
             "function": {"name": c.name, "arguments": c.arguments_json()}}
            for c in reply.calls
        ]
    return message


def _usage(body: dict[str, Any], reply: ScriptedReply) -> dict[str, int]:
    prompt = len(json.dumps(body.get("messages", []))) // 4
    completion = max(1, len(reply.text) // 4)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
            return

        def _send_json(self, status: int, value: Any) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                model = {"id": MODEL, "object": "model", "owned_by": "tests"}
                self._send_json(200, {"object": "list", "data": [model]})
            else:
                self._send_json(404, {"error": {"message": f"no {self.path} here", "type": "invalid_request_error"}})

        def do_POST(self) -> None:
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send_json(404, {"error": {"message": f"no {self.path} here", "type": "invalid_request_error"}})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            reply = server._next(body)
            answer_id, created = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time())
            if not body.get("stream"):
                self._send_json(200, {
                    "id": answer_id, "object": "chat.completion", "created": created, "model": MODEL,
                    "choices": [{"index": 0, "message": _message(reply), "finish_reason": reply.finish}],
                    **({"usage": _usage(body, reply)} if server.usage else {}),
                })
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()

            def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
                event = {"id": answer_id, "object": "chat.completion.chunk", "created": created, "model": MODEL,
                         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()

            chunk({"role": "assistant", "content": ""})
            for start in range(0, len(reply.text), STREAM_PIECE):
                chunk({"content": reply.text[start:start + STREAM_PIECE]})
            for number, tool_call in enumerate(_message(reply).get("tool_calls", [])):
                chunk({"tool_calls": [{"index": number, **tool_call}]})
            asked = (body.get("stream_options") or {}).get("include_usage")
            usage = _usage(body, reply) if asked and server.usage else None
            chunk({}, reply.finish, **({"usage": usage} if usage else {}))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler
