"""Runner: task runs off the request path, at most `tasks.max_parallel` at once.

`submit` begins a run (its file, its lock) and returns at once, so the API and the scheduler
have its id while it waits its turn (`queued`) or runs. A worker thread takes it: a run whose
model is reached over the network runs in a process of its own (child.py), so a chat never
waits for a run, not even for the interpreter lock; a run on a model that lives only in this
process (the embedded model) runs on the worker thread. Stopping the runner asks the runs going to stop, and marks the
runs still waiting as cancelled; a run cut off by the process ending is marked failed the next
time Sentient starts (`recover`).
"""

from __future__ import annotations

import logging
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Mapping

from sentient.agent.sandbox import kill_tree
from sentient.agent.turn import Agent
from sentient.errors import SentientError
from sentient.tasks import child
from sentient.tasks.executor import Started, begin_run, execute
from sentient.tasks.forks import Forked, ForkServer, ForkServerGone
from sentient.tasks.runs import log_line, mark_cut_off, request_cancel, write_run
from sentient.tasks.spec import ROLES, task_spec
from sentient.vault.store import iso

log = logging.getLogger(__name__)
ASKED_ROLES = ("helper", "extraction")  # any run may ask a helper (delegate) or a summary (compaction)


class Runner:
    def __init__(self, agent: Agent, *, apart: bool = True, environ: Mapping[str, str] | None = None,
                 on_end: Callable[[Started], None] | None = None) -> None:
        """`apart`: runs whose model can be reached from another process run in one of their own
        (False: every run on a worker thread, e.g. when the agent reads an injected clock);
        `environ`: what such a process is given beside this one's environment (provider keys)."""
        self.agent = agent
        self.apart = apart
        self.environ = dict(environ or {})
        self.on_end = on_end
        self.max_parallel = agent.settings.tasks.max_parallel
        self._queue: queue.Queue[Started | None] = queue.Queue()
        self._going: dict[str, Started] = {}  # task -> its run, queued or running, in this process
        self._guard = threading.Condition()
        self._workers: list[threading.Thread] = []
        self._forks: ForkServer | None = None  # started by the first run that goes apart (forks.py)
        self._no_forks = False  # it could not start here: runs start fresh interpreters
        self._forking = threading.Lock()  # one worker at a time starts or asks the fork server

    def recover(self) -> list[str]:
        """Mark failed the runs a process left going when it ended ('task/run' of each)."""
        marked = []
        vault = self.agent.workspace.vault
        for found in vault.walk({"task"}):
            try:
                marked += [f"{found.key}/{run}" for run in mark_cut_off(vault, found.key, self.agent.clock)]
            except Exception as exc:  # one task's runs that cannot be fixed up do not stop the others
                log.warning("task %s: its cut-off runs could not be marked: %s", found.key, exc)
        return marked

    def start(self) -> None:
        with self._guard:
            if self._workers:
                return
            for number in range(self.max_parallel):
                worker = threading.Thread(target=self._work, name=f"sentient-task-{number + 1}", daemon=True)
                self._workers.append(worker)
                worker.start()

    def submit(self, task: str, trigger: str = "manual", note: str | None = None) -> Started:
        """Begin a run of `task` and queue it; AlreadyRunning when a run of it is going."""
        started = begin_run(self.agent, task, trigger, note)
        with self._guard:
            self._going[task] = started
        self._queue.put(started)
        return started

    def running(self, task: str) -> str | None:
        """The id of the run of `task` going in this process (queued or running), if any."""
        with self._guard:
            started = self._going.get(task)
        return started.run if started is not None else None

    def going(self) -> list[Started]:
        with self._guard:
            return list(self._going.values())

    def cancel(self, task: str, run: str) -> None:
        """Ask a run to stop (here at once; in another process, before its next step)."""
        request_cancel(self.agent.workspace.vault, task, run)
        with self._guard:
            started = self._going.get(task)
        if started is not None and started.run == run:
            started.cancel.set()
        else:
            mark_cut_off(self.agent.workspace.vault, task, self.agent.clock)  # going nowhere: its process ended

    def wait(self, timeout: float = 30.0) -> bool:
        """Wait until no run is queued or running here; True when none is."""
        with self._guard:
            return self._guard.wait_for(lambda: not self._going, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the runs going to stop, mark those still waiting cancelled, and give the workers
        `timeout` seconds. A run still in a model call then is marked cancelled: its process is
        stopped; a run on a worker thread is left to the ending of this one."""
        with self._guard:
            for started in self._going.values():
                started.stopping = "Sentient stopped before it ended"
                started.cancel.set()
                if started.process is not None:
                    started.process.terminate()  # it stops before its next step, as a thread does
        while True:
            try:
                waiting = self._queue.get_nowait()
            except queue.Empty:
                break
            if waiting is not None:
                self._never_ran(waiting)
                self._ended(waiting)
        for _ in self._workers:
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        with self._guard:
            late = [started.process for started in self._going.values() if started.process is not None]
        for process in late:  # still in a model call: stopped now, and its worker records that
            kill_tree(process.pid)
        deadline = time.monotonic() + 2.0
        for worker in self._workers if late else ():
            worker.join(max(0.0, deadline - time.monotonic()))
        self._workers = []
        with self._forking:
            if self._forks is not None:  # the runs it forked have been stopped above
                self._forks.close()
                self._forks = None
        for started in self.going():  # still in a model call: say so now, the process is ending
            now = self.agent.clock()
            try:
                write_run(self.agent.workspace.vault, started.key,
                          log_line(now, "cancelled: Sentient stopped during a model call"),
                          meta={"status": "cancelled", "finished": iso(now),
                                "summary": "Cancelled: Sentient stopped during a model call"})
            except Exception as exc:  # marked failed at the next start instead
                log.warning("run %s: could not be marked cancelled: %s", started.key, exc)

    def _never_ran(self, started: Started, failed: str | None = None) -> None:
        """Record a run that never began: cancelled (Sentient stopped first), or `failed` (why its
        process could not start); and free its task."""
        now = self.agent.clock()
        status, why = ("failed", failed) if failed is not None else ("cancelled", "Sentient stopped before it ran")
        try:
            write_run(self.agent.workspace.vault, started.key, log_line(now, f"{status}: {why}"),
                      meta={"status": status, "finished": iso(now), "summary": f"{status.capitalize()}: {why}."})
        except Exception as exc:
            log.warning("run %s: could not be marked cancelled: %s", started.key, exc)
        finally:
            started.lock.release()

    def _work(self) -> None:
        while True:
            started = self._queue.get()
            if started is None:
                return
            try:
                if self._runs_apart(started):
                    self._execute_apart(started)
                else:
                    execute(self.agent, started)
            except Exception:  # execute records the run's own failures; this is one it could not record
                log.exception("run %s could not be recorded", started.key)
            finally:
                self._ended(started)

    def _runs_apart(self, started: Started) -> bool:
        """A run goes apart unless a model it may use (its task's role's, or a helper's or a
        summary's it asks for) lives only in this process."""
        return self.apart and not self.agent.llm.in_this_process(*self._roles(started))

    def _roles(self, started: Started) -> tuple[str, ...]:
        """The model roles a run of `started`'s task may use: its task's role, and the roles of
        the helpers and summaries any run may ask for. A task file that cannot be read now may
        name any role (the run itself records why it failed)."""
        try:
            spec = task_spec(self.agent.workspace.vault.get("task", started.task), self.agent.settings,
                             self.agent.registry.names())
        except SentientError:
            return ROLES
        return (spec.role, *ASKED_ROLES)

    def _execute_apart(self, started: Started) -> None:
        failed, process = None, None
        if started.stopping is None:  # not under the guard: the first fork waits for the server's imports
            try:
                process = self._spawn(started)
            except OSError as exc:
                failed = f"its process could not be started ({exc})"
        with self._guard:  # stop() sees no process and stops it here, or sees it and stops it itself
            started.process = process
            if process is not None and started.stopping is not None:
                process.terminate()  # stopped before its first step: wait() records that
        if started.process is None:
            self._never_ran(started, failed)
            return
        try:
            child.wait(self.agent, started, started.process)
        finally:
            started.lock.release()

    def _spawn(self, started: Started) -> subprocess.Popen[bytes] | Forked:
        """The run's process: forked by the fork server, started first when there is none (or it
        left); a fresh interpreter where there can be none."""
        with self._forking:
            if not self._no_forks:
                forked = self._fork(started)
                if forked is not None:
                    return forked
        return child.spawn(self.agent, started, self.environ)

    def _fork(self, started: Started) -> Forked | None:
        for _ in range(2):  # a server that left since the last run: once more with a new one
            if self._forks is None or not self._forks.alive:
                if self._forks is not None:
                    self._forks.close()
                try:
                    self._forks = ForkServer(self.environ, child.NICENESS)
                except OSError as exc:
                    log.warning("runs start a fresh process each (no fork server: %s)", exc)
                    self._no_forks, self._forks = True, None
                    return None
            try:
                forked = child.spawn(self.agent, started, self.environ, self._forks)
            except ForkServerGone as exc:
                log.warning("the fork server is gone (%s); starting another", exc)
                continue
            assert isinstance(forked, Forked)
            return forked
        log.warning("runs start a fresh process each: the fork server went twice without forking")
        self._no_forks = True
        return None

    def _ended(self, started: Started) -> None:
        with self._guard:
            if self._going.get(started.task) is started:
                del self._going[started.task]
            self._guard.notify_all()
        if self.on_end is not None:
            try:
                self.on_end(started)
            except Exception:
                log.exception("after run %s", started.key)
