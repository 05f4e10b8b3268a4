"""Model calls: the client every caller uses.

`LLM(settings, environ)` answers `complete(role, messages, tools)` with a `Reply` (text and
tool calls) from the model configured for that role (chat, helper, extraction). Transient
failures are retried with a short backoff; everything else becomes an `LLMError` whose message
names the model and says what to do.

litellm is imported on first use (lazy.py); errors.py and call.py turn its exceptions into
LLMErrors; reply.py and stream.py read its responses.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from sentient.config import CHARS_PER_TOKEN, LOCAL_MODEL, Settings, is_local
from sentient.llm.call import DEFAULT_TIMEOUT, _Call
from sentient.llm.errors import ContextTooLong, LLMError, LLMUnavailable, _is_transient
from sentient.llm.lazy import _litellm, _local_module, _provider_error
from sentient.llm.reply import Reply, ToolCall, _reply_from_response, parse_tool_call
from sentient.llm.stream import _StreamAssembler

if TYPE_CHECKING:
    from sentient.llm.local import LocalModels

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT",
    "LLM",
    "LOCAL_MODEL",
    "ContextTooLong",
    "Endpoint",
    "LLMError",
    "LLMUnavailable",
    "Reply",
    "Resolver",
    "ToolCall",
    "is_local",
    "parse_tool_call",
]

DEFAULT_RETRIES = 2
DEFAULT_BACKOFF = (0.5, 1.0)

T = TypeVar("T")


@dataclass(frozen=True)
class Endpoint:
    """Where one role's calls go: a litellm model string and, optionally, a server and key."""

    model: str
    api_base: str | None = None
    api_key: str | None = None


Resolver = Callable[[str], Endpoint | None]
"""Maps a configured model string (e.g. `local:/models/x.gguf`) to an Endpoint, or None when
the model is not its business. The embedded-model issue plugs in here."""


