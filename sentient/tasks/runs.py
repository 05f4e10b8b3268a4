"""Run files (`tasks/<id>/runs/<run-id>.md`): their sections, the newest ones of a task, and the
two things a run shares with other processes: the task's run lock and a request to cancel.

A run's body is a `## Log` section, then (when its note could not be kept) a `## Notepad not
saved` section, then `## Final answer`, always last, so an answer holding headings of its own
reads back whole.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sentient.errors import BadFile, SentientError
from sentient.vault import Vault
from sentient.vault.document import Document
from sentient.vault.store import iso

LOG_HEADING = "## Log"
FINAL_HEADING = "## Final answer"
NOTE_HEADING = "## Notepad not saved"
FINISHED = "succeeded"
ENDED = frozenset({"succeeded", "failed", "cancelled"})
GOING = frozenset({"queued", "running"})
SUMMARY_CHARS = 160


class AlreadyRunning(SentientError):
    """A run of the task is going (here or in another process): it holds the task's run lock."""

    status = 409


def log_line(moment: datetime, text: str) -> str:
    """One line of a run's log, whatever the text holds (a model's tool arguments may hold line
    breaks, which must not start a section of the file)."""
    return f"- {moment.astimezone(UTC).strftime('%H:%M:%S')} {' '.join(text.split())}"


def new_body(lines: list[str]) -> str:
    return f"{LOG_HEADING}\n\n" + "".join(line + "\n" for line in lines)


def split_body(body: str) -> tuple[str, str | None, str | None]:
    """(the log section, the note not saved or None, the final answer or None) of a run's body."""
    rest, found, answer = body.partition(f"\n{FINAL_HEADING}\n")
    log, noted, note = rest.partition(f"\n{NOTE_HEADING}\n")
    log = log.rstrip("\n") + ("\n\n" if log.strip() == LOG_HEADING else "\n")  # lines follow a blank one
    kept = "\n".join(line[2:] if line.startswith("> ") else line.lstrip(">") for line in note.strip().splitlines())
    return log, kept if noted else None, answer.strip() if found else None


def with_log(body: str, *lines: str, answer: str | None = None, note: str | None = None) -> str:
    """The body with lines added at the end of its log, and its note not saved and final answer
    set (each kept as it is when not given)."""
    log, old_note, old_answer = split_body(body)
    log += "".join(line + "\n" for line in lines)
    note = old_note if note is None else note
    answer = old_answer if answer is None else answer
    if note is not None:  # quoted line by line: no line of it can start a section
        log += f"\n{NOTE_HEADING}\n\n" + "".join(f"> {line}".rstrip() + "\n" for line in note.strip().splitlines())
    if answer:
        log += f"\n{FINAL_HEADING}\n\n{answer.strip()}\n"
    return log


def answer_of(document: Document) -> str:
    """A run's final answer ('' when it has none)."""
    return split_body(document.body)[2] or ""


def log_of(document: Document) -> list[str]:
    """The lines of a run's log."""
    return [line for line in split_body(document.body)[0].splitlines() if line.startswith("- ")]


def note_of(document: Document) -> str | None:
    """The note a run saved that was not written to the notepad, if any."""
    return split_body(document.body)[1]


def summary_of(answer: str) -> str:
    """One line on what a run told the person: the first line of its answer, shortened."""
    for line in answer.splitlines():
        text = line.strip().lstrip("#*->• ").strip()
        if text:
            return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"
    return "Finished without a final answer."


