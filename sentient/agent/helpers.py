"""Helpers and the reader: sub-agents a turn starts, each with a copy of its context.

A helper's tools are what its parent was offered, narrowed by the helper's own request,
minus what the context refuses: never wider than the parent's. Helpers do not start helpers.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sentient.agent.context import ToolContext
from sentient.agent.loop import cut_middle, run_loop
from sentient.agent.tools import RECURRING_ONLY_TOOLS, Tool, ToolRefused, refusal, tool
from sentient.vault import transcript
from sentient.vault.store import iso

HELPER_TOOLS = frozenset({"delegate_task", "delegate_tasks", "delegate_background"})
MAX_PARALLEL = 3
MAX_GOALS = 6
HELPER_STEPS = 6
HELPER_SECONDS = 120.0


def helper_tools(ctx: ToolContext, wanted: list[str] | None) -> tuple[ToolContext, list[Tool]]:
    """The child context and the tools a helper of `ctx` is offered."""
    registry = ctx.agent.registry
    parent_offer = frozenset(item.name for item in registry.offered(ctx))
    child = ctx.child(parent_offer - HELPER_TOOLS - RECURRING_ONLY_TOOLS)  # the notepad is the run's own
    names = None if not wanted else [name for name in wanted if name not in HELPER_TOOLS]
    return child, registry.offered(child, names)


def run_helper(ctx: ToolContext, goal: str, wanted: list[str] | None = None) -> str:
    """Run one helper to its answer; a failure is returned as text, never raised."""
    agent = ctx.agent
    child, tools = helper_tools(ctx, wanted)
    prompt = agent.prompts.render(
        "helper.md.j2",
        goal=goal,
        memory_allowed=child.memory_allowed,
        user_name=agent.settings.user.name if child.memory_allowed else None,
    )
    messages: list[dict[str, Any]] = [{"role": "system", "content": prompt}, {"role": "user", "content": goal}]
    try:
        result = run_loop(
            agent.llm, "helper", messages, tools, child, max_steps=HELPER_STEPS, time_limit=HELPER_SECONDS
        )
        answer, calls = result.text, result.calls
    except Exception as exc:  # the helper's failure is its parent's to read
        answer, calls = f"Error: the helper failed: {exc}", []
    if ctx.session is not None:
        record = transcript.Message(
            "helper",
            iso(agent.clock()),
            f"Goal: {goal}\n\nTools: {', '.join(t.name for t in tools) or 'none'}\n\n{answer}",
            tool_calls=tuple({"name": c.name, "arguments": c.arguments, "ok": c.ok} for c in calls),
        )
        try:  # a helper that read outside content leaves the session untrusted (a background one too)
            agent.record(ctx.session, record, meta={"untrusted": True} if child.untrusted else None)
        except Exception:  # the transcript line is a record, not the helper's result
            pass
    return answer


@tool(risk="read")
def delegate_task(ctx: ToolContext, goal: str, tools: list[str] | None = None) -> str:
    """Hand one goal to a helper and wait for its answer.

    Args:
        goal: what the helper should find out or do, in one or two sentences.
        tools: names of the tools the helper may use (default: all you have).
    """
    return run_helper(ctx, goal, tools)


@tool(risk="read")
def delegate_tasks(ctx: ToolContext, goals: list[str]) -> str:
    """Hand several independent goals to helpers that work in parallel; wait for all answers.

    Args:
        goals: one goal per helper (at most 6).
    """
    if not goals:
        raise ToolRefused("give at least one goal")
    if len(goals) > MAX_GOALS:
        raise ToolRefused(f"at most {MAX_GOALS} goals at once; you gave {len(goals)}")
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(goals))) as pool:
        answers = list(pool.map(lambda goal: run_helper(ctx, goal), goals))
    return "\n\n".join(f"{n}. {goal}\n{answer}" for n, (goal, answer) in enumerate(zip(goals, answers, strict=True), 1))


@tool(risk="read")
def delegate_background(ctx: ToolContext, goal: str) -> str:
    """Start a helper in the background; its answer is added to this chat when it is done.

    Args:
        goal: what the helper should find out or do.
    """
    thread = threading.Thread(target=run_helper, args=(ctx, goal), name=f"helper-{goal[:20]}", daemon=True)
    ctx.agent.background.start(thread)
    return "Started a background helper; its answer will appear in this chat when it is done."


@tool(risk="read")
def read_with_reader(ctx: ToolContext, tool: str, args: dict[str, Any], question: str) -> str:
    """Run a tool and have a reader answer one question about its output, so long output
    does not fill this chat.

    Args:
        tool: the name of the tool to run.
        args: its arguments.
        question: what you want to know from its output.
    """
    agent = ctx.agent
    target = agent.registry.get(tool)
    if target is None or tool in HELPER_TOOLS or tool in RECURRING_ONLY_TOOLS or tool == "read_with_reader":
        raise ToolRefused(f"the reader cannot run {tool}")
    why = refusal(ctx, tool)
    if why is not None:
        raise ToolRefused(why)  # checked before anything runs: no tool, no reader
    output = target.call(ctx, args)
    # The reader's own call reads up to the whole budget.
    output = cut_middle(output, agent.workspace.settings.reading_chars, "too long to read at once")
    prompt = agent.prompts.render("reader.md.j2", tool=tool, question=question, output=output)
    reply = agent.llm.complete("helper", [{"role": "user", "content": prompt}], None)
    return reply.text


HELPER_TOOL_SET = (delegate_task, delegate_tasks, delegate_background, read_with_reader)
