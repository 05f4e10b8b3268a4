"""Tools: plain functions with a docstring and typed parameters.

`@tool(risk=...)` turns `def memory_recall(ctx: ToolContext, query: str, limit: int = 5) -> str`
into a Tool whose JSON schema comes from the signature and whose description comes from the
docstring. `Tool.call` is the one door every call goes through, however it was reached (the
loop, a helper, the reader, a script's bridge): it refuses memory tools in a turn without
memory, writing tools in an incognito chat, tools above a helper's ceiling, and holds outbound
tools in an untrusted turn.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from sentient.agent.context import HeldCall, ToolContext

Risk = Literal["read", "write", "outbound"]

MEMORY_TOOLS = frozenset(
    {
        "memory_recall",
        "memory_search_by_source",
        "memory_search_history",
        "history_semantic_search",
        "history_time_search",
        "user_model_ask",
        "memory_forget",
    }
)
# Tools that change what Sentient keeps (save, edit or forget a file of the vault). An incognito
# chat is read-only, whatever the settings: it and its helpers are never offered them, and a call
# is refused. Every tool of risk "write" is here, except execute_code, whose script reaches the
# vault only through these tools (tests/test_turns.py holds the list to that).
WRITING_TOOLS = frozenset({"memory_remember", "memory_forget", "skill_save", "task_notepad"})
# Tools that exist only where memory exists in the process (features.memory).
MEMORY_FEATURE_TOOLS = MEMORY_TOOLS | {"memory_remember"}
RECURRING_ONLY_TOOLS = frozenset({"task_notepad"})


class ToolRefused(Exception):
    """A call this turn may not make. Its message is what the model is told."""


def failure(ctx: ToolContext, exc: Exception) -> str:
    """A failed call as the model reads it (a direct call, or one from a script). An error can
    quote a file (a frontmatter value of the wrong type): it is judged like the file's text would
    be, and withheld when flagged."""
    text = f"{type(exc).__name__}: {exc}"
    if ctx.agent.workspace.judge_text(text):
        return (f"{type(exc).__name__}: the message quotes text that reads like instructions, so it is withheld; "
                "`sentient doctor` shows it to the person")
    return text


def refusal(ctx: ToolContext, name: str) -> str | None:
    """Why `name` may not run in this context, or None when it may."""
    if name in MEMORY_TOOLS and not ctx.memory_allowed:
        return f"{name} isn't available in this chat: it doesn't use what Sentient knows about the user."
    if name in WRITING_TOOLS and ctx.incognito:
        return f"{name} isn't available here: an incognito chat never saves, changes or forgets anything."
    if name == "memory_remember" and not ctx.memory_allowed:
        return f"{name} isn't available here: this chat does not save anything."
    if name in RECURRING_ONLY_TOOLS and not ctx.recurring:
        return f"{name} is only available in runs of a recurring task."
    if ctx.allowed_tools is not None and name not in ctx.allowed_tools:
        if ctx.depth == 0:
            return f"{name} isn't available in this run: the task's `tools:` list leaves it out."
        return f"{name} isn't available to this helper: its parent was not offered it."
    return None


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments
    risk: Risk
    func: Callable[..., Any]

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool schema offered to the model."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def call(self, ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
        """Run the tool for this turn; raises ToolRefused when the turn may not."""
        why = refusal(ctx, self.name)
        if why is not None:
            raise ToolRefused(why)
        args = self.bind(arguments)
        if self.risk == "outbound" and ctx.untrusted:
            reasons = ", ".join(ctx.state.untrusted_reasons) or "outside content"
            ctx.state.hold(HeldCall(self.name, dict(args), f"the turn read {reasons}"))
            return (
                f"Held: {self.name} was not run. This turn read outside content ({reasons}), so outbound "
                "actions wait for the person's approval. Tell them what you wanted to do."
            )
        result = self.func(ctx, **args)
        return result if isinstance(result, str) else str(result)

    def bind(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Check the model's arguments against the schema; ToolRefused says what is wrong."""
        properties: dict[str, Any] = self.parameters["properties"]
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            raise ToolRefused(
                f"{self.name} has no parameter {', '.join(unknown)}; "
                f"its parameters are {', '.join(properties) or 'none'}"
            )
        missing = [name for name in self.parameters.get("required", []) if name not in arguments]
        if missing:
            raise ToolRefused(f"{self.name} needs {', '.join(missing)}")
        bound: dict[str, Any] = {}
        for name, value in arguments.items():
            bound[name] = _coerce(self.name, name, properties[name], value)
        return bound


