"""The background committer: every change the app makes to the vault becomes part of a commit
of the vault's own git repository, off the request path (a chat never waits for git).

Writes are recorded as they happen (`record`, a dictionary update under a lock); a thread waits
until no write came for `delay` seconds (at most `5 * delay` after the first of a burst) and
commits the burst as one commit with a readable message, the app as author. Only the paths the
app wrote are committed (`git add` and `git commit --only` with those paths): a person's hand
edits, staged or not, stay as they are in the working tree, unless `commit_manual_edits`.
`flush` commits what is pending now (a CLI command before it exits, `sentient sync` before it
merges); `close` flushes and stops the thread.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sentient.vault.changes import Change, message
from sentient.vault.git import Git, GitError

log = logging.getLogger(__name__)

MAX_WAIT_FACTOR = 5  # a burst that goes on is committed this many delays after its first write
RETRY_SECONDS = 30.0  # after a failed commit, the next try (unless a new write comes first)


def host_name() -> str:
    """This machine's name as a commit trailer and a conflict copy carry it: a-z, 0-9 and '-'."""
    raw = socket.gethostname().split(".")[0].lower()
    cleaned = "".join(ch if ch.isalnum() and ch.isascii() else "-" for ch in raw).strip("-")
    return cleaned[:40] or "host"


def merge_change(before: Change | None, after: Change) -> Change:
    """One file's changes in a burst as one: made and then changed is made; otherwise the last."""
    if before is not None and before.action == "create" and after.action == "update":
        return before
    return after


class Committer:
    """Commits the app's writes to the vault's repository in the background."""

    def __init__(self, find_git: Callable[[], Git | None], state_dir: Path, *, delay: float = 2.0,
                 manual_edits: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self._find_git = find_git  # asked on the committer's thread, not in the write that started it
        self.off = False  # no repository to commit to: writes are no longer recorded
        self.state_dir = state_dir
        self.delay = delay
        self.manual_edits = manual_edits
        self.clock = clock
        self.host = host_name()
        self.last_error: str | None = None
        self.commits = 0  # made by this process
        self._pending: dict[str, Change] = {}
        self._first = 0.0
        self._last = 0.0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._committing = threading.Lock()

    def record(self, change: Change) -> None:
        """A write just made: committed with the rest of its burst. Never blocks on git."""
        if self.off:
            return
        with self._cond:
            now = self.clock()
            if not self._pending:
                self._first = now
            self._last = now
            self._pending[change.rel] = merge_change(self._pending.get(change.rel), change)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, name="sentient-committer", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def pending(self) -> list[Change]:
        with self._cond:
            return list(self._pending.values())

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed and not self.off:
                    self._cond.wait()
                if self._closed or self.off:
                    return
                due = min(self._last + self.delay, self._first + self.delay * MAX_WAIT_FACTOR)
                wait = due - self.clock()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
            self.flush()

    def flush(self) -> bool:
        """Commit what is pending now; True when a commit was made. A failure is logged and kept
        in `last_error` (doctor shows it), and the changes stay pending for the next try (in
        RETRY_SECONDS, or with the next write)."""
        with self._committing:
            with self._cond:
                changes = list(self._pending.values())
                self._pending.clear()
            if not changes:
                return False
            git = self._find_git()
            if git is None:
                self.off = True
                with self._cond:
                    self._pending.clear()
                    self._cond.notify_all()
                return False
            try:
                made = self._commit(git, changes)
            except GitError as exc:
                self.last_error = exc.message
                log.warning("the vault's changes were not committed: %s", exc.message)
                with self._cond:
                    for change in changes:  # back in front of anything written since
                        self._pending[change.rel] = merge_change(change, self._pending.get(change.rel, change))
                    self._first = self._last = self.clock() + RETRY_SECONDS
                return False
            self.last_error = None
            self.commits += made
            return bool(made)

    def _commit(self, git: Git, changes: list[Change]) -> int:
        with git.lock(self.state_dir):
            if git.merging():
                raise GitError(f"{git.root}: a merge is under way in the vault's repository, so the app's changes "
                               "wait until it is finished (`git merge --continue` or `--abort`)")
            rels = [change.rel for change in changes]
            tracked = set(git.run("ls-files", "-z", "--", *rels).out.split("\0")) - {""}
            paths = [rel for rel in rels if rel in tracked or os.path.lexists(git.root / rel)]
            if self.manual_edits:
                git.run("add", "-A", "--", ".")
                staged = set(git.run("diff", "--cached", "--name-only", "-z").out.split("\0")) - {""}
                if not staged:
                    return 0
                hand = sorted(staged - set(paths))
                extra = [f"changed by hand: {rel}" for rel in hand]
                git.run("commit", "-q", "--no-verify", "-F", "-", stdin=message(changes, host=self.host, extra=extra))
                return 1
            if not paths:
                return 0
            git.run("add", "-A", "--", *paths)
            if not git.run("status", "--porcelain", "-z", "--", *paths).out:
                return 0  # the files are as last committed (a write that changed nothing)
            made = [change for change in changes if change.rel in paths]
            git.run("commit", "-q", "--no-verify", "--only", "-F", "-", "--", *paths,
                    stdin=message(made, host=self.host))
            return 1

    def close(self) -> None:
        """Commit what is pending and stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=60)
        self.flush()
