"""What the model said: `Reply` and its `ToolCall`s, from a provider's response."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sentient.vault.transcript import writable


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


def model_text(content: str | None) -> str:
    """What the model said, as text that can be sent on and saved: kept as a session keeps it
    (transcript.writable: a lone surrogate from a broken \\u escape in the provider's JSON, or a
    NUL, as U+FFFD)."""
    return writable(content or "")


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
    if "\\ud" in raw.lower():  # a \u escape of a lone surrogate: kept as U+FFFD, like the model's text
        parsed = json.loads(model_text(json.dumps(parsed, ensure_ascii=False)))
    return ToolCall(call_id, name or "", parsed, raw)


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
        text=model_text(message.content),
        tool_calls=calls,
        model=model,
        finish_reason=choice.finish_reason,
        usage=_usage(getattr(response, "usage", None)),
    )
