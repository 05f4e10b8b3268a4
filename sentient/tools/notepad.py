"""task_notepad: a recurring task's run saves the full list of what has been reported so far, for
the runs after it. Offered only in runs of recurring tasks (never in a chat, a helper or a
script; `Tool.call` refuses it there). What it saves is pending: the run writes it to the
notepad once its final answer is recorded, and not at all when the run fails, times out or is
cancelled (sentient/tasks/executor.py)."""

from __future__ import annotations

from sentient.agent.context import ToolContext
from sentient.agent.tools import ToolRefused, tool

NOTEPAD_CHARS = 1500  # the most a notepad holds, whoever writes it (a run here, the person: tasks/notepad.py)


@tool(risk="write")
def task_notepad(ctx: ToolContext, text: str) -> str:
    """Save the task's notepad for its next runs: the full list of what has been reported so far
    (what the notepad held and what is new today), short lines. It replaces the notepad.

    Args:
        text: the whole list, at most 1,500 characters.
    """
    kept = text.strip()
    if not kept:
        raise ToolRefused("text is empty: write the full list of what has been reported so far")
    if len(kept) > NOTEPAD_CHARS:
        raise ToolRefused(f"the notepad holds at most {NOTEPAD_CHARS:,} characters and this is {len(kept):,}: "
                          "keep one short line an item and call task_notepad again")
    with ctx.state.lock:
        ctx.state.notepad = kept
    return ("Saved for the next runs (it is written once your final answer is recorded). "
            "Now reply with your final answer.")


NOTEPAD_TOOL_SET = (task_notepad,)
