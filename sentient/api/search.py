"""`GET /api/search`: the vault searched as `sentient search` searches it (what the agent knows
first, then chat sessions), each hit judged now. A `sentient search` on this machine asks this
route of a running server (sentient.served) and prints the answer as it would its own."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from sentient.api.deps import WorkspaceDep
from sentient.errors import SentientError
from sentient.search import show
from sentient.vault.kinds import KINDS

router = APIRouter(prefix="/api", tags=["search"])


@router.get("/search")
def search(
    workspace: WorkspaceDep, q: Annotated[str, Query(min_length=1)], kind: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
    mode: Annotated[Literal["bm25", "vector", "hybrid"] | None, Query()] = None,
) -> dict[str, Any]:
    """`hits`: a row each (kind, id, path, title, snippet, score, flagged, withheld, allowed,
    patterns, ref); `more_chats`: sessions matched that the limit left out (ask again with
    `kind=session`); `problem`: why it could not rank by meaning when `mode` asked it to;
    `vault`: the vault searched. `kind`: only this kind of file; `mode` as `sentient search --mode`."""
    if kind is not None and kind not in KINDS:
        raise SentientError(f"kind {kind!r} is not a kind of file; one of {', '.join(sorted(KINDS))}")
    found = show(workspace, q, kind=kind, limit=limit, mode=mode)
    return {"vault": str(workspace.vault.root), **found.as_dict()}
