"""Memory entries: list, search, read, create, edit (If-Match), forget, flagged, allow.

Only mounted when memory exists in the process (features.memory); otherwise these routes do
not exist and answer 404."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field

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
)
from sentient.vault.document import check_id

router = APIRouter(prefix="/api/memory", tags=["memory"])


class NewEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=300)
    body: str
    id: str | None = None
    category: str = "general"
    scope: str = "global"


class EntryEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(default=None, min_length=1, max_length=300)
    body: str | None = None
    category: str | None = None
    scope: str | None = None


class Allow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    revision: str | None = Field(default=None, description="the revision you looked at")


@router.get("")
def list_memory(
    workspace: WorkspaceDep,
    category: str | None = None,
    scope: str | None = None,
    flagged: bool = False,
) -> list[dict[str, Any]]:
    """Every entry with its judgment (`flagged`, `patterns`, `withheld`)."""
    return [e.as_dict() for e in list_entries(workspace, category=category, scope=scope, flagged_only=flagged)]


@router.get("/search")
def search_memory(
    workspace: WorkspaceDep, q: Annotated[str, Query(min_length=1)], limit: int = 10
) -> list[dict[str, Any]]:
    """Ranked hits among memory entries (flagged ones are shown to the person, marked)."""
    results = []
    for hit in workspace.index.search(q, kind="memory", limit=max(1, min(limit, 100))):
        doc = workspace.index.get("memory", hit.key)
        if doc is not None:
            results.append({**view(workspace, doc).as_dict(), "snippet": hit.snippet, "score": round(hit.score, 4)})
    return results


@router.get("/flagged")
def flagged(workspace: WorkspaceDep) -> list[dict[str, Any]]:
    """Every flagged file of every scanned kind (memory, pins, skills, notepads, facts, runs)."""
    return [e.as_dict() for e in flagged_everywhere(workspace)]


@router.get("/{entry_id}")
def read_memory(entry_id: str, workspace: WorkspaceDep) -> dict[str, Any]:
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
    is left as it is."""
    meta = {k: v for k, v in {"category": edit.category, "scope": edit.scope}.items() if v is not None}
    expected = if_match.strip('"') if if_match else None
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
    expected = if_match.strip('"') if if_match else None
    try:
        path = forget_entry(workspace, entry_id, expected_revision=expected)
    except SentientError as exc:
        if exc.status == 409 and expected is not None:
            raise StaleRevision(exc.message) from exc
        raise
    return {"forgotten": entry_id, "path": path}


@router.post("/{entry_id}/allow")
def allow_memory(entry_id: str, workspace: WorkspaceDep, body: Allow | None = None) -> dict[str, Any]:
    """Let exactly this revision of a flagged entry reach the model; an edit judges it again."""
    return allow_entry(workspace, entry_id, body.revision if body else None).as_dict()


@router.api_route("/{entry_id:path}", methods=["GET", "PATCH", "DELETE", "POST"], include_in_schema=False)
def unmatched(entry_id: str) -> None:
    """A path no route above takes: an id holding '/' (sent as %2F) gets the id rule, not a bare 404."""
    check_id(entry_id, "memory id")
    raise HTTPException(status_code=405)
