"""The compact tool profile: the same capabilities in fewer tools, for models that cannot carry
sixteen tool descriptions (the embedded model, or any role with `tools: compact`).

Families of tools are merged into one tool each, `name(action, text)`: `memory` (recall,
remember, forget, versions, from_source, about_person, past_chats, chats_since), `web` (fetch,
read: a page read by the reader, notify) and `work` (ask, background, parallel: helpers;
python: execute_code; save_skill). A tool no family covers (a recurring run's task_notepad) is
offered as it is. A merged
tool is made for one turn from the tools that turn may be offered (already filtered by the
turn's context: the memory decision, incognito, a helper's ceiling), and lists only those
actions: in a turn without memory there is no `memory` tool at all. Its call runs the full tool
through `Tool.call`, which refuses what the context refuses however it was reached.

A small model picks tools badly: asked "what can you do?", the embedded model saved its own
words as a skill and ran them as a script. So in a chat turn an action that changes the vault,
runs code or reaches outside (remember, forget, save_skill, python, notify, fetch, read) is
offered, and done, only when the person's message asks for that kind of thing (`asked_by`: its
words, such as "remember" or "note" for remember, or a web address for fetch); reading memory
and asking helpers always are. A task run has no such message (its goal is what was asked) and
keeps every action.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sentient.agent.context import ToolContext
from sentient.agent.tools import Tool, ToolRefused, refusal

Arguments = Callable[[ToolContext, str], dict[str, Any]]


@dataclass(frozen=True)
class Action:
    name: str  # what the model picks
    tool: str  # the full tool it runs
    text: str  # what `text` is, for this action
    arguments: Arguments  # the full tool's arguments, from the text
    asked_by: re.Pattern[str] | None = None  # words of a person's message that ask for it; None: always offered
    asking: str = ""  # what the person would say to ask for it, for the refusal

    def asked(self, ctx: ToolContext) -> bool:
        """Whether this turn may take the action: a run may; a chat turn when the person asked."""
        return self.asked_by is None or ctx.asked is None or self.asked_by.search(ctx.asked) is not None


def _words(*words: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(words) + r")", re.IGNORECASE)


_ADDRESS = r"https?://|www\.|\w\.(?:com|org|net|io|dev|in|de|uk)\b"


@dataclass(frozen=True)
class Family:
    name: str
    purpose: str
    actions: tuple[Action, ...]


def _first_line(text: str, most: int = 80) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= most else line[: most - 1].rstrip() + "…"


def _recall(ctx: ToolContext, text: str) -> dict[str, Any]:
    """An entry's id reads that entry; anything else is searched for."""
    if ctx.agent.workspace.index.get("memory", text.strip()) is not None:
        return {"id": text.strip()}
    return {"query": text}


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _read(ctx: ToolContext, text: str) -> dict[str, Any]:
    """A page fetched and a question about it answered by the reader: the address on the first
    line, the question after it."""
    address, _, question = text.strip().partition("\n")
    return {"tool": "web_fetch", "args": {"url": address.strip()}, "question": question.strip() or "What does it say?"}


def _skill(ctx: ToolContext, text: str) -> dict[str, Any]:
    name, _, steps = text.strip().partition("\n")
    return {"name": name.strip(), "steps": steps.strip() or name.strip()}


FAMILIES = (
    Family("memory", "Your memory of the person and your past chats.", (
        Action("recall", "memory_recall", "words or id", _recall),
        Action("remember", "memory_remember", "a fact", lambda ctx, text: {"title": _first_line(text), "text": text},
               _words("remember", "memori[sz]e", "note", "save", "keep", "store", "write (?:it |this |that )?down",
                      "don'?t forget", "do not forget", "make a note"), "remember this"),
        Action("forget", "memory_forget", "id", lambda ctx, text: {"id": text.strip()},
               _words("forget", "delete", "remove", "erase", "drop"), "forget ..."),
        Action("versions", "memory_search_history", "id", lambda ctx, text: {"id": text.strip()}),
        Action("from_source", "memory_search_by_source", "url:... or session:...",
               lambda ctx, text: {"source": text.strip()}),
        Action("about_person", "user_model_ask", "question", lambda ctx, text: {"question": text}),
        Action("past_chats", "history_semantic_search", "topic", lambda ctx, text: {"query": text}),
        Action("chats_since", "history_time_search", "date", lambda ctx, text: {"since": text.strip()}),
    )),
    Family("web", "The web, and the person's phone.", (
        Action("fetch", "web_fetch", "URL", lambda ctx, text: {"url": text.strip()},
               re.compile(_ADDRESS + r"|\b(?:fetch|download|web ?page|website|the web|internet|online|look up)",
                          re.IGNORECASE),
               "a web address"),
        Action("read", "read_with_reader", "URL, newline, question about the page", _read,
               re.compile(_ADDRESS + r"|\b(?:read|web ?page|website|article|link)", re.IGNORECASE), "a web address"),
        Action("notify", "notify", "message to the person", lambda ctx, text: {"text": text},
               _words("notify", "remind", "alert", "ping", "message me", "text me", "send me", "let me know"),
               "remind me / notify me"),
    )),
    Family("work", "Helpers, scripts and skills.", (
        Action("ask", "delegate_task", "goal for a helper; waits", lambda ctx, text: {"goal": text}),
        Action("background", "delegate_background", "goal; answered later", lambda ctx, text: {"goal": text}),
        Action("parallel", "delegate_tasks", "goals, one a line", lambda ctx, text: {"goals": _lines(text)}),
        Action("python", "execute_code", "a script; returns what it printed", lambda ctx, text: {"code": text},
               _words("python", "script", "code", "calculat", "comput", "program", "run ", "plot", "count",
                      "how many", "sum", "average", "convert"), "calculate / run a script"),
        Action("save_skill", "skill_save", "name, newline, steps", _skill,
               _words("skill", "procedure", "routine", "recipe", "steps", "how to", "workflow"),
               "save this as a skill"),
    )),
)
MERGED = frozenset(action.tool for family in FAMILIES for action in family.actions)


