"""`sentient task ...` as a person types it: add (refused with the fix when it could not run),
list, show, run here (no server) and on a running server (--wait follows the log), runs,
notepad, cancel. The model is the scripted one behind litellm."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from sentient.api.app import advertise, create_app
from sentient.config import load_settings
from sentient.vault.store import Vault
from tests.agent_support import SCRIPTED, configure, sentient
from tests.scripted import Scripted, ScriptedReply, call, text
from tests.test_api_server import eventually, uvicorn_thread
from tests.test_tasks import write_run

DIGEST = "weekly-digest"


@pytest.fixture
def vault(make_vault: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    made = make_vault("basic")
    configure(made, timezone="UTC")
    monkeypatch.setenv("SENTIENT_MODEL", SCRIPTED)
    monkeypatch.setenv("SENTIENT_VAULT", str(made))
    return made



def test_add_list_show_and_a_bad_schedule_refused_with_the_fix(vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = sentient(capsys, "task", "add", "Fortnightly review", "--plan", "Review.",
                              "--schedule", "every fortnight")
    assert code == 2 and "schedule: 'every fortnight' is not an interval" in err and "Write a cron line" in err
    assert not (vault / "tasks" / "fortnightly-review").exists()
    code, out, _ = sentient(capsys, "task", "add", "Ledger changes", "--plan", "Tell me what changed.",
                            "--goal", "Stay on top of Ledger.", "--schedule", "0 9 * * 1", "--tools",
                            "memory_recall,web_fetch")
    assert code == 0 and "added task ledger-changes" in out and "At 09:00 on Monday (UTC)" in out
    written = (vault / "tasks" / "ledger-changes" / "task.md").read_text()
    assert "schedule: 0 9 * * 1" in written and "## Goal\n\nStay on top of Ledger." in written
    assert "tools:" in written and "web_fetch" in written
    code, out, _ = sentient(capsys, "task", "list")
    assert code == 0 and "ledger-changes" in out and "next 20" in out and DIGEST in out
    code, out, _ = sentient(capsys, "task", "show", DIGEST)
    assert "Reported so far:" in out and "Recent runs:" in out and "run-20261102-0900" in out
    shown = json.loads(sentient(capsys, "task", "show", DIGEST, "--json")[1])
    assert shown["notepad"]["text"].startswith("Reported so far:") and shown["recurring"] is True
    (vault / "tasks" / "broken").mkdir()
    (vault / "tasks" / "broken" / "task.md").write_text("---\nschedule: every fortnight\n---\n\nPlan.\n")
    code, out, _ = sentient(capsys, "task", "list")
    assert code == 1 and "NOT scheduled: schedule: 'every fortnight'" in out


def test_run_here_prints_the_log_and_answer_and_runs_shows_them(
    vault: Path, scripted: Scripted, capsys: pytest.CaptureFixture[str]
) -> None:
    scripted.queue(call("task_notepad", text="- interview script"), text("New: the interview script is ready."))
    code, out, _ = sentient(capsys, "task", "run", DIGEST)
    assert code == 0
    assert "here (no server serves this vault)" in out
    assert "Remembering 2 earlier runs and its notepad, so it reports only what is new." in out
    assert "succeeded" in out and out.rstrip().endswith("New: the interview script is ready.")
    code, out, _ = sentient(capsys, "task", "runs", DIGEST)
    newest = out.splitlines()[0].split()[0]
    assert "succeeded" in out.splitlines()[0] and "New: the interview script is ready." in out.splitlines()[0]
    code, out, _ = sentient(capsys, "task", "runs", DIGEST, newest)
    assert "tool task_notepad" in out and "Final answer:\nNew: the interview script is ready." in out


def test_notepad_show_set_clear(vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = sentient(capsys, "task", "notepad", DIGEST)
    assert "GST step drop-off" in out
    assert sentient(capsys, "task", "notepad", DIGEST, "--set", "  - only this  ")[0] == 0
    assert Vault(vault).get("notepad", DIGEST).body == "- only this\n"
    code, _, err = sentient(capsys, "task", "notepad", DIGEST, "--set", "x" * 1501)
    assert code == 2 and "over the 1,500 a notepad holds" in err
    assert sentient(capsys, "task", "notepad", DIGEST, "--clear")[0] == 0
    assert Vault(vault).get("notepad", DIGEST).body == ""


def test_cancel_marks_a_run_left_going_by_a_dead_process(vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = sentient(capsys, "task", "cancel", DIGEST)
    assert code == 1 and "no run going" in out
    write_run(vault, DIGEST, "run-20261203-090000", status="running", started="2026-12-03T09:00:00Z")
    code, out, _ = sentient(capsys, "task", "cancel", DIGEST)
    assert code == 0 and "marked failed" in out
    assert Vault(vault).get("run", f"{DIGEST}/run-20261203-090000").meta["status"] == "failed"


@pytest.fixture
def server(vault: Path, scripted: Scripted) -> Iterator[str]:
    settings = load_settings(vault, {"SENTIENT_MODEL": SCRIPTED})
    with ExitStack() as stack:
        port = stack.enter_context(uvicorn_thread(create_app(settings, environ={}, watch=False, schedule=False)))
        url = f"http://127.0.0.1:{port}"
        stack.enter_context(advertise(settings.state_dir, url))
        yield url


def test_run_hands_the_run_to_the_server_and_wait_follows_its_log(
    server: str, scripted: Scripted, capsys: pytest.CaptureFixture[str]
) -> None:
    release = threading.Event()

    def slow(request: dict[str, Any]) -> ScriptedReply:
        release.wait(10)
        return text("From the server: nothing is new.")

    scripted.queue(slow, text("Second."))
    code, out, _ = sentient(capsys, "task", "run", DIGEST)
    assert code == 0 and f"on the server at {server}" in out and "--wait" in out
    code, _, err = sentient(capsys, "task", "run", DIGEST)  # one run of a task at a time
    assert code == 2 and "running already" in err
    release.set()

    def run_once_the_first_ended() -> tuple[int, str] | None:
        code, out, err = sentient(capsys, "task", "run", DIGEST, "--wait")
        return None if code == 2 and "running already" in err else (code, out)

    code, out = eventually(run_once_the_first_ended, "the first run ended and a second one ran")
    assert code == 0 and out.rstrip().endswith("Second.") and "on the server" in out


def test_cancel_checks_the_run_id_and_says_when_a_run_has_ended(
    vault: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = sentient(capsys, "task", "cancel", DIGEST, "../../../outside")
    assert code == 2 and "not allowed" in err and not (vault.parent / "outside").exists()
    code, out, _ = sentient(capsys, "task", "cancel", DIGEST, "run-20261102-0900")
    assert code == 1 and "has ended (succeeded)" in out
    assert not (vault / ".sentient" / "cancel").exists()


def test_edit_pauses_and_changes_the_schedule_and_delete_removes_the_task(
    vault: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = sentient(capsys, "task", "edit", DIGEST, "--disable", "--schedule", "every 6h")
    assert code == 0 and "every 6 hours" in out and "paused" in out
    text = (vault / "tasks" / DIGEST / "task.md").read_text()
    assert "schedule: every 6h" in text and "enabled: false" in text
    code, _, err = sentient(capsys, "task", "edit", DIGEST, "--pin", "note:does-not-exist")
    assert code == 2 and "there is no note 'does-not-exist' to pin" in err
    code, out, _ = sentient(capsys, "task", "delete", DIGEST)
    assert code == 0 and "tasks/weekly-digest/task.md" in out and not (vault / "tasks" / DIGEST).exists()