def run_names(vault: Vault, task: str) -> list[str]:
    """The run ids of a task, newest first (run ids start with the time they were made)."""
    folder = vault.root / "tasks" / task / "runs"
    try:
        with os.scandir(folder) as entries:
            names = [e.name[:-3] for e in entries if e.name.endswith(".md") and not e.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(names, reverse=True)


def newest_runs(vault: Vault, task: str, most: int | None = None) -> Iterator[Document]:
    """A task's runs, newest first (at most `most` files read); a run file that cannot be read
    is passed over (`sentient doctor` reports it)."""
    for count, name in enumerate(run_names(vault, task)):
        if most is not None and count >= most:
            return
        path = vault.root / "tasks" / task / "runs" / f"{name}.md"
        try:
            yield vault.read("run", f"{task}/{name}", path)
        except (BadFile, OSError):
            continue


def started_at(document: Document) -> datetime | None:
    value = document.meta.get("started")
    if not isinstance(value, str):
        return None
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class RunLock:
    """A task's run lock (`.sentient/locks/task-run--<id>.lock`), held by whichever process runs
    the task, for as long as it does. A run left `running` while its lock is free was cut off (the
    process ended mid-run). flock: released by the system when the process ends, however it ends."""

    def __init__(self, vault: Vault, task: str) -> None:
        self.path = vault.state_dir / "locks" / f"task-run--{task}.lock"
        self._fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock if nobody holds it; False when a run of the task holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    @classmethod
    def inherited(cls, vault: Vault, task: str, fd: int) -> RunLock:
        """The lock a parent process took and passed down as descriptor `fd` (a run in a process
        of its own): held while either process keeps its descriptor open."""
        lock = cls(vault, task)
        lock._fd = fd
        return lock

    def fileno(self) -> int | None:
        return self._fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _cancel_marker(vault: Vault, task: str, run: str) -> Path:
    return vault.state_dir / "cancel" / f"{task}--{run}"


def request_cancel(vault: Vault, task: str, run: str) -> None:
    """Ask the run to stop, whichever process runs it (it looks before each step)."""
    marker = _cancel_marker(vault, task, run)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def cancel_requested(vault: Vault, task: str, run: str) -> bool:
    return _cancel_marker(vault, task, run).exists()


def forget_cancel(vault: Vault, task: str, run: str) -> None:
    with suppress(OSError):
        _cancel_marker(vault, task, run).unlink()


def write_run(vault: Vault, key: str, *lines: str, meta: dict[str, Any] | None = None, answer: str | None = None,
              note: str | None = None, durable: bool = True) -> Document:
    """Add log lines to a run file, and set its fields, answer and note not saved, in one write.
    `durable=False` for a going run's step: a crash may lose it (the run is then marked failed)."""

    def change(document: Document) -> Document:
        return document.replace(meta, with_log(document.body, *lines, answer=answer, note=note))

    return vault.update("run", key, transform=change, durable=durable)


def going_run(vault: Vault, task: str) -> str | None:
    """The id of the run of `task` its files say is queued or running, if one is."""
    for document in newest_runs(vault, task, 5):
        if document.meta.get("status") in GOING:
            return document.id
    return None


def alive_run(vault: Vault, task: str) -> tuple[str, str] | None:
    """(run id, status) of the run of `task` going now in some process: its files say queued or
    running and its run lock is held (a run whose process ended has a free lock: not going)."""
    going = going_run(vault, task)
    if going is None:
        return None
    lock = RunLock(vault, task)
    if lock.acquire():  # nobody holds it: the run's process ended (looked at for a moment only)
        lock.release()
        return None
    document = vault.get("run", f"{task}/{going}")
    return going, str(document.meta.get("status"))


def mark_cut_off(vault: Vault, task: str, clock: Callable[[], datetime]) -> list[str]:
    """Runs of `task` left queued or running by a process that ended mid-run: marked failed,
    saying so (when no run of it holds its lock). Returns their ids."""
    lock = RunLock(vault, task)
    if not lock.acquire():
        return []  # a run of it is going, in this process or another
    try:
        return mark_dead(vault, task, clock)
    finally:
        lock.release()


def mark_dead(vault: Vault, task: str, clock: Callable[[], datetime]) -> list[str]:
    """With the task's run lock held, no run of it is going: any the newest files say is queued or
    running was cut off. The newest run that ended is as far as one can be (each run begins here)."""
    marked = []
    for document in newest_runs(vault, task):
        if document.meta.get("status") not in GOING:
            break
        now = clock()
        write_run(vault, f"{task}/{document.id}",
                  log_line(now, "failed: the process running it stopped before it ended (marked when Sentient "
                                "started again)"),
                  meta={"status": "failed", "finished": iso(now), "summary": "Failed: cut off when Sentient stopped."})
        marked.append(document.id)
    return marked
