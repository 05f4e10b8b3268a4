"""One model call: its resolved endpoint and timeout, the keyword arguments litellm gets, and
the LLMError a litellm exception becomes (naming the model and the fix)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sentient.config import ModelRole
from sentient.llm.errors import ContextTooLong, LLMError, LLMUnavailable, _is_transient, _short, _unreachable
from sentient.llm.lazy import _litellm

if TYPE_CHECKING:
    from sentient.llm.client import LLM

DEFAULT_TIMEOUT = 300.0


class _Call:
    """One call's resolved endpoint, timeout and the way its errors read."""

    def __init__(self, llm: LLM, role: str, timeout: float | None) -> None:
        self.role = role
        self.config: ModelRole = llm.settings.role(role)
        self.model = self.config.model or llm.settings.model
        self.endpoint = llm.endpoint(role)
        self.timeout = timeout or self.config.timeout or DEFAULT_TIMEOUT
        self.set_model = llm.settings.model_fix(role)  # names SENTIENT_MODEL when that set it
        self.api_key_setting = llm.settings.role_setting(role, "api_key_env")  # the helper's may be chat's
        self.budget = llm.settings.context_budget  # tokens: what a message's send is bounded by

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
                f"overloaded, raise models.{self.role}.timeout, or {self.set_model} to a faster model"
            )
        if isinstance(exc, litellm.AuthenticationError | litellm.PermissionDeniedError):
            key = self.config.api_key_env or f"{(provider or 'openai').upper()}_API_KEY"
            return LLMUnavailable(
                f"the provider refused the key for {model} ({detail}): set {key}, "
                f"or name your key's variable in {self.api_key_setting} in sentient.yaml"
            )
        if isinstance(exc, litellm.NotFoundError):
            return LLMUnavailable(f"model {model} is not known to {where}: {self._pull_fix()}")
        if provider is None:
            return LLMUnavailable(
                f"model {model} names no provider litellm knows: write it as provider/name, e.g. "
                f"ollama_chat/qwen3:8b or openai/gpt-4o-mini, and {self.set_model}"
            )
        if isinstance(exc, litellm.ContextWindowExceededError):
            return ContextTooLong(
                f"what this message sends does not fit {model}'s context window ({detail}). Shorten the message or "
                "send it in parts (the session keeps it, and later messages carry only its start and end), or unpin a "
                "long note; if "
                f"short messages fail too, set chat.context_tokens below {self.budget} in sentient.yaml, the budget "
                "that bounds what a message carries (docs/configuration.md)"
            )
        if _unreachable(exc):
            return LLMUnavailable(f"no model answers at {model} ({where}): {self._start_fix()}")
        if isinstance(exc, litellm.RateLimitError):
            return LLMUnavailable(f"{where} is rate-limiting {model} ({detail}): wait a minute, or {self.set_model}")
        if _is_transient(exc):
            return LLMUnavailable(
                f"{where} failed while answering for {model} ({detail}): try again, or {self.set_model}"
            )
        return LLMError(f"{model} refused the request ({detail}); if this persists, {self.set_model}")

    def streams_usage(self) -> bool:
        """Whether the provider takes `stream_options` (then a stream ends with its token counts)."""
        try:
            supported = _litellm().get_supported_openai_params(model=self.endpoint.model) or []
        except Exception:  # a provider litellm does not know: ask for nothing it may refuse
            return False
        return "stream_options" in supported

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
            return f"pull it (`ollama pull {name}`) or {self.set_model}"
        return f"check the model name, or {self.set_model}"

    def _start_fix(self) -> str:
        provider = self._provider() or ""
        if provider.startswith("ollama"):
            return f"start Ollama (`ollama serve`), or {self.set_model}"
        if self.endpoint.api_base:
            return f"start the server at {self.endpoint.api_base}, or {self.set_model} (and api_base:)"
        return f"check the network connection, or {self.set_model}"
