"""The index's tables, the values read from them, and free text as safe FTS5 queries."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sentient.vault.document import Document

SCHEMA_VERSION = 5  # 3: a session's knowledge sections are not indexed; 4: problems by (kind, key), newest first;
# 5: vectors (vectors.py)
DB_NAME = "index.sqlite"
TITLE_WEIGHT = 10.0
BATCH = 2000  # files written per transaction
CHUNK = 2000  # files of a changed folder a sync looks up in the index at once
# A sync reads files, then judges them in one batch (judge_many), then plans them: at most this
# many, or fewer of JUDGED_BYTES. A batch that big pays its fixed costs once for megabytes and
# is shared with the threat scan's helper processes (threats/parallel.py).
JUDGED_TOGETHER = 5000
JUDGED_BYTES = 4_000_000
OPTIMIZE_AFTER = 1000  # a sync that changed this many rows merges the FTS index into one segment
# A query matching more entries than this is "broad" (see Index.search): ranking costs about a
# microsecond per matching entry (FTS5 scores every match; it has no top-k pruning).
BROAD_MATCHES = 3000
# A filtered search first ranks this many times its limit of all matches (see Index._ranked).
PREFETCH = 4
FIX = "delete {path} (or the whole .sentient/ folder) and run `sentient index --rebuild`"

_NEWEST = "coalesce(nullif(updated, ''), nullif(created, ''), '')"  # when a document last changed, as text
_COLUMNS = ("path", "kind", "key", "mtime_ns", "size", "revision", "stored_revision", "title", "frontmatter",
            "body", "scope", "category", "created", "updated", "untrusted", "threat")
_SCHEMA: tuple[str, ...] = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE documents (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,
        key TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL, revision TEXT NOT NULL,
        stored_revision TEXT, title TEXT NOT NULL, frontmatter TEXT NOT NULL, body TEXT NOT NULL, scope TEXT,
        category TEXT, created TEXT, updated TEXT, untrusted INTEGER NOT NULL, threat TEXT)""",
    "CREATE INDEX documents_kind_key ON documents (kind, key)",
    # a listing newest first (Index.newest) reads its first rows along this, without sorting them all,
    # and counts a kind's rows in some scopes (Index.count) from it alone
    f"CREATE INDEX documents_newest ON documents (kind, {_NEWEST} DESC, key DESC, scope)",
    """CREATE VIRTUAL TABLE documents_fts USING fts5(title, body, content='documents', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2')""",
    """CREATE TABLE problems (path TEXT PRIMARY KEY, kind TEXT NOT NULL, key TEXT NOT NULL, reason TEXT NOT NULL,
        fix TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL, duplicate INTEGER NOT NULL)""",
    "CREATE INDEX problems_kind_key ON problems (kind, key)",
    # per folder, a digest of its document files' (name, mtime_ns, size) as of the sync that stored it,
    # when each of them had its row; a write of any row in the folder deletes it
    "CREATE TABLE folders (path TEXT PRIMARY KEY, state BLOB NOT NULL, files INTEGER NOT NULL)",
    # what each document says, embedded a piece at a time (vectors.py): gone with its row
    "CREATE TABLE embedded (doc INTEGER PRIMARY KEY, revision TEXT NOT NULL)",
    """CREATE TABLE vectors (doc INTEGER NOT NULL, part INTEGER NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL,
        PRIMARY KEY (doc, part)) WITHOUT ROWID""",
    """CREATE TRIGGER documents_vectors_gone AFTER DELETE ON documents BEGIN
        DELETE FROM embedded WHERE doc = old.id; DELETE FROM vectors WHERE doc = old.id; END""",
)
# The documents whose vectors changed (added, replaced or gone), each under the number of its last
# change: what the vectors file (vectors.py) does not hold as it is now. Added to an index of
# schema 5 made before it, by Index._prepare (the file is then made by the next embedding pass).
VECTORS_LOG = (
    "CREATE TABLE IF NOT EXISTS vectors_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, doc INTEGER NOT NULL UNIQUE)",
    """CREATE TRIGGER IF NOT EXISTS vectors_added AFTER INSERT ON vectors BEGIN
        INSERT OR REPLACE INTO vectors_log (doc) VALUES (new.doc); END""",
    """CREATE TRIGGER IF NOT EXISTS vectors_changed AFTER UPDATE ON vectors BEGIN
        INSERT OR REPLACE INTO vectors_log (doc) VALUES (old.doc); INSERT OR REPLACE INTO vectors_log (doc)
        VALUES (new.doc); END""",
    """CREATE TRIGGER IF NOT EXISTS vectors_removed AFTER DELETE ON vectors BEGIN
        INSERT OR REPLACE INTO vectors_log (doc) VALUES (old.doc); END""",
)
_SCHEMA = (*_SCHEMA, *VECTORS_LOG)
_INSERT_DOCUMENT = f"INSERT INTO documents ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)})"

