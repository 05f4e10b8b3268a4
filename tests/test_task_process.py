"""A task run whose model is reached over the network runs in a process of its own, beside a
real uvicorn server on 127.0.0.1: a chat is answered while the run's model call is held; the
person's cancel, Sentient stopping, a run past tasks.timeout and a run whose process dies are each
recorded in the run file, and the task is free again afterwards. The model is an OpenAI-compatible
server on 127.0.0.1 that logs every request, reached through litellm's real `openai/` path."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from sentient.api.app import create_app
from sentient.config import load_settings
from sentient.llm import LLM
from sentient.tasks import child
from tests.agent_support import SCRIPTED, configure, http_server, respond
from tests.scripted import Scripted, text
from tests.test_api_server import Running, eventually, uvicorn_thread

TASK = "weekly-digest"
TITLE = "Weekly Ledger digest"
KEY = "sk-scripted-for-the-run"
ANSWER = "Nothing new on the Ledger since the last digest."
SLOW = 60.0  # seconds for anything a run's process does (it imports the model client first)


class Model:
    """What the model server saw and does: every request's body and key; a task run's calls wait
    for `gate` (set: answer at once), then ask memory_recall once and answer."""

    def __init__(self) -> None:
        self.first: tuple[str, dict[str, Any]] = ("memory_recall", {"query": "ledger"})  # a run's first call
        self.requests: list[tuple[dict[str, Any], str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.held = threading.Event()  # a task run's call is waiting at the gate

    def task_calls(self) -> list[dict[str, Any]]:
        return [body for body, _ in self.requests if TITLE in str(body["messages"][0].get("content"))]

    def handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                model.requests.append((body, self.headers.get("authorization", "")))
                message: dict[str, Any] = {"role": "assistant", "content": "ok"}
                if TITLE in str(body["messages"][0].get("content")):
                    model.held.set()
                    model.gate.wait(SLOW)
                    if not any(m.get("role") == "tool" for m in body["messages"]):
                        message = {"role": "assistant", "content": None, "tool_calls": [
                            {"id": "call-1", "type": "function",
                             "function": {"name": model.first[0], "arguments": json.dumps(model.first[1])}}]}
                    else:
                        message["content"] = ANSWER
                reply = {"id": "c", "object": "chat.completion", "created": 0, "model": "digest",
                         "choices": [{"index": 0, "message": message,
                                      "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
                with suppress(BrokenPipeError, ConnectionResetError):  # its caller was stopped meanwhile
                    respond(self, 200, json.dumps(reply).encode())

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def model() -> Iterator[tuple[Model, str]]:
    served = Model()
    with http_server(served.handler()) as base:
        yield served, base
        served.gate.set()  # a handler still waiting ends now


@contextmanager
def server_on(vault: Path, base: str, *, timeout: float = 600.0, watch: bool = False) -> Iterator[Running]:
    configure(vault, timezone="UTC", tasks={"timeout": timeout},
              models={"chat": {"model": "openai/digest", "api_base": f"{base}/v1", "api_key_env": "DIGEST_KEY"}})
    settings = load_settings(vault, {})
    with ExitStack() as stack:  # the provider key only in the app's environ: the run's process is given it
        app = create_app(settings, environ={"DIGEST_KEY": KEY}, watch=watch, schedule=False)
        yield Running(app, stack.enter_context(uvicorn_thread(app)), vault)


@pytest.fixture
def vault(make_vault: Callable[[str], Path]) -> Path:
    return make_vault("basic")


def processes() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line) of every process there is."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            found[int(entry.name)] = (parent, (entry / "cmdline").read_bytes())
        except (OSError, ValueError, IndexError):
            continue
    return found


def fork_servers() -> list[int]:
    """Pids of this process's children that are fork servers of runs (sentient/tasks/forks.py)."""
    return [pid for pid, (parent, command) in processes().items()
            if parent == os.getpid() and b"sentient.tasks.child" in command and b"--fork-server" in command]


