"""Index: opening the database, and the writing side (sync, update, remove). The reading side
is Reader (reader.py), which Index derives from."""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from functools import partial
from itertools import islice
from pathlib import Path
from types import TracebackType
from typing import Any

from sentient import allocator
from sentient.embedding import Embedder, model_id
from sentient.embedding import embedder as shipped_embedder
from sentient.errors import BadFile, IndexUnavailable
from sentient.index.batch import (
    DUPLICATE_FIX,
    _Batch,
    _chunk_digests,
    _clashes,
    _mark_duplicates,
    _reason,
    _restate_duplicates,
    _State,
)
from sentient.index.reader import EMBED_IN_SEARCH, Reader
from sentient.index.schema import (
    _JSON,
    _SCHEMA,
    BATCH,
    BROAD_MATCHES,
    CHUNK,
    DB_NAME,
    JUDGED_BYTES,
    JUDGED_TOGETHER,
    OPTIMIZE_AFTER,
    SCHEMA_VERSION,
    VECTORS_LOG,
    Judge,
    SyncReport,
    _is_corrupt,
    _text,
    _when,
)
from sentient.index.vectors import (
    _PENDING,
    Remembered,
    behind,
    embed_pending,
    forget_other_models,
    nothing_to_embed,
    pending,
    write_file,
)
from sentient.index.watched import LEASE, this_process, valid
from sentient.vault.document import Document
from sentient.vault.store import File, Found, Vault

# A session's knowledge sections (what it was told: pins, the memory index) are not what was said
# in it: left out of its indexed text, so a search for a remembered word finds the entry, not
# every session that was told about it.
log = logging.getLogger(__name__)
_JUDGE = object()  # the threat value of a document not judged yet: _row judges it
_KNOWLEDGE_SECTION = re.compile(r"^## knowledge · [^\n]*\n.*?(?=^## \S+ · |\Z)", re.MULTILINE | re.DOTALL)


