"""The README's quick start on a fresh clone: `python3 run.py` serves a working copy of the
example vault, a chat and a request leave `git status` clean and no test file added, and
stopping run.py (SIGTERM, SIGINT, SIGHUP) stops the server it started and frees its port.

The clone is this checkout's tracked files, committed in a new repository; its .venv is the
venv running these tests (a launcher that imports the clone's own `sentient`), with run.py's
install stamps written, so run.py installs nothing. The model is the scripted one over HTTP.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.scripted import NOTHING_QUEUED
from tests.scripted_http import ScriptedServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = """#!{python}
import sys
sys.path.insert(0, {clone!r})
{call}
"""


def _git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=clone,
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    target = tmp_path / "clone"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.split(b"\0")):
        source, copy = ROOT / os.fsdecode(name), target / os.fsdecode(name)
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        elif source.is_file():  # (not a file deleted in the work tree and not yet committed)
            shutil.copy2(source, copy)
    _git(target, "init", "-q")
    _git(target, "add", "-A")
    _git(target, "commit", "-qm", "fresh clone")
    bin_dir = target / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    for name, call in (("sentient", "from sentient.cli import main\nsys.exit(main())"),
                       ("pytest", "import pytest\nsys.exit(pytest.console_main())")):
        (bin_dir / name).write_text(LAUNCHER.format(python=sys.executable, clone=str(target), call=call))
        (bin_dir / name).chmod(0o755)
    install_stamp = runpy.run_path(str(target / "run.py"))["install_stamp"]
    for extras in ("", "dev"):
        stamp, digest = install_stamp(extras)
        stamp.write_text(digest)
    return target


def _env(model: ScriptedServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SENTIENT_VAULT", "SENTIENT_MODEL")}
    return {**env, "SENTIENT_MODEL": "openai/scripted", "OPENAI_API_BASE": model.base_url,
            "OPENAI_API_KEY": "scripted"}


def _run_py(clone: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "run.py", *args], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"run.py {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done.stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"  # a zombie has stopped; only its exit status is left to collect


Serving = tuple[subprocess.Popen[bytes], str, dict[str, str]]


@contextmanager
def serving(clone: Path, env: dict[str, str], log: Path) -> Iterator[Serving]:
    """`python3 run.py serve --port N` in the clone, until its API answers: (run.py's process, the
    URL, the auth header)."""
    port = _free_port()
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "run.py", "serve", "--port", str(port)], cwd=clone, env=env,
                                   stdout=out, stderr=subprocess.STDOUT)
    url, token_file = f"http://127.0.0.1:{port}", clone / ".sentient-example" / ".sentient" / "token"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, f"run.py ended early:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the API did not answer in time:\n{log.read_text()}"
            if token_file.exists() and _listening(port):
                headers = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
                if httpx.get(f"{url}/api/health", headers=headers, timeout=10).status_code == 200:
                    break
            time.sleep(0.1)
        yield process, url, headers
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _stop(process: subprocess.Popen[bytes], clone: Path, how: signal.Signals) -> None:
    """Send `how` to run.py alone and check that it and the server it started have ended."""
    server = json.loads((clone / ".sentient-example" / ".sentient" / "server.json").read_text())
    port = int(server["url"].rsplit(":", 1)[1])
    assert server["pid"] != process.pid  # the server is run.py's child, not run.py
    process.send_signal(how)
    process.wait(timeout=60)
    deadline = time.monotonic() + 30
    while (_alive(server["pid"]) or _listening(port)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server["pid"]), f"sentient serve still runs after {how.name} to run.py"
    assert not _listening(port), f"port {port} still taken after {how.name} to run.py"


def _test_files(clone: Path) -> list[str]:
    """Every file pytest could collect tests or fixtures from, anywhere in the clone but its .venv
    and .git (pytest itself collects only its testpaths, pyproject.toml's, which `git status`
    checks; a collection in the clone took 14 s each time)."""
    names = ("test_*.py", "*_test.py", "conftest.py")
    return sorted(str(path.relative_to(clone)) for name in names for path in clone.rglob(name)
                  if path.relative_to(clone).parts[0] not in (".venv", ".git"))


def test_the_quick_start_leaves_the_clone_clean_and_sigterm_stops_the_server(clone: Path, tmp_path: Path) -> None:
    with ScriptedServer() as model:
        env = _env(model)
        tests_before = _test_files(clone)
        doctor = _run_py(clone, env, "doctor", "--no-models")
        assert "copied the example vault/ to .sentient-example/" in doctor
        assert doctor.strip().splitlines()[-1] == "every file reads fine", doctor
        with serving(clone, env, tmp_path / "serve.log") as (process, url, headers):
            chat = httpx.post(f"{url}/api/chat", headers=headers, timeout=60,
                              json={"message": "What do you know about Anika?"})
            assert chat.status_code == 200 and chat.json()["reply"] == NOTHING_QUEUED, chat.text
            assert httpx.get(f"{url}/api/sessions", headers=headers, timeout=10).status_code == 200
            _stop(process, clone, signal.SIGTERM)
        assert "What do you know about Anika?" in model.requests[-1]["messages"][-1]["content"] or any(
            "What do you know about Anika?" in str(request["messages"]) for request in model.requests)
        sessions = list((clone / ".sentient-example" / "sessions").rglob("*.md"))
        assert any("What do you know about Anika?" in path.read_text() for path in sessions)
        assert _git(clone, "status", "--porcelain") == ""
        assert _test_files(clone) == tests_before and "tests/test_quickstart.py" in tests_before


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGHUP])
def test_sigint_and_sighup_to_run_py_stop_the_server(clone: Path, tmp_path: Path, how: signal.Signals) -> None:
    with ScriptedServer() as model, serving(clone, _env(model), tmp_path / "serve.log") as (process, _, _):
        _stop(process, clone, how)
