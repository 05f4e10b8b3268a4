"""Watcher: file events in the vault -> the index, while the server runs.

A watchdog observer watches the vault folder. Document files created, edited, deleted or
renamed by any editor (an editor that saves through a temp file and a rename included) are
gathered into a pending set and applied by one worker thread once the events pause for
`debounce` seconds, or at most `max_delay` after the first one, so a steady stream of writes
still lands. Applying goes through the index: the file is read again, its threat flag judged
again (the judge caches by revision) and its revision recomputed. A folder created, moved or
deleted makes one incremental `Index.sync()` instead, and so does a batch of hundreds of files.

Ignored: `.sentient/` (the index itself), `.git/`, hidden names, our own temp files and
anything that is not a document. The index never writes vault files, so applying an event
cannot cause another.

If file events stop (the observer thread died, or it could not start: the inotify limits),
the worker logs a warning naming the vault and the reason and syncs every
`fallback_interval` seconds instead: `mode` says "polling" and `workspace.watching` goes back
to False, so chat turns sync before they read again.

While events flow and what they said is applied, the index holds the watcher's lease
(index/watched.py), so that a command of this vault (`sentient search`) needs no sync first;
it is dropped when events stop, a batch fails, or the watcher stops.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Literal

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
    FileSystemMovedEvent,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

from sentient.vault.document import is_temp_name
from sentient.vault.kinds import KINDS, classify
from sentient.vault.store import SKIPPED_DIRS
from sentient.workspace import Workspace

log = logging.getLogger(__name__)

Mode = Literal["events", "polling", "stopped"]
THREAD_NAME = "sentient-watcher"
HEALTH_CHECK = 0.5  # seconds between checks that the observer still runs
SYNC_ABOVE = 200  # a batch of more files than this (a git checkout, a copied folder) is one sync: batched, faster
# What the observer reports; opens, reads (our own included), attributes and folder mtimes are left out
EVENTS: list[type[FileSystemEvent]] = [FileCreatedEvent, FileModifiedEvent, FileClosedEvent, FileDeletedEvent,
                                       FileMovedEvent, DirCreatedEvent, DirDeletedEvent, DirMovedEvent]
_TOPS = frozenset(spec.folder.split("/")[0] for spec in KINDS.values())


@dataclass(frozen=True)
class WatcherStatus:
    """What /api/health shows about the watcher."""

    mode: Mode
    reason: str | None  # why file events are not used, in "polling" mode
    batches: int  # batches of file events applied
    syncs: int  # full syncs run (at start, for folder events, when polling or reconciling)
    errors: int  # batches or syncs that failed (logged; retried by a sync)


class Watcher:
    """Keeps `workspace.index` current with the vault's files. Use as a context manager, or
    call start() and stop().

    `on_change(paths)` is called on the worker thread after each applied batch, with the
    paths that had events (a file, or a folder for a full sync); after a periodic sync that
    changed rows, with an empty set. `observer` makes the watchdog observer (tests and
    platforms may pass another); `reconcile_interval` runs a sync now and then even while
    events flow, for events the kernel dropped (None: never). `hold(path)` True: the file's
    events wait, unapplied, until `let_go(path)` (serve holds the file of a task run while the run
    rewrites it at each step, and lets it go when the run has ended: one update, not one a step).
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        debounce: float = 0.1,
        max_delay: float = 0.5,
        fallback_interval: float = 5.0,
        reconcile_interval: float | None = 300.0,
        on_change: Callable[[set[Path]], None] | None = None,
        observer: Callable[[], BaseObserver] = Observer,
        hold: Callable[[Path], bool] | None = None,
    ) -> None:
        self.workspace = workspace
        self.root = workspace.vault.root
        self.debounce = debounce
        self.max_delay = max(max_delay, debounce)
        self.fallback_interval = fallback_interval
        self.reconcile_interval = reconcile_interval
        self.on_change = on_change
        self.hold = hold
        self._make_observer = observer
        self._mode: Mode = "stopped"
        self._reason: str | None = None
        self._counts = {"batches": 0, "syncs": 0, "errors": 0}
        self._state = threading.Lock()  # guards starting, stopping and the thread handles
        self._observer: BaseObserver | None = None
        self._handler: _Handler | None = None
        self._tops: dict[str, tuple[ObservedWatch, tuple[int, int]]] = {}  # folder -> (its watch, (dev, inode))
        self._worker: threading.Thread | None = None
        self._wake = threading.Condition()  # guards everything below
        self._halt = threading.Event()  # set to end the current run's worker
        self._pending: set[Path] = set()
        self._full = False  # a folder event: sync instead of updating files one by one
        self._first = 0.0  # monotonic time of the first pending event
        self._last = 0.0  # ... and of the last one
        self._next_sync = 0.0  # monotonic time of the next periodic sync

    # --- state -----------------------------------------------------------------------

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def reason(self) -> str | None:
        return self._reason

    def status(self) -> WatcherStatus:
        return WatcherStatus(self._mode, self._reason, self._counts["batches"], self._counts["syncs"],
                             self._counts["errors"])

    # --- starting and stopping ---------------------------------------------------------

    def start(self) -> None:
        """Watch the vault and sync once (changes made while nobody watched). The observer is
        started first, so nothing edited during that sync is missed. A no-op when running."""
        with self._state:
            if self._worker is not None:
                return
            halt = threading.Event()
            with self._wake:
                self._halt = halt
                self._pending, self._full = set(), False
            self._set_mode("events", None)
            self._observer = self._start_observer()  # falls back to "polling" when it cannot run
            self._plan_sync()
            self._sync("start")
            self._worker = threading.Thread(target=self._run, args=(halt,), name=THREAD_NAME, daemon=True)
            self._worker.start()

    def stop(self) -> None:
        """Stop watching: the observer and the worker are stopped and joined. Idempotent."""
        with self._state:
            worker, observer = self._worker, self._observer
            self._worker = self._observer = None
            with self._wake:
                self._halt.set()
                self._wake.notify_all()
        _stop_observer(observer)
        if worker is not None and worker is not threading.current_thread():
            worker.join()
        self._set_mode("stopped", None)
        self._release()

    def __enter__(self) -> Watcher:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _start_observer(self) -> BaseObserver | None:
        """A running observer of the vault, or None (logged, mode "polling") when it cannot run."""
        observer: BaseObserver | None = None
        try:
            observer = self._make_observer()
            observer.name = f"{THREAD_NAME}-events"
            self._handler = _Handler(self)
            # The vault's own level alone, then each document folder whole: never .sentient/, where
            # every index write and lock would be an event to read and throw away.
            observer.schedule(self._handler, str(self.root), recursive=False, event_filter=EVENTS)
            self._tops = {}
            for top in sorted(_TOPS):
                self._watch_top(observer, top)
            observer.start()
        except Exception as exc:  # OSError from inotify limits mostly; any failure falls back the same way
            _stop_observer(observer)
            self._fall_back(_why(exc))
            return None
        return observer

    def _watch_top(self, observer: BaseObserver, top: str) -> None:
        """Watch one document folder (memory, sessions, ...) as it is now, and everything under
        it: a watch of a folder that was removed or replaced since is dropped first."""
        folder = self.root / top
        try:
            stat = folder.stat()
            now: tuple[int, int] | None = (stat.st_dev, stat.st_ino) if folder.is_dir() else None
        except OSError:
            now = None
        known = self._tops.get(top)
        if known is not None and known[1] == now:
            return
        if known is not None:
            del self._tops[top]
            with contextlib.suppress(KeyError, OSError):  # watchdog may have dropped it already
                observer.unschedule(known[0])
        if now is not None and self._handler is not None:
            watch = observer.schedule(self._handler, str(folder), recursive=True, event_filter=EVENTS)
            self._tops[top] = (watch, now)

    def _follow_tops(self, event: FileSystemEvent) -> None:
        """A document folder made, removed or replaced at the vault's level: watch what is there now.
        (Its files written before the watch began are picked up by the sync such an event makes.)"""
        observer = self._observer
        if observer is None or not event.is_directory:
            return
        for raw in [event.src_path, event.dest_path] if isinstance(event, FileSystemMovedEvent) else [event.src_path]:
            path = Path(os.fsdecode(raw)) if raw else None
            if path is not None and path.parent == self.root and path.name in _TOPS:
                with contextlib.suppress(OSError):
                    self._watch_top(observer, path.name)

    def _set_mode(self, mode: Mode, reason: str | None) -> None:
        self._mode, self._reason = mode, reason
        self.workspace.watching = mode == "events"  # otherwise chat turns sync before reading

    def _fall_back(self, reason: str) -> None:
        self._release()
        log.warning("watcher: file events for the vault %s stopped (%s); syncing the index every %g s instead",
                    self.root, reason, self.fallback_interval)
        self._set_mode("polling", reason)
        with self._wake:
            self._pending.clear()
            self._full = False

    # --- events (observer thread) ------------------------------------------------------

    def _note(self, event: FileSystemEvent) -> None:
        """Take one watchdog event: keep the paths that matter for the index as pending."""
        if event.is_directory:
            self._follow_tops(event)
        raws = [event.src_path, event.dest_path] if isinstance(event, FileSystemMovedEvent) else [event.src_path]
        relevant = [path for path in (self._relevant(raw, event.is_directory) for raw in raws) if path is not None]
        if not event.is_directory:
            relevant = [path for path in relevant if not self._holds(path)]
        if relevant:
            self._queue(relevant, event.is_directory)

    def let_go(self, path: Path) -> None:
        """A held file may be indexed now: applied with the next batch (whether or not it had events)."""
        self._queue([path], False)

    def _holds(self, path: Path) -> bool:
        if self.hold is None:
            return False
        try:
            return self.hold(path)
        except Exception:  # a hold that fails holds nothing: the file is indexed as any other
            log.exception("watcher: hold failed for %s", path)
            return False

    def _queue(self, relevant: list[Path], folder: bool) -> None:
        now = time.monotonic()
        with self._wake:
            if self._mode != "events" or self._halt.is_set():
                return
            if not self._pending and not self._full:
                self._first = now
                self._wake.notify()
            self._last = now
            self._pending.update(relevant)
            self._full = self._full or folder

    def _relevant(self, raw: bytes | str, is_directory: bool) -> Path | None:
        """The path if its change can change the index, else None."""
        if not raw:
            return None
        path = Path(os.fsdecode(raw))
        try:
            rel = PurePosixPath(path.relative_to(self.root).as_posix())
        except ValueError:
            return None
        if any(part in SKIPPED_DIRS or is_temp_name(part) for part in rel.parts):
            return None
        if is_directory:  # the vault itself, or a folder that can hold documents
            return path if not rel.parts or rel.parts[0] in _TOPS else None
        if path.suffix != ".md" or classify(rel) is None:  # rel is lexical: watchdog's paths are under root
            return None
        return path

    # --- the worker --------------------------------------------------------------------

    def _run(self, halt: threading.Event) -> None:
        while True:
            with self._wake:
                if halt.is_set():
                    return
                self._wake.wait(self._timeout(time.monotonic()))
                if halt.is_set():
                    return
                batch = self._take(time.monotonic())
            if batch is not None:
                self._apply(*batch)
            if self._mode == "events":
                self._check_observer()
            if time.monotonic() >= self._next_sync:
                self._sync("periodic")
                self._plan_sync()

    def _timeout(self, now: float) -> float:
        """Seconds to wait for: the pending batch's time, the next health check, the next sync."""
        wait = self._next_sync - now
        if self._mode == "events":
            wait = min(wait, HEALTH_CHECK)
            if self._pending or self._full:
                wait = min(wait, self._due() - now)
        return max(wait, 0.0)

    def _due(self) -> float:
        return min(self._last + self.debounce, self._first + self.max_delay)

    def _take(self, now: float) -> tuple[set[Path], bool] | None:
        """The pending batch, if its time has come (called holding self._wake)."""
        if not (self._pending or self._full) or now < self._due():
            return None
        batch = (self._pending, self._full)
        self._pending, self._full = set(), False
        return batch

    def _apply(self, paths: set[Path], full: bool) -> None:
        if full or len(paths) > SYNC_ABOVE:
            self._sync("folder" if full else "many files", paths)
            return
        index = self.workspace.index
        gone = {path for path in paths if not path.exists()}
        try:  # removals first: a renamed entry is never seen under both ids
            for path in sorted(gone):
                index.remove(path)
            for path in sorted(paths - gone):
                index.update(path)
        except Exception as exc:  # the index is locked or broken: say so, and let a sync retry
            self._failed(exc, f"{len(paths)} changed file(s)")
            return
        self._counts["batches"] += 1
        self._lease()
        self._changed(paths)

    def _sync(self, why: str, paths: set[Path] | None = None) -> None:
        try:
            report = self.workspace.index.sync()
        except Exception as exc:
            self._failed(exc, f"a sync ({why})")
            return
        self._counts["syncs"] += 1
        self._lease()
        if paths is not None:
            self._changed(paths)
        elif report.added or report.updated or report.removed:
            self._changed(set())

    def _failed(self, exc: Exception, what: str) -> None:
        self._counts["errors"] += 1
        self._release()
        log.warning("watcher: could not index %s in %s (%s); retrying with a sync in %g s",
                    what, self.root, exc, self.fallback_interval)
        with self._wake:
            self._next_sync = min(self._next_sync, time.monotonic() + self.fallback_interval)

    def _lease(self) -> None:
        """While file events flow and what they said is applied, say so in the index (its lease,
        index/watched.py): a command of this vault then searches without a sync first."""
        if self._mode != "events":
            return
        try:
            self.workspace.index.lease()
        except Exception as exc:  # commands then sync first, as without a watcher
            log.warning("watcher: could not say in the index of %s that it is watched (%s)", self.root, exc)

    def _release(self) -> None:
        with contextlib.suppress(Exception):
            self.workspace.index.release()

    def _changed(self, paths: set[Path]) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(paths)
        except Exception:
            log.exception("watcher: on_change failed for %d path(s)", len(paths))

    def _plan_sync(self) -> None:
        """Set the next periodic sync: soon when polling, now and then (or never) with events."""
        interval = self.fallback_interval if self._mode != "events" else self.reconcile_interval
        with self._wake:
            self._next_sync = time.monotonic() + (interval if interval is not None else float("inf"))

    def _check_observer(self) -> None:
        """Fall back to polling when the observer or one of its threads has died."""
        with self._state:
            observer = self._observer
            if observer is None:
                return
            reason = _dead(observer)
            if reason is None:
                return
            self._observer = None
        _stop_observer(observer)
        self._fall_back(reason)
        self._sync("events lost")  # whatever happened since the observer died
        self._plan_sync()


