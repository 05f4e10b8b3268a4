"""A scripted model behind litellm, so every test runs the real `sentient.llm` path.

    def test_recall_is_offered(scripted):
        scripted.queue(call("memory_recall", query="Anika"), text("She teaches in Mysuru."))
        ...  # settings with `model: scripted/test`
        assert "memory_recall" in scripted.offered_tools[0]
        assert "Mysuru" not in scripted.all_prompt_text()

The `scripted` fixture registers a fresh `Scripted` as litellm's `scripted/` provider for one
test. Replies are served in order: `text(...)`, `call(name, **args)`, `calls(call(...), ...)`,
an exception (`scripted.fail(...)`), or a function of the request (for parallel helpers, whose
order is not fixed). With nothing queued it answers NOTHING_QUEUED and notes the request in
`unscripted`. Every request is recorded. Sync, async and streaming calls all work, tool calls
included. Thread-safe.

conftest.py sets LITELLM_LOCAL_MODEL_COST_MAP before this module imports litellm.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import litellm
import pytest
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import (
    ChatCompletionMessageToolCall,
    Choices,
    Function,
    GenericStreamingChunk,
    Message,
    ModelResponse,
    Usage,
)

PROVIDER = "scripted"
MODEL = "scripted/test"  # what a test's settings say: `model: scripted/test`
NOTHING_QUEUED = "(scripted: nothing queued)"
STREAM_PIECE = 8  # characters per streamed text chunk, so a stream has several deltas


@dataclass(frozen=True)
class ScriptedCall:
    """One tool call to send. `arguments` as a str is sent verbatim (malformed JSON on purpose)."""

    name: str
    arguments: dict[str, Any] | str
    id: str | None = None

    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class ScriptedReply:
    """What the model says next: text, tool calls, or both."""

    text: str = ""
    calls: tuple[ScriptedCall, ...] = ()
    finish_reason: str | None = None  # None: "tool_calls" when there are calls, else "stop"

    @property
    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.calls else "stop")


Responder = Callable[[dict[str, Any]], ScriptedReply]
"""Builds the reply from the recorded request (see Scripted.requests for its keys)."""

Queued = ScriptedReply | BaseException | Responder | str  # a str is short for text(str)


def text(content: str) -> ScriptedReply:
    """A plain text answer."""
    return ScriptedReply(text=content)


def call(name: str, /, **arguments: Any) -> ScriptedReply:
    """A reply with one tool call; `arguments` become its JSON arguments."""
    return ScriptedReply(calls=(ScriptedCall(name, arguments),))


def raw_call(name: str, arguments_json: str) -> ScriptedReply:
    """A tool call whose arguments string is sent as given, e.g. broken JSON."""
    return ScriptedReply(calls=(ScriptedCall(name, arguments_json),))


def calls(*replies: ScriptedReply, text: str = "") -> ScriptedReply:
    """One reply holding the tool calls of several `call(...)`s (parallel tool calls)."""
    return ScriptedReply(text=text, calls=tuple(c for reply in replies for c in reply.calls))


def _strings(value: Any) -> Iterator[str]:
    """Every string inside messages or schemas, however nested."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
    elif hasattr(value, "model_dump"):
        yield from _strings(value.model_dump())


