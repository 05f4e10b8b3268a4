"""The fork server: runs apart without paying a new interpreter's start-up each time.

A run in a process of its own (child.py) used to start a fresh Python, which imports the model
client first: litellm brings some 2,700 modules, 1.5-3 s of CPU and 200 MB, once per run, beside
the chats on the same cores. Instead, `serve` keeps one process (`python -m sentient.tasks.child
--fork-server`, started at the first run that goes apart, at the runs' lower priority) that has
imported all that once and waits; for each run it forks a fresh process, which runs that run alone
and exits. So each run still has a process of its own (its pid, its session and process group:
the person's cancel, a timeout and Sentient stopping reach it as before, and a crash takes only
it), and the run's lock is handed to it with its description (SCM_RIGHTS on a Unix socket).

The server holds no thread, no open file of the vault and no database connection when it forks:
it only imports. It leaves by itself after IDLE_SECONDS without a run (its memory is given
back), when `serve` closes its socket, or when `serve` stops it; the runs it forked go on to
their ends either way, as a run's process does when `serve` is killed. Where it cannot start
(no fork: not Linux or macOS), child.spawn starts a fresh interpreter as before.

Messages, one per datagram (SOCK_SEQPACKET): `serve` sends the run's JSON with the lock's
descriptor; the server answers `forked <pid>`, and `ended <pid> <exit code>` when it reaps it.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import random
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import Any

log = logging.getLogger(__name__)
IDLE_SECONDS = 600.0  # the server leaves after this long without a run
REAP_SECONDS = 0.1  # how often the server looks for a run's process that ended
MOST_BYTES = 1 << 20  # the largest message (a run's JSON: its settings, a few KB)
START_SECONDS = 60.0  # for the server's imports, on a busy machine


class ForkServerGone(OSError):
    """The fork server is not there (it left, or could not start): start another."""


class ForkServer:
    """`serve`'s side: starts the server, asks it for a run's process, learns when it ends."""

    def __init__(self, environ: Mapping[str, str], niceness: int) -> None:
        if not hasattr(os, "fork") or not hasattr(socket, "send_fds"):
            raise ForkServerGone("this system cannot fork a run's process")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-P", "-m", "sentient.tasks.child", "--fork-server", str(theirs.fileno())],
                stdin=subprocess.DEVNULL, env={**os.environ, **environ}, pass_fds=(theirs.fileno(),),
                start_new_session=True,  # a Ctrl-C at serve's terminal is serve's to handle
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        with suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, self._process.pid, min(os.getpriority(os.PRIO_PROCESS, 0) + niceness, 19))
        self._socket = ours
        self._guard = threading.Condition()
        self._forked: list[int] = []  # answers to fork requests, in order
        self._ended: dict[int, int] = {}  # pid -> exit code, of the runs' processes reaped
        self._gone = False
        self._asking = threading.Lock()  # one fork request at a time: its answer is the next `forked`
        self._reader = threading.Thread(target=self._read, name="sentient-fork-server", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        with self._guard:
            return not self._gone

    def fork(self, payload: dict[str, Any], lock: int | None) -> Forked:
        """A fresh process running the run `payload` describes, the lock's descriptor handed to it."""
        data = json.dumps(payload).encode()
        with self._asking:
            try:
                socket.send_fds(self._socket, [data], [lock] if lock is not None else [])
            except OSError as exc:
                self._lost()
                raise ForkServerGone(f"the fork server is gone ({exc})") from exc
            with self._guard:
                if not self._guard.wait_for(lambda: self._forked or self._gone, START_SECONDS):
                    self._gone = True
                if not self._forked:
                    raise ForkServerGone("the fork server did not answer")
                return Forked(self, self._forked.pop(0))

    def wait_for(self, pid: int, timeout: float | None) -> int:
        """The exit code of the run's process `pid`, once it ended; subprocess.TimeoutExpired
        after `timeout` s. Should the server go first, the process is watched by its pid."""
        with self._guard:
            if self._guard.wait_for(lambda: pid in self._ended or self._gone, timeout) and pid in self._ended:
                return self._ended[pid]
        if not self.alive:  # no one reaps it for us now: watch it until it is gone
            return _watch(pid, timeout)
        raise subprocess.TimeoutExpired(f"run process {pid}", timeout or 0.0)

    def close(self) -> None:
        """Stop the server (the runs it forked go on to their ends)."""
        self._lost()
        with suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._process.terminate()
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(5)
        self._socket.close()

    def _lost(self) -> None:
        with self._guard:
            self._gone = True
            self._guard.notify_all()

    def _read(self) -> None:
        while True:
            try:
                data = self._socket.recv(4096)
            except OSError:
                data = b""
            if not data:
                self._lost()
                return
            word, *numbers = data.decode().split()
            with self._guard:
                if word == "forked":
                    self._forked.append(int(numbers[0]))
                elif word == "ended":
                    self._ended[int(numbers[0])] = int(numbers[1])
                self._guard.notify_all()


