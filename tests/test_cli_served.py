"""`sentient search` with a `sentient serve` of the vault running: the command asks the server
(GET /api/search on 127.0.0.1) and prints what it would have printed itself, loading neither the
index nor the embedding model; when the recorded server does not answer for this vault (gone,
another vault's, another token, silent), it searches itself, with nothing said. A real uvicorn
server on a free port; the commands run in this process, and once as a process of their own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from fastapi import FastAPI, Request, Response

from sentient.api.app import create_app
from sentient.config import load_settings
from sentient.served import ANSWER_WITHIN, SERVER_FILE, TOKEN_FILE, advertise
from tests.test_api_server import uvicorn_thread
from tests.test_cli import SNEAKY, run

ROOT = Path(__file__).resolve().parent.parent
# Each way a person searches: words, JSON, a kind and a limit, a mode, a flagged hit, no match,
# more chats than the limit shows.
SEARCHES = [["Anika"], ["Anika", "--json"], ["Anika", "--kind", "memory", "--limit", "2"], ["tea", "--mode", "bm25"],
            ["pricing"], ["pricing", "--json"], ["zzzqqqxxy"], ["Anika", "--limit", "3"]]
WORDS = ["Anika", "--mode", "bm25"]  # where what is tested is who answers (no model to load)


@pytest.fixture
def vault(make_vault: Callable[[str], Path]) -> Path:
    made = make_vault("basic")
    (made / "memory" / "pricing.md").write_text("---\ntitle: Pricing notes\n---\n" + SNEAKY)
    month = made / "sessions" / "2026-12"
    month.mkdir(parents=True)
    for day in range(1, 4):
        (month / f"anika{day}.md").write_text(
            f"---\nid: anika{day}\ntitle: About Anika, day {day}\nchannel: chat\n---\n\n"
            f"## user · 2026-12-0{day}T09:00:00Z\n\nWhat is Anika doing on day {day}?\n")
    return made


def searched(capsys: pytest.CaptureFixture[str], vault: Path, words: list[str]) -> tuple[int, str, str]:
    return run(capsys, "--vault", str(vault), "search", *words)


class Server:
    """A real `create_app` on uvicorn, advertised in the vault's .sentient/server.json, counting
    the searches it is asked. `watch`: with the watcher (which holds the index's lease, as `sentient
    serve` runs), or without (it then syncs before each search, as the command would)."""

    def __init__(self, vault: Path, stack: ExitStack, *, watch: bool = True) -> None:
        settings = load_settings(vault, {})
        self.state = settings.state_dir
        self.searches = 0
        app: FastAPI = create_app(settings, environ={}, watch=watch, schedule=False)

        @app.middleware("http")
        async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
            self.searches += request.url.path == "/api/search"
            return await call_next(request)

        self.token: str = app.state.token
        self.port = stack.enter_context(uvicorn_thread(app))
        stack.enter_context(advertise(self.state, f"http://127.0.0.1:{self.port}"))


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as opened:
        yield opened


def test_a_search_is_answered_by_the_running_server_as_the_command_answers_it(
    vault: Path, stack: ExitStack, capsys: pytest.CaptureFixture[str]
) -> None:
    here = [searched(capsys, vault, words) for words in SEARCHES]  # no server yet: the command searches itself
    assert here[4][1].startswith(" 1.![memory] pricing  Pricing notes") and here[6][1] == "no matches\n"
    assert here[7][1].endswith("more in chat sessions: sentient search --kind session Anika\n")
    server = Server(vault, stack)
    for number, (words, expected) in enumerate(zip(SEARCHES, here, strict=True), 1):
        assert searched(capsys, vault, words) == expected, words
        assert server.searches == number  # the server answered it
    with pytest.raises(SystemExit) as refused:  # refused as before, and before anything is asked
        searched(capsys, vault, ["Anika", "--limit", "0"])
    assert refused.value.code == 2 and "out of range" in capsys.readouterr().err
    code, _, err = searched(capsys, vault, ["caf\udce9"])
    assert code == 2 and "the query is not UTF-8" in err and server.searches == len(SEARCHES)


def test_a_search_through_the_server_loads_neither_the_index_nor_the_model(
    vault: Path, stack: ExitStack, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = searched(capsys, vault, ["Anika"])[1]
    server = Server(vault, stack)
    probe = ("import sys; from sentient.cli import main; code = main(sys.argv[1:]); sys.stdout.flush(); "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy' or m.startswith(('sentient.index', "
             "'sentient.workspace', 'sentient.threats', 'sentient.vault.store', 'sentient.vault.kinds', "
             "'sentient.vault.document', 'hashlib'))), file=sys.stderr); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe, "--vault", str(vault), "search", "Anika"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected and server.searches == 1
    assert done.stderr.strip().splitlines()[-1] == "[]"  # no index, patterns, file parser or numpy


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_the_command_searches_itself_when_the_recorded_server_does_not_answer_for_this_vault(
    vault: Path, make_vault: Callable[[str], Path], stack: ExitStack, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = searched(capsys, vault, WORDS)
    state = vault / ".sentient"
    recorded = state / SERVER_FILE
    (state / TOKEN_FILE).write_text("a-token\n")
    # gone: the file names a running process (this one) but nothing listens at its address
    recorded.write_text(json.dumps({"url": f"http://127.0.0.1:{free_port()}", "pid": os.getpid()}))
    assert searched(capsys, vault, WORDS) == expected
    # another vault's server, its file and token copied here: it answers, for the other vault
    other = Server(make_vault("hostile"), stack, watch=False)
    recorded.write_text((other.state / SERVER_FILE).read_text())
    (state / TOKEN_FILE).write_text((other.state / TOKEN_FILE).read_text())
    assert searched(capsys, vault, WORDS) == expected and other.searches == 1
    # this vault's server, asked with a token it does not take
    mine = Server(vault, stack, watch=False)
    (state / TOKEN_FILE).write_text("not-the-token\n")
    assert searched(capsys, vault, WORDS) == expected and mine.searches == 1  # refused (401), then here
    # an address that is not this machine's loopback (0.0.0.0 reaches the server here): not asked,
    # so that the token is not sent over a network
    recorded.write_text(json.dumps({"url": f"http://0.0.0.0:{mine.port}", "pid": os.getpid()}))
    (state / TOKEN_FILE).write_text(mine.token)
    assert searched(capsys, vault, WORDS) == expected and mine.searches == 1
    # the file names a process that has ended: the server is not even asked
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    recorded.write_text(json.dumps({"url": f"http://127.0.0.1:{mine.port}", "pid": int(ended.stdout)}))
    assert searched(capsys, vault, WORDS) == expected and mine.searches == 1


def test_a_server_that_does_not_answer_is_given_up_on_quickly(
    vault: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = searched(capsys, vault, WORDS)
    with socket.socket() as silent:  # listens (connections are taken), never answers: a server stuck
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        (vault / ".sentient" / TOKEN_FILE).write_text("a-token\n")
        (vault / ".sentient" / SERVER_FILE).write_text(
            json.dumps({"url": f"http://127.0.0.1:{silent.getsockname()[1]}", "pid": os.getpid()}))
        start = time.monotonic()
        assert searched(capsys, vault, WORDS) == expected
        assert time.monotonic() - start < ANSWER_WITHIN + 10  # not for ever: a short wait, then here
