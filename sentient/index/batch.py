"""What the writing side of the index writes: the rows of one transaction, the states by
which a sync tells an unchanged folder without loading its rows, and the rows of files that
claim one id."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sentient.index.schema import _INSERT_DOCUMENT

_REPEATABLE = frozenset({"memory", "note", "plan", "skill", "session"})
DUPLICATE_FIX = "Rename all but one, so each id names one file"


class _State:
    """A folder's state: a digest of each chunk of its document files (name, mtime_ns, size), in
    the order listed, taken as they are listed (nothing is kept of the files), and how many
    there were. A chunk whose digest is the one stored for it holds the very files whose rows
    the index holds."""

    __slots__ = ("_chunks", "count")

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self.count = 0

    def add(self, files: list[tuple[str, str, str, int, int]]) -> bytes:
        """Take the next chunk of the folder's files; returns its digest."""
        names, _, _, mtimes, sizes = zip(*files, strict=True)
        digest = hashlib.blake2b("".join(name + "\0" for name in names).encode("utf-8", "surrogateescape"),
                                 digest_size=DIGEST)
        digest.update(array("q", mtimes))
        digest.update(array("q", sizes))
        self._chunks.append(digest.digest())
        self.count += len(files)
        return self._chunks[-1]

    def digest(self) -> bytes:
        return b"".join(self._chunks)


DIGEST = 16  # bytes of a chunk's digest


def _chunk_digests(state: bytes) -> list[bytes]:
    return [state[start : start + DIGEST] for start in range(0, len(state), DIGEST)]


def _claims(conn: sqlite3.Connection, kind: str, key: str) -> list[tuple[str, int, int, int | None]]:
    """(path, mtime_ns, size, documents rowid or None for a problem) of every row claiming an id."""
    return conn.execute("SELECT path, mtime_ns, size, id FROM documents WHERE kind = ?1 AND key = ?2 UNION ALL "
                        "SELECT path, mtime_ns, size, NULL FROM problems WHERE kind = ?1 AND key = ?2 ORDER BY 1",
                        (kind, key)).fetchall()


def _clashes(conn: sqlite3.Connection, keys: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Of these (kind, key)s, those more than one row claims. Only ids of nested kinds and
    sessions can repeat (the others name their folder)."""
    wanted = sorted({(kind, key) for kind, key in keys if kind in _REPEATABLE})
    if not wanted:
        return []
    return conn.execute(
        "SELECT kind, key FROM (SELECT json_extract(value, '$[0]') AS kind, json_extract(value, '$[1]') AS key "
        "FROM json_each(?)) AS k WHERE (SELECT count(*) FROM documents d WHERE d.kind = k.kind AND d.key = k.key) + "
        "(SELECT count(*) FROM problems p WHERE p.kind = k.kind AND p.key = k.key) > 1", (json.dumps(wanted),)
    ).fetchall()


def _mark_duplicates(conn: sqlite3.Connection, clashes: Iterable[tuple[str, str]]
                     ) -> tuple[set[str], list[tuple[str, int]]]:
    """Make every row claiming one of these ids a problem naming all the files that claim it:
    neither is indexed (as Vault.scan). Returns the top-level folders touched, and (path, rowid)
    of the documents that are problems now."""
    touched: set[str] = set()
    demoted: list[tuple[str, int]] = []
    for kind, key in clashes:
        claims = _claims(conn, kind, key)
        paths = [path for path, _, _, _ in claims]
        reason = _reason(key, paths)
        demoted += [(path, rowid) for path, _, _, rowid in claims if rowid is not None]
        ids = sorted(rowid for _, _, _, rowid in claims if rowid is not None)
        for rowid in ids:  # ascending, as FTS5 wants them
            conn.execute("INSERT INTO documents_fts (documents_fts, rowid, title, body) SELECT 'delete', id, title, "
                         "body FROM documents WHERE id = ?", (rowid,))
        conn.executemany("DELETE FROM documents WHERE id = ?", [(rowid,) for rowid in ids])
        conn.executemany("INSERT OR REPLACE INTO problems VALUES (?, ?, ?, ?, ?, ?, ?, 1)",
                         [(path, kind, key, reason, DUPLICATE_FIX, mtime, size) for path, mtime, size, _ in claims])
        conn.executemany("DELETE FROM folders WHERE path = ?", [(path.rpartition("/")[0],) for path in paths])
        touched.update(path.split("/", 1)[0] for path in paths)
    return touched, demoted


def _reason(key: str, paths: list[str]) -> str:
    return f"the id '{key}' is used by {len(paths)} files ({', '.join(paths)})"


def _restate_duplicates(conn: sqlite3.Connection) -> set[str]:
    """Name again the files claiming an id together where the stored reason names others (one
    of them was renamed or deleted, or another joined). Returns the top-level folders touched."""
    stale: list[tuple[str, str]] = []
    for kind, key in conn.execute("SELECT DISTINCT kind, key FROM problems WHERE duplicate = 1").fetchall():
        claims = _claims(conn, kind, key)
        if len(claims) < 2:
            continue  # one alone: planned again as a document by the sync
        reason = _reason(key, [path for path, _, _, _ in claims])
        differ = conn.execute("SELECT count(*) FROM problems WHERE kind = ? AND key = ? AND duplicate = 1 "
                              "AND reason = ?", (kind, key, reason)).fetchone()[0] != len(claims)
        if differ:
            stale.append((kind, key))
    return _mark_duplicates(conn, stale)[0]


@dataclass
class _Batch:
    """Writes gathered for one transaction. FTS5 is fed in bulk: row by row costs four times more."""

    documents: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # path -> documents row
    problems: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # path -> problems row
    deleted: set[str] = field(default_factory=set)  # paths whose rows go
    outcomes: dict[str, str] = field(default_factory=dict)  # path -> "added" or "updated", of `documents`

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
        self.outcomes.clear()
        return {rel.split("/", 1)[0] for rel in touched}
