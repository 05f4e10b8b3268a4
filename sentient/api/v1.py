"""The OpenAI-compatible endpoint, so existing clients can chat: POST /v1/chat/completions
(whole or `stream: true` in the chunk format), GET /v1/models and GET /v1/models/{model}.
Answers carry the turn's token counts in `usage` (a stream in a last chunk when the request
asks with `stream_options.include_usage`). Any other /v1 path (/v1/completions, /v1/embeddings,
/v1/responses, ...) is a 404 in OpenAI's error shape saying what is offered.

These turns use channel `api`: whether they may use memory follows `api.allow_memory`. A
client's `user` (field, or the `X-Sentient-User` header) maps to one session per model, so its
follow-ups continue that session; without one, each request is a new session and the earlier
messages the client sends along are its history.

The `model` picks the persona: `sentient` is none, and each persona of the vault
(`personas/<id>.md`) is a model of its own id, listed by `GET /v1/models`; any other model is a
404 naming the known ones. With a persona and a `user`, the turn is a known caller's: its facts
are told (when the turn may use memory) and kept (docs/facts.md).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, StrictBool, field_validator

from sentient.agent.turn import Agent, TurnResult
from sentient.api.chat import TurnFailed, relay
from sentient.api.deps import AgentDep
from sentient.errors import NotFound, SentientError
from sentient.llm import LLMError
from sentient.personas import get_persona, list_personas
from sentient.vault.document import check_id
from sentient.vault.transcript import writable

router = APIRouter(prefix="/v1", tags=["openai-compatible"])
MODEL_ID = "sentient"


class V1Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None

    @field_validator("content")
    @classmethod
    def _writable(cls, value: str | list[dict[str, Any]] | None) -> str | list[dict[str, Any]] | None:
        return writable(value) if isinstance(value, str) else value


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: StrictBool = False


class CompletionRequest(BaseModel):
    """OpenAI's request; sampling fields a client sends (temperature, ...) are accepted and
    left to the configured model."""

    model_config = ConfigDict(extra="allow")

    model: str = MODEL_ID
    messages: list[V1Message]
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    user: str | None = None

    @field_validator("model", "user")
    @classmethod
    def _writable(cls, value: str | None) -> str | None:
        """Kept as a chat keeps text: a lone surrogate (a broken \\u escape) as U+FFFD."""
        return writable(value) if value is not None else None


def text_of(content: str | list[dict[str, Any]] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(str(part.get("text", "")) for part in content if part.get("type") == "text")


def persona_of(agent: Agent, model: str) -> str | None:
    """The persona a request's `model` names (None for `sentient`); NotFound naming the models."""
    if model == MODEL_ID:
        return None
    try:
        return get_persona(agent.workspace, check_id(model, "model"), "model").id
    except SentientError:
        known = [MODEL_ID, *(p.id for p in list_personas(agent.workspace))]
        raise NotFound(f"model: there is no model '{model}' here; the models are {', '.join(known)} "
                       "(`sentient`, or a persona of the vault: personas/<id>.md)") from None


def caller_of(agent: Agent, user: str | None, persona: str | None) -> str | None:
    """The `user` as a caller id kept in the session (and naming their facts), or None. With
    facts on, a persona's caller must be an id that can name a folder (people/<user>/)."""
    if not user:
        return None
    try:
        return check_id(user, "user")
    except SentientError as exc:
        if persona is not None and agent.settings.facts is not None:
            raise SentientError(f"{exc.message}; with a persona model the user names the caller whose facts are "
                                "kept (people/<user>/), so it must be such an id") from None
        return None


def session_for(agent: Agent, user: str | None, persona: str | None = None) -> tuple[str, bool]:
    """(session key, is new). One stored session per client user and model."""
    if not user:
        return agent.new_session(channel="api", title="API chat", persona=persona), True
    seed = user if persona is None else f"{user}\n{persona}"
    key = "api-" + hashlib.sha256(seed.encode()).hexdigest()[:16]
    if agent.workspace.vault.locate("session", key) is None:
        title = f"API chat ({user[:40]})" if persona is None else f"API chat ({user[:40]}, {persona})"
        agent.new_session(channel="api", title=title, key=key, user=caller_of(agent, user, persona), persona=persona)
        return key, True
    return key, False


def check(request: CompletionRequest) -> None:
    if not request.messages or request.messages[-1].role != "user" or not text_of(request.messages[-1].content).strip():
        raise SentientError("messages: the last message must be a non-empty one from the user")