class Index(Reader):
    """The search index of one vault. Thread-safe; use as a context manager or call close()."""

    def __init__(self, vault: Vault, *, judge: Judge | None = None, judge_version: str | Callable[[], str] = "",
                 judge_many: Callable[[Sequence[Document]], Sequence[Mapping[str, Any] | None]] | None = None,
                 timeout: float = 5.0, broad: int = BROAD_MATCHES, path: Path | None = None,
                 embedder: Callable[[], Embedder | None] | None = None) -> None:
        """`judge` gives each (re)indexed document its `threat` value (else the frontmatter's is kept);
        `judge_version` names its verdicts (a function giving the current name, for a judge whose
        pattern set can change while the index is open: the rows are then judged again, by the
        next sync or update, before any is written under the new name). `judge_many`, when given,
        gives the `threat` values of a sync's documents a batch at a time, as `judge` would one by
        one (ThreatJudge.threats: faster for many short texts, and it keeps none of them).
        `timeout`: seconds to wait for another process's write before IndexUnavailable. `broad`:
        see search(). `path`: the index file, if not the vault's own (.sentient/index.sqlite).
        `embedder`: gives the embedding model (sentient.embedding.embedder), when this index is to
        rank by meaning too; it is called on the first search or embed() that needs it."""
        self.vault = vault
        self.timeout = timeout
        self.broad = broad
        self._counts: tuple[tuple[int, int], dict[str | None, tuple[int, int]]] = ((-1, -1), {})  # _counts_now
        self.path = path or vault.state_dir / DB_NAME
        self._judge = judge
        self._judge_many = judge_many
        self._judge_version = judge_version
        # the judge every row's `threat` comes from (None: rows keep the frontmatter's)
        self.judge_version: str | None = None
        self._fingerprint = ""
        self._label(self._current_judge_version())
        self._lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._generation = 0
        self._version = 0  # bumped by every write that changed rows, for the caches above us
        self._folder_versions: Counter[str] = Counter()  # the same, per top-level folder
        self._pending_tops: set[str] = set()
        self._corrupt = False  # a reader met a corrupt page: the next sync starts from an empty file
        self._first_new = 0  # rows of ids above this were written by the sync under way
        self._embedder = embedder
        self._remembered = Remembered()  # the vectors of pieces embedded last: an edit embeds what it changed
        self.embed_in_search = EMBED_IN_SEARCH  # documents a search embeds first; 0 where another process embeds
        self._matrix = None
        self._queries: dict[tuple[str, str], Any] = {}
        self._pool = None
        self._embedding = threading.Lock()  # one embed() at a time
        self._keeping_vectors = threading.Lock()  # one keep_vectors() at a time (embed() and searches go on)
        self._embedded_at: tuple[int, int] | None = None  # the version every document was embedded at
        self._writer = self._open()

    # --- opening ---------------------------------------------------------------------

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
            elif conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'vectors_log'").fetchone() is None:
                conn.execute("BEGIN IMMEDIATE")  # an index made before the vectors file: kept, the log added
                for statement in VECTORS_LOG:
                    conn.execute(statement)
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
        with self._readers_lock:
            pool, self._pool = self._pool, None
        if pool is not None:  # its searches finish first (outside the lock their connections are listed under)
            pool.shutdown()
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

        Memory is bounded by the batch, not the vault: nothing is held per file or row of the vault.
        Each folder's files are taken a chunk at a time as the walk lists them (with their stat);
        a chunk whose digest of (name, mtime_ns, size) is the one a sync stored for it is skipped
        without loading its rows (loading a row costs about what the stat of its file costs), the
        files of any other chunk are looked up in the index. Rows whose file is gone are found by
        their count, files claiming one id by the index's (kind, key) lookups as their rows are
        written (_clashes). A folder's stored state is dropped whenever a row in it is written.
        `progress`' total is the number of files the last sync found (counted first when none)."""
        start = time.perf_counter()
        counts: Counter[str] = Counter()
        with self._lock:
            if self._corrupt:
                self._reset()
            with self._writing() as conn:
                label = self._current_judge_version()  # the rows are judged with the set of now
                if rebuild or label != self.judge_version or self._meta(conn, "fingerprint") != self._fingerprint:
                    self._create(conn)  # dropped first: no row judged by another set is left under the new name
                    self._label(label)
                    conn.execute("INSERT INTO meta VALUES ('fingerprint', ?)", (self._fingerprint,))
                data_version = conn.execute("PRAGMA data_version").fetchone()[0]
                stored = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT path, state, files FROM folders")}
                self._first_new = conn.execute("SELECT coalesce(max(id), 0) FROM documents").fetchone()[0]
            total = sum(files for _, files in stored.values())
            if not stored and progress is not None:  # nothing known yet: count the files, for the progress
                total = sum(1 for _, files in self.vault.walk_streams() for _ in files)
            sync = _Pass(self, batch=_Batch(), counts=counts, total=total, progress=progress)
            fresh: list[tuple[str, bytes, int]] = []  # states to store: folders whose every file has its row
            listed: set[str] = set()  # folders holding documents: one entry a folder, not a file
            walked = 0  # files that have their row once the sync is done
            for rel, files in self.vault.walk_streams():
                known = stored.get(rel)
                seen, changed = sync.folder(rel, files, None if known is None else _chunk_digests(known[0]))
                walked += seen.count
                if seen.count:
                    listed.add(rel)
                    if changed:
                        fresh.append((rel, seen.digest(), seen.count))
            if progress is not None and (sync.reported != sync.done or sync.done == 0):
                progress(sync.done, sync.done)
            sync.plan_reading()
            self._flush(sync.batch, counts)
            with self._reading() as conn:
                outside = [] if self._row_count(conn) == walked else \
                    self._rows_outside(conn, listed)  # in folders that hold no documents now
            sync.gone(outside)
            self._flush(sync.batch, counts)
            with self._reading() as conn:
                lone = self._lone_duplicates(conn)
            for found in lone:  # the file that claimed an id with others claims it alone now
                counts["unchanged"] -= 1  # as its problem's row was counted
                counts.update(self._plan([found], (), sync.batch))
            # after many changes, merge the FTS index into one segment: searches read less, and the
            # watcher's small writes then merge with small segments only (no 40 ms stalls)
            optimize = counts["added"] + counts["updated"] + counts["removed"] >= OPTIMIZE_AFTER
            stale = stored.keys() - listed
            problem_count = self._flush(sync.batch, counts, optimize=optimize, states=(data_version, fresh, stale))
        self._check_label()
        if optimize:
            allocator.give_back()
        return SyncReport(counts["added"], counts["updated"], counts["removed"], counts["unchanged"], problem_count,
                          time.perf_counter() - start)

    @staticmethod
    def _row_count(conn: sqlite3.Connection) -> int:
        count: int = conn.execute("SELECT (SELECT count(*) FROM documents) + (SELECT count(*) FROM problems)"
                                  ).fetchone()[0]
        return count

    @staticmethod
    def _rows_outside(conn: sqlite3.Connection, folders: Container[str]) -> list[tuple[str, bool]]:
        """(path, is a document) of the rows whose folder is none of `folders` (and so gone)."""
        cursor = conn.execute("SELECT path, 1 FROM documents UNION ALL SELECT path, 0 FROM problems")
        gone: list[tuple[str, bool]] = []
        while rows := cursor.fetchmany(CHUNK):
            gone += [(path, bool(document)) for path, document in rows if path.rpartition("/")[0] not in folders]
        return gone

    def _lone_duplicates(self, conn: sqlite3.Connection) -> list[Found]:
        """The files stored as claiming an id with others that now claim it alone (the others
        were renamed or deleted), as they are on disk now."""
        rows = conn.execute(
            "SELECT p.path, p.kind, p.key FROM problems p WHERE p.duplicate = 1 AND "
            "(SELECT count(*) FROM problems q WHERE q.kind = p.kind AND q.key = p.key) + "
            "(SELECT count(*) FROM documents d WHERE d.kind = p.kind AND d.key = p.key) = 1").fetchall()
        return [found for found in (self._stat(rel, kind, key) for rel, kind, key in rows) if found is not None]

    @staticmethod
    def _folder_rows(conn: sqlite3.Connection, rel: str, names: Iterable[str]
                     ) -> dict[str, tuple[int, int, int]]:
        """name -> (mtime_ns, size, 1 for a document, 0 for a problem, 2 for a duplicate) of the
        rows of these files of one folder."""
        prefix = rel + "/"
        paths = json.dumps([prefix + name for name in names])
        start = len(prefix) + 1
        found: dict[str, tuple[int, int, int]] = {}
        for path, mtime_ns, size, what in conn.execute(
                "SELECT path, mtime_ns, size, 1 FROM documents WHERE path IN (SELECT value FROM json_each(?1)) "
                "UNION ALL SELECT path, mtime_ns, size, 2 * duplicate FROM problems "
                "WHERE path IN (SELECT value FROM json_each(?1))", (paths,)):
            found[path[start - 1:]] = (mtime_ns, size, what)
        return found

    @staticmethod
    def _folder_row_count(conn: sqlite3.Connection, rel: str) -> int:
        where = "WHERE path > ?1 AND path < ?2 AND instr(substr(path, ?3), '/') = 0"
        bounds = (rel + "/", rel + "0", len(rel) + 2)  # '0' follows '/': every path under rel/ sorts between
        count: int = conn.execute(f"SELECT (SELECT count(*) FROM documents {where}) + "
                                  f"(SELECT count(*) FROM problems {where})", bounds).fetchone()[0]
        return count

    def _folder_paths(self, rel: str) -> Iterator[tuple[str, bool]]:
        """(path, is a document) of every row right in one folder, a chunk at a time."""
        where = "WHERE path > ?1 AND path < ?2 AND instr(substr(path, ?3), '/') = 0"
        bounds = (rel + "/", rel + "0", len(rel) + 2)
        with self._reading() as conn:
            cursor = conn.execute(f"SELECT path, 1 FROM documents {where} UNION ALL "
                                  f"SELECT path, 0 FROM problems {where}", bounds)
            while rows := cursor.fetchmany(CHUNK):
                yield from ((path, bool(document)) for path, document in rows)

    def _flush(self, batch: _Batch, counts: Counter[str], *, optimize: bool = False,
               states: tuple[int, list[tuple[str, bytes, int]], Iterable[str]] | None = None) -> int:
        """Write a batch in one transaction; returns the number of problems now stored. Rows of
        files claiming an id with another row become problems naming them all. `states`: (the
        sync's last write: data_version when the sync read the rows, folder states to store,
        folder states to drop); they are written only if no other connection wrote meanwhile."""
        keys = [(row[1], row[2]) for rows in (batch.documents, batch.problems) for row in rows.values()]
        outcomes = dict(batch.outcomes)
        with self._writing() as conn:
            self._pending_tops |= batch.flush(conn)
            clashes = _clashes(conn, keys)
            if clashes:
                touched, demoted = _mark_duplicates(conn, clashes)
                self._pending_tops |= touched
                for path, rowid in demoted:  # what the sync counted for them is not what happened
                    # written before this batch: unchanged when from before the sync, else (as good
                    # as always) added by it
                    was = outcomes.get(path) or ("unchanged" if rowid <= self._first_new else "added")
                    counts[was] -= 1
                    if was != "added":
                        counts["removed"] += 1
            if states is not None:
                self._pending_tops |= _restate_duplicates(conn)
                if conn.execute("PRAGMA data_version").fetchone()[0] == states[0]:
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

    def _plan_read(self, founds: list[Found], documents: Container[str], batch: _Batch) -> list[str]:
        """Plan files that each claim an id alone, read first and judged together (`judge_many`).
        Empties `founds`."""
        read: list[Document | BadFile] = []
        for found in founds:
            try:
                read.append(self.vault.read(found.kind, found.key, found.path))
            except BadFile as exc:
                read.append(exc)
        threats: dict[int, Mapping[str, Any] | None] = {}  # id(document) -> its threat value
        if self._judge_many is not None:
            judged = [document for document in read if isinstance(document, Document)]
            with suppress(Exception):  # whatever fails here fails again, one by one, in _row
                threats = dict(zip(map(id, judged), self._judge_many(judged), strict=True))
        outcomes = [outcome for found, document in zip(founds, read, strict=True)
                    for outcome in self._plan([found], documents, batch, document, threats.get(id(document), _JUDGE))]
        founds.clear()
        return outcomes

    def _plan(self, founds: list[Found], documents: Container[str], batch: _Batch,
              read: Document | BadFile | None = None, threat: Mapping[str, Any] | None | object = _JUDGE) -> list[str]:
        """Read the files claiming one (kind, key) into `batch`; returns what happens to each row.
        `documents` holds the paths indexed now; `read` is the one file's document (or why it
        cannot be read) when it was read already, `threat` its threat value when judged already
        (else _JUDGE)."""
        rels = [found.rel for found in founds]
        if len(founds) > 1:  # two files claim one id: each is a problem and neither is indexed (as Vault.scan)
            reason = _reason(founds[0].key, rels)
            for rel, found in zip(rels, founds, strict=True):
                batch.problems[rel] = (rel, found.kind, found.key, reason, DUPLICATE_FIX, found.mtime_ns, found.size, 1)
            return ["removed" if rel in documents else "problem" for rel in rels]
        found, rel = founds[0], rels[0]
        try:
            if isinstance(read, BadFile):
                raise read
            document = read if read is not None else self.vault.read(found.kind, found.key, found.path)
            batch.documents[rel] = self._row(rel, found, document, threat)
            batch.outcomes[rel] = "updated" if rel in documents else "added"
        except BadFile as exc:
            batch.problems[rel] = (rel, found.kind, found.key, exc.reason, exc.fix, found.mtime_ns, found.size, 0)
            return ["removed" if rel in documents else "problem"]
        return ["updated" if rel in documents else "added"]

    def _row(self, rel: str, found: Found, document: Document, judged: object = _JUDGE) -> tuple[Any, ...]:
        """The row of a document; `judged`: its threat value when judged already, else _JUDGE."""
        meta = document.meta
        try:
            if self._judge is None:
                threat = meta.get("threat")
            elif judged is _JUDGE:
                threat = self._judge(document)
            else:
                threat = judged if isinstance(judged, Mapping) else None
        except Exception as exc:  # an entry that cannot be judged stays out of search, the rest index
            raise BadFile(found.path, f"could not be checked for threats ({type(exc).__name__}: {exc})",
                          "Report this as a bug; the entry stays out of search until it can be checked") from exc
        updated = meta.get("updated") or meta.get("finished") or meta.get("started") or meta.get("created")
        body = _KNOWLEDGE_SECTION.sub("", document.body) if found.kind == "session" else document.body
        return (rel, found.kind, found.key, found.mtime_ns, found.size, document.revision, document.stored_revision,
                document.title, _JSON.encode(dict(meta)), body,
                _text(meta.get("scope")), _text(meta.get("category")), _when(meta.get("created")), _when(updated),
                int(meta.get("untrusted") is True), None if threat is None else json.dumps(dict(threat)))

    def update(self, path: Path) -> None:
        """One file changed (or appeared): re-read it. Non-documents and temp files are ignored.
        (A folder moved or deleted is no file event: call sync() for it.) After the judge's
        pattern set changed, the whole index is judged again instead (see __init__)."""
        if self._current_judge_version() != self.judge_version:
            self.sync()
            return
        try:
            self._refresh(path)
        except _Reset:
            self.sync()
            return
        self._check_label()

    def _check_label(self) -> None:
        """After a write: if the judge's set changed while rows were judged, some may be judged
        by another set than the name says. The index then names none, in the file too, so that
        nothing takes its rows' verdicts for the set of now, and the next sync rebuilds it."""
        if self._judge is None or self._current_judge_version() == self.judge_version:
            return
        with self._lock, self._writing() as conn:
            self._label(None)
            conn.execute("UPDATE meta SET value = ? WHERE name = 'fingerprint'", ("judged by a set since changed",))

    def _current_judge_version(self) -> str | None:
        if self._judge is None:
            return None
        version = self._judge_version
        return version() if callable(version) else version

    def _label(self, judge_version: str | None) -> None:
        """Name the verdicts the rows are judged with (in the index file too, by a sync, which
        rebuilds an index holding another name)."""
        self.judge_version = judge_version
        self._fingerprint = json.dumps({"max_file_bytes": self.vault.max_file_bytes,
                                        "session_bytes": self.vault.max_bytes("session"), "judge": judge_version})

    # --- vectors (vectors.py) -------------------------------------------------------------

    def embed(self, progress: Callable[[int, int], None] | None = None, most: int | None = None,
              threads: int = 1) -> int:
        """Embed every document of the embedded kinds that has no vectors from the model of now
        (all of them, after a model change), a batch at a time, each written in a short
        transaction: a search or the watcher's writes wait one batch at most. Returns how many
        were embedded; 0 without a model. `progress(done, total)` after each batch. `most`: embed
        at most this many (a search's share: the rest wait for `sentient index` or serve's
        background embedding). A whole pass (no `most`) then keeps the vectors file current
        (keep_vectors). `threads`: batches embedded at once, a thread each (vectors.embed_pending)."""
        if self._embedder is None or self._embedded_at == self.version:
            if self._embedder is not None and most is None:
                self.keep_vectors()
            return 0
        with self._reading() as conn:
            installed = model_id() if self._embedder is shipped_embedder else None  # found without loading it
            if nothing_to_embed(conn, installed):  # no model loaded for nothing (a no-change index)
                self._embedded_at = self.version
                if most is None:
                    self.keep_vectors()
                return 0
        model = self.semantic_model()
        if model is None:
            return 0
        with self._embedding:
            if self._embedded_at == self.version:
                return 0
            with self._writing() as conn:
                forget_other_models(conn, model.id)
            with self._reading() as conn:
                total = pending(conn)

            def read(after: int, most: int) -> list[tuple[int, str, str, str, str]]:
                with self._reading() as conn:
                    return conn.execute(_PENDING, (after, most)).fetchall()

            def write(docs: list[tuple[int, str]], vectors: list[tuple[int, int, str, bytes]]) -> None:
                revision = dict(docs)
                current = "EXISTS (SELECT 1 FROM documents WHERE id = ? AND revision = ?)"  # not edited meanwhile
                with self._writing() as conn:
                    conn.executemany(f"INSERT OR REPLACE INTO embedded SELECT ?, ? WHERE {current}",
                                     [(doc, rev, doc, rev) for doc, rev in docs])
                    conn.executemany(f"INSERT OR REPLACE INTO vectors SELECT ?, ?, ?, ? WHERE {current}",
                                     [(*row, row[0], revision[row[0]]) for row in vectors])

            embed = partial(self._remembered.embed, model)  # what the index embedded last is not embedded again
            if threads > 1:
                allocator.share_arenas()
            done = embed_pending(read, write, embed, total, progress, most, threads) if total else 0
            if most is None or done < most:  # none left waiting at this version
                self._embedded_at = self.version
        if most is None:
            self.keep_vectors()
        return done

    def waiting(self) -> int:
        """Reader.waiting, without counting when this index embedded every document at its
        version now (a count of the tables took 20 ms at 100,000 entries, every search)."""
        return 0 if self._embedded_at == self.version else super().waiting()

    def keep_vectors(self) -> bool:
        """Write the vectors file (vectors.py) again when it is missing or more than REWRITE_AFTER
        documents behind the index: what an embedding pass does when it is done, never a search.
        Returns whether it was written."""
        with self._reading() as conn:
            if not behind(conn, self.path):
                return False
        if not self._keeping_vectors.acquire(blocking=False):  # another thread writes it now
            return False
        try:
            return write_file(self._reading, self._writing, self.path)
        except (OSError, ValueError) as exc:  # searches read the index instead, as they did before the file
            log.warning("the vectors file beside %s cannot be written (%s); search by meaning reads the "
                        "vectors from the index instead", self.path, exc)
            return False
        finally:
            self._keeping_vectors.release()

    # --- the watcher's lease (watched.py) -------------------------------------------------

    def lease(self) -> None:
        """Say, in the index, that this process keeps it current (its watcher applies every file
        event): until release(), a command of this vault may search it without a sync first."""
        mine = json.dumps(this_process())
        with self._lock:
            with self._reading() as conn:
                if self._meta(conn, LEASE) == mine:
                    return
            with self._writing() as conn:
                conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (LEASE, mine))

    def release(self) -> None:
        """Take back this process's lease (events stopped, a batch failed, the watcher stops)."""
        mine = json.dumps(this_process())
        with suppress(IndexUnavailable), self._lock, self._writing() as conn:
            conn.execute("DELETE FROM meta WHERE name = ? AND value = ?", (LEASE, mine))

    def watched(self) -> bool:
        """Whether a process that runs now keeps this index current, with the settings and the
        pattern set this one has (else a sync would rebuild it): then a sync finds nothing its
        watcher has not applied, bar what changed in the last fraction of a second."""
        with self._reading() as conn:
            lease, fingerprint = self._meta(conn, LEASE), self._meta(conn, "fingerprint")
        return fingerprint == self._fingerprint and valid(lease)

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
            rows = conn.execute("SELECT path, 1, mtime_ns, size FROM documents WHERE kind = ?1 AND key = ?2 UNION "
                                "SELECT path, 0, mtime_ns, size FROM problems WHERE kind = ?1 AND key = ?2",
                                (kind, key)).fetchall()
            indexed = {rel for rel, is_document, _, _ in rows if is_document}
            rels = {rel for rel, _, _, _ in rows} | {self.vault.rel_of(path) or ""} - {""}
            founds = [f for f in (self._stat(rel, kind, key) for rel in sorted(rels)) if f is not None]
            if len(rows) == 1 and len(founds) == 1 and rows[0][1:] == (1, founds[0].mtime_ns, founds[0].size):
                return  # its one file, indexed as it is on disk (by the process that wrote it): nothing to read
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


