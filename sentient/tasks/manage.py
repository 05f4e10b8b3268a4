"""Tasks as the person manages them (API, CLI): list, read, create, edit, delete, the notepad,
and the runs with their logs and answers. Every field a person sends is checked as the
scheduler would read it, so a bad schedule is refused here rather than found later.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from sentient.errors import AlreadyExists, BadFile, Conflict, NotFound, SentientError
from sentient.knowledge import require_pins
from sentient.memory import EntryView, view
from sentient.tasks.notepad import read_notepad
from sentient.tasks.runs import AlreadyRunning, RunLock, answer_of, log_of, newest_runs, note_of, run_names
from sentient.tasks.spec import TaskSpec, replace_sections, task_body, task_spec
from sentient.vault.document import Document, slugify
from sentient.vault.kinds import check_key, check_title, default_path, kind
from sentient.vault.store import utc_now
from sentient.workspace import Workspace

FIELDS = ("schedule", "timezone", "enabled", "scope", "role", "tools", "pins", "notify")


def _judged(workspace: Workspace, document: Document) -> dict[str, Any]:
    seen: EntryView = view(workspace, document)
    return {"flagged": seen.flagged, "withheld": seen.withheld, "patterns": list(seen.patterns),
            "matches": [{"pattern": m.pattern, "excerpt": m.excerpt} for m in seen.matches]}


def notepad_view(workspace: Workspace, task: str) -> dict[str, Any] | None:
    document = read_notepad(workspace, task)
    if document is None:
        return None
    return {"text": document.body.strip(), "revision": document.revision, "updated": document.meta.get("updated"),
            "source": document.meta.get("source"), "untrusted": document.meta.get("untrusted") is True,
            "edited_outside": document.edited_outside,
            **_judged(workspace, document)}


def run_view(workspace: Workspace, document: Document, *, full: bool = False) -> dict[str, Any]:
    meta = document.meta
    shown: dict[str, Any] = {
        "id": document.id,
        "task": document.key.split("/")[0],
        "status": meta.get("status"),
        "trigger": meta.get("trigger"),
        "started": meta.get("started"),
        "finished": meta.get("finished"),
        "summary": meta.get("summary"),
        "untrusted": meta.get("untrusted") is True,
        "tools_used": list(meta.get("tools_used") or []),
        **_judged(workspace, document),
    }
    if full:
        shown.update(log=log_of(document), answer=answer_of(document), note_not_saved=note_of(document),
                     path=str(document.path.relative_to(workspace.vault.root)))
    return shown


@dataclass(frozen=True)
class TaskView:
    document: Document
    spec: TaskSpec | None
    problem: str | None

    def as_dict(self, workspace: Workspace, *, full: bool = False) -> dict[str, Any]:
        doc, spec, meta = self.document, self.spec, self.document.meta
        shown: dict[str, Any] = {
            "id": doc.key,
            "title": spec.title if spec is not None else doc.title,
            "path": str(doc.path.relative_to(workspace.vault.root)),
            "schedule": meta.get("schedule"),
            "when": spec.describe() if spec is not None else None,
            "recurring": spec.recurring if spec is not None else False,
            "timezone": spec.zone.key if spec is not None else meta.get("timezone"),
            "enabled": meta.get("enabled") is not False,
            "scope": meta.get("scope"),
            "role": meta.get("role") or "chat",
            "tools": meta.get("tools"),
            "pins": list(meta.get("pins") or []),
            "notify": meta.get("notify") is True,
            "created": meta.get("created"),
            "updated": meta.get("updated"),
            "revision": file_revision(doc),
            "problem": self.problem,
        }
        if full:
            shown["goal"], shown["plan"] = (spec.goal, spec.plan) if spec is not None else ("", doc.body.strip())
            shown["body"] = doc.body
            shown["notepad"] = notepad_view(workspace, doc.key)
            shown["runs"] = len(run_names(workspace.vault, doc.key))
        return shown


def file_revision(document: Document) -> str:
    """A task's revision as the API shows it and `If-Match` takes it: of the whole file, so that a
    change of its schedule or `enabled` (frontmatter, outside a content revision) makes a new one."""
    return document.source.file_hash if document.source is not None else document.revision


def _check_revision(document: Document, expected: str | None) -> None:
    if expected is not None and expected not in (file_revision(document), document.revision):
        raise Conflict(document.path, expected, file_revision(document))


def task_view(workspace: Workspace, document: Document, tools: frozenset[str] | None = None) -> TaskView:
    try:
        return TaskView(document, task_spec(document, workspace.settings, tools), None)
    except BadFile as exc:
        return TaskView(document, None, f"{exc.reason}. {exc.fix}")


def list_tasks(workspace: Workspace, tools: frozenset[str] | None = None) -> tuple[list[TaskView], list[str]]:
    """Every task (those whose file says something that cannot be run carry their problem), and
    the task files that cannot be read at all."""
    listing = workspace.vault.scan({"task"})
    views = [task_view(workspace, document, tools) for document in sorted(listing.documents, key=lambda d: d.key)]
    return views, [str(problem) for problem in listing.problems]


def get_task(workspace: Workspace, task: str, tools: frozenset[str] | None = None) -> TaskView:
    return task_view(workspace, workspace.vault.get("task", check_key("task", task)), tools)


def _checked(workspace: Workspace, document: Document, tools: frozenset[str] | None, changed: set[str]) -> None:
    """SentientError (400) naming the field and the fix, for a task that could not be run as written,
    or a `once` time that has passed (a file may say so, the scheduler then runs it at once; a person
    setting one now has made a mistake)."""
    try:
        spec = task_spec(document, workspace.settings, tools)
    except BadFile as exc:
        raise SentientError(f"{exc.reason}. {exc.fix}") from None
    if "pins" in changed:  # NotFound naming a pin with no file (a run could not be told it)
        require_pins(workspace.vault, list(spec.pins))
    schedule = spec.schedule
    if schedule is not None and schedule.kind == "once" and {"schedule", "timezone"} & changed \
            and schedule.at(spec.zone) <= utc_now():
        raise SentientError(f"schedule: '{schedule.text}' has passed ({spec.zone.key}); give a time to come, or run "
                            f"the task now with `sentient task run` / POST /api/tasks/{{id}}/run")


def _fields(values: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise SentientError(f"{', '.join(unknown)}: not a task field; the fields are {', '.join(FIELDS)}")
    # None: not given; '' removes the field (no schedule: the task runs only when asked)
    return {k: (None if isinstance(v, str) and not v.strip() else v) for k, v in values.items() if v is not None}


def create_task(
    workspace: Workspace,
    *,
    title: str,
    plan: str,
    goal: str = "",
    id: str | None = None,
    fields: Mapping[str, Any] | None = None,
    tools: frozenset[str] | None = None,
) -> TaskView:
    """A new task written by the person; refused (nothing written) when it could not run as written."""
    title = check_title(title)
    if not plan.strip():
        raise SentientError("plan: a task needs a plan (what to do each run); it is empty")
    key = check_key("task", id) if id else slugify(title, "task")
    meta = {k: v for k, v in {"title": title, "enabled": True, **_fields(fields or {})}.items() if v is not None}
    body = task_body(goal, plan)
    path = default_path(workspace.vault.root, "task", key)
    _checked(workspace, Document("task", key, path, meta, body, kind("task").fields), tools, {*FIELDS})
    if path.exists():
        raise AlreadyExists(f"{path.relative_to(workspace.vault.root)} exists: the task '{key}' is there already; "
                            "change that one (PATCH, or its file), or give this one another id or title")
    document = workspace.vault.create("task", key, meta, body)
    workspace.index.update(document.path)
    return task_view(workspace, document, tools)


def edit_task(
    workspace: Workspace,
    task: str,
    *,
    expected_revision: str | None,
    title: str | None = None,
    goal: str | None = None,
    plan: str | None = None,
    fields: Mapping[str, Any] | None = None,
    tools: frozenset[str] | None = None,
) -> TaskView:
    """Change a task the caller read at `expected_revision` (Conflict if it changed since); a
    field set to '' (schedule, timezone, scope, role) is removed."""
    updates = _fields(fields or {})
    if title is not None:
        updates["title"] = check_title(title)
    if plan is not None and not plan.strip():
        raise SentientError("plan: a task needs a plan (what to do each run); it is empty")

    def change(document: Document) -> Document:
        _check_revision(document, expected_revision)  # read under the write's lock
        body = None if goal is None and plan is None else replace_sections(document.body, goal=goal, plan=plan)
        changed = document.replace(updates, body)
        _checked(workspace, changed, tools, set(updates))
        return changed

    document = workspace.vault.update("task", check_key("task", task), transform=change)
    workspace.index.update(document.path)
    return task_view(workspace, document, tools)


def delete_task(workspace: Workspace, task: str, *, expected_revision: str | None = None) -> dict[str, Any]:
    """Remove a task's files: task.md first (so the scheduler stops planning it), then its notepad
    and runs (git history keeps them). Refused while a run of it is going, in any process (it holds
    the task's run lock). Other files in its folder are left, and named."""
    document = workspace.vault.get("task", check_key("task", task))
    _check_revision(document, expected_revision)
    lock = RunLock(workspace.vault, task)
    if not lock.acquire():
        raise AlreadyRunning(f"task '{task}' has a run going: cancel it, and delete the task once it has stopped")
    try:
        path = workspace.vault.delete("task", task, expected_revision=document.revision)
        workspace.index.remove(path)
        removed = [path]
        for run in newest_runs(workspace.vault, task):
            run.path.unlink()
            workspace.index.remove(run.path)
            removed.append(run.path)
        notepad = path.parent / "notepad.md"
        if notepad.exists():
            notepad.unlink()
            workspace.index.remove(notepad)
            removed.append(notepad)
    finally:
        lock.release()
    folder = path.parent
    for empty in (folder / "runs", folder):
        with suppress(OSError):
            os.rmdir(empty)
    root = workspace.vault.root
    left = sorted(str(p.relative_to(root)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []
    return {"deleted": task, "removed": [str(p.relative_to(root)) for p in removed], "kept": left}


def list_runs(workspace: Workspace, task: str, limit: int = 20) -> list[dict[str, Any]]:
    workspace.vault.get("task", check_key("task", task))
    return [run_view(workspace, document) for document in newest_runs(workspace.vault, task, limit)]


def get_run(workspace: Workspace, task: str, run: str) -> dict[str, Any]:
    key = check_key("run", f"{check_key('task', task)}/{run}")
    try:
        document = workspace.vault.get("run", key)
    except NotFound:
        raise NotFound(f"task '{task}' has no run '{run}'; `sentient task runs {task}` lists its runs") from None
    return run_view(workspace, document, full=True)
