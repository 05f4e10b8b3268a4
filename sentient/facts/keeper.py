"""FactKeeper: facts told to a turn, and extractions run beside the turns, never in them.

A turn asks `told(user, persona)` (one stat, a read only when the file changed) and, once it is
answered, reports itself with `turn_taken`; every facts.every_n_turns unread turns of a
session schedule one extraction for (user, persona). A scheduled job is a small file in
`.sentient/facts/` until its attempt ends, so a job the process did not get to is run at the
next start (`resume`). Two extractions of one (user, persona) never interleave: a lock file
per key (flock), which holds across threads and processes alike. Every way an extraction can fail leaves the
fact file byte for byte as it was, and is logged.

Which turns an extraction reads: the turns of every session of (user, persona) after the
session's `facts_read` (how many of its person's messages an extraction has read), so turns
said just before a caller hung up are read by the next extraction, in whichever session it runs.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sentient.config import CHARS_PER_TOKEN, FactSettings, is_local
from sentient.errors import AlreadyExists, Conflict, NotFound, SentientError
from sentient.facts.callers import sessions_of
from sentient.facts.extract import Refused, Turn, changed, merged_body, prompt, reply_format, reply_tokens, validate
from sentient.facts.sets import FactReader, FactSet, ShownFact, Told, read_set
from sentient.llm import LLM
from sentient.prompts import Prompts
from sentient.vault import transcript
from sentient.vault.kinds import check_key
from sentient.vault.store import iso, utc_now
from sentient.workspace import Workspace

log = logging.getLogger(__name__)
WORKERS = 2
JOBS = "facts"  # the folder of scheduled jobs in .sentient/
READ_AT = 4096  # sessions whose file state is remembered as read whole (then forgotten, and read again)


@dataclass(frozen=True)
class SessionRead:
    """What an extraction reads of one session: its person's messages read before, and now
    (in the session's file as it was: its state)."""

    before: int
    now: int
    state: tuple[int, int, int]
    created: str  # the session's `created`


@dataclass(frozen=True)
class Outcome:
    key: str  # user/persona
    status: str  # written, unchanged, nothing-new, refused, failed, conflict, stopped
    detail: str
    at: str


def _state(path: Path) -> tuple[int, int, int]:
    """A file's (mtime_ns, size, inode): it changed when this did."""
    stat = os.stat(path)
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


def _created(meta: Mapping[str, Any]) -> str:
    return str(meta.get("created") or "")


def facts_read(meta: Mapping[str, Any]) -> int:
    """How many of a session's person's messages an extraction has read (its `facts_read`)."""
    value = meta.get("facts_read")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class FactKeeper:
    def __init__(self, workspace: Workspace, llm: LLM, prompts: Prompts, settings: FactSettings,
                 *, clock: Callable[[], datetime] = utc_now) -> None:
        self.workspace = workspace
        self.llm = llm
        self.prompts = prompts
        self.settings = settings
        self.clock = clock
        self.reader = FactReader(workspace, prompts)
        self.outcomes: dict[str, Outcome] = {}  # the last attempt's outcome of each key
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._pending: dict[str, set[str]] = {}  # key -> sessions, queued and not started
        self._running: Counter[str] = Counter()  # key -> extractions of it under way (or waiting for its lock)
        self._cond = threading.Condition()
        self._workers: list[threading.Thread] = []
        self._closed = threading.Event()
        self._read_at: dict[str, tuple[int, int, int]] = {}  # session -> its file's state when all of it was read
        self._jobs_lock = threading.Lock()  # the job files in .sentient/facts/
        # session -> how many of its person's messages extractions have read, not yet in its file:
        # the session's next turn writes it (see read_mark); close() writes what is left
        # (the session's `created`, so that a session deleted and made again under its key is another)
        self._unmarked: dict[str, tuple[int, str]] = {}

    # --- the turn's side ------------------------------------------------------------------

    def told(self, user: str, persona: str) -> Told | None:
        """The facts message for a turn of `user` with `persona`; None when there is none."""
        return self.reader.told(user, persona)

    def read_count(self, session: str, meta: Mapping[str, Any]) -> int:
        """How many of the session's person's messages extractions have read: its `facts_read`,
        or more when an extraction read further since (written with the session's next turn)."""
        with self._cond:
            unmarked, created = self._unmarked.get(session, (0, ""))
        return max(facts_read(meta), unmarked if created == _created(meta) else 0)

    def read_mark(self, session: str, meta: Mapping[str, Any]) -> dict[str, int]:
        """The `facts_read` a turn of the session writes with its first write, or {}. An
        extraction never writes a session file while turns go on (the turn would wait for
        that write, under the file's lock); the turn's own write carries the mark."""
        count = self.read_count(session, meta)
        return {"facts_read": count} if count > facts_read(meta) else {}

    def marked(self, session: str, count: int) -> None:
        """The session's file now says `facts_read: count`."""
        with self._cond:
            if self._unmarked.get(session, (0, ""))[0] <= count:
                self._unmarked.pop(session, None)

    def forgotten(self, user: str, personas: list[str], sessions: list[str]) -> None:
        """What is held about `user` with `personas` was deleted: forget what this process
        remembers of it too (the sessions' read marks, and the last extractions' outcomes,
        whose details can quote a fact)."""
        with self._cond:
            for session in sessions:
                self._unmarked.pop(session, None)
                self._read_at.pop(session, None)
            for persona in personas:
                self.outcomes.pop(f"{user}/{persona}", None)

    def turn_taken(self, user: str, persona: str, session: str, before: int, after: int) -> bool:
        """A turn of `session` was answered; `before`/`after`: its person's messages not read by an
        extraction before and after the turn. Schedules one extraction whenever that count
        reaches a multiple of facts.every_n_turns. True when it did."""
        every = self.settings.every_n_turns
        if after <= 0 or after // every == before // every:
            return False
        self.schedule(user, persona, {session})
        return True

    # --- jobs ---------------------------------------------------------------------------

    @property
    def jobs_dir(self) -> Path:
        return self.workspace.vault.state_dir / JOBS

    def _job_path(self, key: str) -> Path:
        return self.jobs_dir / (key.replace("/", "--") + ".json")

    def schedule(self, user: str, persona: str, sessions: set[str]) -> None:
        """Queue an extraction for (user, persona) (one per key: a second joins the queued one)."""
        key = check_key("people", f"{user}/{persona}")
        with self._cond:  # held by a worker only to take a job or end one: no file is read or written under it
            if self._closed.is_set():
                return
            queued = key in self._pending
            self._pending.setdefault(key, set()).update(sessions)
            kept = set(self._pending[key])
            if not queued:
                self._queue.put(key)
        with self._jobs_lock:
            self._save_job(key, kept)
        self.start()

    def _save_job(self, key: str, sessions: set[str]) -> None:
        user, persona = key.split("/")
        data = {"user": user, "persona": persona, "sessions": sorted(sessions), "scheduled": iso(self.clock())}
        path = self._job_path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_suffix(".tmp")
            temp.write_text(json.dumps(data))
            os.replace(temp, path)
        except OSError as exc:  # the job still runs; only a restart before it would lose it
            log.warning("facts about %s: the scheduled extraction could not be kept in %s (%s); it runs now, "
                        "but a restart before it ends would not redo it", key, path, exc)

    def _drop_job(self, key: str) -> None:
        with suppress(OSError):
            self._job_path(key).unlink()

    def resume(self) -> int:
        """Queue the jobs a process scheduled and did not finish (their files); how many."""
        count = 0
        for path in sorted(self.jobs_dir.glob("*.json")) if self.jobs_dir.is_dir() else []:
            try:
                data = json.loads(path.read_text())
                self.schedule(str(data["user"]), str(data["persona"]), {str(s) for s in data.get("sessions", [])})
                count += 1
            except (OSError, ValueError, KeyError, TypeError, SentientError) as exc:
                log.warning("%s: a scheduled fact extraction that cannot be read (%s); delete the file", path, exc)
        if count:
            log.info("facts: %d extraction(s) scheduled before the last stop are run again", count)
        return count

    # --- workers ------------------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            if self._workers or self._closed.is_set():
                return
            for number in range(WORKERS):
                worker = threading.Thread(target=self._work, name=f"sentient-facts-{number + 1}", daemon=True)
                self._workers.append(worker)
                worker.start()

    def busy(self) -> int:
        """How many (user, persona) have an extraction queued or running."""
        with self._cond:
            return len(self._pending.keys() | self._running.keys())

    def wait(self, timeout: float = 30.0) -> bool:
        """Wait until no extraction is queued or running; True when none is."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._running, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop: queued jobs keep their files (run at the next start); an extraction still
        waiting for its model is left to end on its own and writes nothing; the sessions' read
        marks only this process knew are written."""
        self._closed.set()
        with self._cond:
            workers, self._workers = self._workers, []
        for _ in workers:
            self._queue.put(None)
        for worker in workers:
            worker.join(timeout)
        self.write_marks()

    def _work(self) -> None:
        while True:
            key = self._queue.get()
            if key is None or self._closed.is_set():
                return
            with self._cond:
                sessions = self._pending.pop(key, set())
                self._running[key] += 1
            try:
                outcome = self.extract(key, sessions)
            except Exception as exc:  # whatever it was, the set is as it was: the write is the last step
                log.exception("facts about %s: the extraction failed", key)
                outcome = self._outcome(key, "failed", f"{type(exc).__name__}: {exc}")
            finally:
                if outcome.status != "stopped":
                    with self._jobs_lock:  # a job scheduled again meanwhile keeps its file (saved after this)
                        with self._cond:
                            done = key not in self._pending
                        if done:
                            self._drop_job(key)
                with self._cond:
                    self._running[key] -= 1
                    if self._running[key] <= 0:
                        del self._running[key]
                    self._cond.notify_all()

    # --- one extraction -----------------------------------------------------------------

    def extract(self, key: str, sessions: set[str] | None = None) -> Outcome:
        """Run one extraction for `key` (user/persona) now, under its locks; its outcome."""
        with self.workspace.vault.lock("extraction", key):  # per key, across threads and processes
            return self._extract(key, sessions or set())

    def _extract(self, key: str, sessions: set[str]) -> Outcome:
        user, persona = key.split("/")
        try:
            current = read_set(self.workspace, user, persona)
        except SentientError as exc:
            return self._outcome(key, "failed", f"the fact file cannot be read: {exc.message}")
        turns, marks, untrusted = self._unread(user, persona, sessions)
        if not turns:
            return self._outcome(key, "nothing-new", "no turn left unread")
        text = prompt(self.prompts, current.visible, turns, self.settings)
        try:
            reply = self._ask(text, current.visible, turns)
            facts = validate(reply, current.visible, self.settings, self._flagged)
        except Refused as exc:
            return self._outcome(key, "refused", exc.message)
        except SentientError as exc:
            return self._outcome(key, "failed", exc.message)
        if self._closed.is_set():
            return self._outcome(key, "stopped", "Sentient stopped before the set was written; it is redone at start")
        if not changed(current, facts):
            self._mark_read(marks)
            return self._outcome(key, "unchanged", f"read {len(turns)} messages; the set stays as it is")
        try:
            self._write(current, facts, marks, untrusted)
        except (Conflict, AlreadyExists):
            self._mark_read(marks)  # the person's edit is the newer word on these turns
            return self._outcome(key, "conflict", "the fact file was edited while the extraction ran; the edit "
                                 "is kept and the extraction's result dropped")
        except SentientError as exc:
            return self._outcome(key, "failed", f"the fact file could not be written: {exc.message}")
        self._mark_read(marks)
        return self._outcome(key, "written", f"{len(facts)} facts, from {len(turns)} messages")

    def _ask(self, text: str, shown: list[ShownFact], turns: list[Turn]) -> str:
        """The extraction model's answer, or Refused when it takes longer than facts.timeout
        (the call is left to end on its own; its answer is dropped). It is asked for JSON of the
        reply's shape, with room for a whole set, at temperature 0 (it copies what it keeps; a
        provider that takes none of these drops them)."""
        params = {"response_format": reply_format(self.settings, len(shown)),
                  "max_tokens": reply_tokens(self.settings, shown, turns),
                  "temperature": 0, "drop_params": True}
        box: dict[str, Any] = {}
        done = threading.Event()

        def call() -> None:
            try:
                box["reply"] = self.llm.complete("extraction", [{"role": "user", "content": text}], None,
                                                 timeout=self.settings.timeout, params=params).text
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=call, name="sentient-facts-call", daemon=True).start()
        if not done.wait(self.settings.timeout):
            raise Refused(f"the extraction model did not answer within facts.timeout ({self.settings.timeout:g} s)")
        if "error" in box:
            raise box["error"]
        return str(box.get("reply") or "")

    def _flagged(self, text: str) -> tuple[str, ...]:
        return self.workspace.judge.judge(text).patterns

    def _write(self, current: FactSet, facts: list[Any], marks: dict[str, SessionRead], untrusted: bool) -> None:
        """One atomic write, conditional on the set being as it was read."""
        vault = self.workspace.vault
        key = f"{current.user}/{current.persona}"
        seen = current.turns_seen + sum(read.now - read.before for read in marks.values())
        meta: dict[str, Any] = {"user": current.user, "persona": current.persona, "turns_seen": seen}
        if untrusted:
            meta["untrusted"] = True
        if current.document is None:
            vault.create("people", key, meta, merged_body("", [], facts))
            return
        body = merged_body(current.document.body, current.visible, facts)
        vault.update("people", key, meta, body, expected_revision=current.revision)

    def _unread(self, user: str, persona: str,
                sessions: set[str]) -> tuple[list[Turn], dict[str, SessionRead], bool]:
        """The turns of the caller's sessions with the persona an extraction has not read (the
        newest within facts.read_chars), each session's (read before, person's messages now),
        and whether any of them read outside content."""
        vault = self.workspace.vault
        paths: dict[str, Path | None] = dict.fromkeys(sessions)
        with suppress(SentientError):  # not synced: a sync walks the whole vault, beside the turns
            paths.update((ref.key, vault.root / ref.path) for ref in sessions_of(self.workspace, user, sync=False)
                         if ref.persona == persona and ref.key not in paths)
        found: list[tuple[str, list[Turn]]] = []
        marks: dict[str, SessionRead] = {}
        untrusted = False
        for key, path in paths.items():
            try:
                path = path if path is not None and path.is_file() else vault.locate("session", key)
                state = _state(path) if path is not None else None
                if path is None or state is None or self._read_at.get(key) == state:
                    continue  # gone, or unchanged since an extraction read all of it
                document = vault.read("session", key, path)
            except (OSError, SentientError):
                continue
            meta = document.meta
            if meta.get("user") != user or meta.get("persona") != persona:
                continue
            read = self.read_count(key, meta)
            said = [m for m in transcript.parse(document.body).messages
                    if m.role in ("user", "assistant") and m.text.strip()]
            persons = [n for n, m in enumerate(said) if m.role == "user"]
            if len(persons) <= read:
                self._remember_read(key, state)
                continue
            start = persons[read]
            turns = [Turn(m.role, m.text) for m in said[start:]]
            found.append((str(meta.get("created") or ""), turns))
            marks[key] = SessionRead(read, len(persons), state, _created(meta))
            untrusted = untrusted or meta.get("untrusted") is True
        ordered = [turn for _, turns in sorted(found, key=lambda item: item[0]) for turn in turns]
        kept: list[Turn] = []
        total = 0
        for turn in reversed(ordered):
            total += len(turn.text)
            if total > self._read_limit() and kept:
                break
            kept.append(turn)
        return list(reversed(kept)), marks, untrusted

    def _read_limit(self) -> int:
        """Characters of turns one extraction reads: facts.read_chars, and with the embedded model
        answering it at most a quarter of that model's window (local.context), which must also
        hold the instructions, the current set and the reply: a read that never fits would fail
        every extraction of the caller from then on."""
        if is_local(self.llm.model_name("extraction")):
            return min(self.settings.read_chars, self.llm.settings.local.context * CHARS_PER_TOKEN // 4)
        return self.settings.read_chars

    def _mark_read(self, marks: dict[str, SessionRead]) -> None:
        """The sessions' turns are read: noted here (no session file is written beside the turns;
        each session's next turn writes its mark, close() the rest), and a session read whole
        in the state it had is not read again until it changes."""
        for key, read in marks.items():
            with self._cond:
                unmarked, created = self._unmarked.get(key, (0, ""))
                if read.now > unmarked or created != read.created:
                    self._unmarked[key] = (read.now, read.created)
            self._remember_read(key, read.state)

    def write_marks(self) -> None:
        """Write each session's `facts_read` that only this process knows yet (at its stop)."""
        with self._cond:
            unmarked, self._unmarked = self._unmarked, {}
        for key, (count, created) in unmarked.items():
            def mark(document: Any, count: int = count, created: str = created) -> Any:
                if _created(document.meta) != created:  # another session under the same key now
                    return document
                return document.replace({"facts_read": max(count, facts_read(document.meta))})

            try:
                self.workspace.vault.update("session", key, transform=mark, touch=False)
            except NotFound:
                continue  # forgotten meanwhile
            except SentientError as exc:
                log.warning("session %s: its turns read by the fact extraction were not marked read (%s); "
                            "they will be read again", key, exc.message)

    def _remember_read(self, session: str, state: tuple[int, int, int]) -> None:
        """The session's file, in this state, holds no turn an extraction has not read."""
        with self._cond:
            if len(self._read_at) > READ_AT:
                self._read_at.clear()
            self._read_at[session] = state

    def _outcome(self, key: str, status: str, detail: str) -> Outcome:
        outcome = Outcome(key, status, detail, iso(self.clock()))
        self.outcomes[key] = outcome
        level = logging.INFO if status in ("written", "unchanged", "nothing-new") else logging.WARNING
        kept = "" if status == "written" else " (the fact file is as it was)"
        log.log(level, "facts about %s: %s: %s%s", key, status, detail, kept)
        return outcome

