"""The git history of a file of the vault: its revisions (newest first) and its text at each.

Read with `git log` over a glob pathspec, so an entry that moved between subfolders of memory/,
or that was forgotten since, still has its history. Who made a revision is its author: the app
(git.author) or a person; the session or run that caused an app's revision is its
`Sentient-Source` trailer (sentient/vault/changes.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sentient.errors import NotFound
from sentient.vault.changes import SOURCE_TRAILER
from sentient.vault.git import Git

_RECORD, _FIELD = "\x1e", "\x1f"
_FORMAT = _RECORD + _FIELD.join(("%H", "%aI", "%an", "%ae", "%s", f"%(trailers:key={SOURCE_TRAILER},valueonly,"
                                                                  "separator=%x1d)"))


@dataclass(frozen=True)
class Revision:
    """One commit that changed the file."""

    commit: str
    date: str  # ISO 8601, the author's
    subject: str
    author: str
    by_app: bool  # made by Sentient (its author), not by a person
    source: str | None  # the session or run that caused it (the app's commits)
    path: str  # the file's path in that commit, relative to the vault
    deleted: bool  # this commit removed the file

    @property
    def short(self) -> str:
        return self.commit[:10]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "short": self.short, "by": "app" if self.by_app else "person"}


def entry_pathspec(folder: str, key: str) -> str:
    """The file of `key` in `folder` (memory, pins/notes...) or any subfolder of it."""
    return f":(glob){folder}/**/{key}.md"


def revisions(git: Git, pathspec: str, *, limit: int = 50) -> list[Revision]:
    """The commits that changed the files `pathspec` names, newest first (at most `limit`)."""
    if git.head() is None:
        return []
    done = git.run("log", f"--max-count={max(1, limit)}", f"--format={_FORMAT}", "--name-status",
                   "--no-renames", "--", pathspec)
    found = []
    for record in done.out.split(_RECORD)[1:]:
        header, _, names = record.partition("\n")
        commit, date, author, email, subject, source = (header.split(_FIELD) + [""] * 6)[:6]
        changed = [line.split("\t", 1) for line in names.splitlines() if "\t" in line]
        if not changed:
            continue
        # moved between subfolders in this commit: removed at one path, added at another
        status, path = next((item for item in changed if not item[0].startswith("D")), changed[0])
        sources = [item.strip() for item in source.split("\x1d") if item.strip()]
        found.append(Revision(commit, date, subject, author, email == git.author.email,
                              sources[0] if sources else None, path, status.startswith("D")))
    return found


def find(found: list[Revision], rev: str, what: str) -> Revision:
    """The revision of `found` that `rev` names (its commit, or the start of it: 7 characters or more)."""
    wanted = rev.strip().lower()
    matches = [revision for revision in found if len(wanted) >= 7 and revision.commit.startswith(wanted)]
    if len(matches) != 1:
        listed = "; `sentient memory history` lists them" if what.startswith("memory") else ""
        reason = "is not one of its revisions" if not matches else "names more than one of its revisions"
        raise NotFound(f"{rev!r} {reason} ({what}): give a commit from its history, 7 characters or more{listed}")
    return matches[0]


def text_at(git: Git, revision: Revision) -> str | None:
    """The file's text as that commit left it; None when the commit removed it."""
    if revision.deleted:
        return None
    return git.run("show", f"{revision.commit}:{revision.path}").out