class _Pass:
    """One sync's work on the folders that changed: their files looked up a chunk at a time, the
    changed ones read and judged together (`judge_many`), then planned into the batch, which is
    written whenever it is full."""

    def __init__(self, index: Index, *, batch: _Batch, counts: Counter[str], total: int,
                 progress: Callable[[int, int], None] | None) -> None:
        self.index = index
        self.batch = batch
        self.counts = counts
        self.total = total
        self.progress = progress
        self.done = self.reported = 0
        self.reading: list[Found] = []  # read and judged together, then planned
        self.reading_bytes = 0
        self.indexed: set[str] = set()  # those of `reading` that have a document row now

    def advance(self, count: int) -> None:
        self.done += count
        while self.progress is not None and self.done - self.reported >= 256:
            self.reported += 256
            self.progress(self.reported, max(self.total, self.reported))  # total: as the last sync found

    def folder(self, rel: str, files: Iterator[File], known: list[bytes] | None) -> tuple[_State, bool]:
        """Bring one folder's rows up to date with its files, as they are listed: a chunk whose
        digest is the one `known` (the state stored) has for it is skipped, the files of any
        other are looked up in the index. Returns the folder's state as listed now, and whether
        it is not the one stored."""
        index, root = self.index, self.index.vault.root
        seen = _State()
        before: int | None = None  # rows in the folder before this sync wrote any
        matched = 0  # files that had a row before
        number = 0  # of the chunk
        while chunk := list(islice(files, CHUNK)):
            number += 1
            if seen.add(chunk) == (known[number - 1] if known is not None and number <= len(known) else None):
                matched += len(chunk)
                self.counts["unchanged"] += len(chunk)
                self.advance(len(chunk))
                continue
            with index._reading() as conn:
                if before is None:
                    before = index._folder_row_count(conn, rel)
                rows = index._folder_rows(conn, rel, [file[0] for file in chunk])
            for name, kind, key, mtime_ns, size in chunk:
                row = rows.get(name)
                if row is not None:
                    matched += 1
                    if row[0] == mtime_ns and row[1] == size:
                        self.counts["unchanged"] += 1
                        continue
                found = Found(root, f"{rel}/{name}", kind, key, mtime_ns, size)
                if row is not None and row[2] == 1:
                    self.indexed.add(found.rel)
                self.reading.append(found)
                self.reading_bytes += size
                if len(self.reading) >= JUDGED_TOGETHER or self.reading_bytes >= JUDGED_BYTES:
                    self.plan_reading()
            self.advance(len(chunk))
        changed = before is not None or known is None or len(known) != number
        if changed and before is None:  # chunks gone from its end: nothing of it written yet
            with index._reading() as conn:
                before = index._folder_row_count(conn, rel)
        if before is not None and before > matched:  # rows whose file is gone
            self.gone([(path, document) for path, document in index._folder_paths(rel)
                       if not os.path.isfile(os.path.join(root, path))])
        return seen, changed

    def plan_reading(self) -> None:
        if self.reading:
            self.counts.update(self.index._plan_read(self.reading, self.indexed, self.batch))
            self.indexed.clear()
            self.reading_bytes = 0
        if len(self.batch) >= BATCH:
            self.index._flush(self.batch, self.counts)

    def gone(self, rows: list[tuple[str, bool]]) -> None:
        self.batch.deleted.update(path for path, _ in rows)
        self.counts["removed"] += sum(document for _, document in rows)
        if len(self.batch) >= BATCH:
            self.index._flush(self.batch, self.counts)


class _Reset(Exception):
    """The database file was corrupt and has been replaced by an empty index."""
