"""Tasks through the API on a real uvicorn server on 127.0.0.1, its scheduler on a fake clock and
the scripted model behind litellm: create a task, let the scheduler run it twice, the second
run is told the first one's answer; the notepad through PATCH; run now, cancel, delete; and
every way a request can be wrong, answered with the field and the fix."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from sentient.api.app import create_app
from sentient.config import load_settings
from sentient.tasks.runs import RunLock
from sentient.vault.store import Vault
from tests.agent_support import SCRIPTED, configure
from tests.scripted import Scripted, ScriptedReply, call, text
from tests.test_api_server import Running, eventually, uvicorn_thread
from tests.test_scheduler import Clock

DIGEST = "weekly-digest"


@pytest.fixture
def vault(make_vault: Callable[[str], Path]) -> Path:
    made = make_vault("basic")
    configure(made, timezone="UTC")
    task = made / "tasks" / DIGEST / "task.md"  # paused: the scheduler would catch up on it at once
    task.write_text(task.read_text().replace("enabled: true", "enabled: false"))
    return made


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime.now(UTC).replace(microsecond=0))


@pytest.fixture
def server(vault: Path, clock: Clock, scripted: Scripted) -> Iterator[Running]:
    settings = load_settings(vault, {"SENTIENT_MODEL": SCRIPTED})
    with ExitStack() as stack:
        app = create_app(settings, environ={}, watch=False, clock=clock, tick=0.02)
        port = stack.enter_context(uvicorn_thread(app))
        yield Running(app, port, vault)


def run_of(http: httpx.Client, task: str, run: str, status: str) -> dict[str, Any] | None:
    shown: dict[str, Any] = http.get(f"/api/tasks/{task}/runs/{run}").json()
    return shown if shown.get("status") == status else None


def test_a_task_made_through_the_api_runs_twice_on_schedule_and_the_second_run_is_told_the_first(
    server: Running, clock: Clock, scripted: Scripted, vault: Path
) -> None:
    with server.http() as http:
        assert http.delete(f"/api/tasks/{DIGEST}").status_code == 200  # the fixture's own task: out of the way
        made = http.post("/api/tasks", json={"title": "Ledger changes", "goal": "Tell Maya what changed.",
                                              "plan": "Read the memory entries about Ledger.",
                                              "schedule": "every 1h"})
        assert made.status_code == 201, made.text
        task = made.json()
        assert task["id"] == "ledger-changes" and task["recurring"] and task["when"] == "every hour"
        assert (vault / "tasks" / "ledger-changes" / "task.md").read_text().count("## Plan") == 1
        due = datetime.fromisoformat(task["next_due"])
        health = http.get("/api/health").json()
        assert [t["id"] for t in health["tasks"]] == ["ledger-changes"] and health["tasks"][0]["next_due"]

        scripted.queue(call("task_notepad", text="- Ledger beta date"), text("New: the Ledger beta starts 9 December."))
        clock.now = due
        runs = eventually(lambda: http.get("/api/tasks/ledger-changes/runs").json(), "the first scheduled run")
        first = eventually(lambda: run_of(http, "ledger-changes", runs[0]["id"], "succeeded"), "run 1 to finish")
        assert first["trigger"] == "schedule" and first["answer"] == "New: the Ledger beta starts 9 December."
        assert first["log"][0].endswith("Remembering 0 earlier runs and its notepad, so it reports only what is new.")

        scripted.queue(text("Nothing is new since the last run."))
        clock.advance(hours=1)
        later = eventually(lambda: [r for r in http.get("/api/tasks/ledger-changes/runs").json()
                                    if r["id"] != first["id"]], "the second scheduled run")
        eventually(lambda: run_of(http, "ledger-changes", later[0]["id"], "succeeded"), "run 2 to finish")
        second_prompt = str(scripted.requests[-1]["messages"])
        assert "New: the Ledger beta starts 9 December." in second_prompt and "- Ledger beta date" in second_prompt

        shown = http.get("/api/tasks/ledger-changes").json()
        assert shown["notepad"]["text"] == "- Ledger beta date" and shown["notepad"]["flagged"] is False
        edited = http.patch("/api/tasks/ledger-changes", json={"notepad": "  - Ledger beta date\n- pricing  \n"},
                            headers={"If-Match": shown["notepad"]["revision"]})
        assert edited.status_code == 200 and edited.json()["notepad"]["text"] == "- Ledger beta date\n- pricing"
        assert edited.json()["notepad"]["source"] == "user" and edited.json()["notepad"]["untrusted"] is False
        stale = http.patch("/api/tasks/ledger-changes", json={"notepad": "x"},
                           headers={"If-Match": shown["notepad"]["revision"]})
        assert stale.status_code == 412
        cleared = http.patch("/api/tasks/ledger-changes", json={"notepad": None})
        assert cleared.json()["notepad"]["text"] == ""

        gone = http.delete("/api/tasks/ledger-changes")
        assert gone.status_code == 200 and "tasks/ledger-changes/task.md" in gone.json()["removed"]
        assert not (vault / "tasks" / "ledger-changes").exists()
        assert http.get("/api/tasks/ledger-changes").status_code == 404
        assert http.get("/api/health").json()["tasks"] == []


def test_run_now_answers_at_once_and_a_run_going_can_be_cancelled(
    server: Running, scripted: Scripted, vault: Path
) -> None:
    release = threading.Event()
    entered = threading.Event()

    def slow(request: dict[str, Any]) -> ScriptedReply:
        entered.set()
        release.wait(10)
        return call("memory_recall", query="ledger")

    before = (vault / "tasks" / DIGEST / "notepad.md").read_bytes()
    scripted.queue(call("task_notepad", text="- NEW"), slow, text("never"))
    with server.http() as http:
        started = http.post(f"/api/tasks/{DIGEST}/run")
        assert started.status_code == 202
        run = started.json()["run"]
        assert entered.wait(10)
        again = http.post(f"/api/tasks/{DIGEST}/run")
        assert again.status_code == 409 and run in again.json()["error"]["message"]
        assert http.delete(f"/api/tasks/{DIGEST}").status_code == 409  # not while it runs
        assert http.post(f"/api/tasks/{DIGEST}/runs/{run}/cancel").status_code == 202
        release.set()
        ended = eventually(lambda: run_of(http, DIGEST, run, "cancelled"), "the run to be cancelled")
        assert ended["summary"] == "Cancelled by the person." and "- NEW" in (ended["note_not_saved"] or "")
        assert http.post(f"/api/tasks/{DIGEST}/runs/{run}/cancel").status_code == 400  # it has ended
    assert (vault / "tasks" / DIGEST / "notepad.md").read_bytes() == before


def test_bad_requests_name_the_field_and_the_fix_and_write_nothing(server: Running, vault: Path) -> None:
    task_file = vault / "tasks" / DIGEST / "task.md"
    before = task_file.read_bytes()
    with server.http() as http:
        bad = http.post("/api/tasks", json={"title": "Fortnightly", "plan": "x", "schedule": "every fortnight"})
        assert bad.status_code == 400
        assert "schedule: 'every fortnight' is not an interval" in bad.json()["error"]["message"]
        assert "Write a cron line such as '0 9 * * 1'" in bad.json()["error"]["message"]
        assert not (vault / "tasks" / "fortnightly").exists()
        zone = http.patch(f"/api/tasks/{DIGEST}", json={"timezone": "Mars/Olympus"})
        assert zone.status_code == 400 and "not a known time zone" in zone.json()["error"]["message"]
        tool = http.patch(f"/api/tasks/{DIGEST}", json={"tools": ["teleport"]})
        assert tool.status_code == 400 and "no tool named teleport" in tool.json()["error"]["message"]
        long = http.patch(f"/api/tasks/{DIGEST}", json={"notepad": "x" * 1501})
        assert long.status_code == 400 and "over the 1,500 a notepad holds" in long.json()["error"]["message"]
        stale = http.patch(f"/api/tasks/{DIGEST}", json={"enabled": True}, headers={"If-Match": "sha256:old"})
        assert stale.status_code == 412
        assert http.get("/api/tasks/nope").status_code == 404
        assert http.get(f"/api/tasks/{DIGEST}/runs/run-nope").status_code == 404
        assert http.post("/api/tasks/Bad..Id/run").status_code == 400
        assert task_file.read_bytes() == before
        assert http.get(f"/api/tasks/{DIGEST}").json()["next_due"] is None  # paused
        resumed = http.patch(f"/api/tasks/{DIGEST}", json={"enabled": True},
                             headers={"If-Match": http.get(f"/api/tasks/{DIGEST}").json()["revision"]})
        assert resumed.status_code == 200 and resumed.json()["next_due"] is not None
        assert "enabled: true" in task_file.read_text()


def test_a_schedule_out_of_range_is_refused_and_a_bad_file_stops_no_other_task(
    server: Running, vault: Path
) -> None:
    with server.http() as http:
        for schedule, timezone in [("every 600000w", None), ("once 9999-12-31T23:59", "Etc/GMT+12"),
                                   ("once 2020-12-24T09:00", None)]:
            body = {"title": "Far", "plan": "x", "schedule": schedule, **({"timezone": timezone} if timezone else {})}
            refused = http.post("/api/tasks", json=body)
            assert refused.status_code == 400, refused.text
            assert "schedule:" in refused.json()["error"]["message"] and not (vault / "tasks" / "far").exists()
        (vault / "tasks" / "far").mkdir()  # the same, written in an editor: reported, the others planned
        (vault / "tasks" / "far" / "task.md").write_text("---\nschedule: once 9999-12-31T23:59\ntimezone: Etc/GMT+12\n"
                                                         "---\n\nPlan.\n")
        task = vault / "tasks" / DIGEST / "task.md"
        task.write_text(task.read_text().replace("enabled: false", "enabled: true"))
        server.app.state.scheduler.load()
        plans = {plan["id"]: plan for plan in http.get("/api/health").json()["tasks"]}
        assert "names no time Sentient can keep" in plans["far"]["problem"]
        assert plans[DIGEST]["problem"] is None and plans[DIGEST]["next_due"]
        assert http.get("/api/tasks").status_code == 200


def test_a_patch_with_a_notepad_too_long_writes_nothing(server: Running, vault: Path) -> None:
    task_file = vault / "tasks" / DIGEST / "task.md"
    before = task_file.read_bytes()
    with server.http() as http:
        refused = http.patch(f"/api/tasks/{DIGEST}", json={"plan": "NEW PLAN", "notepad": "x" * 2000})
        assert refused.status_code == 400 and task_file.read_bytes() == before


def test_delete_waits_for_a_run_going_in_another_process(server: Running, vault: Path) -> None:
    other_process = RunLock(Vault(vault), DIGEST)
    assert other_process.acquire()
    try:
        with server.http() as http:
            refused = http.delete(f"/api/tasks/{DIGEST}")
            assert refused.status_code == 409 and "has a run going" in refused.json()["error"]["message"]
    finally:
        other_process.release()
    assert (vault / "tasks" / DIGEST / "task.md").exists() and (vault / "tasks" / DIGEST / "runs").exists()
