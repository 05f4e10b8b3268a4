"""A task's notepad (`tasks/<id>/notepad.md`): what its recurring runs keep for each other,
usually the list of what they already reported. The person reads, edits and clears it at any
time; a run's new text is written only after the run recorded its final answer, and only over
the revision the run read (else the person's text stays, and the run's is kept in its run file).
"""

from __future__ import annotations

from dataclasses import dataclass

from sentient.errors import AlreadyExists, Conflict, NotFound, SentientError
from sentient.tools.notepad import NOTEPAD_CHARS
from sentient.vault.document import Document
from sentient.workspace import Workspace


class NotepadTooLong(SentientError):
    def __init__(self, size: int) -> None:
        super().__init__(f"notepad: {size:,} characters, over the {NOTEPAD_CHARS:,} a notepad holds; shorten it "
                         "(a terse list of what was reported)")


def read_notepad(workspace: Workspace, task: str) -> Document | None:
    """The notepad as it is on disk now, or None when the task has none."""
    try:
        return workspace.vault.get("notepad", task)
    except NotFound:
        return None


def checked(text: str | None) -> str:
    """A notepad's new text, trimmed; '' clears it. NotepadTooLong over NOTEPAD_CHARS."""
    trimmed = (text or "").strip()
    if len(trimmed) > NOTEPAD_CHARS:
        raise NotepadTooLong(len(trimmed))
    return trimmed


def _body(text: str) -> str:
    return text + "\n" if text else ""


def set_notepad(workspace: Workspace, task: str, text: str | None, *, expected_revision: str | None = None,
                source: str = "user", untrusted: bool = False) -> Document:
    """A new notepad (None or '' clears it: the file stays, empty), by default the person's.
    `expected_revision`: the revision the writer read (Conflict when it changed since). `source`
    and `untrusted`: its provenance when another writes it (an MCP client: `mcp:<name>`,
    untrusted, so the task's next run starts untrusted)."""
    trimmed = checked(text)
    workspace.vault.get("task", task)  # NotFound for a task that is not there
    meta = {"task": task, "source": source, "untrusted": untrusted}
    current = read_notepad(workspace, task)
    if current is None:
        if expected_revision is not None:
            raise Conflict(workspace.vault.root / "tasks" / task / "notepad.md", expected_revision, None)
        document = workspace.vault.create("notepad", task, meta, _body(trimmed))
    else:
        document = workspace.vault.update("notepad", task, meta, _body(trimmed),
                                          expected_revision=expected_revision or current.revision)
    workspace.index.update(document.path)
    return document


@dataclass(frozen=True)
class Kept:
    """What became of a run's note: saved, or not (and why)."""

    saved: bool
    why: str = ""


def keep_run_note(
    workspace: Workspace, task: str, text: str, read_revision: str | None, *, untrusted: bool, source: str
) -> Kept:
    """Write a run's note over the notepad it read (`read_revision`; None: there was none), unless
    the person changed or cleared it since: then theirs stays."""
    meta = {"task": task, "source": source, "untrusted": untrusted}
    try:
        if read_revision is None:
            document = workspace.vault.create("notepad", task, meta, _body(text))
        else:
            document = workspace.vault.update("notepad", task, meta, _body(text), expected_revision=read_revision)
    except (Conflict, AlreadyExists, NotFound):
        return Kept(False, "the person changed the notepad while this run was going, so their text stays")
    except SentientError as exc:  # it cannot be read or written now (bad YAML, a folder in the way ...)
        return Kept(False, f"the notepad could not be written ({exc.message})")
    workspace.index.update(document.path)
    return Kept(True)
