"""create_app(settings): the FastAPI app. Its lifespan opens the vault and index, starts the
watcher, and stops them cleanly. Nothing is built at import time."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sentient.agent.turn import Agent
from sentient.api import chat, docs, git, health, memory, people, personas, search, sessions, skills, tasks, v1
from sentient.api.auth import TokenGate, load_or_create_token, require_token
from sentient.api.guard import RequestGuard
from sentient.api.mcp import build_server, mounted
from sentient.api.mcp_tools import Backend
from sentient.config import Settings
from sentient.conflicts import PeriodicSync
from sentient.errors import SentientError
from sentient.index.background import BackgroundEmbedding
from sentient.llm import LLM
from sentient.served import advertise as advertise  # for `sentient serve`, and tests
from sentient.tasks.runner import Runner
from sentient.tasks.scheduler import Scheduler
from sentient.tools import build_registry
from sentient.vault.kinds import check_key
from sentient.vault.store import iso, utc_now
from sentient.vault.transcript import writable
from sentient.watcher import Watcher
from sentient.workspace import open_workspace

MAX_BODY = 1024 * 1024
log = logging.getLogger("sentient.api")


def error_body(status: int, message: str, **extra: Any) -> dict[str, Any]:
    """One error shape for every route; OpenAI clients read `error.message` too."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 401:
        kind = "authentication_error"
    # a message may quote what was sent, lone surrogates too (which JSON cannot send back)
    return {"error": {"message": writable(message), "type": kind, "status": status, **extra}}


