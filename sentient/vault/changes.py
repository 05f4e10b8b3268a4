"""What the app changed in the vault, and why: one Change per write, and the commit message a
burst of them makes (docs/git.md).

`memory: remember anika-teacher (session 2026-11/k3f9a2)`; `task weekly-digest: notepad after
run r-0007`; several changes are a subject that counts them and one line each in the body. The
provenance of each (the session, run or person that caused it) is a trailer,
`Sentient-Source: session 2026-11/k3f9a2`, which `sentient memory history` reads back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SOURCE_TRAILER = "Sentient-Source"
HOST_TRAILER = "Sentient-Host"
_ENTRY_KINDS = ("memory", "note", "plan", "skill", "persona")


@dataclass(frozen=True)
class Change:
    """One write of the app: the file (relative to the vault, '/'-separated), what it is, what
    was done (create, update, delete) and why (a verb such as remember, allow, revert to
    abc1234; None: the action's own), and where it came from (`session 2026-11/k3f9a2`,
    `task weekly-digest/r-0007`, `user`; None when unknown)."""

    rel: str
    kind: str
    key: str
    action: str
    why: str | None = None
    source: str | None = None

    @property
    def line(self) -> str:
        """The change as one line of a commit message."""
        origin = f" ({self.source})" if self.source else ""
        if self.kind in _ENTRY_KINDS:
            return f"{self.kind}: {self.verb} {self.key}{origin}"
        if self.kind == "notepad":
            run = _run_of(self.source)
            if run is not None and self.action != "delete":
                return f"task {self.key}: notepad after run {run}"
            return f"task {self.key}: notepad {self.verb}{origin}"
        if self.kind == "run":
            task, _, run = self.key.partition("/")
            return f"task {task}: run {run} {self.verb}"
        if self.kind == "session":
            where = (self.source or "").removeprefix("session ") or self.key
            return f"session {where}: {self.why or ('start' if self.action == 'create' else 'messages')}"
        if self.kind == "people":
            return f"facts {self.key}: {self.why or ('reconciled' if self.action != 'delete' else 'forgotten')}"
        return f"{self.kind} {self.key}: {self.verb}{origin}"

    @property
    def verb(self) -> str:
        if self.why:
            return self.why
        if self.action == "delete":
            return "forget" if self.kind == "memory" else "delete"
        if self.action == "create":
            return "add" if self.source in (None, "user") or self.kind not in ("memory", "skill") else "remember"
        return "update"


def source_of(kind: str, key: str, rel: str, meta: Mapping[str, Any]) -> str | None:
    """Where a write came from, as shown: a file's `source:` (session:2026-11/x as
    `session 2026-11/x`), a session's own month and id, a run's task and run."""
    if kind == "session":
        parts = rel.split("/")
        return f"session {parts[1]}/{key}" if len(parts) == 3 else f"session {key}"
    if kind == "run":
        return f"task {key}"
    source = meta.get("source")
    return shown_source(source) if isinstance(source, str) else None


def shown_source(source: str) -> str | None:
    """A `source:` value as a commit shows it: session:2026-11/x as `session 2026-11/x`."""
    if not source.strip():
        return None
    prefix, colon, rest = source.strip().partition(":")
    if colon and prefix in ("session", "task"):
        return f"{prefix} {rest}"
    return source.strip().splitlines()[0]


def _run_of(source: str | None) -> str | None:
    """The run id in `task <id>/<run>`, else None."""
    if source and source.startswith("task ") and "/" in source:
        return source.rsplit("/", 1)[1]
    return None


def message(changes: Sequence[Change], *, host: str | None = None, extra: Sequence[str] = ()) -> str:
    """The commit message of a burst of changes (in the order made, each file's last counted):
    its subject, a line per change when there are several, and the trailers. `extra`: lines
    for what else the commit holds (hand edits committed with git.commit_manual_edits)."""
    lines = list(dict.fromkeys(change.line for change in changes))
    if len(lines) == 1 and not extra:
        subject, body = lines[0], []
    else:
        counted = Counter(sorted((change.kind for change in changes), key=lambda kind: kind in _LAST))
        parts = [f"{n} {_NOUNS.get(kind, (kind, kind + 's'))[n != 1]}" for kind, n in counted.items()]
        subject, body = f"sentient: {', '.join(parts)}" + (" and hand edits" if extra else ""), [*lines, *extra]
    sources = list(dict.fromkeys(change.source for change in changes if change.source))
    trailers = [f"{SOURCE_TRAILER}: {source}" for source in sources]
    if host:
        trailers.append(f"{HOST_TRAILER}: {host}")
    text = subject + "\n"
    if body:
        text += "\n" + "\n".join(f"- {line}" for line in body) + "\n"
    if trailers:
        text += "\n" + "\n".join(trailers) + "\n"
    return text


_LAST = ("session", "run")  # in a subject, after what the sessions and runs did
_NOUNS = {"memory": ("memory entry", "memory entries"), "people": ("fact set", "fact sets"),
          "notepad": ("notepad", "notepads"), "session": ("session", "sessions")}
