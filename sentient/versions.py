"""Earlier versions of a memory entry, from the vault's git history: list them, read one, and
restore one (a new conditional write, committed like any other). `sentient memory history`,
`/api/memory/{id}/history` and the memory_search_history tool all read through here; what the
model is shown of an old version is judged as it is read (`withheld_reason`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sentient.errors import BadFile, NotFound, SentientError
from sentient.memory import EntryView, view
from sentient.vault.document import Document, check_id, parse
from sentient.vault.history import Revision, entry_pathspec, find, revisions, text_at
from sentient.vault.kinds import KINDS
from sentient.workspace import Workspace

RESTORED = ("title", "category", "scope", "source", "untrusted")  # what a revert brings back with the body


@dataclass(frozen=True)
class Version:
    """One revision of an entry with its text then (None: the commit forgot the entry)."""

    revision: Revision
    text: str | None
    document: Document | None  # the text parsed as the entry (None: forgotten, or it does not parse)
    problem: str | None  # why it does not parse

    def as_dict(self, workspace: Workspace) -> dict[str, Any]:
        shown: dict[str, Any] = {**self.revision.as_dict(), "text": self.text, "problem": self.problem}
        if self.document is not None:
            judged = view(workspace, self.document)
            shown.update(title=judged.title, body=self.document.body, flagged=judged.flagged,
                         patterns=list(judged.patterns))
        return shown


def _git(workspace: Workspace) -> Any:
    git = workspace.git
    if git is None:
        raise SentientError(f"no history: {workspace.repo.why_not}")
    return git


def entry_history(workspace: Workspace, key: str, *, limit: int = 50) -> list[Revision]:
    """The commits that changed memory entry `key` (in memory/ or any subfolder), newest first;
    a forgotten entry has its history too. SentientError when the vault has no repository."""
    check_id(key, "memory id")
    found = revisions(_git(workspace), entry_pathspec(KINDS["memory"].folder, key), limit=limit)
    if not found and workspace.vault.locate("memory", key) is None:
        raise NotFound(f"no memory entry '{key}', now or in the vault's git history")
    return found


def entry_version(workspace: Workspace, key: str, rev: str) -> Version:
    """The entry as revision `rev` (a commit of its history, 7 characters or more) left it."""
    revision = find(entry_history(workspace, key, limit=10_000), rev, f"memory entry '{key}'")
    return version_of(workspace, key, revision)


def version_of(workspace: Workspace, key: str, revision: Revision) -> Version:
    text = text_at(_git(workspace), revision)
    if text is None:
        return Version(revision, None, None, None)
    try:
        document = parse(text, kind="memory", key=key, path=workspace.vault.root / revision.path,
                         fields=KINDS["memory"].fields)
    except BadFile as exc:
        return Version(revision, text, None, exc.reason)
    return Version(revision, text, document, None)


def withheld_reason(workspace: Workspace, version: Version) -> str | None:
    """Why an old version may not be shown to the model, if so: it must parse as an entry, and
    read as no instructions both as the file it is and as the entry it parses to (a YAML escape in
    the file can spell what only the parsed title says)."""
    if version.document is None or version.text is None:
        return "it does not parse as an entry" if version.text is not None else None
    if version.document.key in workspace.conflicted("memory"):
        return "the entry is in a sync conflict a person has not resolved yet"
    if workspace.judge_text(version.text) or not workspace.visible(version.document):
        return "it reads like instructions"
    return None


def revert_entry(workspace: Workspace, key: str, rev: str, *, expected_revision: str | None = None) -> EntryView:
    """Bring back the entry as revision `rev` had it (its title, text, category, scope and
    source): a new write over the entry as it is now (`expected_revision`: the revision the caller
    read; else the one read here), judged and committed like any other; a forgotten entry is
    written again."""
    version = entry_version(workspace, key, rev)
    old = version.document
    if old is None:
        why = version.problem or "the entry was forgotten in that commit"
        raise SentientError(f"memory entry '{key}' at {version.revision.short}: nothing to restore ({why}); "
                            "choose another revision")
    fields = {name: old.meta.get(name) for name in RESTORED}
    fields["title"] = old.title
    why = f"revert to {version.revision.short}"
    path = workspace.vault.locate("memory", key)
    if path is None:
        document = workspace.vault.create("memory", key, {k: v for k, v in fields.items() if v is not None}, old.body,
                                          why=why, source="user")
    else:
        current = workspace.vault.read("memory", key, path)
        document = workspace.vault.update("memory", key, fields, old.body, why=why, source="user",
                                          expected_revision=expected_revision or current.revision)
    workspace.index.update(document.path)
    return view(workspace, document)
