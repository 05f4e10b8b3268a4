"""Memory entries: list, search, read, create, edit (If-Match), forget, flagged, allow.

Reading and allowing take any judged file, as `/api/memory/flagged` names it (`ref`): a memory
entry's id, or `note:sneaky`, `skill:weekly-review`, `people:maya/companion`...

Only mounted when memory exists in the process (features.memory); otherwise these routes do
not exist and answer 404."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, HTTPException, Query, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sentient.api.deps import WorkspaceDep
from sentient.errors import SentientError, StaleRevision
from sentient.memory import (
    allow_entry,
    create_entry,
    edit_entry,
    flagged_everywhere,
    forget_entry,
    get_entry,
    list_entries,
    view,
    whole_memory_readable,
)
from sentient.search import default_mode
from sentient.vault.document import check_id
from sentient.vault.kinds import TITLE_RULE
from sentient.versions import entry_history, entry_version, revert_entry

router = APIRouter(prefix="/api/memory", tags=["memory"])


class NewEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=300)
    body: str
    id: str | None = None
    category: str = "general"
    scope: str = "global"

    @field_validator("title")
    @classmethod
    def one_line(cls, title: str) -> str:
        return _one_line(title)

    @field_validator("body")
    @classmethod
    def some_text(cls, body: str) -> str:
        if not body.strip():
            raise ValueError("an entry needs some text (what there is to remember); it is empty")
        return body


def _one_line(title: str) -> str:
    """A field error (422) for a title that is blank or more than one line."""
    if not title.strip():
        raise ValueError("must not be empty")
    if len(title.strip().splitlines()) > 1:
        raise ValueError(TITLE_RULE)
    return title


class EntryEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(default=None, min_length=1, max_length=300)
    body: str | None = None
    category: str | None = None
    scope: str | None = None

    @field_validator("title")
    @classmethod
    def one_line(cls, title: str | None) -> str | None:
        return None if title is None else _one_line(title)

    @field_validator("body")
    @classmethod
    def some_text(cls, body: str | None) -> str | None:
        return None if body is None else NewEntry.some_text(body)


def expected_revision(if_match: str | None) -> str | None:
    """The revision an `If-Match` header names; None for none, or for `*` (any revision)."""
    if if_match is None or if_match.strip() == "*":
        return None
    return if_match.strip().strip('"')


class Allow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    revision: str | None = Field(default=None, description="the revision you looked at")


UNREADABLE_HEADER = "Sentient-Unreadable"  # memory folders that could not be listed: their entries are missing


def _say_unreadable(workspace: WorkspaceDep, response: Response) -> None:
    """Name in a header the memory subfolders whose entries are missing from this answer (the
    whole memory/ folder failing is a 503 instead)."""
    problems = whole_memory_readable(workspace)
    if problems:
        root = workspace.vault.root
        response.headers[UNREADABLE_HEADER] = ", ".join(p.path.relative_to(root).as_posix() for p in problems)


@router.get("")
def list_memory(
    workspace: WorkspaceDep,
    response: Response,
    category: str | None = None,
    scope: str | None = None,
    flagged: bool = False,
) -> list[dict[str, Any]]:
    """Every entry with its judgment (`flagged`, `patterns`, `withheld`)."""
    entries = list_entries(workspace, category=category, scope=scope, flagged_only=flagged)
    _say_unreadable(workspace, response)
    return [e.as_dict() for e in entries]


@router.get("/search")
def search_memory(
    workspace: WorkspaceDep, response: Response, q: Annotated[str, Query(min_length=1)],
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
    mode: Annotated[Literal["bm25", "vector", "hybrid"] | None, Query()] = None,
) -> list[dict[str, Any]]:
    """Ranked hits among memory entries (flagged ones are shown to the person, marked). `mode`:
    rank by words (bm25), by meaning (vector) or both fused (hybrid: the default when the
    embedding model loads, else bm25; /api/health says which)."""
    _say_unreadable(workspace, response)
    results = []
    chosen = mode or default_mode(workspace.index)
    for hit in workspace.index.search(q, kind="memory", limit=max(1, min(limit, 100)), mode=chosen):
        doc = workspace.index.get("memory", hit.key)
        if doc is not None:
            results.append({**view(workspace, doc).as_dict(), "snippet": hit.snippet, "score": round(hit.score, 4)})
    return results


@router.get("/flagged")
def flagged(workspace: WorkspaceDep) -> list[dict[str, Any]]:
    """Every flagged file of every scanned kind (memory, pins, skills, notepads, facts, runs)."""
    return [e.as_dict() for e in flagged_everywhere(workspace)]


class Revert(BaseModel):
    model_config = ConfigDict(extra="forbid")

    revision: str = Field(min_length=1, description="a commit from the entry's history")
    expected_revision: str | None = Field(default=None, description="the entry's revision you read; 412 if changed")


@router.get("/{entry_id}/history")
def memory_history(entry_id: str, workspace: WorkspaceDep,
                   limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> dict[str, Any]:
    """The entry's revisions in the vault's git history, newest first: date, message, the app or
    a person, and the session or run that caused it (`source`)."""
    return {"id": entry_id, "revisions": [revision.as_dict() for revision in entry_history(workspace, entry_id,
                                                                                           limit=limit)]}


@router.get("/{entry_id}/history/{rev}")
def memory_version(entry_id: str, rev: str, workspace: WorkspaceDep) -> dict[str, Any]:
    """The entry as one revision left it (`text`: the whole file; null where that commit forgot it)."""
    return entry_version(workspace, entry_id, rev).as_dict(workspace)


@router.post("/{entry_id}/revert")
def revert_memory(entry_id: str, body: Revert, workspace: WorkspaceDep) -> dict[str, Any]:
    """Bring back the entry as a revision had it: a new write (412 when `expected_revision` is
    not the entry's now), committed like any other."""
    try:
        entry = revert_entry(workspace, entry_id, body.revision, expected_revision=body.expected_revision)
    except SentientError as exc:
        if exc.status == 409 and body.expected_revision is not None:
            raise StaleRevision(exc.message) from exc
        raise
    return entry.as_dict(body=True)


@router.get("/{entry_id:path}")
def read_memory(entry_id: str, workspace: WorkspaceDep) -> dict[str, Any]:
    """One entry in full (or another judged file, by its `ref`: `note:sneaky`)."""
    return get_entry(workspace, entry_id).as_dict(body=True)


@router.post("", status_code=201)
def create_memory(entry: NewEntry, workspace: WorkspaceDep) -> dict[str, Any]:
    """A new entry; scanned on write (a match is stored, flagged, and withheld, never refused)."""
    meta = {"category": entry.category, "scope": entry.scope}
    return create_entry(workspace, title=entry.title, body=entry.body, id=entry.id, meta=meta).as_dict(body=True)


@router.patch("/{entry_id}")
def edit_memory(
    entry_id: str,
    edit: EntryEdit,
    workspace: WorkspaceDep,
    if_match: Annotated[str | None, Header(description="the revision you read; 412 if it changed")] = None,
) -> dict[str, Any]:
    """Change an entry. Send `If-Match: <revision>`; a stale revision gets 412 and the file
    is left as it is (`If-Match: *`: any revision)."""
    meta = {k: v for k, v in {"category": edit.category, "scope": edit.scope}.items() if v is not None}
    expected = expected_revision(if_match)
    try:
        entry = edit_entry(workspace, entry_id, expected_revision=expected, title=edit.title, body=edit.body,
                           meta=meta)
    except SentientError as exc:
        if exc.status == 409 and expected is not None:
            raise StaleRevision(exc.message) from exc
        raise
    return entry.as_dict(body=True)


@router.delete("/{entry_id}")
def forget_memory(
    entry_id: str,
    workspace: WorkspaceDep,
    if_match: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    """Forget an entry (its file is removed; git history keeps it)."""
    expected = expected_revision(if_match)
    try:
        path = forget_entry(workspace, entry_id, expected_revision=expected)
    except SentientError as exc:
        if exc.status == 409 and expected is not None:
            raise StaleRevision(exc.message) from exc
        raise
    return {"forgotten": entry_id, "path": path}


@router.post("/{entry_id:path}/allow")
def allow_memory(entry_id: str, workspace: WorkspaceDep, body: Allow | None = None) -> dict[str, Any]:
    """Let exactly this revision of a flagged entry reach the model; an edit judges it again.
    Any flagged file can be allowed by its `ref` (`note:sneaky`, `people:maya/companion`)."""
    return allow_entry(workspace, entry_id, body.revision if body else None).as_dict()


@router.api_route("/{entry_id:path}", methods=["GET", "PATCH", "DELETE", "POST"], include_in_schema=False)
def unmatched(entry_id: str) -> None:
    """A path no route above takes: an id holding '/' (sent as %2F) gets the id rule, not a bare 404."""
    check_id(entry_id, "memory id")
    raise HTTPException(status_code=405)
