"""What is held about a caller, for the caller and the person running Sentient to see and erase:
their fact sets (one per persona) and their sessions. `GET/DELETE /api/people/{user}` and
`sentient people show/forget` are this module.

A caller's sessions are found through the index (synced first: it is then as current as the
files), by the `user` in each session's frontmatter.
"""

from __future__ import annotations

import os
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from typing import Any

from sentient.errors import BadFile, IndexUnavailable, NotFound
from sentient.facts.sets import read_set
from sentient.vault.document import check_id
from sentient.workspace import Workspace


@dataclass(frozen=True)
class SessionRef:
    key: str
    path: str  # relative to the vault
    persona: str | None
    title: str

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.key, "persona": self.persona, "path": self.path, "title": self.title}


def sessions_of(workspace: Workspace, user: str, *, sync: bool = True) -> list[SessionRef]:
    """Every stored session of the caller `user`, oldest first. `sync=False`: as the index has
    them now (kept current by the watcher, or by the turn's own sync without one), without the
    walk of the whole vault a sync takes."""
    index = workspace.index
    try:
        if sync:
            index.sync()
        rows = index.sessions_of(user)
    except IndexUnavailable:  # the files are the truth: read them all
        return [SessionRef(d.key, d.path.relative_to(workspace.vault.root).as_posix(),
                           d.meta.get("persona") if isinstance(d.meta.get("persona"), str) else None, d.title)
                for d in workspace.vault.documents("session") if d.meta.get("user") == user]
    return [SessionRef(key, path, persona, title or key) for key, path, persona, title in rows]


def personas_with_facts(workspace: Workspace, user: str) -> list[str]:
    """The personas that have a fact file about `user` (people/<user>/<persona>.md)."""
    return sorted(found.key.split("/")[1] for found in workspace.vault.walk({"people"})
                  if found.key.split("/")[0] == user)


def callers(workspace: Workspace) -> list[dict[str, Any]]:
    """Every caller anything is held about (a fact file, or a session naming them): their id,
    the personas that have a fact file about them, and how many sessions of theirs there are."""
    held: dict[str, list[str]] = {}
    for found in workspace.vault.walk({"people"}):
        user, persona = found.key.split("/")
        held.setdefault(user, []).append(persona)
    sessions: dict[str, int] = {}
    try:
        workspace.index.sync()
        named = workspace.index.session_users()
    except IndexUnavailable:  # the files are the truth: read them all
        named = [str(d.meta["user"]) for d in workspace.vault.documents("session")
                 if isinstance(d.meta.get("user"), str)]
    for user in named:
        sessions[user] = sessions.get(user, 0) + 1
    return [{"user": user, "personas": sorted(held.get(user, [])), "sessions": sessions.get(user, 0)}
            for user in sorted(held.keys() | sessions.keys())]


def caller(workspace: Workspace, user: str) -> dict[str, Any]:
    """Everything held about `user`: each persona's facts (withheld ones marked, with the
    patterns they matched), fact files that cannot be read, and their sessions' ids.
    NotFound when nothing is held."""
    check_id(user, "user")
    sets: list[dict[str, Any]] = []
    for persona in personas_with_facts(workspace, user):
        try:
            sets.append(read_set(workspace, user, persona).as_dict())
        except BadFile as exc:
            sets.append({"user": user, "persona": persona, "path": f"people/{user}/{persona}.md",
                         "problem": exc.message, "facts": []})
    sessions = sessions_of(workspace, user)
    if not sets and not sessions:
        raise NotFound(f"nothing is held about the caller '{user}': no people/{user}/ facts and no session of theirs")
    return {"user": user, "facts": sets, "sessions": [s.as_dict() for s in sessions]}


def forget(workspace: Workspace, user: str, persona: str | None = None) -> dict[str, Any]:
    """Delete what is held about `user` (with `persona`: only what is about that persona): the
    fact files and the sessions. An extraction under way for the caller ends first (its lock is
    taken), so nothing it writes outlives this. NotFound when nothing is held."""
    check_id(user, "user")
    if persona is not None:
        check_id(persona, "character_id")
    vault = workspace.vault
    sessions = [s for s in sessions_of(workspace, user) if persona is None or s.persona == persona]
    personas = [p for p in personas_with_facts(workspace, user) if persona is None or p == persona]
    if not sessions and not personas:
        about = f" with the persona '{persona}'" if persona else ""
        raise NotFound(f"nothing is held about the caller '{user}'{about}: no fact file and no session")
    keys = sorted({f"{user}/{p}" for p in personas} | {f"{user}/{s.persona}" for s in sessions if s.persona})
    removed: list[str] = []
    with ExitStack() as locks:
        for key in keys:
            locks.enter_context(vault.lock("extraction", key))
        for found in [f for f in vault.walk({"people"}) if f.key.split("/")[0] == user]:
            if persona is None or found.key.split("/")[1] == persona:
                with suppress(NotFound):
                    removed.append(vault.delete("people", found.key).relative_to(vault.root).as_posix())
        for session in sessions:
            with suppress(NotFound):
                removed.append(vault.delete("session", session.key).relative_to(vault.root).as_posix())
    with suppress(OSError):
        os.rmdir(vault.root / "people" / user)  # only when empty
    return {"user": user, "persona": persona, "removed": removed, "sessions": [s.key for s in sessions],
            "personas": sorted({*personas, *(s.persona for s in sessions if s.persona)})}
