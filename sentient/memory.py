"""Memory entries as the person manages them (CLI, API): list with their threat judgment,
read, create, edit, forget, and allow one flagged revision.

Every listing judges each entry as it is now, so an entry edited on disk into an injection,
or one written before a pattern existed, shows up flagged without a restart, with the
patterns that matched and the text they matched.

Reading and allowing also take the other judged files (notes, plans, skills, notepads, runs,
fact sets), named as `kind:key` (`note:sneaky`, `people:maya/companion`) or by their path in
the vault (`pins/notes/sneaky.md`); a bare id is a memory entry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sentient.errors import Conflict, NotFound, SentientError, StaleRevision, Unreadable
from sentient.index import IndexedDoc
from sentient.threats import judged_revision
from sentient.vault import Problem
from sentient.vault.document import Document, check_id, slugify
from sentient.vault.kinds import check_key, check_title, classify, one_line
from sentient.workspace import Workspace

THREAT_KINDS = ("memory", "note", "plan", "skill", "notepad", "people", "run", "persona")


@dataclass(frozen=True)
class Match:
    """One pattern that matched an entry, and the text it matched (normalised, shortened)."""

    pattern: str
    excerpt: str

    def __str__(self) -> str:
        return f"{self.pattern}: {json.dumps(one_line(self.excerpt), ensure_ascii=False)}"


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
    allow_revision: str  # what `allow` takes and records: the revision of all the model is shown (judged_revision)
    edited_outside: bool  # the text changed since the app last wrote it
    body: str = ""
    matches: tuple[Match, ...] = ()
    guard: Mapping[str, Any] | None = None  # the guard model's verdict (threats/guard.py), when it was asked

    @property
    def withheld(self) -> bool:
        return self.flagged and not self.allowed

    @property
    def ref(self) -> str:
        """How `sentient memory show/allow` and /api/memory/{ref} name it: the id of a memory
        entry, `kind:key` of anything else (note:sneaky, skill:weekly-review)."""
        return self.id if self.kind == "memory" else f"{self.kind}:{self.id}"

    def as_dict(self, *, body: bool = False) -> dict[str, Any]:
        data = {
            "kind": self.kind,
            "id": self.id,
            "ref": self.ref,
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
            "matches": [{"pattern": m.pattern, "excerpt": m.excerpt} for m in self.matches],
            "allowed": self.allowed,
            "allow_revision": self.allow_revision,
            "withheld": self.withheld,
            "edited_outside": self.edited_outside,
            "guard": dict(self.guard) if self.guard is not None else None,
        }
        if body:
            data["body"] = self.body
        return data


def view(workspace: Workspace, item: IndexedDoc | Document) -> EntryView:
    judgment, allowed = workspace.full_judgment(item)
    flagged, withheld = judgment.flagged, judgment.withheld(allowed)
    source = item.meta.get("source")
    category = item.meta.get("category")
    scope = item.meta.get("scope")
    updated = item.meta.get("updated")
    return EntryView(
        kind=item.kind,
        id=item.key,
        path=str(item.path.relative_to(workspace.vault.root)),
        title=one_line(item.title),
        category=category if isinstance(category, str) else None,
        scope=scope if isinstance(scope, str) else None,
        source=source if isinstance(source, str) else None,
        untrusted=item.meta.get("untrusted") is True,
        updated=updated if isinstance(updated, str) else None,
        revision=item.revision,
        flagged=flagged,
        patterns=judgment.patterns,
        allowed=flagged and not withheld,
        allow_revision=judged_revision(item),
        edited_outside=item.stored_revision != item.revision,
        body=item.body,
        matches=tuple(Match(f.pattern_id, f.excerpt) for f in judgment.findings),
        guard=guard if isinstance(guard := item.meta.get("guard"), Mapping) else None,
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
    if kind == "memory":
        whole_memory_readable(workspace)
    views = [view(workspace, doc) for doc in workspace.index.documents(kind, scope=scope)]
    return [
        v for v in views if (category is None or v.category == category) and (not flagged_only or v.flagged)
    ]


def unreadable_memory(workspace: Workspace) -> list[Problem]:
    """The memory folders the last look at the vault could not list: memory/ itself (then
    nothing can be said of what is remembered) or some of its subfolders (then some is missing)."""
    return workspace.vault.folder_problems({"memory"})


def whole_memory_readable(workspace: Workspace) -> list[Problem]:
    """unreadable_memory(), when memory/ itself can be listed; else Unreadable, naming it."""
    problems = unreadable_memory(workspace)
    top = workspace.vault.root / "memory"
    for problem in problems:
        if problem.path == top:
            raise Unreadable(str(problem))
    return problems


def flagged_everywhere(workspace: Workspace) -> list[EntryView]:
    """Every flagged file of every kind that is scanned, for doctor and the API."""
    index = workspace.index
    index.sync()
    # judged by the index with the set judging now: a row it found nothing in is no flagged file
    judged = index.judge_version == workspace.judge_fingerprint
    found: list[EntryView] = []
    for kind in THREAT_KINDS:  # a chunk of the index at a time, never all of it
        views = [v for v in (view(workspace, d) for d in index.each(kind, flagged=judged)) if v.flagged]
        found += sorted(views, key=lambda v: (v.id, v.path))
    return found


def judge_hit(workspace: Workspace, kind: str, key: str) -> EntryView | None:
    """A search hit as a person sees it, judged now; None for a kind that is not judged
    (sessions, tasks) or a hit the index no longer holds."""
    if kind not in THREAT_KINDS:
        return None
    doc = workspace.index.get(kind, key)
    return view(workspace, doc) if doc is not None else None


def parse_ref(workspace: Workspace, ref: str) -> tuple[str, str]:
    """(kind, key) of what a person names: a memory entry's id, `kind:key` of any judged file
    (note:sneaky, plan:x, skill:x, notepad:<task>, run:<task>/<run>, people:<user>/<persona>),
    or a judged file's path in the vault (pins/notes/sneaky.md)."""
    if ref.endswith(".md") and ":" not in ref:
        path = Path(ref)
        root = workspace.vault.root
        try:
            rel = path.resolve().relative_to(root.resolve()) if path.is_absolute() else path
        except ValueError:
            raise SentientError(f"{ref} is outside the vault {root}") from None
        found = classify(PurePosixPath(rel.as_posix()))
        if found is None or found[0] not in THREAT_KINDS:
            raise SentientError(f"{ref} is not a memory entry, note, plan, skill, notepad, run, fact set or persona "
                                "of the vault; name it by its path in the vault, as `sentient doctor` shows it")
        return found[0], check_key(*found)
    kind, colon, key = ref.partition(":")
    if not colon:
        return "memory", check_id(ref, "memory id")
    if kind not in THREAT_KINDS:
        raise SentientError(f"'{ref}': name a memory entry by its id, anything else as one of "
                            f"{', '.join(k + ':<id>' for k in THREAT_KINDS)}")
    return kind, check_key(kind, key)


