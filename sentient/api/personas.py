"""The vault's personas (`personas/<id>.md`), each judged now: what `/v1/models` offers and what
`character_id` names."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from sentient.api.deps import WorkspaceDep
from sentient.personas import get_persona, list_personas

router = APIRouter(prefix="/api/personas", tags=["personas"])


@router.get("")
def personas(workspace: WorkspaceDep) -> dict[str, Any]:
    return {"personas": [p.as_dict() for p in list_personas(workspace)]}


@router.get("/{persona_id}")
def persona(persona_id: str, workspace: WorkspaceDep) -> dict[str, Any]:
    return get_persona(workspace, persona_id, "persona_id").as_dict()
