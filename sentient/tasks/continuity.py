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

from sentient.knowledge import quoted_cut
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
    outside: list[str] = field(default_factory=list)  # what in it was written from outside content
    notes: list[str] = field(default_factory=list)  # for the run's log: what was withheld and why

    @property
    def log_line(self) -> str:
        count = len(self.runs)
        return (f"Remembering {count} earlier run{'' if count == 1 else 's'} and its notepad, so it reports only "
                "what is new.")


def _cut(text: str, most: int) -> str:
    shown, kept = quoted_cut(text.strip(), most)
    return shown if kept >= len(text.strip()) else shown.rstrip() + " …"


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
        moment = started_at(document)
        when = moment.astimezone(zone).strftime("%a %d %b %H:%M") if moment is not None else document.id
        untrusted = document.meta.get("untrusted") is True
        found.runs.append(Earlier(document.id, when, _cut(said, ANSWER_CHARS), untrusted))
        if untrusted:
            found.outside.append(f"the answer of run {document.id}, written from outside content")
    notepad = read_notepad(workspace, task)
    if notepad is not None:
        found.notepad_revision = notepad.revision
        if not workspace.visible(notepad):
            found.notepad_withheld = True
            found.notes.append("the notepad is withheld: it reads like instructions; the person can review it with "
                               "`sentient doctor` (this run's note is kept in its run file, not written over it)")
        elif notepad.body.strip():
            found.notepad = _cut(notepad.body, NOTEPAD_CHARS)
            if notepad.meta.get("untrusted") is True:
                found.outside.append("the notepad, written by a run that read outside content")
    return found

