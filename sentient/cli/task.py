"""`sentient task ...`: list, show, add, run (and follow), runs, notepad, cancel.

`task run` hands the run to the server when one serves this vault (it then runs beside the
scheduler, and `--wait` follows its log); with no server it runs here, in the foreground.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from sentient.cli.common import count_in, read_stdin
from sentient.errors import NotFound, SentientError

if TYPE_CHECKING:
    from sentient.workspace import Workspace

POLL = 0.25  # seconds between looks at a run file being followed


def _tools(workspace: Workspace) -> frozenset[str]:
    from sentient.tools import build_registry

    return build_registry(workspace.settings).names()


def _plans(workspace: Workspace) -> dict[str, dict[str, Any]]:
    """Each task's next due time: as the server serving this vault plans it (it saw every edit as it
    came), or, with none, as `serve` would plan it from the files now."""
    from sentient.tasks.scheduler import Scheduler

    server = running_server(workspace)
    if server is not None:
        import httpx

        with suppress(httpx.HTTPError, ValueError, KeyError):
            health = httpx.get(f"{server[0]}/api/health", headers={"Authorization": f"Bearer {server[1]}"}, timeout=5)
            return {plan["id"]: plan for plan in health.json()["tasks"]}
    scheduler = Scheduler(workspace, None, tools=_tools(workspace))
    scheduler.load()
    return {plan["id"]: plan for plan in scheduler.overview()}


def _going(workspace: Workspace, task: str) -> str | None:
    """'running now (run-...)', 'waiting its turn (run-...)', or None."""
    from sentient.tasks.runs import alive_run

    found = alive_run(workspace.vault, task)
    if found is None:
        return None
    return f"running now ({found[0]})" if found[1] == "running" else f"waiting its turn ({found[0]})"


def cmd_task_list(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.tasks.manage import list_tasks

    views, unreadable = list_tasks(workspace, _tools(workspace))
    plans = _plans(workspace)
    rows = []
    for view in views:
        shown = view.as_dict(workspace)
        shown["next_due"] = plans.get(view.document.key, {}).get("next_due")
        shown["running"] = _going(workspace, view.document.key)
        rows.append(shown)
    if args.json:
        print(json.dumps({"tasks": rows, "unreadable": unreadable}, ensure_ascii=False, indent=2))
        return 0
    if not rows and not unreadable:
        print("no tasks yet: add one with `sentient task add TITLE --plan TEXT --schedule '0 9 * * 1'`")
    for row in rows:
        if row["problem"]:
            state = f"NOT scheduled: {row['problem']}"
        elif row["running"]:
            state = row["running"]
        elif not row["enabled"]:
            state = "paused (enabled: false)"
        elif row["next_due"]:
            state = f"next {row['next_due']}"
        else:
            state = "runs when asked" if row["schedule"] is None else "done (its one run has run)"
        print(f"{row['id']:<28} {row['when'] or '?':<34} {state}")
        print(f"    {row['title']}")
    for problem in unreadable:
        print(f"unreadable: {problem}")
    return 1 if unreadable or any(row["problem"] for row in rows) else 0


def cmd_task_show(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.tasks.manage import get_task, list_runs

    view = get_task(workspace, args.id, _tools(workspace))
    shown = view.as_dict(workspace, full=True)
    shown["next_due"] = _plans(workspace).get(args.id, {}).get("next_due")
    shown["running"] = _going(workspace, args.id)
    shown["recent_runs"] = list_runs(workspace, args.id, 5)
    if args.json:
        print(json.dumps(shown, ensure_ascii=False, indent=2))
        return 0
    print(f"{shown['title']}  ({shown['path']})")
    due = f", next {shown['next_due']}" if shown["next_due"] else ""
    print(f"  when: {shown['when'] or shown['schedule']}{due}")
    if shown["problem"]:
        print(f"  NOT scheduled: {shown['problem']}")
    if not shown["enabled"]:
        print("  paused (enabled: false)")
    for name in ("scope", "role", "tools", "pins"):
        if shown[name]:
            print(f"  {name}: {', '.join(shown[name]) if isinstance(shown[name], list) else shown[name]}")
    if shown["notify"]:
        print("  notify: each final answer goes to notify.webhook_url")
    if shown["running"]:
        print(f"  {shown['running']} (`sentient task cancel {args.id}` stops it)")
    if shown["goal"]:
        print(f"\nGoal:\n{shown['goal']}")
    print(f"\nPlan:\n{shown['plan']}")
    _print_notepad(shown["notepad"], args.id)
    if shown["recent_runs"]:
        print("\nRecent runs:")
        for run in shown["recent_runs"]:
            print(_run_line(run))
    return 0


def _print_notepad(notepad: dict[str, Any] | None, task: str) -> None:
    if notepad is None or not notepad["text"]:
        print("\nNotepad: empty")
        return
    author = f"written by {notepad['source']}" if notepad["source"] else "kept by its runs"
    if notepad["edited_outside"]:
        author += ", edited by hand since"
    print(f"\nNotepad ({author}{', from outside content' if notepad['untrusted'] else ''}):")
    if notepad["withheld"]:
        print(f"  ! it reads like instructions ({', '.join(notepad['patterns'])}), so no run is shown it; "
              f"fine after all? `sentient memory allow notepad:{task}`")
    print(notepad["text"])


def _run_line(run: dict[str, Any]) -> str:
    mark = "!" if run["withheld"] else " "
    return f" {mark}{run['id']:<24} {run['status'] or '?':<10} {run['trigger'] or '':<9} {run['summary'] or ''}"


def cmd_task_add(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.tasks.manage import create_task

    plan = read_stdin() if args.plan == "-" else args.plan
    fields = {**_fields_of(args), "enabled": False if args.disabled else None}
    view = create_task(workspace, title=args.title, plan=plan, goal=args.goal or "", id=args.id, fields=fields,
                       tools=_tools(workspace))
    print(f"added task {view.document.key} ({view.document.path.relative_to(workspace.vault.root)}): "
          f"runs {view.spec.describe() if view.spec else 'when asked'}")
    next_due = _plans(workspace).get(view.document.key, {}).get("next_due")
    if next_due:
        print(f"next run {next_due}, while `sentient serve` runs (or now: `sentient task run {view.document.key}`)")
    return 0


def _fields_of(args: argparse.Namespace) -> dict[str, Any]:
    """The task fields a command line gives (None: not given; '' removes one)."""
    enabled = getattr(args, "enable", None)  # `edit --enable / --disable`
    return {"schedule": args.schedule, "timezone": args.timezone, "scope": args.scope, "role": args.role,
            "tools": [t.strip() for t in args.tools.split(",") if t.strip()] if args.tools is not None else None,
            "pins": args.pin, "notify": args.notify, "enabled": enabled}


def cmd_task_edit(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.tasks.manage import edit_task

    plan = read_stdin() if args.plan == "-" else args.plan
    view = edit_task(workspace, args.id, expected_revision=None, title=args.title, goal=args.goal, plan=plan,
                     fields=_fields_of(args), tools=_tools(workspace))
    print(f"changed task {args.id}: runs {view.spec.describe() if view.spec else 'when asked'}"
          + ("" if view.document.meta.get("enabled") is not False else ", paused"))
    return 0


def cmd_task_delete(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.tasks.manage import delete_task

    deleted = delete_task(workspace, args.id)
    print(f"deleted task {args.id}: {', '.join(deleted['removed'])} (git history keeps them)")
    for kept in deleted["kept"]:
        print(f"  kept (not the task's): {kept}")
    return 0


def cmd_task_run(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.tasks.manage import get_task

    get_task(workspace, args.id)  # NotFound before anything starts
    server = running_server(workspace)
    if server is not None:
        url, _ = server
        run = start_on(server, args.id)
        print(f"started run {args.id}/{run} on the server at {url}")
        if not args.wait:
            print(f"follow it with `sentient task runs {args.id} {run}` (or run with --wait)")
            return 0
        try:
            return _follow(workspace, args.id, run)
        except KeyboardInterrupt:
            print(f"\nstopped following; the run goes on at the server (`sentient task cancel {args.id} {run}` "
                  "stops it)", file=sys.stderr)
            return 130
    return _run_here(workspace, args.id)


def start_on(server: tuple[str, str], task: str) -> str:
    """Start a run of `task` on a server (url, token) that serves this vault; the run's id."""
    import httpx

    url, token = server
    answer = httpx.post(f"{url}/api/tasks/{task}/run", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    if answer.status_code >= 400:
        raise SentientError(answer.json().get("error", {}).get("message", answer.text))
    return str(answer.json()["run"])


def running_server(workspace: Workspace) -> tuple[str, str] | None:
    """(url, token) of a server serving this vault now, if one is (.sentient/server.json)."""
    from sentient.served import recorded

    found = recorded(workspace.vault.state_dir)
    if found is None:
        return None
    url, token = found
    import httpx

    try:
        health = httpx.get(f"{url}/api/health", headers={"Authorization": f"Bearer {token}"}, timeout=5)
    except httpx.HTTPError:
        return None
    if health.status_code != 200 or health.json().get("vault") != str(workspace.vault.root):
        return None
    return url, token


def _run_here(workspace: Workspace, task: str) -> int:
    """No server serves this vault: run the task in this process, following its log."""
    from sentient.agent.turn import open_agent
    from sentient.tasks.executor import begin_run, execute

    agent = open_agent(workspace, os.environ)
    try:
        started = begin_run(agent, task, "manual")
        print(f"started run {task}/{started.run} here (no server serves this vault); Ctrl-C cancels it")
        worker = threading.Thread(target=execute, args=(agent, started), name="sentient-task", daemon=True)
        worker.start()
        printed = [0]
        try:
            return _follow(workspace, task, started.run, worker, printed)
        except KeyboardInterrupt:
            started.cancel.set()
            print("\ncancelling: the run stops before its next step (a model call under way ends first; Ctrl-C "
                  "again leaves it, and it is marked failed at the next start) ...", file=sys.stderr)
            worker.join()
            return _follow(workspace, task, started.run, None, printed)
    finally:
        agent.close()


def _follow(workspace: Workspace, task: str, run: str, worker: threading.Thread | None = None,
            printed_lines: list[int] | None = None) -> int:
    """Print a run's log as it grows, then its final answer; 0 when it succeeded. `printed_lines`:
    how many of its lines were printed already (kept across a second call)."""
    from sentient.tasks.manage import get_run
    from sentient.tasks.runs import GOING

    counter = printed_lines if printed_lines is not None else [0]
    ended = False
    while True:
        try:
            shown = get_run(workspace, task, run)
        except NotFound:
            raise SentientError(f"the run {task}/{run} is gone (its task was deleted?)") from None
        for line in shown["log"][counter[0]:]:
            print(line, flush=True)
        counter[0] = len(shown["log"])
        if shown["status"] not in GOING or (worker is not None and ended):
            break  # ended (or its thread did, without saying so in the file: nothing more will come)
        ended = worker is not None and not worker.is_alive()  # one more look prints what it wrote last
        if not ended:
            time.sleep(POLL)
    print(f"\n{shown['status']}: {shown['summary'] or ''}")
    if shown["answer"]:
        print(f"\n{shown['answer']}")
    if shown["note_not_saved"]:
        print(f"\n(the note it saved was not kept:)\n{shown['note_not_saved']}")
    return 0 if shown["status"] == "succeeded" else 1


def cmd_task_runs(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.tasks.manage import get_run, list_runs

    if args.run:
        shown = get_run(workspace, args.id, args.run)
        if args.json:
            print(json.dumps(shown, ensure_ascii=False, indent=2))
            return 0
        print(f"{args.id}/{shown['id']}: {shown['status']} ({shown['trigger']}), started {shown['started'] or '-'}, "
              f"finished {shown['finished'] or '-'}" + (", read outside content" if shown["untrusted"] else ""))
        if shown["withheld"]:
            print(f"! it reads like instructions ({', '.join(shown['patterns'])}): later runs are not told its answer")
        print("\n" + "\n".join(shown["log"]))
        if shown["note_not_saved"]:
            print(f"\nNote it saved, not kept in the notepad:\n{shown['note_not_saved']}")
        print(f"\nFinal answer:\n{shown['answer']}" if shown["answer"] else "\n(no final answer)")
        return 0
    runs = list_runs(workspace, args.id, args.limit)
    if args.json:
        print(json.dumps(runs, ensure_ascii=False, indent=2))
        return 0
    if not runs:
        print(f"task {args.id} has not run yet (`sentient task run {args.id}`)")
    for run in runs:
        print(_run_line(run))
    return 0


def cmd_task_notepad(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.tasks.manage import notepad_view
    from sentient.tasks.notepad import set_notepad

    if args.clear or args.set is not None:
        text = None if args.clear else (read_stdin() if args.set == "-" else args.set)
        set_notepad(workspace, args.id, text)
        print(f"notepad of {args.id} {'cleared' if not (text or '').strip() else 'saved'}")
        return 0
    workspace.vault.get("task", args.id)
    _print_notepad(notepad_view(workspace, args.id), args.id)
    return 0


def cmd_task_cancel(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.tasks.manage import get_run
    from sentient.tasks.runs import GOING, going_run, mark_cut_off, request_cancel
    from sentient.vault.store import utc_now

    workspace.vault.get("task", args.id)
    run = args.run or going_run(workspace.vault, args.id)
    if run is None:
        print(f"task {args.id} has no run going")
        return 1
    status = get_run(workspace, args.id, run)["status"]  # the run id checked, and the run found
    if status not in GOING:
        print(f"run {args.id}/{run} has ended ({status}); there is nothing to cancel")
        return 1
    request_cancel(workspace.vault, args.id, run)
    if run in mark_cut_off(workspace.vault, args.id, utc_now):
        print(f"run {args.id}/{run} was going nowhere (its process had ended): marked failed")
        return 0
    print(f"asked run {args.id}/{run} to stop: it stops before its next step (a model call under way ends first)")
    return 0


def _task_fields(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schedule", help="a cron line ('0 9 * * 1'), 'every 30m|6h|1d', 'once 2026-12-24T09:00'; "
                                           "none: only when asked")
    parser.add_argument("--timezone", help="an IANA zone for the schedule (default: the vault's timezone, else the "
                                           "machine's)")
    parser.add_argument("--scope", help="the memory scope its runs see (default: global)")
    parser.add_argument("--role", choices=("chat", "helper", "extraction", ""), help="the model role its runs use")
    parser.add_argument("--tools", help="comma-separated tools its runs may use (default: all)")
    parser.add_argument("--pin", action="append", help="note:ID or plan:ID every run is told about (repeatable)")
    parser.add_argument("--notify", action=argparse.BooleanOptionalAction, default=None,
                        help="send each final answer to notify.webhook_url")


def add_parser(sub: Any) -> None:
    task = sub.add_parser("task", help="recurring and one-off tasks: list, show, add, edit, delete, run, runs, "
                                       "notepad, cancel")
    verbs = task.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="every task, its schedule and next run")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_task_list)
    show = verbs.add_parser("show", help="one task: its plan, notepad, next run and recent runs")
    show.add_argument("id")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cmd_task_show)
    add = verbs.add_parser("add", help="write a new task (tasks/<id>/task.md)")
    add.add_argument("title")
    add.add_argument("--plan", required=True, help="what each run does (markdown), or - to read it from stdin")
    add.add_argument("--goal", help="why: what the person wants from it")
    add.add_argument("--id", help="its id (default: made from the title)")
    _task_fields(add)
    add.add_argument("--disabled", action="store_true", help="write it paused (enabled: false)")
    add.set_defaults(handler=cmd_task_add)
    edit = verbs.add_parser("edit", help="change a task's fields, goal or plan ('' removes a field)")
    edit.add_argument("id")
    edit.add_argument("--title")
    edit.add_argument("--plan", help="the new plan, or - to read it from stdin")
    edit.add_argument("--goal")
    _task_fields(edit)
    state = edit.add_mutually_exclusive_group()
    state.add_argument("--enable", dest="enable", action="store_true", default=None, help="run it on schedule")
    state.add_argument("--disable", dest="enable", action="store_false", help="pause it (enabled: false)")
    edit.set_defaults(handler=cmd_task_edit)
    delete = verbs.add_parser("delete", help="remove a task: its task.md, notepad and runs (not while one runs)")
    delete.add_argument("id")
    delete.set_defaults(handler=cmd_task_delete)
    run = verbs.add_parser("run", help="run a task now (on the server when one serves this vault)")
    run.add_argument("id")
    run.add_argument("--wait", action="store_true", help="follow its log until it ends (always, with no server)")
    run.set_defaults(handler=cmd_task_run)
    runs = verbs.add_parser("runs", help="a task's runs, newest first, or one run's log and answer")
    runs.add_argument("id")
    runs.add_argument("run", nargs="?", help="one run's id: its log and final answer")
    runs.add_argument("--limit", type=count_in(1, 500), default=20, help="how many, 1-500 (default 20)")
    runs.add_argument("--json", action="store_true")
    runs.set_defaults(handler=cmd_task_runs)
    notepad = verbs.add_parser("notepad", help="show, set or clear what a task's runs keep for each other")
    notepad.add_argument("id")
    group = notepad.add_mutually_exclusive_group()
    group.add_argument("--set", metavar="TEXT", help="its new text (at most 1,500 characters), or - for stdin")
    group.add_argument("--clear", action="store_true", help="empty it")
    notepad.set_defaults(handler=cmd_task_notepad)
    cancel = verbs.add_parser("cancel", help="stop a run (default: the one going)")
    cancel.add_argument("id")
    cancel.add_argument("run", nargs="?")
    cancel.set_defaults(handler=cmd_task_cancel)
