"""Skills: saved procedures, read-only here (the agent saves them with skill_save)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from sentient.api.deps import WorkspaceDep
from sentient.memory import view
from sentient.vault.document import check_id

router = APIRouter(prefix="/api/skills", tags=["skills"])


@router.get("")
def list_skills(workspace: WorkspaceDep) -> list[dict[str, Any]]:
    """Every skill, with its threat judgment."""
    return [view(workspace, doc).as_dict() for doc in workspace.index.documents("skill")]


@router.get("/{skill_id}")
def read_skill(skill_id: str, workspace: WorkspaceDep) -> dict[str, Any]:
    """One skill in full."""
    return view(workspace, workspace.vault.get("skill", check_id(skill_id, "skill id"))).as_dict(body=True)
