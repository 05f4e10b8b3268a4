"""A run in a process of its own.

A run whose model is reached over the network runs in a child process of `serve`
(`python -m sentient.tasks.child`), so that its Python work (the model client's handling of
every reply, the run file's writes, the tools) never holds the server's interpreter lock while a
chat turn waits for it. A run whose model lives only in this process (the embedded model, whose
server is this process's child) runs on one of the runner's threads as before.

The parent has begun the run (its file, `queued`, and the task's run lock) and sends the child
what it needs as JSON on its standard input: the settings, the run, and the number of the lock's
descriptor, which the child inherits, so the lock is held for as long as either process lives.
The child executes the run as a thread would, and stops the same way before its next step: when
the person asks (the cancel marker) or Sentient stops (SIGTERM). Whatever the child could not
record (it was killed, it ran past `tasks.timeout`, it could not start) the parent records.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from contextlib import suppress
from types import FrameType
from typing import Any

from sentient.agent.sandbox import kill_tree
from sentient.agent.turn import Agent, open_agent
from sentient.config import Settings
from sentient.tasks.executor import Started, execute
from sentient.tasks.forks import Forked, ForkServer
from sentient.tasks.runs import RunLock, log_line, write_run
from sentient.vault.store import iso
from sentient.workspace import open_workspace, with_current_patterns

log = logging.getLogger(__name__)
GRACE = 10.0  # seconds past tasks.timeout (counted from the process's start) before the parent stops
# a run's process itself: a model call that does not come back does not hold the task for ever
ENDED = ("succeeded", "failed", "cancelled")
NICENESS = 10  # how much lower a run's process runs than serve (the Unix nice scale: 10 of 19)


def spawn(agent: Agent, started: Started, environ: Mapping[str, str],
          server: ForkServer | None = None) -> subprocess.Popen[bytes] | Forked:
    """Start the process of a begun run: forked by `server` (forks.py: the model client already
    imported) and given its run at once, or else a fresh interpreter that reads its run from its
    standard input (`wait`). It runs at a lower priority (NICENESS) than serve: a run is
    background work, and when the two want the same core (its steps; a fresh interpreter's
    start-up, about a second of imports), a chat goes first. ForkServerGone when `server` is."""
    if server is not None:
        return server.fork(payload(agent, started), started.lock.fileno())
    fd = started.lock.fileno()
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "sentient.tasks.child"],  # -P: not from serve's working folder
        stdin=subprocess.PIPE,
        env={**os.environ, **environ},
        pass_fds=(fd,) if fd is not None else (),
        start_new_session=True,  # a Ctrl-C at serve's terminal reaches serve, which stops its runs itself
    )
    with suppress(OSError, AttributeError):  # not where priorities cannot be set (it runs as serve's)
        os.setpriority(os.PRIO_PROCESS, process.pid, min(os.getpriority(os.PRIO_PROCESS, 0) + NICENESS, 19))
    return process


def payload(agent: Agent, started: Started) -> dict[str, Any]:
    """What a run's process is told: the settings, the run, and its lock's descriptor."""
    return {"settings": agent.settings.handed_down(), "task": started.task, "run": started.run,
            "trigger": started.trigger, "note": started.note, "lock": started.lock.fileno()}


def wait(agent: Agent, started: Started, process: subprocess.Popen[bytes] | Forked) -> str:
    """Give a fresh interpreter its run, wait for the process to end, and record what it could
    not; the run's status."""
    limit = agent.settings.tasks.timeout
    why = None
    try:
        if isinstance(process, Forked):  # given its run when it was forked
            process.wait(limit + GRACE)
        else:
            process.communicate(json.dumps(payload(agent, started)).encode(), timeout=limit + GRACE)
    except subprocess.TimeoutExpired:
        kill_tree(process.pid)  # with what it started (a script)
        process.wait()
        why = f"it timed out, running longer than tasks.timeout ({limit:g} s), and its process was stopped"
    except (BrokenPipeError, ConnectionResetError):  # it ended before reading its run
        process.wait()
    vault = agent.workspace.vault
    try:
        meta = vault.get("run", started.key).meta
    except Exception as exc:  # its file gone or unreadable: nothing to record it in
        log.warning("run %s: its file cannot be read after its process ended: %s", started.key, exc)
        return "failed"
    status = str(meta.get("status", ""))
    if status in ENDED:
        return status
    if started.stopping is not None and not meta.get("started"):
        status, why = "cancelled", "Sentient stopped before it ran"
    elif started.stopping is not None:
        status, why = "cancelled", "Sentient stopped while it was in a model call, and stopped its process"
    else:
        status, why = "failed", why or f"its process ended (exit code {process.returncode}) before the run did"
    now = agent.clock()
    write_run(vault, started.key, log_line(now, f"{status}: {why}"),
              meta={"status": status, "finished": iso(now), "summary": f"{status.capitalize()}: {why}"})
    return status


def main(argv: list[str]) -> int:
    """The child: execute the run described on standard input; with `--fork-server FD`, the fork
    server (forks.py), which imports what a run needs and forks a process for each run."""
    if argv[:1] == ["--fork-server"]:
        return fork_server(int(argv[1]))
    return run(json.loads(sys.stdin.buffer.read()))


def run(payload: dict[str, Any]) -> int:
    """Execute the run `payload` describes (spawn's payload())."""
    task, key = str(payload["task"]), str(payload["run"])
    logging.basicConfig(level=logging.WARNING, format=f"task {task} run {key}: %(levelname)s %(name)s: %(message)s")
    settings = with_current_patterns(Settings.handed_over(payload["settings"]))
    workspace = open_workspace(settings)
    workspace.index.embed_in_search = 0  # serve embeds what changed, beside it: a run's searches do not
    agent = open_agent(workspace, os.environ)
    agent.llm.prepare()  # before the run's clock starts
    lock = RunLock.inherited(workspace.vault, task, int(payload["lock"]))
    started = Started(task, key, str(payload["trigger"]), lock, payload.get("note"))

    def stopping(signum: int, frame: FrameType | None) -> None:
        started.stopping = "Sentient stopped before it ended"
        started.cancel.set()

    signal.signal(signal.SIGTERM, stopping)
    try:
        execute(agent, started)
    finally:
        agent.close()
        workspace.close()
    return 0


def fork_server(fd: int) -> int:
    """Import what every run needs, once (the model client: litellm, and the embedding model a
    run's searches use), then fork a process for each run (forks.serve_forks)."""
    import litellm  # noqa: F401  (most of a run's start-up: imported here, once)

    from sentient import embedding
    from sentient.tasks.forks import serve_forks

    with suppress(Exception):  # a run's searches embed their query; no model: they rank by words
        if (model := embedding.embedder()) is not None:
            model.query("a run's search")  # the weights mapped, the tokenizer read
    return serve_forks(fd, run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
