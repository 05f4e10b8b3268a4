"""Runner: task runs off the request path, at most `tasks.max_parallel` at once.

`submit` begins a run (its file, its lock) and returns at once, so the API and the scheduler
have its id while it waits its turn (`queued`) or runs on one of the runner's worker threads.
A chat never waits for a run. Stopping the runner asks the runs going to stop, and marks the
runs still waiting as cancelled; a run cut off by the process ending is marked failed the next
time Sentient starts (`recover`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from sentient.agent.turn import Agent
from sentient.tasks.executor import Started, begin_run, execute
from sentient.tasks.runs import log_line, mark_cut_off, request_cancel, write_run
from sentient.vault.store import iso

log = logging.getLogger(__name__)


class Runner:
    def __init__(self, agent: Agent, *, on_end: Callable[[Started], None] | None = None) -> None:
        self.agent = agent
        self.on_end = on_end
        self.max_parallel = agent.settings.tasks.max_parallel
        self._queue: queue.Queue[Started | None] = queue.Queue()
        self._going: dict[str, Started] = {}  # task -> its run, queued or running, in this process
        self._guard = threading.Condition()
        self._workers: list[threading.Thread] = []

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
        `timeout` seconds (a model call under way is not interrupted: such a run is marked failed
        at the next start)."""
        for started in self.going():
            started.stopping = "Sentient stopped before it ended"
            started.cancel.set()
        while True:
            try:
                waiting = self._queue.get_nowait()
            except queue.Empty:
                break
            if waiting is not None:
                self._never_ran(waiting)
        for _ in self._workers:
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        self._workers = []
        for started in self.going():  # still in a model call: say so now, the process is ending
            now = self.agent.clock()
            try:
                write_run(self.agent.workspace.vault, started.key,
                          log_line(now, "cancelled: Sentient stopped during a model call"),
                          meta={"status": "cancelled", "finished": iso(now),
                                "summary": "Cancelled: Sentient stopped during a model call"})
            except Exception as exc:  # marked failed at the next start instead
                log.warning("run %s: could not be marked cancelled: %s", started.key, exc)

    def _never_ran(self, started: Started) -> None:
        now = self.agent.clock()
        try:
            line = log_line(now, "cancelled: Sentient stopped before it ran")
            write_run(self.agent.workspace.vault, started.key, line,
                      meta={"status": "cancelled", "finished": iso(now), "summary": "Cancelled: Sentient stopped."})
        except Exception as exc:
            log.warning("run %s: could not be marked cancelled: %s", started.key, exc)
        finally:
            started.lock.release()
            self._ended(started)

    def _work(self) -> None:
        while True:
            started = self._queue.get()
            if started is None:
                return
            try:
                execute(self.agent, started)
            except Exception:  # execute records the run's own failures; this is one it could not record
                log.exception("run %s could not be recorded", started.key)
            finally:
                self._ended(started)

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
