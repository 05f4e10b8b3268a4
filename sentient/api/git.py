"""POST /api/sync: fetch, merge and push the vault's git remote (docs/git.md)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from sentient.api.deps import WorkspaceDep
from sentient.conflicts import as_dict, sync_vault

router = APIRouter(tags=["git"])


@router.post("/api/sync")
def sync(workspace: WorkspaceDep) -> dict[str, Any]:
    """Commit what the app has pending, fetch git.remote, merge it and push. A file changed on
    both sides in the same lines is kept both ways (`conflicts`: theirs beside ours), and
    neither side reaches the model until it is resolved (`sentient resolve`)."""
    done = sync_vault(workspace)
    return {**done.as_dict(), "conflicts": [as_dict(copy) for copy in done.conflicts]}
