"""Index: a SQLite FTS5 cache of the vault in `.sentient/index.sqlite`.

Files are the truth; this is a cache that can be deleted at any time. `sync()` walks the
vault (one stat per file) and re-reads only files whose (mtime_ns, size) changed; `update()`
and `remove()` keep it current one file at a time for the watcher; `search()` ranks with BM25,
the title weighing more than the body. Files that cannot be read are kept in `problems`.

Reading never writes: nothing outside `.sentient/` is touched. One writer connection sits
behind a lock; every thread reads through its own connection (WAL), so a search never waits
for a long sync. A database from another schema, other settings, or garbage bytes is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from sentient.errors import BadFile, IndexUnavailable
from sentient.vault.document import Document
from sentient.vault.store import Folder, Found, Problem, Vault

SCHEMA_VERSION = 2
DB_NAME = "index.sqlite"
TITLE_WEIGHT = 10.0
BATCH = 5000  # files written per transaction
OPTIMIZE_AFTER = 1000  # a sync that changed this many rows merges the FTS index into one segment
# A query matching more entries than this is "broad" (see Index.search): ranking costs about a
# microsecond per matching entry (FTS5 scores every match; it has no top-k pruning).
BROAD_MATCHES = 3000
# A filtered search first ranks this many times its limit of all matches (see Index._ranked).
PREFETCH = 4
FIX = "delete {path} (or the whole .sentient/ folder) and run `sentient index --rebuild`"

_COLUMNS = ("path", "kind", "key", "mtime_ns", "size", "revision", "stored_revision", "title", "frontmatter",
            "body", "scope", "category", "created", "updated", "untrusted", "threat")
_SCHEMA = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE documents (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,
        key TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL, revision TEXT NOT NULL,
        stored_revision TEXT, title TEXT NOT NULL, frontmatter TEXT NOT NULL, body TEXT NOT NULL, scope TEXT,
        category TEXT, created TEXT, updated TEXT, untrusted INTEGER NOT NULL, threat TEXT)""",
    "CREATE INDEX documents_kind_key ON documents (kind, key)",
    """CREATE VIRTUAL TABLE documents_fts USING fts5(title, body, content='documents', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2')""",
    """CREATE TABLE problems (path TEXT PRIMARY KEY, kind TEXT NOT NULL, key TEXT NOT NULL, reason TEXT NOT NULL,
        fix TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL, duplicate INTEGER NOT NULL)""",
    # per folder, a digest of its document files' (name, mtime_ns, size) as of the sync that stored it,
    # when each of them had its row; a write of any row in the folder deletes it
    "CREATE TABLE folders (path TEXT PRIMARY KEY, state BLOB NOT NULL, files INTEGER NOT NULL)",
)
_REPEATABLE = frozenset({"memory", "note", "plan", "skill", "session"})
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


def phrases(text: str) -> list[str]:
    """Free text as FTS5 phrases: every word quoted, so no syntax is ever interpreted."""
    words = [w for w in text.replace("\x00", " ").split() if any(c.isalnum() for c in w)][:32]
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