class Scripted(CustomLLM):
    """The scripted model. Queue replies, run the code under test, then read the records.

    Each entry of `requests` is a dict: `model` ("scripted/test"), `messages` (a deep copy),
    `tools` (offered tool names), `tool_schemas`, `tool_choice`, `stream`, `api_base`,
    `api_key`, `timeout`, and `params` (other options litellm passed on, e.g. max_tokens).
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._queue: deque[Queued] = deque()
        self.requests: list[dict[str, Any]] = []
        self.unscripted: list[int] = []  # indexes of requests answered with NOTHING_QUEUED

    # -- what tests call -------------------------------------------------------------

    def queue(self, *replies: Queued) -> Scripted:
        """Replies for the next calls, in order."""
        with self._lock:
            self._queue.extend(text(reply) if isinstance(reply, str) else reply for reply in replies)
        return self

    def fail(self, exc: BaseException | None = None) -> Scripted:
        """Make the next call raise `exc` (default: a connection error, which is transient)."""
        error = exc or litellm.APIConnectionError(
            message="scripted: connection refused", llm_provider=PROVIDER, model="test"
        )
        return self.queue(error)

    @property
    def pending(self) -> int:
        """How many queued replies no call has taken yet."""
        with self._lock:
            return len(self._queue)

    @property
    def offered_tools(self) -> list[list[str]]:
        """The tool names offered in each request, in order."""
        with self._lock:
            return [list(request["tools"]) for request in self.requests]

    @property
    def last_request(self) -> dict[str, Any]:
        with self._lock:
            return self.requests[-1]

    def all_prompt_text(self) -> str:
        """Every string the model was shown in every request (messages and tool schemas)."""
        with self._lock:
            requests = list(self.requests)
        return "\n".join(
            piece
            for request in requests
            for part in (request["messages"], request["tool_schemas"])
            for piece in _strings(part)
        )

    # -- litellm's side ---------------------------------------------------------------

    def _next(
        self,
        model: str,
        messages: list[Any],
        optional_params: dict[str, Any],
        stream: bool,
        api_base: str | None,
        api_key: str | None,
        timeout: Any,
    ) -> ScriptedReply:
        params = dict(optional_params)
        schemas = params.pop("tools", None) or []
        request: dict[str, Any] = {
            "model": f"{PROVIDER}/{model}",
            "messages": copy.deepcopy(messages),
            "tools": [schema.get("function", {}).get("name", "") for schema in schemas],
            "tool_schemas": copy.deepcopy(schemas),
            "tool_choice": params.pop("tool_choice", None),
            "stream": stream,
            "api_base": api_base,
            "api_key": api_key,
            "timeout": timeout,
            "params": {k: v for k, v in params.items() if k not in {"max_retries", "stream", "stream_options"}},
        }
        with self._lock:
            self.requests.append(request)
            item: Queued | None = self._queue.popleft() if self._queue else None
            if item is None:
                self.unscripted.append(len(self.requests) - 1)
        if item is None:
            return text(NOTHING_QUEUED)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ScriptedReply):
            return item
        assert not isinstance(item, str)  # queue() made it a ScriptedReply
        return item(request)

    def _response(
        self, reply: ScriptedReply, model: str, messages: list[Any], response: ModelResponse
    ) -> ModelResponse:
        tool_calls = [
            ChatCompletionMessageToolCall(
                id=c.id or f"call_{uuid.uuid4().hex[:12]}",
                type="function",
                function=Function(name=c.name, arguments=c.arguments_json()),
            )
            for c in reply.calls
        ]
        message = Message(role="assistant", content=reply.text or None, tool_calls=tool_calls or None)
        response.choices = [Choices(index=0, finish_reason=reply.finish, message=message)]
        response.model = f"{PROVIDER}/{model}"
        response.created = int(time.time())
        response.usage = self._usage(reply, messages)
        response._hidden_params["response_cost"] = 0.0  # as the embedded model's handler does: nothing to price
        return response

    def _usage(self, reply: ScriptedReply, messages: list[Any]) -> Usage:
        prompt = max(1, sum(len(s) for s in _strings(messages)) // 4)
        completion = max(1, (len(reply.text) + sum(len(c.arguments_json()) for c in reply.calls)) // 4)
        return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)

    def _chunks(self, reply: ScriptedReply, messages: list[Any]) -> Iterator[GenericStreamingChunk]:
        def chunk(content: str = "", tool_use: Any = None) -> GenericStreamingChunk:
            return {
                "text": content,
                "tool_use": tool_use,
                "is_finished": False,
                "finish_reason": "",
                "usage": None,
                "index": 0,
            }

        for start in range(0, len(reply.text), STREAM_PIECE):
            yield chunk(reply.text[start : start + STREAM_PIECE])
        for index, c in enumerate(reply.calls):
            raw = c.arguments_json()
            half = len(raw) // 2
            call_id = c.id or f"call_{uuid.uuid4().hex[:12]}"
            # the first piece names the call, the second carries the rest of its arguments
            yield chunk(
                tool_use={
                    "id": call_id,
                    "type": "function",
                    "index": index,
                    "function": {"name": c.name, "arguments": raw[:half]},
                }
            )
            yield chunk(
                tool_use={
                    "id": None,
                    "type": "function",
                    "index": index,
                    "function": {"name": None, "arguments": raw[half:]},
                }
            )
        usage = self._usage(reply, messages)
        yield {
            "text": "",
            "tool_use": None,
            "is_finished": True,
            "finish_reason": reply.finish,
            "index": 0,
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            },
        }

    # litellm passes everything by keyword; the rest of its arguments are of no use here.

    def completion(
        self,
        *,
        model: str,
        messages: list[Any],
        model_response: ModelResponse,
        optional_params: dict[str, Any],
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: Any = None,
        **_: Any,
    ) -> ModelResponse:
        reply = self._next(model, messages, optional_params, False, api_base, api_key, timeout)
        return self._response(reply, model, messages, model_response)

    async def acompletion(
        self,
        *,
        model: str,
        messages: list[Any],
        model_response: ModelResponse,
        optional_params: dict[str, Any],
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: Any = None,
        **_: Any,
    ) -> ModelResponse:
        reply = self._next(model, messages, optional_params, False, api_base, api_key, timeout)
        return self._response(reply, model, messages, model_response)

    def streaming(
        self,
        *,
        model: str,
        messages: list[Any],
        optional_params: dict[str, Any],
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: Any = None,
        **_: Any,
    ) -> Iterator[GenericStreamingChunk]:
        reply = self._next(model, messages, optional_params, True, api_base, api_key, timeout)
        return self._chunks(reply, messages)

    async def astreaming(
        self,
        *,
        model: str,
        messages: list[Any],
        optional_params: dict[str, Any],
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: Any = None,
        **_: Any,
    ) -> AsyncIterator[GenericStreamingChunk]:
        reply = self._next(model, messages, optional_params, True, api_base, api_key, timeout)
        for piece in self._chunks(reply, messages):
            yield piece


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    """A fresh scripted model registered as litellm's `scripted/` provider for one test."""
    handler = Scripted()
    previous = litellm.custom_provider_map
    litellm.custom_provider_map = [
        *(item for item in previous if item["provider"] != PROVIDER),
        {"provider": PROVIDER, "custom_handler": handler},
    ]
    try:
        yield handler
    finally:
        litellm.custom_provider_map = previous


@pytest.fixture(autouse=True)
def _close_event_loop_left_by_litellm() -> Iterator[None]:
    """litellm's sync OpenAI-compatible path calls asyncio.get_event_loop(), which on the main
    thread sets a new loop that nothing closes; the next asyncio.run() orphans it, and its
    ResourceWarning then fails whichever test the garbage collector happens to run in. Close a
    loop a test left set on the main thread."""
    yield
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:  # no loop set, and none will be made: nothing left behind
        return
    if not loop.is_running():
        loop.close()
        asyncio.set_event_loop(None)