def _coerce(tool: str, name: str, schema: Mapping[str, Any], value: Any) -> Any:
    kind = schema.get("type")
    if value is None and schema.get("nullable"):
        return None
    ok = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }
    if kind == "integer" and isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    if kind in ok and not ok[kind](value):
        raise ToolRefused(f"{tool}: {name} must be a {kind}, not {type(value).__name__}")
    if "enum" in schema and value not in schema["enum"]:
        raise ToolRefused(f"{tool}: {name} must be one of {', '.join(map(str, schema['enum']))}")
    return value


# --- building a Tool from a function ----------------------------------------------------

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}


def _json_schema(annotation: Any) -> dict[str, Any]:
    origin = get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        inner = [arg for arg in get_args(annotation) if arg is not type(None)]
        schema = _json_schema(inner[0])
        return {**schema, "nullable": True}
    if origin is Literal:
        values = list(get_args(annotation))
        return {"type": _JSON_TYPES[type(values[0])], "enum": values}
    if origin is list:
        (item,) = get_args(annotation) or (str,)
        return {"type": "array", "items": _json_schema(item)}
    if origin is dict:
        return {"type": "object"}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    raise TypeError(f"unsupported tool parameter type {annotation!r}")


def _docstring(func: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """(description, {parameter: help}) from a docstring with an optional 'Args:' section."""
    doc = inspect.getdoc(func) or ""
    head, _, args = doc.partition("\nArgs:\n")
    helps: dict[str, str] = {}
    current = None
    for line in args.splitlines():
        match = re.match(r"\s*(\w+):\s*(.*)", line)
        if match and line.startswith("    ") and not line.startswith("     "):
            current = match.group(1)
            helps[current] = match.group(2).strip()
        elif current and line.strip():
            helps[current] += " " + line.strip()
    return " ".join(head.split()), helps


def tool(risk: Risk = "read", name: str | None = None) -> Callable[[Callable[..., Any]], Tool]:
    """Decorator: a function `f(ctx, ...)` with a docstring becomes a Tool."""

    def build(func: Callable[..., Any]) -> Tool:
        hints = typing.get_type_hints(func)
        description, helps = _docstring(func)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for index, (param_name, param) in enumerate(inspect.signature(func).parameters.items()):
            if index == 0:
                continue  # the ToolContext
            schema = _json_schema(hints[param_name])
            if param_name in helps:
                schema["description"] = helps[param_name]
            properties[param_name] = schema
            if param.default is inspect.Parameter.empty:
                required.append(param_name)
        parameters = {"type": "object", "properties": properties, "required": required}
        return Tool(name or func.__name__, description, parameters, risk, func)

    return build


class ToolRegistry:
    """The tools a process has. Memory tools are absent when memory is off in the process."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.add(item)

    def add(self, item: Tool) -> None:
        if item.name in self._tools:
            raise ValueError(f"two tools are named {item.name}")
        self._tools[item.name] = item

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> frozenset[str]:
        return frozenset(self._tools)

    def __iter__(self) -> typing.Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def offered(self, ctx: ToolContext, names: Iterable[str] | None = None) -> list[Tool]:
        """What the loop may offer in this context: `names` (default: all), minus what the
        context refuses. Whoever built the list, this filter applies."""
        wanted = self._tools if names is None else {n: self._tools[n] for n in names if n in self._tools}
        return [item for item in wanted.values() if refusal(ctx, item.name) is None]