class Index:
    """The search index of one vault. Thread-safe; use as a context manager or call close()."""

    def __init__(self, vault: Vault, *, judge: Judge | None = None, judge_version: str = "",
                 timeout: float = 5.0, broad: int = BROAD_MATCHES) -> None:
        """`judge` gives each (re)indexed document its `threat` value (else the frontmatter's is kept);
        change `judge_version` when its verdicts may change. `timeout`: seconds to wait for another
        process's write before IndexUnavailable. `broad`: see search()."""
        self.vault = vault
        self.timeout = timeout
        self.broad = broad
        self._counts: tuple[tuple[int, int], dict[str | None, tuple[int, int]]] = ((-1, -1), {})  # _counts_now
        self.path = vault.state_dir / DB_NAME
        self._judge = judge
        self._fingerprint = json.dumps({"max_file_bytes": vault.max_file_bytes,
                                        "judge": None if judge is None else judge_version})
        self._lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._generation = 0
        self._version = 0  # bumped by every write that changed rows, for the caches above us
        self._folder_versions: Counter[str] = Counter()  # the same, per top-level folder
        self._pending_tops: set[str] = set()
        self._corrupt = False  # a reader met a corrupt page: the next sync starts from an empty file
        self._writer = self._open()

    # --- opening ---------------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> IndexUnavailable:
        return IndexUnavailable(f"the index {self.path} cannot be used ({exc}); close other Sentient processes "
                                f"using this vault, or {FIX.format(path=self.path)}")

    def _connect(self, *, writer: bool = False) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        if writer:  # journal_mode is stored in the file; setting it again would wait for the writer
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        else:
            conn.execute("PRAGMA query_only = 1")
        return conn

    def _open(self) -> sqlite3.Connection:
        try:
            self.vault.state_dir.mkdir(exist_ok=True)
            ignore = self.vault.state_dir / ".gitignore"
            if not ignore.exists():
                ignore.write_text("*\n")
        except OSError as exc:
            raise IndexUnavailable(f"cannot create {self.vault.state_dir} ({exc.strerror}); make the vault "
                                   "folder writable") from None
        try:
            try:
                return self._prepare(self._connect(writer=True))
            except sqlite3.DatabaseError as exc:
                if not _is_corrupt(exc):
                    raise
            self._delete_files()
            return self._prepare(self._connect(writer=True))
        except (sqlite3.Error, OSError) as exc:
            raise self._unavailable(exc) from None

    def _prepare(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                conn.execute("BEGIN IMMEDIATE")
                self._create(conn)
                conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        return conn

    def _delete_files(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    @staticmethod
    def _create(conn: sqlite3.Connection) -> None:
        """Drop whatever is there and make an empty index of this schema (inside a transaction)."""
        tables = conn.execute("SELECT name, sql LIKE 'CREATE VIRTUAL%' FROM sqlite_master WHERE type = 'table' "
                              "AND name NOT LIKE 'sqlite_%' ORDER BY 2 DESC").fetchall()
        for name, _ in tables:
            conn.execute(f'DROP TABLE IF EXISTS "{name}"')
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _reset(self) -> None:
        """Replace a corrupt database file with an empty one."""
        self._writer.close()
        self._generation += 1
        self._corrupt = False
        self._delete_files()
        self._writer = self._open()

    def close(self) -> None:
        with self._lock, self._readers_lock:
            for conn in [self._writer, *self._readers]:
                conn.close()
            self._readers.clear()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # --- writing ---------------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """The writer connection in a transaction. A corrupt file is replaced by an empty index
        and _Reset raised, so the caller can fill it again."""
        with self._lock:
            try:
                before = self._writer.total_changes
                self._writer.execute("BEGIN IMMEDIATE")
                yield self._writer
                self._writer.execute("COMMIT")
                if self._writer.total_changes != before:  # after the commit, so readers see the rows
                    self._version += 1
                    self._folder_versions.update(self._pending_tops)
            except BaseException as exc:
                with suppress(sqlite3.Error):
                    if self._writer.in_transaction:
                        self._writer.execute("ROLLBACK")
                if not isinstance(exc, sqlite3.Error):
                    raise
                if not _is_corrupt(exc):
                    raise self._unavailable(exc) from None
                self._reset()
                raise _Reset from None
            finally:
                self._pending_tops.clear()

    @property
    def version(self) -> tuple[int, int]:
        """Changes whenever this index's rows change: a key for caches of what it holds."""
        return (self._generation, self._version)

    def version_of(self, top: str) -> tuple[int, int]:
        """Changes whenever rows under one top-level folder (memory, pins, ...) change."""
        return (self._generation, self._folder_versions[top])

    def sync(self, progress: Callable[[int, int], None] | None = None) -> SyncReport:
        """Bring the index up to date with the files; re-read only what changed on disk.
        `progress(done, total)` is called every few hundred files."""
        try:
            return self._sync(progress, rebuild=False)
        except _Reset:
            return self._sync(progress, rebuild=True)

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> SyncReport:
        """Drop everything and read every file again."""
        try:
            return self._sync(progress, rebuild=True)
        except _Reset:
            return self._sync(progress, rebuild=True)

    def _sync(self, progress: Callable[[int, int], None] | None, *, rebuild: bool) -> SyncReport:
        """Files are read outside transactions and written in batches, so another process's writer
        waits one batch at most; this process's own writers wait for the whole sync (self._lock).

        A folder whose document files all have the (name, mtime_ns, size) they had when a sync last
        stored its state is skipped whole, without loading its rows (loading a row costs about what
        the stat of its file costs). The files of other folders are compared one by one."""
        start = time.perf_counter()
        folders = [(folder, _folder_state(folder.files)) for folder in self.vault.walk_folders()]
        repeated = _repeated_keys(folder for folder, _ in folders)
        sharing = {folder.rel for folder, _ in folders  # folders holding a file whose id another file has
                   if repeated and any((kind, key) in repeated for _, kind, key, _, _ in folder.files)}
        total, done, reported = sum(len(folder.files) for folder, _ in folders), 0, 0
        counts: Counter[str] = Counter()
        batch = _Batch()
        with self._lock:
            if self._corrupt:
                self._reset()
            with self._writing() as conn:
                if rebuild or self._meta(conn, "fingerprint") != self._fingerprint:
                    self._create(conn)
                    conn.execute("INSERT INTO meta VALUES ('fingerprint', ?)", (self._fingerprint,))
                data_version = conn.execute("PRAGMA data_version").fetchone()[0]
                stored = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT path, state, files FROM folders")}
                changed = {folder.rel for folder, state in folders
                           if folder.rel in sharing or stored.get(folder.rel) != (state, len(folder.files))}
                documents, problems = self._folder_rows(conn, changed)
                # A stored state vouches for exactly len(files) rows in its folder; any other row is
                # in a folder that no longer holds documents.
                vouched = sum(len(folder.files) for folder, _ in folders if folder.rel not in changed)
                if vouched + len(documents) + len(problems) != self._row_count(conn):
                    self._rows_outside(conn, {folder.rel for folder, _ in folders}, documents, problems)
            walked: set[str] = set()
            duplicates: dict[tuple[str, str], list[Found]] = {}

            def advance(count: int) -> None:
                nonlocal done, reported
                done += count
                while progress is not None and done - reported >= 256:
                    reported += 256
                    progress(reported, total)

            for folder, _ in folders:
                if folder.rel not in changed:
                    counts["unchanged"] += len(folder.files)
                    advance(len(folder.files))
                    continue
                for name, kind, key, mtime_ns, size in folder.files:
                    found = Found(self.vault.root, f"{folder.rel}/{name}", kind, key, mtime_ns, size)
                    walked.add(found.rel)
                    if repeated and (kind, key) in repeated:  # files sharing an id are planned together
                        duplicates.setdefault((kind, key), []).append(found)
                    elif documents.get(found.rel) == (mtime_ns, size) or problems.get(found.rel) == (mtime_ns, size, 0):
                        counts["unchanged"] += 1
                    else:
                        counts.update(self._plan([found], documents, batch))
                        if len(batch) >= BATCH:
                            self._flush(batch)
                    advance(1)
            for founds in duplicates.values():
                counts.update(self._plan(founds, documents, batch))
            gone = (documents.keys() | problems.keys()) - walked
            batch.deleted.update(gone)
            counts["removed"] += len(gone & documents.keys())
            # after many changes, merge the FTS index into one segment: searches read less, and the
            # watcher's small writes then merge with small segments only (no 40 ms stalls)
            optimize = counts["added"] + counts["updated"] + counts["removed"] >= OPTIMIZE_AFTER
            fresh = [(f.rel, state, len(f.files)) for f, state in folders if f.rel in changed and f.rel not in sharing]
            stale = stored.keys() - {folder.rel for folder, _ in folders}
            if progress is not None and (reported != total or total == 0):
                progress(total, total)
            problem_count = self._flush(batch, optimize=optimize, states=(data_version, fresh, stale))
        return SyncReport(counts["added"], counts["updated"], counts["removed"], counts["unchanged"], problem_count,
                          time.perf_counter() - start)

    @staticmethod
    def _row_count(conn: sqlite3.Connection) -> int:
        count: int = conn.execute("SELECT (SELECT count(*) FROM documents) + (SELECT count(*) FROM problems)"
                                  ).fetchone()[0]
        return count

    @staticmethod
    def _rows_outside(conn: sqlite3.Connection, folders: Container[str], documents: dict[str, Any],
                      problems: dict[str, Any]) -> None:
        """Add to `documents` and `problems` the rows whose folder is none of `folders` (and so gone)."""
        for path, mtime_ns, size in conn.execute("SELECT path, mtime_ns, size FROM documents"):
            if path.rpartition("/")[0] not in folders:
                documents[path] = (mtime_ns, size)
        for path, mtime_ns, size, duplicate in conn.execute("SELECT path, mtime_ns, size, duplicate FROM problems"):
            if path.rpartition("/")[0] not in folders:
                problems[path] = (mtime_ns, size, duplicate)

    @staticmethod
    def _folder_rows(conn: sqlite3.Connection, folders: Iterable[str]
                     ) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int, int]]]:
        """(path -> (mtime_ns, size)) of the documents, and (path -> (mtime_ns, size, duplicate)) of
        the problems, that are files right in these folders."""
        documents: dict[str, tuple[int, int]] = {}
        problems: dict[str, tuple[int, int, int]] = {}
        where = "WHERE path > ?1 AND path < ?2 AND instr(substr(path, ?3), '/') = 0"
        for rel in folders:
            bounds = (rel + "/", rel + "0", len(rel) + 2)  # '0' follows '/': every path under rel/ sorts between
            for path, mtime_ns, size in conn.execute(f"SELECT path, mtime_ns, size FROM documents {where}", bounds):
                documents[path] = (mtime_ns, size)
            for path, mtime_ns, size, duplicate in conn.execute(
                    f"SELECT path, mtime_ns, size, duplicate FROM problems {where}", bounds):
                problems[path] = (mtime_ns, size, duplicate)
        return documents, problems

    def _flush(self, batch: _Batch, *, optimize: bool = False,
               states: tuple[int, list[tuple[str, bytes, int]], Iterable[str]] | None = None) -> int:
        """Write a batch in one transaction; returns the number of problems now stored. `states`:
        (data_version when the sync read the rows, folder states to store, folder states to drop);
        they are written only if no other connection wrote meanwhile."""
        with self._writing() as conn:
            self._pending_tops |= batch.flush(conn)
            if states is not None and conn.execute("PRAGMA data_version").fetchone()[0] == states[0]:
                conn.executemany("INSERT OR REPLACE INTO folders VALUES (?, ?, ?)", states[1])
                conn.executemany("DELETE FROM folders WHERE path = ?", [(rel,) for rel in states[2]])
            if optimize:
                conn.execute("INSERT INTO documents_fts (documents_fts) VALUES ('optimize')")
            count: int = conn.execute("SELECT count(*) FROM problems").fetchone()[0]
        return count

    @staticmethod
    def _meta(conn: sqlite3.Connection, name: str) -> str | None:
        row = conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def _plan(self, founds: list[Found], documents: Container[str], batch: _Batch) -> list[str]:
        """Read the files claiming one (kind, key) into `batch`; returns what happens to each row.
        `documents` holds the paths indexed now."""
        rels = [found.rel for found in founds]
        if len(founds) > 1:  # two files claim one id: each is a problem and neither is indexed (as Vault.scan)
            reason = f"the id '{founds[0].key}' is used by {len(founds)} files ({', '.join(rels)})"
            for rel, found in zip(rels, founds, strict=True):
                batch.problems[rel] = (rel, found.kind, found.key, reason,
                                       "Rename all but one, so each id names one file", found.mtime_ns, found.size, 1)
            return ["removed" if rel in documents else "problem" for rel in rels]
        found, rel = founds[0], rels[0]
        try:
            batch.documents[rel] = self._row(rel, found, self.vault.read(found.kind, found.key, found.path))
        except BadFile as exc:
            batch.problems[rel] = (rel, found.kind, found.key, exc.reason, exc.fix, found.mtime_ns, found.size, 0)
            return ["removed" if rel in documents else "problem"]
        return ["updated" if rel in documents else "added"]

    def _row(self, rel: str, found: Found, document: Document) -> tuple[Any, ...]:
        meta = document.meta
        try:
            threat = self._judge(document) if self._judge is not None else meta.get("threat")
        except Exception as exc:  # an entry that cannot be judged stays out of search, the rest index
            raise BadFile(found.path, f"could not be checked for threats ({type(exc).__name__}: {exc})",
                          "Report this as a bug; the entry stays out of search until it can be checked") from exc
        updated = meta.get("updated") or meta.get("finished") or meta.get("started") or meta.get("created")
        return (rel, found.kind, found.key, found.mtime_ns, found.size, document.revision, document.stored_revision,
                document.title, _JSON.encode(dict(meta)), document.body,
                _text(meta.get("scope")), _text(meta.get("category")), _when(meta.get("created")), _when(updated),
                int(meta.get("untrusted") is True), None if threat is None else json.dumps(dict(threat)))

    def update(self, path: Path) -> None:
        """One file changed (or appeared): re-read it. Non-documents and temp files are ignored.
        (A folder moved or deleted is no file event: call sync() for it.)"""
        try:
            self._refresh(path)
        except _Reset:
            self.sync()

    def remove(self, path: Path) -> None:
        """One file was deleted. The disk is checked, so a file that came back is kept."""
        self.update(path)

    def _refresh(self, path: Path) -> None:
        """Re-read every file that claims the id of `path` (it may now be unique, or duplicated)."""
        found = self.vault.classify_path(path)
        if found is None:
            return
        kind, key = found
        batch = _Batch()
        with self._writing() as conn:  # one transaction: the file is read inside it, under 5 ms
            rows = conn.execute("SELECT path, 1 FROM documents WHERE kind = ?1 AND key = ?2 UNION "
                                "SELECT path, 0 FROM problems WHERE kind = ?1 AND key = ?2", (kind, key)).fetchall()
            indexed = {rel for rel, is_document in rows if is_document}
            rels = {rel for rel, _ in rows} | {path.resolve().relative_to(self.vault.root).as_posix()}
            founds = [f for f in (self._stat(rel, kind, key) for rel in sorted(rels)) if f is not None]
            batch.deleted.update(rels - {f.rel for f in founds})
            if founds:
                self._plan(founds, indexed, batch)
            self._pending_tops |= batch.flush(conn)

    def _stat(self, rel: str, kind: str, key: str) -> Found | None:
        path = self.vault.root / rel
        try:
            stat = path.stat()
        except OSError:
            return None
        return Found(self.vault.root, rel, kind, key, stat.st_mtime_ns, stat.st_size) if path.is_file() else None

    # --- reading ---------------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """This thread's own read connection; errors become IndexUnavailable."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        try:
            if conn is None or self._local.generation != self._generation:
                if conn is not None:
                    conn.close()
                conn = self._connect()
                self._local.conn, self._local.generation = conn, self._generation
                with self._readers_lock:  # not self._lock, which a long sync holds
                    self._readers.append(conn)
            yield conn
        except sqlite3.Error as exc:
            self._corrupt = self._corrupt or _is_corrupt(exc)
            raise self._unavailable(exc) from None

    def search(self, query: str, *, kind: str | None = None, scope: str | None = None, category: str | None = None,
               since: str | None = None, until: str | None = None, limit: int = 10,
               any_word: bool = False) -> list[Hit]:
        """Documents matching every word of `query` (any word, when none match all), best first.
        `any_word`: rank the documents matching any of its words, with no word left out.

        `since`/`until` bound the `updated` time (ISO; a bare date for `until` means its whole day).

        Ranking costs about a microsecond per matching entry (FTS5 scores every match), so a query
        of every word that matches more than `self.broad` entries ranks only the entries holding
        its words in their title, unless fewer than `limit` do. And the any-word fallback leaves
        out the words found in more than a tenth of all entries when the query has other words,
        which rank above them anyway: a word weighs less the more entries hold it.
        """
        filters = {"d.kind = ?": kind, "d.scope = ?": scope, "d.category = ?": category,
                   "d.updated >= ?": _when(since), "d.updated <= ?": _until(until)}
        clauses = "".join(f" AND {sql}" for sql, value in filters.items() if value is not None)
        params = [value for value in filters.values() if value is not None]
        limit = max(1, min(limit, 1000))
        words = phrases(query)
        if not words:
            return []
        if any_word:
            return self._search(" OR ".join(words), clauses, params, limit)
        match = " ".join(words)
        if self._more_than(match, self.broad):
            hits = self._search(f"title : ({match})", clauses, params, limit)
            if len(hits) >= limit:
                return hits
        hits = self._search(match, clauses, params, limit)
        if hits or len(words) == 1:
            return hits
        common = max(self.broad, self._entries() // 10)
        narrow = [word for word in words if not self._more_than(word, common)] or words
        return self._search(" OR ".join(narrow), clauses, params, limit)

    def _entries(self) -> int:
        """About how many entries the index holds (kept until it changes)."""
        counts = self._counts_now()
        if None not in counts:
            with self._reading() as conn:
                counts[None] = (conn.execute("SELECT coalesce(max(id), 0) FROM documents").fetchone()[0], 0)
        return counts[None][0]

    def _more_than(self, match: str, threshold: int) -> bool:
        """Whether `match` matches more than `threshold` entries."""
        return self._entries() > threshold and self._count(match, threshold + 1) > threshold

    def _count(self, match: str, most: int) -> int:
        """How many documents `match` matches, counted up to `most`, at a fraction of the cost of
        ranking them; kept until the index changes."""
        counts = self._counts_now()
        count, limit = counts.get(match, (0, 0))
        if count == limit and limit < most:  # not counted that far yet
            with self._reading() as conn:
                count = conn.execute("SELECT count(*) FROM (SELECT rowid FROM documents_fts WHERE documents_fts "
                                     "MATCH ? LIMIT ?)", (match, most)).fetchone()[0]
            counts[match] = (count, most)
        return min(count, most)

    def word_counts(self, words: Iterable[str], most: int) -> dict[str, int]:
        """How many documents (of any kind) hold each word, counted up to `most`: what tells a
        rare word from a common one before anything is ranked."""
        counts: dict[str, int] = {}
        for word in words:
            quoted = phrases(word)
            counts[word] = self._count(" ".join(quoted), most) if quoted else 0
        return counts

    def _counts_now(self) -> dict[str | None, tuple[int, int]]:
        """match -> (entries counted, the limit they were counted to), for the index as it is now."""
        version, counts = self._counts
        if version != self.version:
            counts = {}
            self._counts = (self.version, counts)
        return counts

    def _search(self, match: str, clauses: str, params: list[str], limit: int) -> list[Hit]:
        """Rank first, then fetch rows and snippets of the best `limit` only (a snippet costs a re-tokenise)."""
        with self._reading() as conn:
            scores = self._ranked(conn, match, clauses, params, limit)
            if not scores:
                return []
            marks = ", ".join("?" for _ in scores)
            rows = conn.execute(
                "SELECT d.id, d.kind, d.key, d.path, d.title, snippet(documents_fts, -1, '[', ']', '…', 12), d.scope, "
                "d.category, d.updated, d.revision, d.untrusted, d.threat FROM documents_fts JOIN documents d "
                f"ON d.id = documents_fts.rowid WHERE documents_fts MATCH ? AND documents_fts.rowid IN ({marks})",
                [match, *scores]).fetchall()
        hits = [Hit(r[1], r[2], self.vault.root / r[3], r[4], r[5], -scores[r[0]], r[6], r[7], r[8], r[9],
                    bool(r[10]), _loads(r[11])) for r in rows]
        return sorted(hits, key=lambda hit: -hit.score)

    @staticmethod
    def _ranked(conn: sqlite3.Connection, match: str, clauses: str, params: list[str],
                limit: int) -> dict[int, float]:
        """rowid -> score of the best `limit` matches that pass the filters (`clauses` on `d`).

        Filtering while ranking reads every match's row, which doubles the cost of ranking. So the
        best PREFETCH x `limit` of all matches are ranked first without their rows: when `limit` of
        them pass the filters (or they are all the matches), those are the answer, exactly; only
        otherwise is everything ranked again with the filters."""
        rank = f"SELECT documents_fts.rowid, bm25(documents_fts, {TITLE_WEIGHT}, 1.0) AS score FROM documents_fts"
        if not clauses:
            return dict(conn.execute(f"{rank} WHERE documents_fts MATCH ? ORDER BY score LIMIT ?",
                                     [match, limit]).fetchall())
        best = conn.execute(f"{rank} WHERE documents_fts MATCH ? ORDER BY score LIMIT ?",
                            [match, limit * PREFETCH]).fetchall()
        marks = ", ".join("?" for _ in best)
        # NOT INDEXED: by rowid, never by scanning the (kind, key) index for a kind's every row
        passing = {row[0] for row in conn.execute(
            f"SELECT d.id FROM documents d NOT INDEXED WHERE d.id IN ({marks}){clauses}",
            [*(rowid for rowid, _ in best), *params])}
        if len(passing) >= limit or len(best) < limit * PREFETCH:
            return dict([(rowid, score) for rowid, score in best if rowid in passing][:limit])
        # CROSS JOIN keeps the matches the outer loop: a kind's rows first would try each one against FTS5
        return dict(conn.execute(f"{rank} CROSS JOIN documents d ON d.id = documents_fts.rowid WHERE documents_fts "
                                 f"MATCH ?{clauses} ORDER BY score LIMIT ?", [match, *params, limit]).fetchall())

    def get(self, kind: str, key: str) -> IndexedDoc | None:
        rows = self._select("WHERE kind = ? AND key = ?", (kind, key))
        return rows[0] if rows else None

    def documents(self, kind: str | None = None, *, scope: str | None = None) -> list[IndexedDoc]:
        """Every indexed document (of one kind, in one scope), ordered by kind and key."""
        where = {"kind = ?": kind, "scope = ?": scope}
        sql = " AND ".join(clause for clause, value in where.items() if value is not None)
        return self._select(f"WHERE {sql}" if sql else "", tuple(v for v in where.values() if v is not None))

    def _select(self, where: str, params: tuple[str, ...]) -> list[IndexedDoc]:
        with self._reading() as conn:
            rows = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM documents {where} ORDER BY kind, key, path",
                                params).fetchall()
        return [IndexedDoc(kind=r[1], key=r[2], path=self.vault.root / r[0], rel=r[0], title=r[7], revision=r[5],
                           stored_revision=r[6], meta=json.loads(r[8]), body=r[9], scope=r[10], category=r[11],
                           created=r[12], updated=r[13], mtime_ns=r[3], size=r[4], untrusted=bool(r[14]),
                           threat=_loads(r[15])) for r in rows]

    def newest(self, kind: str, scopes: Sequence[str]) -> list[Listed]:
        """The documents of one kind in `scopes` (or with no scope), newest first: what a listing
        of thousands needs, without the frontmatter, paths or typed rows of `documents()`."""
        marks = ", ".join("?" for _ in scopes)
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT key, title, body, category, revision, json_extract(frontmatter, '$.threat.allowed_revision') "
                f"FROM documents WHERE kind = ? AND (scope IS NULL OR scope IN ({marks})) "
                "ORDER BY coalesce(nullif(updated, ''), nullif(created, ''), '') DESC, key DESC",
                (kind, *scopes)).fetchall()
        return [Listed(r[0], r[1], r[2], r[3], r[4], r[5] if isinstance(r[5], str) else None) for r in rows]

    def problems(self) -> list[Problem]:
        with self._reading() as conn:
            rows = conn.execute("SELECT path, reason, fix, kind FROM problems ORDER BY path").fetchall()
        return [Problem(self.vault.root / r[0], r[1], r[2], r[3]) for r in rows]


def _until(value: str | None) -> str | None:
    if value is not None and len(value) == 10:  # a bare date: the whole day
        return f"{value}T23:59:59Z"
    return _when(value)


class _Reset(Exception):
    """The database file was corrupt and has been replaced by an empty index."""


def _is_corrupt(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


