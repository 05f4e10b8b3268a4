"""Sync with the vault's remote, and the conflicts a sync keeps for a person to resolve
(docs/git.md): `sentient sync`, `sentient resolve ID --keep mine|theirs|both`, and what
`doctor` and `/api/health` report."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from sentient.errors import NotFound, SentientError
from sentient.memory import free_id, parse_ref
from sentient.vault.committer import host_name
from sentient.vault.document import Document, parse
from sentient.vault.git import NETWORK_TIMEOUT
from sentient.vault.kinds import classify, kind
from sentient.vault.sync import ConflictCopy, Synced, conflicts, sync
from sentient.workspace import Workspace

log = logging.getLogger(__name__)
Keep = Literal["mine", "theirs", "both"]


def sync_vault(workspace: Workspace) -> Synced:
    """Commit what the app has pending, then fetch, merge and push git.remote; the index is
    brought up to date with what the merge changed."""
    git = workspace.git
    if git is None:
        raise SentientError(f"cannot sync: {workspace.repo.why_not}")
    workspace.flush_commits()
    done = sync(git, workspace.vault.state_dir, workspace.settings.git.remote, host_name())
    workspace.index.sync()
    return done


def open_conflicts(workspace: Workspace) -> list[ConflictCopy]:
    """The conflict copies in the vault now (none where it is no repository)."""
    git = workspace.git
    return conflicts(git) if git is not None else []


def ref_of(copy: ConflictCopy) -> str:
    """How `sentient resolve` names the file a copy is of: a memory id, else kind:key."""
    found = classify(PurePosixPath(copy.original))
    if found is None:
        return copy.original
    return found[1] if found[0] == "memory" else f"{found[0]}:{found[1]}"


def as_dict(copy: ConflictCopy) -> dict[str, str]:
    return {**copy.as_dict(), "ref": ref_of(copy)}


@dataclass(frozen=True)
class Resolved:
    kept: str  # what the entry is now: mine, theirs, or both (theirs as `new_id`)
    removed: list[str]  # the copies removed
    new_id: str | None = None


def _copies(workspace: Workspace, kind_name: str, key: str) -> list[ConflictCopy]:
    found = [copy for copy in open_conflicts(workspace) if classify(PurePosixPath(copy.original)) == (kind_name, key)]
    if not found:
        raise NotFound(f"{kind_name} '{key}' has no conflict copy beside it; `sentient doctor` lists the conflicts")
    return sorted(found, key=lambda copy: copy.time)


def resolve(workspace: Workspace, ref: str, keep: Keep) -> Resolved:
    """Settle a conflict a sync kept: `mine` keeps the file as it is, `theirs` puts the other
    side (the newest copy) in its place, `both` keeps the other side as a new entry. The copies
    are removed; each change is committed like any other."""
    kind_name, key = parse_ref(workspace, ref)
    copies = _copies(workspace, kind_name, key)
    root = workspace.vault.root
    theirs = _parsed(workspace, kind_name, key, root / copies[-1].copy)
    why = f"resolve conflict: keep {keep} ({copies[-1].host})"
    new_id = None
    if keep == "theirs":
        path = workspace.vault.locate(kind_name, key)
        if path is None:
            workspace.vault.create(kind_name, key, dict(theirs.meta), theirs.body, why=why, source="user")
        else:
            current = workspace.vault.read(kind_name, key, path)
            meta = {name: theirs.meta.get(name) for name in {*current.meta, *theirs.meta}}
            workspace.vault.update(kind_name, key, meta, theirs.body, expected_revision=current.revision, why=why,
                                   source="user")
    elif keep == "both":
        new_id = free_id(workspace, theirs.title) if kind_name == "memory" else f"{key}-{copies[-1].host}"
        meta = {name: value for name, value in theirs.meta.items() if name != "id"}
        workspace.vault.create(kind_name, new_id, meta, theirs.body, why=why, source="user")
    for copy in copies:
        workspace.vault.discard_copy(root / copy.copy, why=why, source="user")
    workspace.index.sync()
    return Resolved(keep, [copy.copy for copy in copies], new_id)


def _parsed(workspace: Workspace, kind_name: str, key: str, path: Path) -> Document:
    try:
        text = path.read_text(encoding="utf-8")
        return parse(text, kind=kind_name, key=key, path=path, fields=kind(kind_name).fields)
    except (OSError, UnicodeDecodeError) as exc:
        raise SentientError(f"{path}: the other side cannot be read ({exc}); compare and resolve it by hand") from None


class PeriodicSync:
    """`serve`'s sync every git.sync_minutes (a thread; a failure is logged and tried again next time)."""

    def __init__(self, workspace: Workspace, minutes: float) -> None:
        self.workspace = workspace
        self.interval = minutes * 60.0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sentient-sync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                done = sync_vault(self.workspace)
            except SentientError as exc:
                self.last_error = exc.message
                log.warning("the vault's sync failed (tried again in %g minutes): %s", self.interval / 60, exc.message)
                continue
            self.last_error = None
            if done.conflicts:
                log.warning("sync kept %d conflicting edit(s) both ways; see `sentient doctor`", len(done.conflicts))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=NETWORK_TIMEOUT)


def git_state(workspace: Workspace) -> str:
    """One line on what happens to the app's changes in git (doctor and /api/health say it)."""
    settings = workspace.settings.git
    if not settings.autocommit:
        return "autocommit is off (git.autocommit: false): the app's changes stay uncommitted"
    if workspace.git is None:
        return f"not committing: {workspace.repo.why_not}"
    committer = workspace.committer
    if committer is not None and committer.last_error:
        return f"committing, but the last commit failed: {committer.last_error}"
    return f"every change the app makes is committed, as {settings.author}"