def _get(workspace: Workspace, kind: str, key: str) -> Document:
    """The file, or NotFound that says where a memory id the person gave is found instead."""
    try:
        return workspace.vault.get(kind, key)
    except NotFound as exc:
        if kind != "memory":
            raise
        elsewhere = [other for other in THREAT_KINDS[1:4] if workspace.vault.locate(other, key) is not None]
        if not elsewhere:
            raise
        raise NotFound(f"{exc.message}; there is a {elsewhere[0]} '{key}': name it {elsewhere[0]}:{key}") from None


def get_entry(workspace: Workspace, ref: str) -> EntryView:
    """One entry (or another judged file: see parse_ref) in full, with its judgment."""
    return view(workspace, _get(workspace, *parse_ref(workspace, ref)))


def create_entry(
    workspace: Workspace, *, title: str, body: str, id: str | None = None, meta: Mapping[str, Any] | None = None
) -> EntryView:
    """A new entry written by the person (source: user). Scanned and flagged on write."""
    title = check_title(title)
    if not body.strip():
        raise SentientError("body: an entry needs some text (what there is to remember); it is empty")
    key = check_id(id, "memory id") if id else free_id(workspace, title)
    fields = {"category": "general", "scope": "global", "source": "user", "untrusted": False, **(meta or {})}
    document = workspace.vault.create("memory", key, {**fields, "title": title}, _body(body))
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
    """Change an entry the caller read at `expected_revision`; Conflict if it changed since.
    An edit that changes nothing (no field, or each the value it has) writes nothing: the file
    stays byte for byte as it was, its `updated:` too."""
    updates = dict(meta or {})
    if title is not None:
        updates["title"] = check_title(title)
    if body is not None and not body.strip():
        raise SentientError("body: an entry needs some text (what there is to remember); to remove it, forget it")
    key = check_id(key, "memory id")
    new_body = None if body is None else _body(body)
    current = _get(workspace, "memory", key)
    if all(current.meta.get(name) == value for name, value in updates.items()) and new_body in (None, current.body):
        if expected_revision is not None and current.revision != expected_revision:
            raise Conflict(current.path, expected_revision, current.revision)
        return view(workspace, current)
    document = workspace.vault.update("memory", key, updates, new_body, expected_revision=expected_revision)
    workspace.index.update(document.path)
    return view(workspace, document)


def forget_entry(workspace: Workspace, key: str, *, expected_revision: str | None = None) -> str:
    path = workspace.vault.delete("memory", check_id(key, "memory id"), expected_revision=expected_revision,
                                  source="user")
    workspace.index.remove(path)
    return str(path.relative_to(workspace.vault.root))


def allow_entry(workspace: Workspace, ref: str, revision: str | None = None) -> EntryView:
    """Let exactly the current revision of a flagged entry (or note, plan, skill...: see
    parse_ref) through; an edit judges it afresh.

    `revision`, when given, must be the current `allow_revision` (what the person looked at:
    title, body, category and source; the content revision will do for an entry with neither
    field)."""
    kind, key = parse_ref(workspace, ref)
    current = _get(workspace, kind, key)
    now = judged_revision(current)
    if revision is not None and revision != now:
        shown = one_line(revision)[:80]  # as typed: it may be anything
        raise StaleRevision(f"{kind} '{key}' is no longer at revision {shown} (its allow_revision is {now}: its "
                            "title, text, category and source); look at it again before allowing it")
    flagged, patterns, _ = workspace.judgment_of(current)
    if not flagged:
        raise SentientError(f"{kind} '{key}' is not flagged; there is nothing to allow")

    def allow(document: Document) -> Document:
        threat = dict(document.meta.get("threat") or {})
        threat.update(
            {
                "flagged": True,
                "patterns": list(patterns),
                "pattern_set": workspace.judge.patterns.version,
                "allowed_revision": judged_revision(document),  # of all the model is shown of it
            }
        )
        return document.replace({"threat": threat})

    document = workspace.vault.update(kind, key, expected_revision=current.revision, transform=allow, why="allow",
                                      source="user")
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
