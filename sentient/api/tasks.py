"""Tasks: list, create, read, edit (the notepad too), delete; run now, the runs, cancel.

A run started here (or by the scheduler) runs on the server's task workers, never on the
request: `POST /api/tasks/{id}/run` answers with the run's id at once."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sentient.api.deps import AgentDep, WorkspaceDep
from sentient.api.memory import expected_revision
from sentient.errors import Conflict, SentientError, StaleRevision
from sentient.tasks.manage import create_task, delete_task, edit_task, get_run, get_task, list_runs, list_tasks
from sentient.tasks.notepad import checked, set_notepad
from sentient.tasks.runner import Runner
from sentient.tasks.runs import GOING
from sentient.tasks.scheduler import Scheduler
from sentient.vault.kinds import TITLE_RULE, check_key
from sentient.vault.store import iso

router = APIRouter(prefix="/api/tasks", tags=["tasks"])


def _runner(request: Request) -> Runner:
    runner: Runner = request.app.state.runner
    return runner


def _scheduler(request: Request) -> Scheduler:
    scheduler: Scheduler = request.app.state.scheduler
    return scheduler


class TaskFields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schedule: str | None = Field(default=None, description="a cron line ('0 9 * * 1'), 'every 30m', "
                                 "'once 2026-12-24T09:00'; '' for none (run only when asked)")
    timezone: str | None = Field(default=None, description="an IANA zone (Europe/Berlin); '' for the vault's")
    enabled: bool | None = None
    scope: str | None = None
    role: str | None = Field(default=None, description="the model role: chat, helper or extraction")
    tools: list[str] | None = Field(default=None, description="the tools its runs may use (default: all)")
    pins: list[str] | None = Field(default=None, description="note:<id> or plan:<id>, told to every run")
    notify: bool | None = Field(default=None, description="send each final answer to notify.webhook_url")

    def fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in TaskFields.model_fields}


def _title(title: str | None) -> str | None:
    if title is not None and (not title.strip() or len(title.strip().splitlines()) > 1):
        raise ValueError(TITLE_RULE if title.strip() else "must not be empty")
    return title


class NewTask(TaskFields):
    title: str = Field(min_length=1, max_length=300)
    plan: str = Field(min_length=1, description="what each run does (markdown)")
    goal: str = ""
    id: str | None = None

    _one_line = field_validator("title")(_title)


class TaskEdit(TaskFields):
    title: str | None = Field(default=None, min_length=1, max_length=300)
    plan: str | None = None
    goal: str | None = None
    notepad: str | None = Field(default=None, description="the notepad's new text, trimmed (at most 1,500 "
                                "characters); null or '' clears it")

    _one_line = field_validator("title")(_title)


@router.get("")
def tasks(workspace: WorkspaceDep, agent: AgentDep, request: Request) -> dict[str, Any]:
    """Every task with its schedule in words, next due time and problem (if its file says something
    that cannot be run), and the task files that cannot be read."""
    views, unreadable = list_tasks(workspace, agent.registry.names())
    due = {plan["id"]: plan for plan in _scheduler(request).overview()}
    return {"tasks": [{**view.as_dict(workspace), "next_due": due.get(view.document.key, {}).get("next_due"),
                       "running": _runner(request).running(view.document.key)} for view in views],
            "unreadable": unreadable}


@router.post("", status_code=201)
def new_task(task: NewTask, workspace: WorkspaceDep, agent: AgentDep, request: Request) -> dict[str, Any]:
    """A new task (refused, with the fix, when its schedule, time zone, role, tools or pins are wrong)."""
    view = create_task(workspace, title=task.title, plan=task.plan, goal=task.goal, id=task.id, fields=task.fields(),
                       tools=agent.registry.names())
    _scheduler(request).refresh(view.document.key)
    return _full(view.document.key, workspace, agent, request)


def _full(task_id: str, workspace: WorkspaceDep, agent: AgentDep, request: Request) -> dict[str, Any]:
    view = get_task(workspace, task_id, agent.registry.names())
    shown = view.as_dict(workspace, full=True)
    shown["next_due"] = _iso(_scheduler(request).next_due(task_id))
    shown["running"] = _runner(request).running(task_id)
    return shown


def _iso(moment: datetime | None) -> str | None:
    return iso(moment) if moment is not None else None


@router.get("/{task_id}")
def read_task(task_id: str, workspace: WorkspaceDep, agent: AgentDep, request: Request) -> dict[str, Any]:
    """A task in full: its fields, goal and plan, notepad (judged), next due time and the run going."""
    return _full(check_key("task", task_id), workspace, agent, request)


@router.patch("/{task_id}")
def change_task(
    task_id: str,
    edit: TaskEdit,
    workspace: WorkspaceDep,
    agent: AgentDep,
    request: Request,
    if_match: Annotated[str | None, Header(description="the revision you read (of task.md, or of the notepad "
                                                     "when only it changes); 412 if it changed")] = None,
) -> dict[str, Any]:
    """Change a task's fields, goal, plan or notepad. `If-Match` names the revision you read:
    task.md's, or the notepad's when the notepad is all you change."""
    check_key("task", task_id)
    expected = expected_revision(if_match)
    sent = edit.model_fields_set
    changes_task = bool(sent - {"notepad"})
    if expected is not None and changes_task and "notepad" in sent:
        raise SentientError("If-Match names one file's revision: change the notepad and the task's other fields in "
                            "two requests")
    if "notepad" in sent:
        checked(edit.notepad)  # a notepad that would be refused is refused before task.md is written
    try:
        if changes_task:
            edit_task(workspace, task_id, expected_revision=expected, title=edit.title, goal=edit.goal,
                      plan=edit.plan, fields={k: v for k, v in edit.fields().items() if k in sent},
                      tools=agent.registry.names())
            _scheduler(request).refresh(task_id)
        if "notepad" in sent:
            set_notepad(workspace, task_id, edit.notepad, expected_revision=None if changes_task else expected)
    except SentientError as exc:
        if exc.status == 409 and expected is not None:
            raise StaleRevision(exc.message) from exc
        raise
    return _full(task_id, workspace, agent, request)


@router.delete("/{task_id}")
def remove_task(
    task_id: str, workspace: WorkspaceDep, request: Request, if_match: Annotated[str | None, Header()] = None
) -> dict[str, Any]:
    """Delete a task: its task.md, notepad and runs (git history keeps them). Refused (409) while
    a run of it is going: cancel that first."""
    check_key("task", task_id)
    expected = expected_revision(if_match)
    try:
        deleted = delete_task(workspace, task_id, expected_revision=expected)
    except Conflict as exc:
        raise StaleRevision(exc.message) from exc
    _scheduler(request).refresh(task_id)
    return deleted


@router.post("/{task_id}/run", status_code=202)
def run_now(task_id: str, workspace: WorkspaceDep, request: Request) -> dict[str, Any]:
    """Start a run now; answers at once with its id (it runs on the task workers: `queued` while
    they are busy). 409 while a run of the task is going."""
    started = _runner(request).submit(check_key("task", task_id), "manual")
    return {"task": task_id, "run": started.run, "status": "queued"}


@router.get("/{task_id}/runs")
def runs(
    task_id: str, workspace: WorkspaceDep, limit: Annotated[int, Query(ge=1, le=500)] = 20
) -> list[dict[str, Any]]:
    """A task's runs, newest first: status, times, summary, tools used, and whether one is flagged."""
    return list_runs(workspace, task_id, limit)


@router.get("/{task_id}/runs/{run_id}")
def run(task_id: str, run_id: str, workspace: WorkspaceDep) -> dict[str, Any]:
    """One run: its log, final answer, and a note it saved that was not kept (the notepad changed)."""
    return get_run(workspace, task_id, run_id)


@router.post("/{task_id}/runs/{run_id}/cancel", status_code=202)
def cancel(task_id: str, run_id: str, workspace: WorkspaceDep, request: Request) -> dict[str, Any]:
    """Ask a run to stop (before its next step); its notepad is left as it was."""
    shown = get_run(workspace, task_id, run_id)
    if shown["status"] not in GOING:
        raise SentientError(f"run {run_id} has ended ({shown['status']}); there is nothing to cancel")
    _runner(request).cancel(task_id, run_id)
    return {"task": task_id, "run": run_id, "status": "cancelling"}
