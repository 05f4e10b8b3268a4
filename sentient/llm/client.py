"""Model calls: the only module that imports litellm.

`LLM(settings, environ)` answers `complete(role, messages, tools)` with a `Reply` (text and
tool calls) from the model configured for that role (chat, helper, extraction). Transient
failures are retried with a short backoff; everything else becomes an `LLMError` whose message
names the model and says what to do.

litellm is imported on first use, not when this module is imported, and with
LITELLM_LOCAL_MODEL_COST_MAP defaulted to True so that importing it never fetches a price
list from the internet.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from sentient.config import ModelRole, Settings
from sentient.errors import SentientError

if TYPE_CHECKING:
    from sentient.llm.local import LocalModels

DEFAULT_TIMEOUT = 300.0
DEFAULT_RETRIES = 2
DEFAULT_BACKOFF = (0.5, 1.0)
LOCAL_MODEL = "local"  # `local` or `local:<path.gguf>`: the embedded llama.cpp model

SET_MODEL = "set model: in sentient.yaml"

T = TypeVar("T")
_ERROR_PREFIX = re.compile(r"^(litellm\.)?\w*(Error|Exception)(:| -)\s*")


class LLMError(SentientError):
    """A model call failed. The message names the model and says what to do."""

    status = 502


class LLMUnavailable(LLMError):
    """No model answers: unreachable, unknown, refused the key, or too slow."""

    status = 503


class ContextTooLong(LLMError):
    """The messages do not fit the model's context window; compact them and call again."""


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for. `arguments_error` says why `raw_arguments` did not parse
    as a JSON object (then `arguments` is empty), so the loop can tell the model."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str = ""
    arguments_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The OpenAI form of this call, as it goes back into an assistant message (with `{}` for
        arguments that did not parse, which strict providers would refuse to read back)."""
        raw = self.raw_arguments if self.raw_arguments and self.arguments_error is None else json.dumps(self.arguments)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": raw}}


@dataclass(frozen=True)
class Reply:
    """What the model said: text and/or tool calls."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    model: str = ""
    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation before the tool results."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [call.as_dict() for call in self.tool_calls]
        return message


@dataclass(frozen=True)
class Endpoint:
    """Where one role's calls go: a litellm model string and, optionally, a server and key."""

    model: str
    api_base: str | None = None
    api_key: str | None = None


Resolver = Callable[[str], Endpoint | None]
"""Maps a configured model string (e.g. `local:/models/x.gguf`) to an Endpoint, or None when
the model is not its business. The embedded-model issue plugs in here."""


@cache
def _litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm: Any = importlib.import_module("litellm")
    litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on stdout
    return litellm


def _local_module() -> ModuleType:
    """sentient.llm.local, imported on first use (it imports litellm)."""
    _litellm()
    return importlib.import_module("sentient.llm.local")


@cache
def _provider_error() -> type[Exception]:
    """The base of every exception litellm raises for a failed call (it re-uses openai's)."""
    _litellm()
    base: type[Exception] = importlib.import_module("openai").OpenAIError
    return base


def parse_tool_call(call_id: str | None, name: str | None, raw: str | None, position: int) -> ToolCall:
    """A ToolCall from the pieces a provider sent; bad JSON leaves `arguments` empty."""
    raw = raw or ""
    call_id = call_id or f"call_{position}"
    if not raw.strip():
        return ToolCall(call_id, name or "", {}, raw)
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        return ToolCall(call_id, name or "", {}, raw, f"not valid JSON ({exc})")
    if not isinstance(parsed, dict):
        return ToolCall(call_id, name or "", {}, raw, f"a JSON object is needed, not {type(parsed).__name__}")
    return ToolCall(call_id, name or "", parsed, raw)


