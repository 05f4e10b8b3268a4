"""Compaction: when a session's history outgrows its budget, the model summarises the older
turns into a `## summary` section of the session file (nothing is deleted from the file), and
the session knowledge block travels again with the person's next message, together with the
messages the person pinned, as one synthetic part of it (no model call of its own).

A summary is made only from what the person and the agent said: never from knowledge blocks,
tool results, helper runs or the memories of a system prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sentient.knowledge import quoted, quoted_attribute, quoted_cut
from sentient.llm import LLM
from sentient.prompts import Prompts
from sentient.vault import transcript

SUMMARY_WORDS = 250


@dataclass(frozen=True)
class Window:
    """What the model sees of a session: the latest summary and the messages after it."""

    summary: str | None
    messages: tuple[transcript.Message, ...]


def window(messages: tuple[transcript.Message, ...]) -> Window:
    last = max((n for n, m in enumerate(messages) if m.role == "summary"), default=None)
    if last is None:
        return Window(None, messages)
    return Window(messages[last].text, messages[last + 1 :])


def pinned(messages: tuple[transcript.Message, ...]) -> list[transcript.Message]:
    return [m for m in messages if m.pinned and m.text.strip()]


def compacted_pinned(messages: tuple[transcript.Message, ...]) -> list[transcript.Message]:
    """The pinned messages a summary took out of the window (those before the latest one)."""
    last = max((n for n, m in enumerate(messages) if m.role == "summary"), default=0)
    return pinned(messages[:last])


def pinned_block(messages: list[transcript.Message]) -> str:
    """The pinned messages as quoted data (see knowledge.quoted): no message can end its
    wrapper or open one of its own."""
    if not messages:
        return ""
    shown = "\n".join(
        f'<pinned-message role="{quoted_attribute(m.role)}" time="{quoted_attribute(m.time)}">\n'
        f"{quoted(m.text.strip())}\n</pinned-message>"
        for m in messages
    )
    return f"{PINNED_HEADING}\n" + shown


PINNED_HEADING = "Messages the person pinned in this session, kept word for word (quoted data):"


SAID = ("system", "user", "assistant")  # what a summary is made of: what was said, nothing memory supplied


def summarise(
    llm: LLM, prompts: Prompts, previous: str | None, older: list[transcript.Message], most: int
) -> str:
    """The summary of the older messages, folded into the previous one, each call's prompt at
    most about `most` characters: the messages go in slices that fit beside the summary so far
    (a message longer than half of `most` is cut), each slice folded into it, so a history of
    any length is summarised, in one call when it fits."""
    pending: list[transcript.Message] = []
    for message in older:
        text = message.text.strip()
        if message.role in SAID and text:
            cut, kept = quoted_cut(text, most // 2)
            if kept < len(text):
                cut += f" ... (the other {len(text) - kept:,} characters of this message are left out)"
            pending.append(replace(message, text=cut))
    summary = previous
    while True:
        room = most - len(_prompt(prompts, summary, []))
        taken: list[transcript.Message] = []
        size = 0
        while pending and (not taken or size + len(pending[0].text) <= room):
            size += len(pending[0].text)
            taken.append(pending.pop(0))
        summary = llm.complete("extraction", [{"role": "user", "content": _prompt(prompts, summary, taken)}],
                               None).text.strip()
        if not pending:
            return summary


def _prompt(prompts: Prompts, previous: str | None, messages: list[transcript.Message]) -> str:
    return prompts.render("summary.md.j2", previous=previous, messages=messages, words=SUMMARY_WORDS)


def split(current: Window, keep: int) -> tuple[list[transcript.Message], list[transcript.Message]]:
    """(older, recent): recent holds the last `keep` messages, starting at a person's message."""
    items = list(current.messages)
    cut = max(0, len(items) - keep)
    while cut > 0 and items[cut].role != "user":
        cut -= 1
    older = items[:cut]
    if sum(m.role in ("user", "assistant") for m in older) < 2:
        return [], items  # nothing worth a summary yet
    return older, items[cut:]


def insert_summary(body: str, recent: int, summary: transcript.Message) -> str:
    """The session body with a summary section inserted before its last `recent` messages:
    only added lines, every earlier message kept word for word."""
    parsed = transcript.parse(body)
    cut = len(parsed.messages) - recent
    head = parsed.preamble + "".join(m.raw for m in parsed.messages[:cut])
    tail = "".join(m.raw for m in parsed.messages[cut:])
    if head and not head.endswith("\n\n"):
        head += "\n" if head.endswith("\n") else "\n\n"
    return head + summary.render() + ("\n" + tail if tail else "")