class _Handler(FileSystemEventHandler):
    """Hands events to the watcher. Never raises: an exception would end the observer thread."""

    def __init__(self, watcher: Watcher) -> None:
        super().__init__()
        self._watcher = watcher

    def dispatch(self, event: FileSystemEvent) -> None:
        try:
            self._watcher._note(event)
        except Exception:
            log.exception("watcher: could not take the event %r", event)


def _dead(observer: BaseObserver) -> str | None:
    """Why the observer delivers no more events, or None while it runs."""
    if not observer.is_alive():
        return "the observer thread stopped"
    emitters = list(observer.emitters)
    if not emitters or not all(emitter.is_alive() for emitter in emitters):
        return "the watch on the vault folder ended"
    reader = getattr(observer, "_inotify_fd", None)  # the inotify reader thread (Linux); not public API
    if isinstance(reader, threading.Thread) and not reader.is_alive():
        return "the inotify reader thread stopped"
    return None


def _stop_observer(observer: BaseObserver | None) -> None:
    if observer is None:
        return
    try:
        observer.stop()
        if observer.is_alive() and observer is not threading.current_thread():
            observer.join()
    except Exception as exc:  # a half-started or already dead observer: nothing more to release
        log.debug("watcher: stopping the observer: %s", exc)


def _why(exc: Exception) -> str:
    """An error starting the observer, with the fix for the inotify limits."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"{text}; raise the limit with `sysctl fs.inotify.max_user_watches=524288`"
    if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
        return f"{text}; raise the limit with `sysctl fs.inotify.max_user_instances=1024`"
    return text
