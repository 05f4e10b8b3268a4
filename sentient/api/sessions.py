"""Sessions: list, read, their pins, and what they are told (the knowledge block)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, ConfigDict

from sentient.agent.context import memory_allowed
from sentient.agent.turn import Agent, check_pins, left_out, session_knowledge
from sentient.api.deps import AgentDep, WorkspaceDep
from sentient.errors import NotFound
from sentient.knowledge import Knowledge, require_pins
from sentient.vault import transcript
from sentient.vault.kinds import check_key, one_line

router = APIRouter(prefix="/api/sessions", tags=["sessions"])


class Pins(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pins: list[str]


class PinsSet(Pins):
    """The pins now, and what of them the session is not shown whole (a pin cut to fit, one
    withheld because it reads like instructions)."""

    problems: list[str]


@router.get("")
def list_sessions(workspace: WorkspaceDep, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[dict[str, Any]]:
    """Stored sessions, newest first (incognito sessions are never stored)."""
    docs = sorted(workspace.index.documents("session"), key=lambda d: d.updated or "", reverse=True)
    return [
        {"id": d.key, "title": one_line(d.title), "updated": d.updated, "channel": d.meta.get("channel"),
         "pins": d.meta.get("pins") or []}
        for d in docs[: max(1, min(limit, 500))]
    ]


@router.get("/{session_id}")
def read_session(session_id: str, agent: AgentDep) -> dict[str, Any]:
    """A session's settings and its messages."""
    check_key("session", session_id)
    messages = agent.messages_of(session_id) if agent.is_incognito(session_id) else None
    meta: dict[str, Any] = {"incognito": True}
    if messages is None:
        document = agent.workspace.vault.get("session", session_id)
        meta = dict(document.meta)
        messages = transcript.parse(document.body).messages
    return {
        "id": session_id,
        **{k: v for k, v in meta.items() if k != "id"},
        "messages": [
            {"role": m.role, "time": m.time, "text": m.text, "tool_calls": list(m.tool_calls),
             "tool_results": list(m.tool_results), "pinned": m.pinned}
            for m in messages
        ],
    }


@router.get("/{session_id}/pins")
def get_pins(session_id: str, agent: AgentDep) -> Pins:
    check_key("session", session_id)
    if not agent.is_incognito(session_id) and agent.workspace.vault.locate("session", session_id) is None:
        raise NotFound(f"no session '{session_id}'")
    return Pins(pins=agent.session_settings(session_id)[0])


@router.put("/{session_id}/pins")
def put_pins(session_id: str, body: Pins, agent: AgentDep) -> PinsSet:
    """Replace the session's pins; the next message carries the changed block. A pin that
    names no note or plan is refused (404); one already pinned may stay though its file is gone."""
    check_key("session", session_id)
    pins = check_pins(body.pins)
    require_pins(agent.workspace.vault, pins, pinned=agent.session_settings(session_id)[0])
    pins = agent.set_pins(session_id, pins)
    return PinsSet(pins=pins, problems=agent.knowledge.pin_problems(pins))


def knowledge_of(agent: Agent, session_id: str) -> tuple[Knowledge | None, bool, tuple[str, ...]]:
    """What a session's next message would carry, whether the session already carries it, and
    what is left out of it; an incognito session's too, while this process holds it."""
    if not agent.is_incognito(session_id):
        return session_knowledge(agent.workspace, session_id, agent.prompts)
    pins, scope, delivered = agent.session_settings(session_id)
    allowed = memory_allowed(incognito=True, channel="chat", settings=agent.settings)
    knowledge = agent.knowledge.build(pins=pins, scope=scope, memory_allowed=allowed)
    carried = knowledge is not None and knowledge.signature == delivered
    return knowledge, carried, left_out(agent.knowledge, knowledge, pins)


@router.get("/{session_id}/knowledge")
def get_knowledge(session_id: str, agent: AgentDep) -> dict[str, Any]:
    """Exactly what the session is told, and whether it already carries it."""
    check_key("session", session_id)
    knowledge, delivered, problems = knowledge_of(agent, session_id)
    if knowledge is None:
        return {"text": None, "signature": None, "delivered": False, "problems": list(problems)}
    return {"text": knowledge.text, "signature": knowledge.signature, "delivered": delivered,
            "problems": list(problems)}


@router.api_route("/{session_id:path}", methods=["GET", "PUT"], include_in_schema=False)
def unmatched(session_id: str) -> None:
    """A path no route above takes: an id holding '/' (sent as %2F) gets the id rule, not a bare 404."""
    check_key("session", session_id)
    raise HTTPException(status_code=405)
