"""Skills: saved procedures, read-only here (the agent saves them with skill_save)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from sentient.api.deps import WorkspaceDep
from sentient.memory import allow_entry, view
from sentient.vault.document import check_id

router = APIRouter(prefix="/api/skills", tags=["skills"])


class Allow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    revision: str | None = Field(default=None, description="the revision you looked at")


@router.get("")
def list_skills(workspace: WorkspaceDep) -> list[dict[str, Any]]:
    """Every skill, with its threat judgment."""
    return [view(workspace, doc).as_dict() for doc in workspace.index.documents("skill")]


@router.get("/{skill_id}")
def read_skill(skill_id: str, workspace: WorkspaceDep) -> dict[str, Any]:
    """One skill in full."""
    return view(workspace, workspace.vault.get("skill", check_id(skill_id, "skill id"))).as_dict(body=True)


@router.post("/{skill_id}/allow")
def allow_skill(skill_id: str, workspace: WorkspaceDep, body: Allow | None = None) -> dict[str, Any]:
    """Let exactly this revision of a flagged skill through; an edit judges it again."""
    return allow_entry(workspace, f"skill:{check_id(skill_id, 'skill id')}", body.revision if body else None).as_dict()