def turn(agent: Agent, request: CompletionRequest, user: str | None, on_text: Any = None) -> TurnResult:
    check(request)
    persona = persona_of(agent, request.model)
    caller_of(agent, request.user or user, persona)  # a bad one refused before anything is written
    agent.check_length(text_of(request.messages[-1].content))  # before a session is opened for it
    session, new = session_for(agent, request.user or user, persona)
    prior: list[dict[str, Any]] = []
    if new:
        prior = [{"role": m.role, "content": text_of(m.content)} for m in request.messages[:-1]
                 if m.role in ("system", "user", "assistant") and text_of(m.content).strip()]
    try:
        return agent.turn(text_of(request.messages[-1].content), session=session, channel="api", prior=prior,
                          on_text=on_text)
    except LLMError as exc:
        raise TurnFailed(exc, session) from exc


def _model_card(agent: Agent, model_id: str, name: str | None = None) -> dict[str, Any]:
    card = {"id": model_id, "object": "model", "created": 0, "owned_by": "sentient",
            "root": agent.llm.model_name("chat")}
    return card if name is None else {**card, "name": name}


@router.get("/models")
def models(agent: AgentDep) -> dict[str, Any]:
    """`sentient` (no persona) and one model per persona of the vault, by its id."""
    listed = [_model_card(agent, MODEL_ID)]
    listed += [_model_card(agent, p.id, p.name) for p in list_personas(agent.workspace)]
    return {"object": "list", "data": listed}


@router.get("/models/{model}")
def model(model: str, agent: AgentDep) -> dict[str, Any]:
    """One model (`models.retrieve`): `sentient`, or a persona; 404 naming the models otherwise."""
    persona = persona_of(agent, model)
    if persona is None:
        return _model_card(agent, MODEL_ID)
    return _model_card(agent, persona, get_persona(agent.workspace, persona, "model").name)


@router.post("/chat/completions")
def completions(
    request: CompletionRequest,
    agent: AgentDep,
    x_sentient_user: Annotated[str | None, Header()] = None,
) -> Any:
    check(request)  # before a stream starts: bad input gets its 400, not a 200 with an error chunk
    caller_of(agent, request.user or x_sentient_user, persona_of(agent, request.model))
    completion_id = "chatcmpl-" + uuid.uuid4().hex[:24]
    created = int(time.time())
    if request.stream:
        return StreamingResponse(_chunks(agent, request, x_sentient_user, completion_id, created),
                                 media_type="text/event-stream")
    result = turn(agent, request, x_sentient_user)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": request.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text},
                     "finish_reason": "stop"}],
        "usage": usage_of(result),
        "sentient": {"session_id": result.session, "memory_allowed": result.memory_allowed},
    }


def usage_of(result: TurnResult) -> dict[str, int]:
    """The turn's token counts as OpenAI reports them."""
    prompt, completion = result.usage.get("prompt_tokens", 0), result.usage.get("completion_tokens", 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": result.usage.get("total_tokens", prompt + completion)}


async def _chunks(agent: Agent, request: CompletionRequest, user: str | None, completion_id: str,
                  created: int) -> AsyncIterator[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": request.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    usage: dict[str, int] = {}
    async for event, data in relay(lambda on_text: {"usage": usage_of(turn(agent, request, user, on_text))}):
        if event == "delta":
            yield chunk({"content": data["text"]})
        elif event == "done":
            usage = data["usage"]
        elif event == "error":
            yield f"data: {json.dumps({'error': {'message': data['message'], 'type': 'server_error'}})}\n\n"
            yield "data: [DONE]\n\n"
            return
    yield chunk({}, "stop")
    if request.stream_options is not None and request.stream_options.include_usage:
        last = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": request.model,
                "choices": [], "usage": usage}  # as OpenAI sends it: a chunk of its own, with no choices
        yield f"data: {json.dumps(last)}\n\n"
    yield "data: [DONE]\n\n"


OFFERED = "POST /v1/chat/completions, GET /v1/models and GET /v1/models/{model}"


class NotOffered(NotFound):
    """An OpenAI endpoint Sentient does not have; its error carries OpenAI's `param` and `code`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.extra = {"param": None, "code": "not_found"}


@router.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
def not_offered(path: str, request: Request) -> None:
    """Every other /v1 endpoint (completions, embeddings, responses, ...): a 404 that says so, in
    OpenAI's error shape, which its clients raise as NotFoundError with this message."""
    raise NotOffered(f"{request.method} /v1/{path} is not offered by Sentient; it offers {OFFERED} "
                     "(with the openai client: chat.completions.create and models)")