def _refuse(*args: Any, **kwargs: Any) -> str:
    raise AssertionError("a merged tool runs its actions' tools, never a function of its own")


@dataclass(frozen=True)
class MergedTool(Tool):
    """One tool standing for several: `action` picks the full tool, `text` is its argument."""

    actions: Mapping[str, Action] = field(default_factory=dict)  # this turn's
    family: Family | None = None

    def call(self, ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
        unknown = sorted(set(arguments) - {"action", "text"})
        if unknown:
            raise ToolRefused(f"{self.name} has no parameter {', '.join(unknown)}; its parameters are action, text")
        action, text = arguments.get("action"), arguments.get("text")
        if action is None and self.family is not None and len(self.family.actions) == 1:
            action = self.family.actions[0].name
        chosen = self.actions.get(action) if isinstance(action, str) else None
        known = {a.name: a for a in self.family.actions} if self.family is not None else {}
        unasked = known.get(action) if isinstance(action, str) else None
        if unasked is not None and not unasked.asked(ctx):
            raise ToolRefused(f"{self.name}: the person did not ask to {action} (they would say something like "
                              f"'{unasked.asking}'), so it was not done; answer them instead")
        if chosen is None:
            why = refusal(ctx, known[action].tool) if isinstance(action, str) and action in known else None
            if why is not None:  # left out of this turn by its context: said as the full tool says it
                raise ToolRefused(why)
            raise ToolRefused(f"{self.name}: action must be one of {', '.join(self.actions)}")
        if not isinstance(text, str) or not text.strip():
            raise ToolRefused(f"{self.name}: give the text ({chosen.text})")
        full = ctx.agent.registry.get(chosen.tool)
        if full is None:
            raise ToolRefused(f"{self.name}: {action} is not available here")
        return full.call(ctx, chosen.arguments(ctx, text))  # the full tool's refusals apply


def merged(family: Family, present: Iterable[str], ctx: ToolContext | None = None) -> MergedTool | None:
    """The family's tool with the actions whose full tools are `present` (and, given the turn's
    `ctx`, that it asked for); None with none."""
    names = set(present)
    actions = {action.name: action for action in family.actions
               if action.tool in names and (ctx is None or action.asked(ctx))}
    if not actions:
        return None
    if len(family.actions) == 1:  # one thing to do: no action to choose
        (only,) = actions.values()
        parameters = {"type": "object", "properties": {"text": {"type": "string", "description": only.text}},
                      "required": ["text"]}
        return MergedTool(family.name, family.purpose, parameters, "read", _refuse, actions, family)
    listing = "; ".join(f"{name}: {action.text}" for name, action in actions.items())
    parameters = {"type": "object", "properties": {"action": {"type": "string", "enum": list(actions)},
                                                   "text": {"type": "string"}},
                  "required": ["action", "text"]}
    # risk: each action's own tool holds an outbound call in an untrusted turn, as it always does
    return MergedTool(family.name, f"{family.purpose} text for {listing}.", parameters, "read", _refuse,
                      actions, family)


def compact(tools: Iterable[Tool], keep: str | None = None, ctx: ToolContext | None = None) -> list[Tool]:
    """The compact offer for the tools a turn may be offered: the merged families first, then
    every tool no family covers, as it is. `keep`: a tool the caller forces by name
    (tool_choice), offered as itself, not merged. `ctx`: the turn, whose person's message
    decides which actions that must be asked for are offered."""
    tools = list(tools)
    present = [item.name for item in tools if item.name != keep]
    families = [made for family in FAMILIES if (made := merged(family, present, ctx)) is not None]
    return [*families, *(item for item in tools if item.name not in MERGED or item.name == keep)]