class LLM:
    """The models of one process, by role. Stateless apart from its settings; safe across threads."""

    def __init__(
        self,
        settings: Settings,
        environ: Mapping[str, str],
        *,
        resolver: Resolver | None = None,
        retries: int = DEFAULT_RETRIES,
        backoff: Sequence[float] = DEFAULT_BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        """`announce` is told, a line at a time, what a person waits for: the embedded model
        starting on first use, and how long it took (chat and serve print it)."""
        self.settings = settings
        self._announce = announce
        self._environ = environ
        self._resolver = resolver
        self._retries = retries
        self._backoff = tuple(backoff) or (0.0,)
        self._sleep = sleep
        self._local: LocalModels | None = None
        self._local_lock = threading.Lock()

    def model_name(self, role: str) -> str:
        """The model string configured for a role, e.g. `ollama_chat/qwen3:8b` or `local`."""
        return self.settings.role(role).model or self.settings.model

    def endpoint(self, role: str) -> Endpoint:
        """Where calls for `role` go. Raises LLMUnavailable when that cannot be known."""
        config = self.settings.role(role)
        model = config.model or self.settings.model
        api_key = None
        if config.api_key_env:
            api_key = self._environ.get(config.api_key_env)
            if not api_key:
                setting = self.settings.role_setting(role, "api_key_env")
                raise LLMUnavailable(
                    f"{setting} names {config.api_key_env}, which is not set: "
                    f"export {config.api_key_env}=<your key>, or change {setting.rsplit('.', 1)[0]} in sentient.yaml"
                )
        resolved = self._resolver(model) if self._resolver is not None else None
        if resolved is not None:
            return resolved
        if is_local(model):
            return Endpoint(self._local_models().litellm_model(model))
        return Endpoint(model, config.api_base, api_key)

    def in_this_process(self, *roles: str) -> bool:
        """Can the model of one of `roles` be reached only from this process? The embedded model
        (its server is this process's child, spoken to over a pipe), a model a resolver maps, and
        one whose litellm provider is registered in this process (a custom handler) can; a model
        reached over the network (a provider's API, a server on this machine) can be reached from
        any. (litellm not imported yet: no provider is registered.)"""
        litellm = sys.modules.get("litellm")
        registered = {item.get("provider") for item in getattr(litellm, "custom_provider_map", None) or ()}
        for role in roles:
            model = self.model_name(role)
            if is_local(model) or (self._resolver is not None and self._resolver(model) is not None):
                return True
            if "/" in model and model.split("/", 1)[0] in registered:
                return True
        return False

    def prepare(self) -> None:
        """Import the model client now (in a process that is about to call a model), not in its
        first call."""
        _litellm()

    def _local_models(self) -> LocalModels:
        with self._local_lock:
            if self._local is None:
                self._local = _local_module().LocalModels(self.settings.local, self._announce)
            return self._local

    def embedded_servers(self) -> list[str]:
        """Addresses of the embedded model servers running for this client."""
        with self._local_lock:
            local = self._local
        return [server.address() for server in local.running()] if local is not None else []

    def local_requests(self) -> list[dict[str, Any]]:
        """The latest request bodies the embedded model received (for `doctor` and debugging)."""
        with self._local_lock:
            return list(self._local.recent) if self._local is not None else []

    def close(self) -> None:
        """Stop the embedded model servers this client started."""
        with self._local_lock:
            local, self._local = self._local, None
        if local is not None:
            local.close()

    def complete(
        self,
        role: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        tool_choice: str | dict[str, Any] | None = None,
        timeout: float | None = None,
        stream: bool = False,
        params: Mapping[str, Any] | None = None,
    ) -> Reply:
        """One model call. `tools` are OpenAI function schemas; `params` goes to litellm as is
        (temperature, max_tokens, response_format ...). `stream=True` streams under the hood
        and returns the assembled Reply."""
        if stream:
            final: Reply | None = None
            for piece in self.stream_complete(
                role, messages, tools, tool_choice=tool_choice, timeout=timeout, params=params
            ):
                if isinstance(piece, Reply):
                    final = piece
            assert final is not None  # stream_complete always ends with a Reply
            return final
        call = _Call(self, role, timeout)
        kwargs = call.kwargs(messages, tools, tool_choice, params)
        response = self._retrying(call, lambda: _litellm().completion(**kwargs), self._retries)
        return self._counted(role, _reply_from_response(response, call.model), messages, tools)

    def stream_complete(
        self,
        role: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        tool_choice: str | dict[str, Any] | None = None,
        timeout: float | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Iterator[str | Reply]:
        """Text deltas as they come, then one final Reply with the whole text and tool calls.
        Retries happen only before the first chunk; a failure mid-stream raises LLMError."""
        call = _Call(self, role, timeout)
        kwargs = call.kwargs(messages, tools, tool_choice, params)
        if call.streams_usage():
            kwargs["stream_options"] = {"include_usage": True}  # the token counts in the last chunk

        def open_stream() -> tuple[Any, Any]:
            stream = _litellm().completion(**kwargs, stream=True)
            return stream, next(stream, None)

        stream, chunk = self._retrying(call, open_stream, self._retries)
        assembler = _StreamAssembler()
        try:
            while chunk is not None:
                delta = assembler.add(chunk)
                if delta:
                    yield delta
                chunk = next(stream, None)
        except _provider_error() as exc:
            raise call.error(exc) from exc
        finally:
            if chunk is not None:  # the caller stopped early, or it failed: let go of the connection
                stream.close()
        yield self._counted(role, assembler.reply(call.model), messages, tools)

    def _counted(self, role: str, reply: Reply, messages: list[dict[str, Any]],
                 tools: list[dict[str, Any]] | None) -> Reply:
        """The reply with its token counts: the provider's, or litellm's count of what was sent
        and said when the provider gave none (some do not, streaming)."""
        if reply.usage.get("total_tokens"):
            return reply
        prompt = self.count_tokens(role, messages, tools)
        said = reply.text + "".join(json.dumps(call.as_dict()) for call in reply.tool_calls)
        completion = self.count_text(role, said)
        return replace(reply, usage={"prompt_tokens": prompt, "completion_tokens": completion,
                                     "total_tokens": prompt + completion})

    def count_tokens(self, role: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
        """Roughly how many tokens the messages take for the role's model (never starts a model)."""
        model = self.model_name(role)
        try:
            count = _litellm().token_counter(model=model, messages=messages, tools=tools)
            return int(count)
        except Exception:  # an unknown model or an odd message shape: estimate instead
            text = json.dumps(messages, ensure_ascii=False, default=str)
            if tools:
                text += json.dumps(tools, ensure_ascii=False, default=str)
            return max(1, len(text) // CHARS_PER_TOKEN)

    def count_text(self, role: str, text: str) -> int:
        """Roughly how many tokens `text` alone is for the role's model (as litellm counts an
        answer it was streamed without counts)."""
        if not text:
            return 0
        try:
            return int(_litellm().token_counter(model=self.model_name(role), text=text))
        except Exception:  # an unknown model: estimate instead
            return max(1, len(text) // CHARS_PER_TOKEN)

    def ping(self, role: str, timeout: float = 10.0) -> tuple[bool, str]:
        """Whether the role's model answers a one-token call (naming its server when one is
        set), and what to do if not."""
        config = self.settings.role(role)
        model = f"{config.model} at {config.api_base}" if config.api_base else str(config.model)
        started = time.monotonic()
        try:
            call = _Call(self, role, timeout)
            kwargs = call.kwargs([{"role": "user", "content": "Say OK."}], None, None, {"max_tokens": 1})
            self._retrying(call, lambda: _litellm().completion(**kwargs), retries=0)
        except LLMError as exc:
            return False, exc.message
        return True, f"{model} answers ({time.monotonic() - started:.1f} s)"

    def _retrying(self, call: _Call, attempt: Callable[[], T], retries: int) -> T:
        for tried in range(retries + 1):
            try:
                return attempt()
            except _provider_error() as exc:
                if tried < retries and _is_transient(exc):
                    self._sleep(self._backoff[min(tried, len(self._backoff) - 1)])
                    continue
                raise call.error(exc) from exc
        raise AssertionError("unreachable: the last attempt returns or raises")
