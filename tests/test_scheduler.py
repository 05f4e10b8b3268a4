"""The scheduler with a fake clock and the real runner: on time, never twice at once, one
catch-up after downtime, a run cut off by a crash marked failed, `enabled: false` pausing, a
task file edited on disk (through the real watcher) planned again, a bad schedule reported
without stopping the other tasks."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sentient.agent.turn import Agent
from sentient.doctor import examine
from sentient.tasks.runner import Runner
from sentient.tasks.runs import RunLock, log_of
from sentient.tasks.scheduler import Scheduler
from sentient.vault.store import Vault
from sentient.watcher import Watcher
from tests.agent_support import agent_on, configure
from tests.scripted import Scripted, ScriptedReply, call, text
from tests.test_tasks import write_run, write_task

MONDAY = datetime(2027, 1, 4, 8, 59, 59, tzinfo=UTC)  # a Monday, a second before 09:00 UTC
MADE = "2027-01-04T08:00:00Z"  # a task written an hour before


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def vault(make_vault: Callable[[str], Path]) -> Path:
    made = make_vault("basic")
    shutil.rmtree(made / "tasks" / "weekly-digest")  # each test writes the tasks it needs
    configure(made, timezone="UTC")
    return made


@pytest.fixture
def clock() -> Clock:
    return Clock(MONDAY)


@pytest.fixture
def running(vault: Path, clock: Clock, scripted: Scripted) -> Iterator[tuple[Agent, Runner, Scheduler]]:
    agent = agent_on(vault)
    agent.clock = clock
    runner = Runner(agent)
    scheduler = Scheduler(agent.workspace, runner, clock=clock, tools=agent.registry.names())
    runner.start()
    yield agent, runner, scheduler
    runner.stop()


def runs(vault: Path, task: str) -> list[dict[str, Any]]:
    folder = vault / "tasks" / task / "runs"
    return [dict(Vault(vault).get("run", f"{task}/{p.stem}").meta) for p in sorted(folder.glob("*.md"))] \
        if folder.exists() else []


def test_a_task_starts_on_time_and_not_before(vault: Path, clock: Clock, scripted: Scripted,
                                              running: tuple[Agent, Runner, Scheduler]) -> None:
    write_task(vault, "weekly", schedule="0 9 * * 1", created=MADE)
    _, runner, scheduler = running
    scheduler.load()
    assert scheduler.next_due("weekly") == datetime(2027, 1, 4, 9, 0, tzinfo=UTC)
    assert scheduler.tick() == []
    clock.advance(seconds=1)
    scripted.queue(text("Weekly: all quiet."))
    (started,) = scheduler.tick()
    assert runner.wait()
    (run,) = runs(vault, "weekly")
    assert started == f"weekly/{run['id']}" and run["trigger"] == "schedule" and run["status"] == "succeeded"
    assert run["started"] == "2027-01-04T09:00:00Z"
    assert scheduler.tick() == [] and scheduler.next_due("weekly") == datetime(2027, 1, 11, 9, 0, tzinfo=UTC)


def test_a_task_still_running_is_not_started_again_and_runs_once_when_it_ends(
    vault: Path, clock: Clock, scripted: Scripted, running: tuple[Agent, Runner, Scheduler]
) -> None:
    write_task(vault, "poll", schedule="every 30m")
    _, runner, scheduler = running
    scheduler.load()
    release = threading.Event()

    def slow(request: dict[str, Any]) -> ScriptedReply:
        release.wait(10)
        return text("Polled.")

    scripted.queue(slow, text("Polled again."))
    clock.advance(minutes=30)  # created 2026-11-01: due long ago, so one run now
    assert len(scheduler.tick()) == 1
    clock.advance(minutes=31)
    assert scheduler.tick() == []  # due again, but its run is still going
    clock.advance(minutes=31)
    assert scheduler.tick() == []
    assert len(runs(vault, "poll")) == 1
    release.set()
    assert runner.wait()
    assert len(scheduler.tick()) == 1  # the slots missed while it ran: once
    assert runner.wait()
    assert [run["status"] for run in runs(vault, "poll")] == ["succeeded", "succeeded"]


def test_after_downtime_the_missed_slots_run_once(vault: Path, clock: Clock, scripted: Scripted,
                                                  running: tuple[Agent, Runner, Scheduler]) -> None:
    write_task(vault, "daily", schedule="0 7 * * *")
    write_run(vault, "daily", "run-20261228-070000", answer="Old news.", started="2026-12-28T07:00:00Z")
    _, runner, scheduler = running
    scheduler.load()  # Sentient starts again a week later: six slots were missed
    scripted.queue(text("Caught up."))
    assert len(scheduler.tick()) == 1
    assert runner.wait()
    assert scheduler.tick() == []
    newest = runs(vault, "daily")[-1]
    log = log_of(Vault(vault).get("run", f"daily/{newest['id']}"))
    assert any("catching up: it was due at 2026-12-29T07:00:00Z" in line for line in log)
    assert scheduler.next_due("daily") == datetime(2027, 1, 5, 7, 0, tzinfo=UTC)


def test_a_run_cut_off_by_a_crash_is_marked_failed_at_the_next_start(
    vault: Path, running: tuple[Agent, Runner, Scheduler]
) -> None:
    write_task(vault, "crashed", schedule=None)
    write_task(vault, "elsewhere", schedule=None)
    write_run(vault, "crashed", "run-20270104-080000", status="running")
    write_run(vault, "elsewhere", "run-20270104-080000", status="running")
    other_process = RunLock(Vault(vault), "elsewhere")  # a run another process is doing holds its lock
    assert other_process.acquire()
    try:
        _, runner, _ = running
        assert runner.recover() == ["crashed/run-20270104-080000"]
    finally:
        other_process.release()
    (crashed,) = runs(vault, "crashed")
    assert crashed["status"] == "failed" and crashed["finished"]
    assert "stopped before it ended" in Vault(vault).get("run", "crashed/run-20270104-080000").body
    assert runs(vault, "elsewhere")[0]["status"] == "running"  # going, elsewhere: left alone


def test_enabled_false_pauses_and_enabling_again_does_not_catch_up(
    vault: Path, clock: Clock, scripted: Scripted, running: tuple[Agent, Runner, Scheduler]
) -> None:
    path = write_task(vault, "paused", schedule="every 1h", extra="")
    path.write_text(path.read_text().replace("enabled: true", "enabled: false"))
    _, runner, scheduler = running
    scheduler.load()
    clock.advance(hours=5)
    assert scheduler.tick() == [] and scheduler.next_due("paused") is None
    path.write_text(path.read_text().replace("enabled: false", "enabled: true"))
    scheduler.refresh("paused")
    assert scheduler.tick() == []  # from now on, not for the hours it was paused
    assert scheduler.next_due("paused") == clock.now + timedelta(hours=1)


def test_a_task_file_edited_on_disk_is_planned_again_through_the_watcher(
    vault: Path, clock: Clock, running: tuple[Agent, Runner, Scheduler]
) -> None:
    path = write_task(vault, "weekly", schedule="0 9 * * 1", created=MADE)
    agent, _, scheduler = running
    scheduler.load()
    assert scheduler.next_due("weekly") == datetime(2027, 1, 4, 9, 0, tzinfo=UTC)
    with Watcher(agent.workspace, on_change=scheduler.on_change, debounce=0.05):
        path.write_text(path.read_text().replace("schedule: 0 9 * * 1", "schedule: 30 10 * * *"))
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while scheduler.next_due("weekly") != datetime(2027, 1, 4, 10, 30, tzinfo=UTC):
            assert datetime.now(UTC) < deadline, "the edited schedule was not picked up"
            threading.Event().wait(0.02)
        path.write_text(path.read_text().replace("schedule: 30 10 * * *", "schedule: every fortnight"))
        while not scheduler.overview()[0]["problem"]:
            assert datetime.now(UTC) < deadline, "the broken schedule was not noticed"
            threading.Event().wait(0.02)
    assert scheduler.next_due("weekly") is None


def test_a_bad_schedule_is_a_doctor_problem_and_the_other_tasks_still_run(
    vault: Path, clock: Clock, scripted: Scripted, running: tuple[Agent, Runner, Scheduler]
) -> None:
    write_task(vault, "broken", schedule="every fortnight")
    write_task(vault, "fine", schedule="0 9 * * 1", created=MADE)
    agent, runner, scheduler = running
    scheduler.load()
    (broken,) = [plan for plan in scheduler.overview() if plan["id"] == "broken"]
    assert "schedule: 'every fortnight' is not an interval" in broken["problem"]
    assert "Write a cron line such as '0 9 * * 1'" in broken["problem"]
    clock.advance(seconds=1)
    scripted.queue(text("Fine."))
    assert [run.split("/")[0] for run in scheduler.tick()] == ["fine"]
    assert runner.wait()
    problems = [problem for problem in examine(agent.workspace).problems if "broken" in str(problem.path)]
    assert len(problems) == 1 and "schedule:" in problems[0].reason


def test_a_once_task_runs_at_its_time_and_then_is_done(vault: Path, clock: Clock, scripted: Scripted,
                                                       running: tuple[Agent, Runner, Scheduler]) -> None:
    write_task(vault, "dentist", schedule="once 2027-01-04T12:00", created=MADE)
    _, runner, scheduler = running
    scheduler.load()
    assert scheduler.next_due("dentist") == datetime(2027, 1, 4, 12, 0, tzinfo=UTC)
    clock.advance(hours=3, seconds=1)
    scripted.queue(text("Reminded."))
    assert len(scheduler.tick()) == 1
    assert runner.wait()
    scheduler.load()  # as after a restart: the run on disk says it is done
    assert scheduler.next_due("dentist") is None and scheduler.tick() == []


def test_a_task_another_process_is_running_waits_and_starts_once_it_is_free(
    vault: Path, clock: Clock, scripted: Scripted, running: tuple[Agent, Runner, Scheduler]
) -> None:
    write_task(vault, "shared", schedule="0 9 * * 1", created=MADE)
    _, runner, scheduler = running
    scheduler.load()
    clock.advance(seconds=1)
    other_process = RunLock(Vault(vault), "shared")  # `sentient task run shared` in another terminal
    assert other_process.acquire()
    try:
        assert scheduler.tick() == [] and scheduler.overview()[0]["problem"] is None
        assert scheduler.tick() == []
    finally:
        other_process.release()
    scripted.queue(text("Shared."))
    assert len(scheduler.tick()) == 1  # still due: it starts as soon as the other run has ended
    assert runner.wait()


def test_stopping_records_its_runs_as_stopped_and_a_slot_never_run_is_caught_up(
    vault: Path, clock: Clock, scripted: Scripted, running: tuple[Agent, Runner, Scheduler]
) -> None:
    write_task(vault, "daily", schedule="0 9 * * *", created=MADE)
    write_task(vault, "other", schedule="0 9 * * *", created=MADE)
    agent, runner, scheduler = running
    scheduler.load()
    release = threading.Event()

    def slow(request: dict[str, Any]) -> ScriptedReply:
        release.set()
        return call("memory_recall", query="x")

    scripted.queue(slow, text("never"))
    clock.advance(seconds=1)
    assert len(scheduler.tick()) == 2  # max_parallel 1: one runs, the other waits its turn
    assert release.wait(10)
    runner.stop()
    statuses = {task: runs(vault, task)[0] for task in ("daily", "other")}
    going, waiting = sorted(statuses.values(), key=lambda run: run.get("started") is None)
    assert going["status"] == "cancelled" and going["summary"] == "Cancelled: Sentient stopped before it ended"
    assert waiting["status"] == "cancelled" and "started" not in waiting
    after = Scheduler(agent.workspace, runner, clock=clock)  # the next start
    after.load()
    waited = next(task for task, run in statuses.items() if run is waiting)
    assert after.next_due(waited) == datetime(2027, 1, 4, 9, 0, tzinfo=UTC)  # the slot it never ran: due