Judge = Callable[[Document], Mapping[str, Any] | None]


@dataclass(frozen=True)
class SyncReport:
    added: int
    updated: int
    removed: int
    unchanged: int
    problems: int
    elapsed: float  # seconds


@dataclass(frozen=True)
class IndexedDoc:
    """One indexed document, as the index holds it (no file read)."""

    kind: str
    key: str
    path: Path
    rel: str
    title: str
    revision: str
    stored_revision: str | None
    meta: Mapping[str, Any]
    body: str
    scope: str | None
    category: str | None
    created: str | None
    updated: str | None
    mtime_ns: int
    size: int
    untrusted: bool
    threat: Mapping[str, Any] | None

    @property
    def edited_outside(self) -> bool:
        return self.stored_revision != self.revision


@dataclass(frozen=True)
class Hit:
    kind: str
    key: str
    path: Path
    title: str
    snippet: str
    score: float  # higher is better
    scope: str | None
    category: str | None
    updated: str | None
    revision: str
    untrusted: bool
    threat: Mapping[str, Any] | None


@dataclass(frozen=True)
class Listed:
    """One row of a lean listing (Index.newest)."""

    key: str
    title: str
    body: str
    category: str | None
    revision: str
    allowed_revision: str | None  # the frontmatter's threat.allowed_revision
    source: str | None = None
    untrusted: bool = False  # written from outside content

    @property
    def meta(self) -> Mapping[str, Any]:
        """The frontmatter fields a listing holds (those the model is shown with the text)."""
        return {"category": self.category, "source": self.source}


_POSSESSIVE = re.compile(r"['’]s$", re.IGNORECASE)


def phrases(text: str) -> list[str]:
    """Free text as FTS5 phrases: every word quoted, so no syntax is ever interpreted. A
    possessive's "'s" is left off ("my sister's job" looks for "sister", which the tokenizer would
    otherwise read as the phrase "sister s")."""
    words = [_POSSESSIVE.sub("", w) for w in text.replace("\x00", " ").split()]
    words = [w for w in words if any(c.isalnum() for c in w)][:32]
    return ['"' + w.replace('"', '""') + '"' for w in words]


def fts_query(text: str, operator: str = " ") -> str | None:
    """Free text as a safe FTS5 query: its phrases joined by `operator`."""
    return operator.join(phrases(text)) or None


_UTC_SECONDS = re.compile(r"[1-9]\d{3}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # what _when writes (and the app too)
_JSON = json.JSONEncoder(default=str, ensure_ascii=False)  # json.dumps with options builds one per call


def _when(value: Any) -> str | None:
    """An ISO date as 'YYYY-MM-DDTHH:MM:SSZ' in UTC (naive means UTC), so text compares as time."""
    if not isinstance(value, str):
        return None
    if _UTC_SECONDS.fullmatch(value):
        return value  # already in that form, or not a date at all (kept as it is, as below)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)


def _is_corrupt(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