class BodyLimit:
    """Refuse request bodies over `limit` bytes with 413, before any route reads them."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        seen = 0
        exceeded = False
        replaced = False

        async def limited() -> Message:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    exceeded = True
                    return {"type": "http.disconnect"}  # whatever the route makes of it is replaced below
            return message

        async def guarded(message: Message) -> None:
            nonlocal replaced
            if exceeded:
                if not replaced:
                    replaced = True
                    await self._refuse(send)
                return
            await send(message)

        try:
            await self.app(scope, limited, guarded)
        except Exception:
            if not exceeded:
                raise
            if not replaced:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        response = JSONResponse(
            error_body(413, f"the request body is over {self.limit:,} bytes; send less (split long text)"), 413
        )
        await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in (loc[1:] if loc[:1] in (("body",), ("query",), ("path",)) else loc)]
    return ".".join(parts) or "body"


def create_app(
    settings: Settings,
    *,
    environ: Mapping[str, str] | None = None,
    llm: LLM | None = None,
    watch: bool = True,
    schedule: bool = True,
    clock: Callable[[], datetime] = utc_now,
    tick: float = 1.0,
    announce: Callable[[str], None] | None = None,
    host: str | None = None,
) -> FastAPI:
    """The app for one vault. `environ` holds provider keys (named by api_key_env); `llm`
    replaces the model client (tests); `watch` starts the file watcher, `schedule` the scheduler
    (without it, tasks run only when asked); `clock` is what the
    scheduler and the agent read the time from, every `tick` seconds (tests pass a fake one);
    `announce` is told each task's next due time at start, and when the embedded model starts
    and how long that took (serve prints them); `host` is the address it listens on when not
    api.host (serve --host): the server answers to loopback names and that host only
    (sentient/api/guard.py)."""
    token, _ = load_or_create_token(settings.state_dir)
    mcp = StreamableHTTPSessionManager(app=build_server(lambda: app.state.mcp))  # Host: RequestGuard checks it

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        workspace = open_workspace(settings)
        _ = workspace.judge.patterns.prefilter  # the scan's databases compiled (or loaded) now, not in a chat turn
        workspace.index.sync()
        agent = Agent(workspace, llm or LLM(settings, dict(environ or {}), announce=announce), build_registry(settings),
                      clock=clock)
        runner = Runner(agent, apart=clock is utc_now, environ=environ)  # a run apart reads the real clock
        scheduler = Scheduler(workspace, runner, clock=clock, tools=agent.registry.names(), interval=tick)
        runner.recover()  # runs a process left going when it ended: failed
        if agent.facts is not None:
            agent.facts.resume()  # fact extractions scheduled before the last stop and not run
        scheduler.load()
        embedding = BackgroundEmbedding(workspace.index)  # vectors kept current apart from any request
        embedding.start()

        def changed(paths: set[Path]) -> None:
            embedding.poke()
            scheduler.on_change(paths)

        held: dict[str, Path] = {}  # run -> its file, whose events wait for the run's end

        def hold(path: Path) -> bool:
            """A run going here rewrites its file at each step: indexed once, when the run ends."""
            found = workspace.vault.classify_path(path)
            if found is None or found[0] != "run":
                return False
            held[found[1]] = path  # before the check: a run ending meanwhile lets it go
            task, _, run = found[1].partition("/")
            if runner.running(task) == run:
                return True
            held.pop(found[1], None)
            return False

        watcher = Watcher(workspace, on_change=changed, hold=hold) if watch else None
        if watcher is not None:
            watcher.start()
            runner.on_end = lambda started: _let_go(watcher, held.pop(started.key, None))
        app.state.workspace, app.state.agent, app.state.watcher = workspace, agent, watcher
        app.state.runner, app.state.scheduler = runner, scheduler
        app.state.mcp = Backend(agent, start_run=lambda task: runner.submit(check_key("task", task), "manual").run)
        if announce is not None:
            announce_tasks(scheduler, announce)
        runner.start()
        if schedule:
            scheduler.start()
        syncing = PeriodicSync(workspace, settings.git.sync_minutes) if settings.git.sync_minutes else None
        if syncing is not None:
            syncing.start()
        try:
            async with mcp.run():
                yield
        finally:
            if syncing is not None:
                syncing.stop()
            scheduler.stop()
            if watcher is not None:
                watcher.stop()
            embedding.stop()
            runner.stop()
            agent.close()
            workspace.close()

    app = FastAPI(
        title="Sentient",
        description="A personal knowledge agent whose memory is a vault of markdown files.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.token = token
    app.state.settings = settings
    app.add_middleware(BodyLimit)
    app.add_middleware(RequestGuard, listen_host=host or settings.api.host, error_body=error_body)
    _handlers(app)
    protected = [Depends(require_token)]
    app.include_router(health.router, dependencies=protected)
    app.include_router(search.router, dependencies=protected)
    app.include_router(chat.router, dependencies=protected)
    app.include_router(sessions.router, dependencies=protected)
    app.include_router(skills.router, dependencies=protected)
    app.include_router(tasks.router, dependencies=protected)
    app.include_router(people.router, dependencies=protected)
    app.include_router(personas.router, dependencies=protected)
    app.include_router(git.router, dependencies=protected)
    if settings.features.memory:  # absent, not switched off: the routes do not exist
        app.include_router(memory.router, dependencies=protected)
    app.include_router(v1.router, dependencies=protected)

    app.include_router(docs.router, dependencies=protected)
    # the MCP endpoint (docs/mcp.md): an ASGI app of the SDK's, behind the same token
    app.router.routes.append(Route("/mcp", TokenGate(mounted(StreamableHTTPASGIApp(mcp)), token, error_body),
                                   include_in_schema=False))

    return app


def _let_go(watcher: Watcher, path: Path | None) -> None:
    if path is not None:
        watcher.let_go(path)


SHOWN_TASKS = 10  # next due times serve prints at start; /api/health has them all


def announce_tasks(scheduler: Scheduler, say: Callable[[str], None]) -> None:
    """Each task's next due time (or why it has none), soonest first, a line each."""
    plans = scheduler.overview()
    now = iso(scheduler.clock())
    if not plans:
        say("tasks: none (add one with `sentient task add` or POST /api/tasks)")
        return
    for plan in plans[:SHOWN_TASKS]:
        if plan["problem"]:
            state = f"NOT scheduled: {plan['problem']} (see `sentient doctor`)"
        elif plan["next_due"]:
            due = plan["next_due_local"]
            state = f"next run {due} ({plan['when']})" if plan["next_due"] > now else \
                f"due since {due} ({plan['when']}): running now, to catch up"
        elif plan["schedule"] is None:
            state = "runs when asked (no schedule)"
        else:
            state = "paused (enabled: false)" if plan["enabled"] is False else "done (its one run has run)"
        say(f"task {plan['id']}: {state}")
    if len(plans) > SHOWN_TASKS:
        say(f"... and {len(plans) - SHOWN_TASKS} more tasks (GET /api/health lists them)")


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(SentientError)
    async def sentient_error(request: Request, exc: SentientError) -> JSONResponse:
        extra = getattr(exc, "extra", None) or {}
        return JSONResponse(error_body(exc.status, exc.message, **extra), exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for error in exc.errors():
            if error.get("type") == "json_invalid":
                problems.append(f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')})")
            elif error.get("type") == "extra_forbidden":
                problems.append(f"{_field(error['loc'])}: unknown field; remove it")
            else:
                problems.append(f"{_field(error['loc'])}: {error['msg']}")
        return JSONResponse(error_body(422, "; ".join(problems)), 422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(error_body(exc.status_code, str(exc.detail)), exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body(500, f"internal error ({type(exc).__name__}); see the server log"), 500)