def is_local(model: str) -> bool:
    return model == LOCAL_MODEL or model.startswith(LOCAL_MODEL + ":")


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
    ) -> None:
        self.settings = settings
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
                raise LLMUnavailable(
                    f"models.{role}.api_key_env names {config.api_key_env}, which is not set: "
                    f"export {config.api_key_env}=<your key>, or change models.{role} in sentient.yaml"
                )
        resolved = self._resolver(model) if self._resolver is not None else None
        if resolved is not None:
            return resolved
        if is_local(model):
            return Endpoint(self._local_models().litellm_model(model))
        return Endpoint(model, config.api_base, api_key)

    def _local_models(self) -> LocalModels:
        with self._local_lock:
            if self._local is None:
                self._local = _local_module().LocalModels(self.settings.local)
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
        return _reply_from_response(response, call.model)

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
        yield assembler.reply(call.model)

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
            return max(1, len(text) // 4)

    def ping(self, role: str, timeout: float = 10.0) -> tuple[bool, str]:
        """Whether the role's model answers a one-token call, and what to do if not."""
        model = self.model_name(role)
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


class _Call:
    """One call's resolved endpoint, timeout and the way its errors read."""

    def __init__(self, llm: LLM, role: str, timeout: float | None) -> None:
        self.role = role
        self.config: ModelRole = llm.settings.role(role)
        self.model = self.config.model or llm.settings.model
        self.endpoint = llm.endpoint(role)
        self.timeout = timeout or self.config.timeout or DEFAULT_TIMEOUT

    def kwargs(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: str | dict[str, Any] | None,
        params: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {**(params or {})}
        kwargs.update(model=self.endpoint.model, messages=messages, timeout=self.timeout, max_retries=0)
        if self.endpoint.api_base:
            kwargs["api_base"] = self.endpoint.api_base
        if self.endpoint.api_key:
            kwargs["api_key"] = self.endpoint.api_key
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        return kwargs

    def error(self, exc: Exception) -> LLMError:
        """The LLMError for a litellm exception, naming the model and the fix."""
        litellm = _litellm()
        model, provider = self.model, self._provider()
        where = self.endpoint.api_base or provider or "its provider"
        detail = _short(exc)
        if isinstance(exc, litellm.Timeout):
            return LLMUnavailable(
                f"{model} did not answer within {self.timeout:g} s: check that {where} is running and not "
                f"overloaded, raise models.{self.role}.timeout, or {SET_MODEL} to a faster model"
            )
        if isinstance(exc, litellm.AuthenticationError | litellm.PermissionDeniedError):
            key = self.config.api_key_env or f"{(provider or 'openai').upper()}_API_KEY"
            return LLMUnavailable(
                f"the provider refused the key for {model} ({detail}): set {key}, "
                f"or name your key's variable in models.{self.role}.api_key_env in sentient.yaml"
            )
        if isinstance(exc, litellm.NotFoundError):
            return LLMUnavailable(f"model {model} is not known to {where}: {self._pull_fix()}")
        if provider is None:
            return LLMUnavailable(
                f"model {model} names no provider litellm knows: write it as provider/name, e.g. "
                f"ollama_chat/qwen3:8b or openai/gpt-4o-mini, and {SET_MODEL}"
            )
        if isinstance(exc, litellm.ContextWindowExceededError):
            return ContextTooLong(f"the conversation is too long for {model}: compact it or start a new session")
        if _unreachable(exc):
            return LLMUnavailable(f"no model answers at {model} ({where}): {self._start_fix()}")
        if isinstance(exc, litellm.RateLimitError):
            return LLMUnavailable(f"{where} is rate-limiting {model} ({detail}): wait a minute, or {SET_MODEL}")
        if _is_transient(exc):
            return LLMUnavailable(f"{where} failed while answering for {model} ({detail}): try again, or {SET_MODEL}")
        return LLMError(f"{model} refused the request ({detail}); if this persists, {SET_MODEL}")

    def _provider(self) -> str | None:
        try:
            provider = _litellm().get_llm_provider(self.endpoint.model)[1]
        except Exception:  # litellm raises when the string names no provider it knows
            return None
        return str(provider) if provider else None

    def _pull_fix(self) -> str:
        provider = self._provider() or ""
        if provider.startswith("ollama"):
            name = self.endpoint.model.split("/", 1)[-1]
            return f"pull it (`ollama pull {name}`) or {SET_MODEL}"
        return f"check the model name, or {SET_MODEL}"

    def _start_fix(self) -> str:
        provider = self._provider() or ""
        if provider.startswith("ollama"):
            return f"start Ollama (`ollama serve`), or {SET_MODEL}"
        if self.endpoint.api_base:
            return f"start the server at {self.endpoint.api_base}, or {SET_MODEL} (and api_base:)"
        return f"check the network connection, or {SET_MODEL}"


def _is_transient(exc: BaseException) -> bool:
    litellm = _litellm()
    if isinstance(exc, litellm.NotFoundError | litellm.BadRequestError | litellm.AuthenticationError):
        return False
    transient = (
        litellm.RateLimitError,
        litellm.APIConnectionError,  # includes litellm.Timeout
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
    )
    if isinstance(exc, transient):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and status >= 500


def _unreachable(exc: BaseException) -> bool:
    """Whether the error (or any error behind it) says nothing listens where we called."""
    litellm = _litellm()
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError):  # connection refused, no route, name not resolved
            return True
        if isinstance(current, litellm.APIConnectionError) and not isinstance(current, litellm.Timeout):
            return True
        current = current.__cause__ or current.__context__
    return "connection error" in str(exc).lower()


def _short(exc: BaseException) -> str:
    """The provider's own words, without litellm's prefixes and tracebacks, on one line."""
    lines = str(getattr(exc, "message", "") or exc).strip().splitlines()
    line = lines[0] if lines else ""
    while True:  # "litellm.NotFoundError: OpenAIException - The model ..." -> "The model ..."
        shorter = _ERROR_PREFIX.sub("", line, count=1)
        if shorter == line:
            break
        line = shorter
    return line[:300] or type(exc).__name__


def _usage(raw: Any) -> dict[str, int]:
    usage: dict[str, int] = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = getattr(raw, key, None) if raw is not None else None
        if isinstance(value, int):
            usage[key] = value
    return usage


def _reply_from_response(response: Any, model: str) -> Reply:
    choice = response.choices[0]
    message = choice.message
    calls = tuple(
        parse_tool_call(call.id, call.function.name, call.function.arguments, position)
        for position, call in enumerate(message.tool_calls or ())
    )
    return Reply(
        text=message.content or "",
        tool_calls=calls,
        model=model,
        finish_reason=choice.finish_reason,
        usage=_usage(getattr(response, "usage", None)),
    )


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


class _StreamAssembler:
    """Joins streamed chunks into text and whole tool calls (argument pieces arrive in order)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, _PartialCall] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, int] = {}

    def add(self, chunk: Any) -> str:
        usage = _usage(getattr(chunk, "usage", None))
        if usage:
            self.usage = usage
        if not chunk.choices:
            return ""
        choice = chunk.choices[0]
        if choice.finish_reason:
            self.finish_reason = choice.finish_reason
        delta = choice.delta
        for position, piece in enumerate(getattr(delta, "tool_calls", None) or ()):
            self._add_call(piece, position)
        content: str = delta.content or ""
        if content:
            self.text.append(content)
        return content

    def _add_call(self, piece: Any, position: int) -> None:
        index = piece.index if isinstance(piece.index, int) else position
        partial = self.calls.get(index)
        # Some servers send every whole call at index 0; a new id there starts a new call.
        if partial is not None and piece.id and partial.id and piece.id != partial.id:
            index = max(self.calls) + 1
            partial = None
        if partial is None:
            partial = self.calls[index] = _PartialCall()
        partial.id = partial.id or piece.id or ""
        function = piece.function
        if function is not None:
            partial.name = partial.name or function.name or ""
            partial.arguments += function.arguments or ""

    def reply(self, model: str) -> Reply:
        calls = tuple(
            parse_tool_call(partial.id, partial.name, partial.arguments, position)
            for position, (_, partial) in enumerate(sorted(self.calls.items()))
        )
        return Reply("".join(self.text), calls, model, self.finish_reason, self.usage)
