"""Scheduler: starts each task when its schedule says, inside `sentient serve`.

Each task's next due time is kept in a heap, so a tick looks at the top of it and costs the
same with a thousand tasks as with one. A task's plan is made again only when its file
changes (the watcher calls `on_change`) or a run of it starts.

The rules, from the files alone (nothing is stored beside them): a task is due at the first
time its schedule names after its *anchor*, the start of its latest scheduled run (else its
`created` time, else its file's). So after downtime a missed slot runs once, not once per
slot; a `once` task that has a scheduled run is done. A task whose schedule, time zone or
`enabled` changes while Sentient runs is anchored at that moment (no catch-up for a slot it
was paused or scheduled otherwise for). A task still running when it is due waits for its
run to end; `enabled: false` pauses it. The clock is injected: tests tick with a fake one.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from sentient.errors import BadFile, NotFound, SentientError
from sentient.tasks.runs import newest_runs, started_at
from sentient.tasks.spec import TaskSpec, task_spec
from sentient.vault.document import Document
from sentient.vault.store import iso, utc_now
from sentient.workspace import Workspace

log = logging.getLogger(__name__)
LATE = timedelta(minutes=1)  # a run starting this much after its slot says it is catching up
LOOKED_AT = 50  # run files read at most to find a task's latest scheduled run
RETRY = timedelta(minutes=1)  # a run that could not be started is tried again after this


class Starts(Protocol):
    """What the scheduler starts runs with (tasks.runner.Runner)."""

    def submit(self, task: str, trigger: str = "manual", note: str | None = None) -> Any: ...

    def running(self, task: str) -> str | None: ...


@dataclass
class Plan:
    """One task as the scheduler holds it."""

    id: str
    spec: TaskSpec | None
    problem: str | None  # why it cannot be scheduled (then spec is None)
    anchor: datetime
    due: datetime | None
    fingerprint: tuple[str, str, bool]  # (schedule, zone, enabled): a change re-anchors
    seq: int = 0
    when: str | None = None  # the schedule in words, made once (the health route lists every task)

    def view(self) -> dict[str, Any]:
        spec = self.spec
        if self.when is None and spec is not None:
            self.when = spec.describe()
        return {
            "id": self.id,
            "schedule": spec.schedule.text if spec is not None and spec.schedule is not None else None,
            "when": self.when,
            "enabled": spec.enabled if spec is not None else None,
            "next_due": iso(self.due) if self.due is not None else None,
            "next_due_local": self.due.astimezone(spec.zone).isoformat(timespec="minutes")
            if self.due is not None and spec is not None else None,
            "problem": self.problem,
        }


class Scheduler:
    """Plans every task of the vault and starts the due ones with `runner` (None: it only
    plans, as `sentient task list` does to say when each task would run next)."""

    def __init__(
        self,
        workspace: Workspace,
        runner: Starts | None,
        *,
        clock: Callable[[], datetime] = utc_now,
        tools: frozenset[str] | None = None,
        interval: float = 1.0,
    ) -> None:
        self.workspace = workspace
        self.runner = runner
        self.clock = clock
        self.tools = tools
        self.interval = interval
        self._plans: dict[str, Plan] = {}
        self._heap: list[tuple[datetime, int, str]] = []
        self._seq = itertools.count()
        self._since: datetime | None = None  # when it first planned: a slot due before was missed
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    # --- plans ----------------------------------------------------------------------

    def load(self) -> None:
        """Plan every task from its file (at start, and when a whole folder changed)."""
        listing = self.workspace.vault.scan({"task"})
        now = self.clock()
        seen = set()
        with self._lock:
            if self._since is None:
                self._since = now
            self._heap = []  # every task is planned again below: no stale entries pile up
            for document in listing.documents:
                seen.add(document.key)
                self._plan(document, now)  # never raises: a task it cannot plan is unplannable
            for problem in listing.problems:
                key = _task_of(self.workspace.vault.root, problem.path)
                if key is not None:
                    seen.add(key)
                    self._unplannable(key, f"{problem.reason}. {problem.fix}", now)
            for gone in set(self._plans) - seen:
                del self._plans[gone]


    def refresh(self, task: str) -> None:
        """Plan one task again from its file (it was written, edited or removed)."""
        now = self.clock()
        with self._lock:
            try:
                document = self.workspace.vault.get("task", task)
            except NotFound:
                self._plans.pop(task, None)
                return
            except BadFile as exc:
                self._unplannable(task, f"{exc.reason}. {exc.fix}", now)
                return
            self._plan(document, now)
        self._wake.set()

    def on_change(self, paths: Iterable[Path]) -> None:
        """The watcher's hook: plan again the tasks whose files changed (all of them for a change
        it cannot pin down to files)."""
        root = self.workspace.vault.root
        tasks: set[str] = set()
        for path in paths:
            try:
                parts = path.relative_to(root).parts
            except ValueError:
                continue
            if len(parts) >= 2 and parts[0] == "tasks" and (len(parts) == 2 or parts[2] == "task.md"):
                tasks.add(parts[1])
            elif len(parts) <= 1:  # the vault or tasks/ itself: anything may have changed
                self.load()
                return
        if not paths:
            self.load()
        for task in sorted(tasks):
            self.refresh(task)

    def _plan(self, document: Document, now: datetime) -> None:
        """Plan one task; one that cannot be planned (its file, or a time out of range) is kept
        with its problem, and every other task is planned all the same."""
        try:
            self._plan_task(document, now)
        except SentientError as exc:
            self._unplannable(document.key, exc.message, now)
        except (OverflowError, ValueError) as exc:  # a time past what a datetime holds, say
            self._unplannable(document.key, f"its schedule names no time Sentient can keep ({exc})", now)

    def _plan_task(self, document: Document, now: datetime) -> None:
        spec = task_spec(document, self.workspace.settings, self.tools)
        fingerprint = (spec.schedule.text if spec.schedule else "", spec.zone.key or "", spec.enabled)
        before = self._plans.get(spec.id)
        unchanged = before is not None and before.fingerprint == fingerprint
        scheduled = None if unchanged else self._latest_scheduled(spec.id)  # run files read only when needed
        if before is not None and unchanged:
            anchor = before.anchor
        else:
            known = [moment for moment in (scheduled, spec.created) if moment is not None]
            anchor = min(max(known) if known else _mtime(document.path), now)  # never in the future (a clock jump)
            if before is not None:  # changed while running: from now on, no catch-up for the past
                anchor = max(anchor, now)
        due = None
        if spec.enabled and spec.schedule is not None:
            if spec.schedule.kind == "once":  # done once a scheduled run started at or after its time
                at = spec.schedule.at(spec.zone)
                done = before.due is None if before is not None and unchanged else \
                    scheduled is not None and scheduled >= at
                due = None if done else at
            else:
                due = spec.schedule.next_after(anchor, spec.zone)
        self._put(Plan(spec.id, spec, None, anchor, due, fingerprint))

    def _unplannable(self, task: str, problem: str, now: datetime) -> None:
        before = self._plans.get(task)
        if self.runner is not None and (before is None or before.problem != problem):  # once, where it runs
            log.info("task %s is not scheduled: %s", task, problem)
        self._put(Plan(task, None, problem, now, None, ("", "", False)))

    def _put(self, plan: Plan) -> None:
        plan.seq = next(self._seq)
        self._plans[plan.id] = plan
        if plan.due is not None:
            heapq.heappush(self._heap, (plan.due, plan.seq, plan.id))

    def _latest_scheduled(self, task: str) -> datetime | None:
        """The start of the task's latest scheduled run that did start (one cancelled while it
        waited its turn took no slot)."""
        for document in newest_runs(self.workspace.vault, task, LOOKED_AT):
            moment = started_at(document)
            if document.meta.get("trigger") == "schedule" and moment is not None:
                return moment
        return None

    # --- ticking --------------------------------------------------------------------

    def tick(self) -> list[str]:
        """Start every task that is due and not running; returns the runs started ('task/run')."""
        if self.runner is None:
            raise RuntimeError("a scheduler without a runner plans tasks but cannot start them")
        now = self.clock()
        started: list[str] = []
        waiting: list[tuple[datetime, int, str]] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now:
                item = heapq.heappop(self._heap)
                due, seq, task = item
                plan = self._plans.get(task)
                if plan is None or plan.seq != seq or plan.spec is None:
                    continue  # planned again since
                if self.runner.running(task) is not None:
                    waiting.append(item)  # it runs: due again when that run has ended
                    continue
                note = None
                if now - due > LATE:
                    note = f"catching up: it was due at {iso(due)}, " + (
                        "while Sentient was not running" if self._since is None or due < self._since
                        else "and waited for the run before it to end")
                try:
                    run = self.runner.submit(task, "schedule", note)
                except SentientError as exc:
                    if exc.status == 409:  # running in another process
                        waiting.append(item)
                        continue
                    log.warning("task %s could not start: %s", task, exc.message)
                    self._unplannable(task, exc.message, now)
                    continue
                except Exception:  # a file it could not write, say: tried again in a while, not lost
                    log.exception("task %s could not start; trying again in %s", task, RETRY)
                    self._put(Plan(task, plan.spec, None, plan.anchor, now + RETRY, plan.fingerprint))
                    continue
                started.append(f"{task}/{run.run}")
                spec = plan.spec
                assert spec.schedule is not None
                try:
                    next_due = None if spec.schedule.kind == "once" else spec.schedule.next_after(now, spec.zone)
                except (OverflowError, ValueError) as exc:
                    self._unplannable(task, f"its schedule names no time Sentient can keep ({exc})", now)
                    continue
                self._put(Plan(task, spec, None, now, next_due, plan.fingerprint))
            for item in waiting:
                heapq.heappush(self._heap, item)
        return started

    def overview(self) -> list[dict[str, Any]]:
        """Every task: its schedule in words, next due time (None: on demand, paused, done) and
        problem, soonest first."""
        with self._lock:
            plans = list(self._plans.values())
        far = datetime.max.replace(tzinfo=UTC)
        plans.sort(key=lambda p: (p.due or far, p.id))
        runner = self.runner
        return [{**plan.view(), "running": runner.running(plan.id) if runner else None} for plan in plans]

    def next_due(self, task: str) -> datetime | None:
        with self._lock:
            plan = self._plans.get(task)
        return plan.due if plan is not None else None

    # --- the thread -----------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._halt.clear()
        self._thread = threading.Thread(target=self._run, name="sentient-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._halt.is_set():
            try:
                self.tick()
            except Exception:  # a tick that failed is logged; the next one tries again
                log.exception("scheduler tick failed")
            self._wake.wait(self.interval)
            self._wake.clear()


def _task_of(root: Path, path: Path) -> str | None:
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return None
    return parts[1] if len(parts) == 3 and parts[0] == "tasks" and parts[2] == "task.md" else None


def _mtime(path: Path) -> datetime:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return utc_now()
