"""Memory entries as the person manages them (CLI, API): list with their threat judgment,
read, create, edit, forget, and allow one flagged revision.

Every listing judges each entry as it is now, so an entry edited on disk into an injection,
or one written before a pattern existed, shows up flagged without a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sentient.errors import SentientError, StaleRevision
from sentient.index import IndexedDoc
from sentient.vault.document import Document, check_id, slugify
from sentient.workspace import Workspace

THREAT_KINDS = ("memory", "note", "plan", "skill", "notepad", "people", "run")


@dataclass(frozen=True)
class EntryView:
    """One entry as a person sees it."""

    kind: str
    id: str
    path: str
    title: str
    category: str | None
    scope: str | None
    source: str | None
    untrusted: bool
    updated: str | None
    revision: str
    flagged: bool
    patterns: tuple[str, ...]
    allowed: bool  # flagged, but the person allowed exactly this revision
    edited_outside: bool  # the text changed since the app last wrote it
    body: str = ""

    @property
    def withheld(self) -> bool:
        return self.flagged and not self.allowed

    def as_dict(self, *, body: bool = False) -> dict[str, Any]:
        data = {
            "kind": self.kind,
            "id": self.id,
            "path": self.path,
            "title": self.title,
            "category": self.category,
            "scope": self.scope,
            "source": self.source,
            "untrusted": self.untrusted,
            "updated": self.updated,
            "revision": self.revision,
            "flagged": self.flagged,
            "patterns": list(self.patterns),
            "allowed": self.allowed,
            "withheld": self.withheld,
            "edited_outside": self.edited_outside,
        }
        if body:
            data["body"] = self.body
        return data


def view(workspace: Workspace, item: IndexedDoc | Document) -> EntryView:
    flagged, patterns, withheld = workspace.judgment_of(item)
    source = item.meta.get("source")
    category = item.meta.get("category")
    scope = item.meta.get("scope")
    updated = item.meta.get("updated")
    return EntryView(
        kind=item.kind,
        id=item.key,
        path=str(item.path.relative_to(workspace.vault.root)),
        title=item.title,
        category=category if isinstance(category, str) else None,
        scope=scope if isinstance(scope, str) else None,
        source=source if isinstance(source, str) else None,
        untrusted=item.meta.get("untrusted") is True,
        updated=updated if isinstance(updated, str) else None,
        revision=item.revision,
        flagged=flagged,
        patterns=patterns,
        allowed=flagged and not withheld,
        edited_outside=item.stored_revision != item.revision,
        body=item.body,
    )


def list_entries(
    workspace: Workspace,
    *,
    kind: str = "memory",
    category: str | None = None,
    scope: str | None = None,
    flagged_only: bool = False,
) -> list[EntryView]:
    workspace.index.sync()
    views = [view(workspace, doc) for doc in workspace.index.documents(kind, scope=scope)]
    return [
        v for v in views if (category is None or v.category == category) and (not flagged_only or v.flagged)
    ]


def flagged_everywhere(workspace: Workspace) -> list[EntryView]:
    """Every flagged file of every kind that is scanned, for doctor and the API."""
    workspace.index.sync()
    found: list[EntryView] = []
    for kind in THREAT_KINDS:
        found += [v for v in (view(workspace, d) for d in workspace.index.documents(kind)) if v.flagged]
    return found


def get_entry(workspace: Workspace, key: str) -> EntryView:
    return view(workspace, workspace.vault.get("memory", check_id(key, "memory id")))


def create_entry(
    workspace: Workspace, *, title: str, body: str, id: str | None = None, meta: Mapping[str, Any] | None = None
) -> EntryView:
    """A new entry written by the person (source: user). Scanned and flagged on write."""
    if not title.strip():
        raise SentientError("title: must not be empty")
    key = check_id(id, "memory id") if id else free_id(workspace, title)
    fields = {"category": "general", "scope": "global", "source": "user", "untrusted": False, **(meta or {})}
    document = workspace.vault.create("memory", key, {**fields, "title": title.strip()}, _body(body))
    workspace.index.update(document.path)
    return view(workspace, document)


def edit_entry(
    workspace: Workspace,
    key: str,
    *,
    expected_revision: str | None,
    title: str | None = None,
    body: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> EntryView:
    """Change an entry the caller read at `expected_revision`; Conflict if it changed since."""
    updates = dict(meta or {})
    if title is not None:
        if not title.strip():
            raise SentientError("title: must not be empty")
        updates["title"] = title.strip()
    document = workspace.vault.update(
        "memory", check_id(key, "memory id"), updates, None if body is None else _body(body),
        expected_revision=expected_revision,
    )
    workspace.index.update(document.path)
    return view(workspace, document)


def forget_entry(workspace: Workspace, key: str, *, expected_revision: str | None = None) -> str:
    path = workspace.vault.delete("memory", check_id(key, "memory id"), expected_revision=expected_revision)
    workspace.index.remove(path)
    return str(path.relative_to(workspace.vault.root))


def allow_entry(workspace: Workspace, key: str, revision: str | None = None) -> EntryView:
    """Let exactly the current revision of a flagged entry through; an edit judges it afresh.

    `revision`, when given, must be the current one (what the person looked at)."""
    current = workspace.vault.get("memory", check_id(key, "memory id"))
    if revision is not None and revision != current.revision:
        raise StaleRevision(f"memory '{key}' is no longer at revision {revision} (it is at {current.revision}); "
                            "look at it again before allowing it")
    flagged, patterns, _ = workspace.judgment_of(current)
    if not flagged:
        raise SentientError(f"memory '{key}' is not flagged; there is nothing to allow")

    def allow(document: Document) -> Document:
        threat = dict(document.meta.get("threat") or {})
        threat.update(
            {
                "flagged": True,
                "patterns": list(patterns),
                "pattern_set": workspace.judge.patterns.version,
                "allowed_revision": document.revision,
            }
        )
        return document.replace({"threat": threat})

    document = workspace.vault.update("memory", key, expected_revision=current.revision, transform=allow)
    workspace.index.update(document.path)
    return view(workspace, document)


def _body(text: str) -> str:
    return text.strip("\n") + "\n" if text.strip() else ""


def free_id(workspace: Workspace, title: str) -> str:
    base = slugify(title, "memory")
    candidate, n = base, 1
    while workspace.vault.locate("memory", candidate) is not None:
        n += 1
        candidate = f"{base[:75]}-{n}"
    return candidate
