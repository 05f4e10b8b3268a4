"""POST /api/chat: one message to a session (a new one when session_id is left out), answered
whole or streamed as server-sent events."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator

from sentient.agent.turn import INCOGNITO_PREFIX, Agent, TurnResult
from sentient.api.deps import AgentDep
from sentient.errors import NotFound, SentientError
from sentient.llm import LLMError
from sentient.vault.document import check_id
from sentient.vault.kinds import check_key
from sentient.vault.transcript import writable

router = APIRouter(tags=["chat"])


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(description="what the person says")
    session_id: str | None = Field(default=None, description="continue this session; leave out to start one")
    incognito: StrictBool = Field(default=False, description="start an incognito session: nothing from it is saved "
                                  "(a new session only: not with session_id)")
    pins: list[str] | None = Field(default=None, description="note:<id> / plan:<id> to pin to a new session (not with "
                                   "session_id: PUT /api/sessions/{session_id}/pins changes an existing one's)")
    stream: StrictBool = Field(default=False, description="answer as server-sent events")
    user_id: str | None = Field(default=None, description="the caller: a new session keeps it, and with "
                                "character_id their facts are told and kept (docs/facts.md)")
    character_id: str | None = Field(default=None, description="the persona (personas/<id>.md) a new session "
                                     "talks as; a stored session keeps the one it started with")

    @field_validator("message")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty; type something to send")
        return value

    @field_validator("message")
    @classmethod
    def _surrogates_kept_as_replacement(cls, value: str) -> str:
        """A lone surrogate (a \\u escape of half a UTF-16 pair) is no character and has no UTF-8:
        it is kept as U+FFFD, as the session file keeps it, so the turn and its title never fail on it."""
        return writable(value)

    @field_validator("session_id")
    @classmethod
    def _valid_id(cls, value: str | None) -> str | None:
        if value is not None:
            check_key("session", value)
        return value

    @field_validator("user_id", "character_id")
    @classmethod
    def _valid_ids(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            check_id(value, str(info.field_name))
        return value

    @field_validator("incognito")
    @classmethod
    def _incognito_starts(cls, value: bool, info: ValidationInfo) -> bool:
        session = info.data.get("session_id")
        if value and session is not None and not session.startswith(INCOGNITO_PREFIX):
            # never answer (and save) a message sent as private in a session that is not
            raise ValueError("applies only to a new session; a stored session cannot become incognito: leave out "
                             "session_id to start an incognito one")
        return value

    @field_validator("pins")
    @classmethod
    def _pins_start(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if value is not None and info.data.get("session_id") is not None:
            raise ValueError("apply only to a new session; change an existing session's pins with "
                             f"PUT /api/sessions/{info.data['session_id']}/pins")
        return value


class HeldCallOut(BaseModel):
    tool: str
    arguments: dict[str, Any]
    reason: str


class ToolCallOut(BaseModel):
    name: str
    arguments: dict[str, Any]
    ok: bool


class ChatResponse(BaseModel):
    session_id: str
    reply: str
    memory_allowed: bool
    incognito: bool
    untrusted: bool
    untrusted_reasons: list[str]
    held: list[HeldCallOut]
    tool_calls: list[ToolCallOut]


def shape(result: TurnResult) -> ChatResponse:
    return ChatResponse(
        session_id=result.session,
        reply=result.text,
        memory_allowed=result.memory_allowed,
        incognito=result.incognito,
        untrusted=result.untrusted,
        untrusted_reasons=result.untrusted_reasons,
        held=[HeldCallOut(tool=h.tool, arguments=h.arguments, reason=h.reason) for h in result.held],
        tool_calls=[ToolCallOut(name=c.name, arguments=c.arguments, ok=c.ok) for c in result.calls],
    )


class TurnFailed(SentientError):
    """A model error during a turn; the person's message is already in the session."""

    def __init__(self, error: LLMError, session: str) -> None:
        super().__init__(f"{error.message} (your message was kept in session {session})")
        self.status = error.status
        self.extra = {"session_id": session}


def open_session(agent: Agent, request: ChatRequest) -> str:
    agent.check_length(request.message)  # before a session is opened for it
    if request.session_id is not None:  # checked before a stream starts: a 404, not an error event
        if agent.is_incognito(request.session_id):
            agent.check_session_caller(request.session_id, request.user_id, request.character_id)
            return request.session_id
        if request.incognito:
            raise NotFound(f"no incognito session '{request.session_id}' (it ends with the server that holds it); "
                           "start a new one by leaving session_id out")
        if agent.workspace.vault.locate("session", request.session_id) is None:
            raise NotFound(f"no session '{request.session_id}'; start a new one by leaving session out")
        agent.check_session_caller(request.session_id, request.user_id, request.character_id)
        return request.session_id
    return agent.new_session(incognito=request.incognito, pins=request.pins, title=request.message.strip()[:60],
                             user=request.user_id, persona=request.character_id)


def run_turn(agent: Agent, session: str, request: ChatRequest, on_text: Callable[[str], None] | None = None,
             channel: str = "chat") -> TurnResult:
    try:
        return agent.turn(request.message, session=session, channel=channel, on_text=on_text)
    except LLMError as exc:
        raise TurnFailed(exc, session) from exc


@router.post("/api/chat", response_model=ChatResponse)
def post_chat(request: ChatRequest, agent: AgentDep) -> Any:
    """Send a message; with `stream: true` the answer comes as events `delta` ({"text"}),
    then `done` (the whole response) or `error` ({"message", "status"})."""
    session = open_session(agent, request)
    if not request.stream:
        return shape(run_turn(agent, session, request))
    events = relay(lambda on_text: shape(run_turn(agent, session, request, on_text)).model_dump())
    return StreamingResponse((sse(event, data) async for event, data in events), media_type="text/event-stream")


def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def relay(work: Callable[[Callable[[str], None]], dict[str, Any]]) -> AsyncIterator[tuple[str, Any]]:
    """Run a turn in a worker thread and relay its events as they come: ("delta", {"text"}),
    then ("done", result) or ("error", {"message", "status"})."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def put(item: tuple[str, Any]) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, item)

    def worker() -> None:
        try:
            put(("done", work(lambda text: put(("delta", {"text": text})))))
        except SentientError as exc:
            put(("error", {"message": exc.message, "status": exc.status, **(getattr(exc, "extra", None) or {})}))
        except Exception as exc:  # the stream must end with an event, whatever happened
            put(("error", {"message": f"internal error ({type(exc).__name__}); see the server log", "status": 500}))

    threading.Thread(target=worker, name="sentient-stream", daemon=True).start()
    while True:
        event, data = await queue.get()
        yield event, data
        if event in ("done", "error"):
            return