class Forked:
    """A run's process forked by the server: what the runner uses of a Popen."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.server.wait_for(self.pid, timeout)
        return self.returncode

    def terminate(self) -> None:
        if self.returncode is None:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGTERM)


def _watch(pid: int, timeout: float | None) -> int:
    """Wait for a process that is not our child to end (its exit code unknown: -1)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return -1
        except PermissionError:
            pass
        if deadline is not None and time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(f"run process {pid}", timeout or 0.0)
        time.sleep(REAP_SECONDS)


def serve_forks(fd: int, run: Callable[[dict[str, Any]], int], idle: float = IDLE_SECONDS) -> int:
    """The server's loop (`--fork-server FD`): for each run asked for, fork a process that calls
    `run(payload)` and exits with what it returns; report each one's pid and its end."""
    channel = socket.socket(fileno=fd)
    signal.signal(signal.SIGTERM, _stop)
    try:
        return _serve(channel, run, idle)
    finally:  # leaving: a SIGTERM now (serve stopping) would raise in the interpreter's shutdown
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _stop(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: not again while this exit unwinds
    sys.exit(0)


def _serve(channel: socket.socket, run: Callable[[dict[str, Any]], int], idle: float) -> int:
    gc.freeze()  # what was imported is never collected: a fork's collector does not copy every page of it
    children: set[int] = set()
    quiet = 0.0
    while True:
        readable, _, _ = select.select([channel], [], [], REAP_SECONDS)
        if readable:
            try:
                data, fds, _, _ = socket.recv_fds(channel, MOST_BYTES, 1)
            except OSError:
                data, fds = b"", []
            if not data:  # serve closed its end
                return 0
            quiet = 0.0
            # SIGTERM held over the fork: one sent to the new process before it has its own handler
            # (serve stopping it at once) waits, and then ends it quietly, not through ours
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            pid = os.fork()
            if pid == 0:
                _in_the_fork(channel, data, fds, run)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            for descriptor in fds:  # the run's process holds the lock now, not the server
                os.close(descriptor)
            children.add(pid)
            channel.send(f"forked {pid}".encode())
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                with suppress(OSError):
                    channel.send(f"ended {pid} {os.waitstatus_to_exitcode(status)}".encode())
        quiet = 0.0 if children else quiet + REAP_SECONDS
        if quiet >= idle:
            return 0


def _in_the_fork(channel: socket.socket, data: bytes, fds: list[int], run: Callable[[dict[str, Any]], int]) -> None:
    """In the forked process: a session of its own, the server's socket closed, then the run."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the server's handler
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # a SIGTERM held until now ends it here
        channel.close()
        os.setsid()
        random.seed()  # not the server's sequence, shared by every run it forked
        payload = json.loads(data)
        payload["lock"] = fds[0] if fds else None
        code = run(payload)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        log.exception("a run's forked process failed")
    finally:
        with suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
