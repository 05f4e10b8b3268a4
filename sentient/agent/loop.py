"""The tool loop: ask the model, run the tools it calls, repeat until it answers.

Whoever built the tool list (a chat, a helper, a task), the loop offers only what the turn's
context allows, and every call still goes through `Tool.call`. A tool's failure goes back to
the model as `Error: ...` text; it never ends the turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sentient.agent.compact import compact
from sentient.agent.context import ToolContext
from sentient.agent.tools import Tool, ToolRefused, failure, refusal
from sentient.knowledge import shortened
from sentient.llm import LLM, Reply, ToolCall

Message = dict[str, Any]
OnMessage = Callable[[Message], None]


@dataclass(frozen=True)
class CallRecord:
    name: str
    arguments: dict[str, Any]
    result: str
    ok: bool


@dataclass(frozen=True)
class LoopResult:
    text: str
    steps: int
    calls: list[CallRecord] = field(default_factory=list)
    offered: list[str] = field(default_factory=list)
    stopped: str = "answer"  # answer | step-limit | time-limit | result-limit
    usage: dict[str, int] = field(default_factory=dict)  # tokens of the loop's own model calls, summed


def add_usage(total: dict[str, int], reply: Reply) -> None:
    """Add one reply's token counts to `total` (prompt_tokens, completion_tokens, total_tokens)."""
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        total[key] = total.get(key, 0) + reply.usage.get(key, 0)


# The tool results of one run of the loop take at most TURN_RESULTS results' worth together (half
# the budget: Settings.result_chars is a quarter). The round that fills that share cuts its
# later results to RESULT_FLOOR, and then the model answers (no more rounds of tools).
TURN_RESULTS = 2
RESULT_FLOOR = 400


def run_tool_call(ctx: ToolContext, offered: dict[str, Tool], call: ToolCall, room: int | None = None) -> CallRecord:
    """Run one call the model made; every failure becomes text for the model, and a result too
    long for the session, or for what is left of the turn's `room` (characters), is cut (see
    `fit`)."""
    record = _run_tool_call(ctx, offered, call)
    most = ctx.agent.workspace.settings.result_chars
    if room is not None and room < most:
        most = max(room, RESULT_FLOOR)
        hint = (" This turn's tool results have filled their share of the session: answer with what you have, "
                "or ask for the rest in the next message.")
    elif "read_with_reader" in offered:
        hint = " To learn what the rest says, ask read_with_reader a question about it."
    else:
        hint = " Ask for less, or for the next part where the tool has parts."
    return fit(record, most, hint)


# What a cut keeps of a text's end: the close of its wrapper and what follows it.
KEPT_END = 200


def fit(record: CallRecord, most: int, hint: str = "") -> CallRecord:
    """The record with its result cut to at most `most` characters, saying so: a longer one
    would overflow the model's context, and the turn would fail whatever the result held."""
    size = len(record.result)
    if size <= most:
        return record
    said = f"{shortened(record.name, 60)} gave {size:,} characters, more than this session takes at once.{hint}"
    return replace(record, result=cut_middle(record.result, most, said))


