"""What the writing side of the index writes: the rows of one transaction, and the states
by which a sync tells an unchanged folder without loading its rows."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sentient.index.schema import _INSERT_DOCUMENT
from sentient.vault.store import Folder

_REPEATABLE = frozenset({"memory", "note", "plan", "skill", "session"})


def _folder_state(files: list[tuple[str, str, str, int, int]]) -> bytes:
    """A digest of one folder's document files (name, mtime_ns, size), in the order listed."""
    names, _, _, mtimes, sizes = zip(*files, strict=True)
    digest = hashlib.blake2b("\0".join(names).encode("utf-8", "surrogateescape"), digest_size=16)
    digest.update(array("q", mtimes))
    digest.update(array("q", sizes))
    return digest.digest()


def _repeated_keys(folders: Iterable[Folder]) -> set[tuple[str, str]]:
    """The (kind, key)s claimed by more than one file. Only ids of nested kinds and sessions can
    repeat (the others name their folder), and never within one folder, where names are unique."""
    folders = list(folders)
    seen: dict[str, set[str]] = {}
    clash = False
    for folder in folders:
        kind = folder.files[0][1]
        if kind in _REPEATABLE:
            keys = seen.setdefault(kind, set())
            before = len(keys)
            keys.update(file[2] for file in folder.files)
            clash = clash or len(keys) - before != len(folder.files)
    if not clash:
        return set()
    claims = Counter((kind, key) for folder in folders for _, kind, key, _, _ in folder.files)
    return {claim for claim, count in claims.items() if count > 1}


@dataclass
class _Batch:
    """Writes gathered for one transaction. FTS5 is fed in bulk: row by row costs four times more."""

    documents: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # path -> documents row
    problems: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # path -> problems row
    deleted: set[str] = field(default_factory=set)  # paths whose rows go

    def __len__(self) -> int:
        return len(self.documents) + len(self.problems) + len(self.deleted)

    def flush(self, conn: sqlite3.Connection) -> set[str]:
        """Replace the rows of every path touched: old FTS entries out, new rows and entries in.
        Returns the top-level folders touched (memory, sessions, ...)."""
        touched = [*self.documents, *self.problems, *self.deleted]
        if not touched:
            return set()
        conn.executemany("DELETE FROM folders WHERE path = ?",  # their stored states are stale now
                         [(folder,) for folder in {rel.rpartition("/")[0] for rel in touched}])
        paths = json.dumps(touched)  # one parameter, read back by json_each
        # rowids in ascending order: FTS5 writes out a new segment whenever a rowid goes down (5x slower)
        conn.execute("INSERT INTO documents_fts (documents_fts, rowid, title, body) SELECT 'delete', id, title, body "
                     "FROM documents WHERE path IN (SELECT value FROM json_each(?)) ORDER BY id", (paths,))
        conn.execute("DELETE FROM documents WHERE path IN (SELECT value FROM json_each(?))", (paths,))
        conn.execute("DELETE FROM problems WHERE path IN (SELECT value FROM json_each(?))", (paths,))
        newest = conn.execute("SELECT coalesce(max(id), 0) FROM documents").fetchone()[0]
        conn.executemany(_INSERT_DOCUMENT, self.documents.values())  # rowids from newest + 1 up
        conn.executemany("INSERT INTO problems VALUES (?, ?, ?, ?, ?, ?, ?, ?)", self.problems.values())
        conn.execute("INSERT INTO documents_fts (rowid, title, body) SELECT id, title, body FROM documents "
                     "WHERE id > ?", (newest,))
        self.documents.clear()
        self.problems.clear()
        self.deleted.clear()
        return {rel.split("/", 1)[0] for rel in touched}