def run_processes() -> list[int]:
    """Pids of the task runs' processes this process started: forked by its fork server, or
    started by it."""
    everything, servers = processes(), set(fork_servers())
    return [pid for pid, (parent, command) in everything.items() if b"sentient.tasks.child" in command
            and (parent in servers or (parent == os.getpid() and b"--fork-server" not in command))]


def running(mark: str) -> list[int]:
    """Pids of processes whose command line holds `mark`."""
    found = []
    for entry in Path("/proc").iterdir():
        with suppress(OSError):
            if entry.name.isdigit() and mark.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def start(http: httpx.Client) -> str:
    response = http.post(f"/api/tasks/{TASK}/run")
    assert response.status_code == 202, response.text
    run: str = response.json()["run"]
    return run


def start_again(http: httpx.Client) -> str:
    """Start a run once the last one's lock is free (its process has ended; the server lets go a
    moment after)."""
    response = eventually(lambda: (r := http.post(f"/api/tasks/{TASK}/run")).status_code == 202 and r,
                          "the task free again")
    run: str = response.json()["run"]
    return run


def ended(http: httpx.Client, run: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        shown: dict[str, Any] = http.get(f"/api/tasks/{TASK}/runs/{run}").json()
        return shown if shown.get("status") in ("succeeded", "failed", "cancelled") else None

    return check


def test_a_run_on_a_network_model_runs_in_its_own_process_while_a_chat_is_answered(
    vault: Path, model: tuple[Model, str]
) -> None:
    served, base = model
    served.gate.clear()
    with server_on(vault, base) as server, server.http() as http:
        run = start(http)
        assert served.held.wait(SLOW), "the run's model call never came"
        assert len(run_processes()) == 1, "the run is not in a process of its own"
        assert len(fork_servers()) == 1, "the run's process was not forked by the fork server"
        chat = http.post("/api/chat", json={"message": "hello"}, timeout=SLOW)  # the run's call is held meanwhile
        assert chat.status_code == 200 and chat.json()["reply"] == "ok"
        assert http.post(f"/api/tasks/{TASK}/run").status_code == 409  # its lock is held for it
        served.gate.set()
        shown = eventually(ended(http, run), "the run ended", SLOW)
        assert shown["status"] == "succeeded", shown
        assert shown["answer"] == ANSWER
        assert any("tool memory_recall" in line for line in shown["log"])
        eventually(lambda: not run_processes(), "the run's process ended")
        calls = served.task_calls()
        assert len(calls) == 2 and calls[1]["messages"][-1]["role"] == "tool"
        assert {key for body, key in served.requests if TITLE in str(body["messages"][0].get("content"))} == \
            {f"Bearer {KEY}"}  # the provider key reached the run's process
        assert start_again(http) != run


def test_a_running_runs_file_is_indexed_once_when_the_run_ends_not_at_each_step(
    vault: Path, model: tuple[Model, str]
) -> None:
    """serve's watcher holds the events of a run's file while the run rewrites it (a step at a
    time, from its own process): the index takes it once the run has ended, not a step at a time."""
    served, base = model
    served.gate.clear()
    with server_on(vault, base, watch=True) as server, server.http() as http:
        index = server.app.state.workspace.index
        run = start(http)
        assert served.held.wait(SLOW)
        key, path = f"{TASK}/{run}", vault / "tasks" / TASK / "runs" / f"{run}.md"
        eventually(lambda: "status: running" in path.read_text(), "the run's process wrote its file")
        (vault / "memory" / "held-marker.md").write_text("A marker written after the run's step.\n")
        eventually(lambda: index.get("memory", "held-marker"), "the watcher indexed a later edit")
        shown = index.get("run", key)
        assert shown is None or shown.meta.get("status") != "running"  # its events were held
        served.gate.set()
        assert eventually(ended(http, run), "the run ended", SLOW)["status"] == "succeeded"
        done = eventually(lambda: (found := index.get("run", key)) and found.meta.get("status") == "succeeded"
                          and found, "the ended run indexed")
        assert ANSWER in done.body


def test_the_persons_cancel_reaches_a_run_in_its_own_process(vault: Path, model: tuple[Model, str]) -> None:
    served, base = model
    served.gate.clear()
    notepad = (vault / "tasks" / TASK / "notepad.md").read_bytes()
    with server_on(vault, base) as server, server.http() as http:
        run = start(http)
        assert served.held.wait(SLOW)
        assert http.post(f"/api/tasks/{TASK}/runs/{run}/cancel").status_code in (200, 202)
        served.gate.set()
        shown = eventually(ended(http, run), "the run ended", SLOW)
    assert shown["status"] == "cancelled", shown
    assert not shown.get("answer")
    assert len(served.task_calls()) == 1  # stopped before its next step
    assert (vault / "tasks" / TASK / "notepad.md").read_bytes() == notepad


def test_sentient_stopping_stops_a_run_in_its_own_process_and_records_it(
    vault: Path, model: tuple[Model, str]
) -> None:
    served, base = model
    served.gate.clear()  # the run's model call does not come back before the server stops
    with server_on(vault, base) as server, server.http() as http:
        run = start(http)
        assert served.held.wait(SLOW)
        assert run_processes()
    assert not run_processes(), "the run's process outlived the server"
    text = (vault / "tasks" / TASK / "runs" / f"{run}.md").read_text()
    assert "status: cancelled" in text and "Sentient stopped while it was in a model call" in text


def test_a_run_past_its_timeout_is_stopped_from_outside_with_the_script_it_started(
    vault: Path, model: tuple[Model, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    served, base = model
    monkeypatch.setattr(child, "GRACE", 2.0)  # serve's wait past tasks.timeout (10 s) before it stops the process
    seconds = f"30{os.getpid() % 1000:03d}.7"  # this test's sleep
    mark = f"sleep\0{seconds}"
    served.first = ("execute_code", {"code": f"import subprocess\nsubprocess.run(['sleep', '{seconds}'])"})
    configure(vault, scripts={"time_limit": 600, "sandbox": "none"})  # bwrap would die with the run's process
    with server_on(vault, base, timeout=1) as server, server.http() as http:
        run = start(http)
        eventually(lambda: running(mark), "the run's script started", SLOW)
        shown = eventually(ended(http, run), "the run ended", SLOW)
        assert shown["status"] == "failed", shown
        assert "timed out" in shown["log"][-1] and "its process was stopped" in shown["log"][-1]
        eventually(lambda: not run_processes(), "the run's process ended")
        eventually(lambda: not running(mark), "the run's script ended with it")
        assert start_again(http) != run


def test_a_run_reads_with_the_patterns_the_files_have_now(vault: Path, model: tuple[Model, str]) -> None:
    """A pattern added to sentient.yaml while serve runs judges a run's notepad, in its process too."""
    served, base = model
    with server_on(vault, base) as server, server.http() as http:
        configure(vault, threats={"patterns": [{"id": "override-interview", "class": "override", "description": "x",
                                                "regex": r"\binterview script ready\b"}]})
        shown = eventually(ended(http, start(http)), "the run ended", SLOW)
    assert shown["status"] == "succeeded", shown
    assert any("notepad is withheld" in line for line in shown["log"]), shown["log"]
    assert all("interview script ready" not in json.dumps(body) for body in served.task_calls())


def test_a_run_apart_does_not_import_from_the_servers_working_folder(
    vault: Path, model: tuple[Model, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trap = tmp_path / "trap" / "sentient" / "tasks"
    trap.mkdir(parents=True)
    (trap.parent / "__init__.py").write_text("raise SystemExit(7)\n")
    monkeypatch.chdir(trap.parent.parent)
    served, base = model
    with server_on(vault, base) as server, server.http() as http:
        shown = eventually(ended(http, start(http)), "the run ended", SLOW)
    assert shown["status"] == "succeeded", shown


def test_a_run_whose_process_dies_is_failed_and_frees_its_task(vault: Path, model: tuple[Model, str]) -> None:
    served, base = model
    served.gate.clear()
    with server_on(vault, base) as server, server.http() as http:
        run = start(http)
        assert served.held.wait(SLOW)
        (pid,) = run_processes()
        os.kill(pid, signal.SIGKILL)
        shown = eventually(ended(http, run), "the run ended", SLOW)
        assert shown["status"] == "failed", shown
        assert "exit code -9" in shown["log"][-1]
        served.gate.set()
        served.held.clear()
        again = start_again(http)
        assert eventually(ended(http, again), "the next run ended", SLOW)["status"] == "succeeded"


def test_only_a_model_that_lives_in_this_process_keeps_a_run_here(vault: Path, scripted: Scripted) -> None:
    def llm(model: str) -> LLM:
        return LLM(load_settings(vault, {"SENTIENT_MODEL": model}), {})

    assert llm("local").in_this_process("chat")  # the embedded model: a child of this process
    assert llm(SCRIPTED).in_this_process("chat")  # a provider registered in this process
    assert not llm("openai/gpt-4o-mini").in_this_process("chat")
    assert not llm("ollama_chat/qwen3:8b").in_this_process("chat")
    configure(vault, model="openai/gpt-4o-mini", models={"helper": {"model": "local"}})  # a run may delegate to it
    mixed = LLM(load_settings(vault, {}), {})
    assert mixed.in_this_process("chat", "helper", "extraction")
    assert not mixed.in_this_process("chat")



def test_where_a_run_goes_follows_its_tasks_role_not_every_role(
    vault: Path, model: tuple[Model, str], scripted: Scripted
) -> None:
    """Chat's model lives in serve (a provider registered here); the task's role is the helper's,
    and the helper's and summaries' models are on the network: its runs go apart, as chat's model
    is never theirs. A task whose role is chat
    keeps its run on serve's thread, where that model is reached (apart, it could not be)."""
    served, base = model
    served.gate.clear()
    network = {"model": "openai/digest", "api_base": f"{base}/v1", "api_key_env": "DIGEST_KEY"}
    configure(vault, timezone="UTC", model=SCRIPTED, models={"helper": network, "extraction": network})
    task = vault / "tasks" / TASK / "task.md"
    task.write_text(task.read_text().replace("enabled: true\n", "enabled: true\nrole: helper\n"))
    app = create_app(load_settings(vault, {}), environ={"DIGEST_KEY": KEY}, watch=False, schedule=False)
    with uvicorn_thread(app) as port, Running(app, port, vault).http() as http:
        run = start(http)
        assert served.held.wait(SLOW), "the run's model call never came"
        assert len(run_processes()) == 1, "a run on the helper's network model stayed in serve"
        served.gate.set()
        assert eventually(ended(http, run), "the run ended", SLOW)["status"] == "succeeded"
        eventually(lambda: not run_processes(), "the run's process ended")
        task.write_text(task.read_text().replace("role: helper\n", ""))  # chat's role: the model in serve
        scripted.queue(text("Nothing new on the Ledger."))
        shown = eventually(ended(http, start_again(http)), "the second run ended", SLOW)
        assert shown["status"] == "succeeded" and shown["answer"] == "Nothing new on the Ledger.", shown


def test_runs_are_forked_each_in_a_process_of_its_own_by_one_server_and_a_lost_server_is_replaced(
    vault: Path, model: tuple[Model, str]
) -> None:
    """The fork server imports once and forks a fresh process for each run; killed between two
    runs, the next run starts a new one, and succeeds; serve stopping stops it."""
    served, base = model
    with server_on(vault, base) as server, server.http() as http:
        seen = []
        for number in range(3):
            served.gate.clear()
            served.held.clear()  # the last run's second call set it too
            run = start_again(http)
            assert served.held.wait(SLOW)
            [process], [forker] = run_processes(), fork_servers()
            assert processes()[process][0] == forker  # forked by the server, serve's child
            seen.append((process, forker))
            served.gate.set()
            assert eventually(ended(http, run), "the run ended", SLOW)["status"] == "succeeded"
            eventually(lambda: not run_processes(), "the run's process ended")
            if number == 1:
                os.kill(forker, signal.SIGKILL)
                eventually(lambda: not fork_servers() or None, "the fork server gone")
        (first, server_1), (second, server_2), (third, server_3) = seen
        assert len({first, second, third}) == 3  # a fresh process each run
        assert server_1 == server_2 != server_3  # one server across runs; a new one once it was gone
    assert not fork_servers(), "the fork server outlived serve"