def cut_middle(text: str, most: int, said: str) -> str:
    """The text in at most `most` characters: its start and its last KEPT_END (the close of a
    wrapper such as </memory>, and a reminder after it) with the middle dropped, saying how
    much was and `said` why. Dropping quoted text (knowledge.quoted) never makes a tag: a '<'
    keeps the characters after it, or is followed by the note."""
    if len(text) <= most:
        return text
    end = min(KEPT_END, most // 4)

    def note(cut: int) -> str:
        return f"\n... ({cut:,} characters cut here: {said})\n"

    start = max(0, most - end - len(note(len(text))))  # the longest count there can be
    return text[:start] + note(len(text) - start - end) + text[len(text) - end :]


def _run_tool_call(ctx: ToolContext, offered: dict[str, Tool], call: ToolCall) -> CallRecord:
    item = offered.get(call.name)
    if item is None:
        registered = ctx.agent.registry.get(call.name)
        why = refusal(ctx, call.name) if registered is not None else None
        text = f"Error: {why}" if why else f"Error: there is no tool named {shortened(call.name, 60)} here."
        return CallRecord(call.name, call.arguments, text, False)
    if call.arguments_error is not None:
        return CallRecord(call.name, {}, f"Error: the arguments were {call.arguments_error}; call it again with a JSON "
                          "object of its parameters.", False)
    try:
        return CallRecord(call.name, call.arguments, item.call(ctx, call.arguments), True)
    except ToolRefused as exc:
        return CallRecord(call.name, call.arguments, f"Error: {exc}", False)
    except Exception as exc:  # a tool's bug or failure is the model's to read, not the turn's end
        return CallRecord(call.name, call.arguments, f"Error: {failure(ctx, exc)}", False)


def _ask(
    llm: LLM,
    role: str,
    messages: list[Message],
    schemas: list[dict[str, Any]] | None,
    choice: str | dict[str, Any] | None,
    on_text: Callable[[str], None] | None,
) -> Reply:
    """One model call; streamed when someone listens for the text as it comes."""
    if on_text is None:
        return llm.complete(role, messages, schemas, tool_choice=choice)
    for piece in llm.stream_complete(role, messages, schemas, tool_choice=choice):
        if isinstance(piece, Reply):
            return piece
        on_text(piece)
    raise AssertionError("stream_complete always ends with a Reply")


def run_loop(
    llm: LLM,
    role: str,
    messages: list[Message],
    tools: Sequence[Tool],
    ctx: ToolContext,
    *,
    max_steps: int = 8,
    time_limit: float | None = None,
    tool_choice: str | dict[str, Any] | None = None,
    on_message: OnMessage | None = None,
    on_text: Callable[[str], None] | None = None,
    nudge: Callable[[str], str | None] | None = None,
) -> LoopResult:
    """Run the model with tools until it answers, `max_steps` model calls, or `time_limit`.
    `nudge(text)`: what to tell the model, once, when it answers without calling a tool though
    it says it will (None: it has answered)."""
    allowed = [item for item in tools if refusal(ctx, item.name) is None]
    if llm.settings.tool_profile(role) == "compact":  # a small model: the same capabilities in fewer tools
        forced = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
        allowed = compact(allowed, keep=forced, ctx=ctx)
    offered = {item.name: item for item in allowed}
    schemas = [item.schema() for item in offered.values()] or None
    deadline = None if time_limit is None else time.monotonic() + time_limit
    calls: list[CallRecord] = []
    room = TURN_RESULTS * ctx.agent.workspace.settings.result_chars  # for the tool results of this run
    emit = on_message or (lambda message: None)
    stopped = "step-limit"
    nudged = nudge is None or not schemas
    usage: dict[str, int] = {}
    for step in range(1, max_steps + 1):
        choice = tool_choice if step == 1 and schemas else None
        reply = _ask(llm, role, messages, schemas, choice, on_text)
        add_usage(usage, reply)
        assistant = reply.as_message()
        messages.append(assistant)
        emit(assistant)
        if not reply.tool_calls:
            told = None if nudged or nudge is None else nudge(reply.text)
            if told is None:
                return LoopResult(reply.text, step, calls, list(offered), usage=usage)
            nudged = True
            reminder: Message = {"role": "user", "content": told}
            messages.append(reminder)
            emit(reminder)
            continue
        for call in reply.tool_calls:
            record = run_tool_call(ctx, offered, call, room)
            room -= len(record.result)
            calls.append(record)
            result: Message = {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": record.result}
            messages.append(result)
            emit(result)
        if room <= 0:
            stopped = "result-limit"
            break
        if deadline is not None and time.monotonic() > deadline:
            stopped = "time-limit"
            break
    messages.append({"role": "user", "content": "Stop using tools now and answer with what you have."})
    reply = _ask(llm, role, messages, None, None, on_text)
    add_usage(usage, reply)
    final: Message = {"role": "assistant", "content": reply.text}
    messages.append(final)
    emit(final)
    return LoopResult(reply.text, step + 1, calls, list(offered), stopped, usage)
