"""What is held about a caller (docs/facts.md): see it all, and forget it, one persona or all.

`GET /api/people` lists the callers with facts; `GET /api/people/{user}` shows one caller's
facts under every persona (withheld ones marked) and their sessions' ids; `DELETE` removes the
fact files and the sessions, all of them or those with one persona (`?character_id=`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from sentient.api.deps import AgentDep, WorkspaceDep
from sentient.facts import caller, callers, forget

router = APIRouter(prefix="/api/people", tags=["people"])


@router.get("")
def list_callers(workspace: WorkspaceDep) -> dict[str, Any]:
    return {"people": callers(workspace)}


@router.get("/{user}")
def show_caller(user: str, workspace: WorkspaceDep, agent: AgentDep) -> dict[str, Any]:
    """Everything held about the caller: facts per persona (and the last extraction's outcome
    in this process), unreadable fact files, and their sessions."""
    held = caller(workspace, user)
    outcomes = {key.split("/")[1]: {"status": o.status, "detail": o.detail, "at": o.at}
                for key, o in (agent.facts.outcomes if agent.facts is not None else {}).items()
                if key.split("/")[0] == user}
    for facts in held["facts"]:
        facts["last_extraction"] = outcomes.get(facts["persona"])
    held["last_extractions"] = outcomes  # by persona: also those with no fact file (yet), e.g. a refused reply
    held["facts_enabled"] = agent.facts is not None
    return held


@router.delete("/{user}")
def forget_caller(
    user: str,
    workspace: WorkspaceDep,
    agent: AgentDep,
    character_id: Annotated[str | None, Query(description="forget only what is held with this persona")] = None,
) -> dict[str, Any]:
    done = forget(workspace, user, character_id)
    if agent.facts is not None:
        agent.facts.forgotten(user, done["personas"], done["sessions"])
    return done
