"""A session's transcript: the markdown body of a session file.

Each message is a section headed `## <role> · <ISO time>`; tool calls and their results are
fenced blocks tagged `json tool-call` / `json tool-result`:

    ## assistant · 2026-11-30T10:00:05Z

    Let me look that up.

    ```json tool-call
    {"id": "call_1", "name": "memory_recall", "arguments": {"query": "Anika"}}
    ```

Headings inside fenced code are content, not messages. Parsing keeps each section's exact
text, so an unchanged transcript renders back byte for byte and new messages are appended
without touching earlier lines.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

HEADING = re.compile(r"^## ([a-z][a-z_-]*) · (\S+)( · pinned)?[ \t]*\r?$")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CALL_TAG = "json tool-call"
RESULT_TAG = "json tool-result"

_UNWRITABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class Message:
    role: str  # user, assistant, tool, system, summary
    time: str
    text: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    tool_results: tuple[dict[str, Any], ...] = ()
    pinned: bool = False  # the person pinned it: it survives compaction verbatim
    raw: str = field(default="", compare=False, repr=False)

    def render(self) -> str:
        """Canonical markdown for this message (ends with one newline)."""
        parts = [f"## {self.role} · {self.time}{' · pinned' if self.pinned else ''}\n"]
        if self.text.strip():
            parts.append("\n" + writable(self.text.strip("\n")) + "\n")
        for tag, items in ((CALL_TAG, self.tool_calls), (RESULT_TAG, self.tool_results)):
            for item in items:
                encoded = writable(json.dumps(item, ensure_ascii=False, sort_keys=False))
                fence = "````" if "```" in encoded else "```"
                parts.append(f"\n{fence}{tag}\n{encoded}\n{fence}\n")
        return "".join(parts)


@dataclass(frozen=True)
class Transcript:
    preamble: str  # text before the first message (a summary, notes)
    messages: tuple[Message, ...]

    def render(self) -> str:
        return self.preamble + "".join(m.raw or _separated(m.render()) for m in self.messages)


def writable(text: str) -> str:
    """The text with what a session file cannot hold kept as U+FFFD: a NUL (it would make the
    file read as binary; the vault writes none) and a lone surrogate (from a broken \\u escape
    or a wrong decoding; UTF-8 has no bytes for it), so that a turn never fails on one."""
    return _UNWRITABLE.sub("\ufffd", text)


def _separated(text: str) -> str:
    return text + "\n"


def append(body: str, message: Message) -> str:
    """The session body with one more message at the end; earlier text is untouched."""
    if body and not body.endswith("\n"):
        body += "\n"
    if body and not body.endswith("\n\n"):
        body += "\n"
    return body + message.render()


def _sections(body: str) -> tuple[str, list[tuple[str, str, bool, str]]]:
    """Split into (preamble, [(role, time, pinned, raw section)]) at headings outside fences."""
    preamble: list[str] = []
    sections: list[tuple[str, str, bool, list[str]]] = []
    fence: str | None = None
    for line in body.splitlines(keepends=True):
        opened = FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence) \
                    and not line.strip().lstrip(fence[0]):
                fence = None
        elif opened:
            fence = opened.group(1)
        else:
            heading = HEADING.match(line)
            if heading:
                sections.append((heading.group(1), heading.group(2), bool(heading.group(3)), [line]))
                continue
        (sections[-1][3] if sections else preamble).append(line)
    return "".join(preamble), [(role, time, pinned, "".join(lines)) for role, time, pinned, lines in sections]


@functools.cache
def _markdown() -> Any:
    """The markdown parser (tokens, no rendering), made on first use: only a message with a tool
    block needs it, and importing mistune costs every command that reads no such message 10 ms."""
    import mistune

    return mistune.create_markdown(renderer=None)


@functools.lru_cache(maxsize=1024)  # a session is parsed again on every turn; its old sections never change
def _message(role: str, time: str, pinned: bool, raw: str) -> Message:
    content = raw.split("\n", 1)[1] if "\n" in raw else ""
    if CALL_TAG not in content and RESULT_TAG not in content:  # no tool block: nothing for markdown to find
        return Message(role, time, content.strip("\n"), (), (), pinned, raw)
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    tokens = _markdown()(content)
    assert isinstance(tokens, list)
    text = content
    for token in tokens:
        if token.get("type") != "block_code":
            continue
        info = (token.get("attrs") or {}).get("info", "")
        if info not in (CALL_TAG, RESULT_TAG):
            continue
        code = token.get("raw", "")
        try:
            value = json.loads(code)
        except json.JSONDecodeError:
            continue  # shown as text; the session still loads
        if not isinstance(value, dict):
            continue
        (calls if info == CALL_TAG else results).append(value)
        text = _remove_block(text, info, code)
    return Message(role, time, text.strip("\n"), tuple(calls), tuple(results), pinned, raw)


def _remove_block(text: str, info: str, code: str) -> str:
    pattern = re.compile(r"^ {0,3}(`{3,}|~{3,})" + re.escape(info) + r"\n" + re.escape(code) + r"[ ]{0,3}\1[ \t]*\n?",
                         re.MULTILINE)
    return pattern.sub("", text, count=1)


def parse(body: str) -> Transcript:
    preamble, sections = _sections(body)
    return Transcript(preamble, tuple(_message(*section) for section in sections))
