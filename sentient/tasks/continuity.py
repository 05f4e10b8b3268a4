"""What a run of a recurring task is told of the runs before it, so that it reports only what is
new: what the last 3 finished runs told the person (start time and final answer, or the run's
summary when it has none, each cut to 400 characters) and the task's notepad (at most 1,500).

Both are remembered text: judged by the threat patterns on every read (a flagged one is
withheld, and the run's log says which), quoted as data, and, when written by a run that read
outside content, they make this run untrusted too (outbound tools held).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from sentient.errors import SentientError
from sentient.knowledge import quoted
from sentient.tasks.notepad import read_notepad
from sentient.tasks.runs import FINISHED, answer_of, newest_runs, started_at
from sentient.tools.notepad import NOTEPAD_CHARS
from sentient.vault.document import Document
from sentient.workspace import Workspace

EARLIER_RUNS = 3
ANSWER_CHARS = 400
LOOKED_AT = 50  # run files read at most to find the finished ones (failed runs in a row are passed over)


@dataclass(frozen=True)
class Earlier:
    """One earlier run as the next is told of it."""

    run: str
    started: str  # 'Mon 30 Nov 07:30', in the task's zone
    text: str  # quoted, cut
    untrusted: bool


@dataclass
class Continuity:
    runs: list[Earlier] = field(default_factory=list)  # oldest first
    notepad: str | None = None  # quoted; None: none, or withheld
    notepad_revision: str | None = None  # the revision read (None: there was no notepad)
    notepad_withheld: bool = False  # the notepad may not be rewritten by this run (the person is to see it)
    notepad_problem: str | None = None  # why it could not be read, when it could not
    outside: list[str] = field(default_factory=list)  # what in it was written from outside content
    notes: list[str] = field(default_factory=list)  # for the run's log: what was withheld and why

    @property
    def history(self) -> bool:
        """Did earlier runs tell the person anything, or leave a notepad?"""
        return bool(self.runs or self.notepad or self.notepad_withheld)

    @property
    def log_line(self) -> str:
        count = len(self.runs)
        return (f"Remembering {count} earlier run{'' if count == 1 else 's'} and its notepad, so it reports only "
                "what is new.")


def _cut(text: str, most: int) -> str:
    """At most `most` characters of the text as written, then quoted (quoting may lengthen it:
    a notepad of 1,500 characters is shown whole)."""
    text = text.strip()
    return quoted(text) if len(text) <= most else quoted(text[:most].rstrip()) + " …"


def continuity(workspace: Workspace, task: str, zone: ZoneInfo) -> Continuity:
    """What a recurring run of `task` is told of the runs before it (see the module's doc); times
    are shown in `zone`, the task's."""
    found = Continuity()
    finished: list[Document] = []
    for document in newest_runs(workspace.vault, task, LOOKED_AT):
        if document.meta.get("status") == FINISHED:
            finished.append(document)
            if len(finished) == EARLIER_RUNS:
                break
    for document in reversed(finished):
        if not workspace.visible(document):
            found.notes.append(f"run {document.id} is withheld: it reads like instructions; the person can review "
                               "it with `sentient doctor`")
            continue
        answer = answer_of(document)
        summary = document.meta.get("summary")
        said = answer or (summary if isinstance(summary, str) else "") or "(it recorded no answer)"
        if not answer and workspace.judge_text(said):  # the summary is a field: judged apart from the body
            found.notes.append(f"run {document.id} is withheld: its summary reads like instructions; the person "
                               "can review it with `sentient doctor`")
            continue
        moment = started_at(document)
        when = moment.astimezone(zone).strftime("%a %d %b %H:%M") if moment is not None else document.id
        untrusted = document.meta.get("untrusted") is True
        found.runs.append(Earlier(document.id, when, _cut(said, ANSWER_CHARS), untrusted))
        if untrusted:
            found.outside.append(f"the answer of run {document.id}, written from outside content")
    try:
        notepad = read_notepad(workspace, task)
    except SentientError as exc:  # bad YAML, say: left out, and never written over (the person is to fix it)
        found.notepad_withheld = True
        found.notepad_problem = exc.message
        found.notes.append(f"the notepad cannot be read ({exc.message}); it is left out, and this run's note is "
                           "kept in its run file, not written over it")
        return found
    if notepad is not None:
        found.notepad_revision = notepad.revision
        if not workspace.visible(notepad):
            found.notepad_withheld = True
            found.notes.append("the notepad is withheld: it reads like instructions; the person can review it with "
                               "`sentient doctor` (this run's note is kept in its run file, not written over it)")
        elif notepad.body.strip():
            found.notepad = _cut(notepad.body, NOTEPAD_CHARS)
            if len(notepad.body.strip()) > NOTEPAD_CHARS:
                found.notes.append(f"the notepad holds {len(notepad.body.strip()):,} characters: only its first "
                                   f"{NOTEPAD_CHARS:,} are shown (shorten it: a run's note may not be longer)")
            if notepad.meta.get("untrusted") is True:
                source = notepad.meta.get("source")
                client = source.removeprefix("mcp:") if isinstance(source, str) and source.startswith("mcp:") else None
                by = f"the MCP client {client}" if client else "a run that read outside content"
                found.outside.append(f"the notepad, written by {by}")
    return found

