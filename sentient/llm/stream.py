"""A streamed reply: chunks joined into text and whole tool calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sentient.llm.reply import Reply, _usage, model_text, parse_tool_call


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
        content = model_text(delta.content)
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
