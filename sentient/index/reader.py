"""The reading side of the index: its connections, search and its ranking and counting, and
the listings. `Index` (index.py) derives from `Reader` and sets up the state declared here."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from sentient.embedding import Embedder
from sentient.errors import IndexUnavailable
from sentient.index.schema import (
    _COLUMNS,
    _NEWEST,
    CHUNK,
    FIX,
    PREFETCH,
    TITLE_WEIGHT,
    Hit,
    IndexedDoc,
    Listed,
    _is_corrupt,
    _loads,
    _when,
    phrases,
)
from sentient.index.vectors import Matrix, blended, fused, pending
from sentient.search import MODES as MODES  # where the CLI, which loads no index, finds them
from sentient.vault.store import Problem, Vault
from sentient.vault.sync import conflict_of

# Of each ranking fused: the best this many (at least the limit) of BM25 and of vectors. A paraphrase's
# answer is often high among the vectors and deep in BM25 (it holds the name only): fusing the best 20
# of each lost that (bench_recall recall@10 0.70 -> 0.67, paraphrased 0.27 -> 0.17).
FUSED_DEPTH = 50
EMBED_IN_SEARCH = 32  # documents a search embeds first (about a tenth of a second): what was just written
QUERIES_KEPT = 16  # query embeddings kept (Reader._query_vector)
HELPERS = 4  # threads ranking by words for hybrid searches under way at once (more wait)
SNIPPET_CHARS = 160  # of the piece a vector hit was found by
_SNIPPET = "snippet(documents_fts, -1, '[', ']', '…', 12)"
_HIT = ("d.id, d.kind, d.key, d.path, d.title, {snippet}, d.scope, d.category, d.updated, d.revision, d.untrusted, "
        "d.threat")  # the columns of a Hit


class Reader:
    """Connections and every query of an Index; what Index.__init__ sets up is declared here."""

    vault: Vault
    timeout: float
    broad: int
    embed_in_search: int
    path: Path
    _counts: tuple[tuple[int, int], dict[str | None, tuple[int, int]]]
    _local: threading.local
    _readers: list[sqlite3.Connection]
    _readers_lock: threading.Lock
    _generation: int
    _version: int
    _folder_versions: Counter[str]
    _corrupt: bool
    _embedder: Callable[[], Embedder | None] | None  # the model, when this index ranks by meaning too
    _matrix: Matrix | None  # every vector, as of Matrix.state
    _queries: dict[tuple[str, str], Any]  # (model id, query) -> its embedding, the last QUERIES_KEPT
    _pool: ThreadPoolExecutor | None  # _helpers(), made on the first hybrid search

    # --- connections -----------------------------------------------------------------

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

    @property
    def version(self) -> tuple[int, int]:
        """Changes whenever this index's rows change: a key for caches of what it holds."""
        return (self._generation, self._version)

    def version_of(self, top: str) -> tuple[int, int]:
        """Changes whenever rows under one top-level folder (memory, pins, ...) change."""
        return (self._generation, self._folder_versions[top])

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
               any_word: bool = False, not_kind: str | None = None, mode: str = "bm25",
               recency: float = 0.0) -> list[Hit]:
        """Documents matching any word of `query`, best first, ranked by BM25 as a bare FTS5
        `a OR b` query ranks them (the title weighing more): an entry holding the rare words of
        the query ranks above a long one holding every word once. (Asking for every word first,
        and for any word only when no entry held them all, lost to that bare query: a long session
        that mentions everything pushed out the short turn that answers.)
        `any_word`: no word left out (see below). `kind`: only that kind; `not_kind`: every
        kind but that one.

        `since`/`until` bound the `updated` time (ISO; a bare date for `until` means its whole day).

        Ranking costs about a microsecond per matching entry (FTS5 scores every match), so words
        found in more than a tenth of all entries (and more than `self.broad`) are left out when
        the query has other words, which rank above them anyway: a word weighs less the more
        entries hold it. A query of such words alone ranks the entries holding all of them, and
        when those are more than `self.broad`, only those holding them in their title, unless
        fewer than `limit` do.

        `mode`: "bm25" (words), "vector" (meaning: the cosine of the query's embedding and the
        best piece of each document), or "hybrid" (both rankings' scores blended, the words
        weighing less when they single out no document: vectors.blended). Without an embedding
        model (semantic_model() is None) every mode ranks by words. `recency`: in hybrid mode,
        the weight of a ranking of the hits of both, newest first, fused with the blended one by
        reciprocal rank (1.0 weighs as much).
        """
        if mode not in MODES:
            raise ValueError(f"unknown search mode {mode!r}; one of {', '.join(MODES)}")
        filters = {"d.kind = ?": kind, "d.kind != ?": not_kind, _scope_clause("d.scope", scope): scope,
                   "d.category = ?": category,
                   "d.updated >= ?": _when(since), "d.updated <= ?": _until(until)}
        clauses = "".join(f" AND {sql}" for sql, value in filters.items() if value is not None)
        params = [value for value in filters.values() if value is not None]
        limit = max(1, min(limit, 1000))
        words = phrases(query)
        if not words:
            return []
        model = self.semantic_model() if mode != "bm25" else None
        if model is None:
            return self._words(words, any_word, clauses, params, limit)[1]
        if self.embed_in_search:  # what just changed; a vault never embedded waits for serve or `index`
            self.embed(most=self.embed_in_search)
        if mode == "vector":
            hits = self._nearest(self._query_vector(model, query[:4000]), clauses, params, limit)
            texts = self._pieces([piece for _, piece in hits])
            return [replace(hit, snippet=texts.get(piece, "")) for hit, piece in hits]
        depth = max(limit, FUSED_DEPTH)
        ids: dict[Path, int] = {}  # of the hits by words: fetched without snippets, the shown ones get theirs
        # both rankings at once: SQLite and numpy's products let go of the GIL (docs/benchmarks.md)
        by_words = self._helpers().submit(self._words, words, any_word, clauses, params, depth, ids)
        near = self._nearest(self._query_vector(model, query[:4000]), clauses, params, depth)
        match, found = by_words.result()
        by_path = {hit.path: hit for hit in [*(hit for hit, _ in near), *found]}
        scores = blended([(hit.path, hit.score) for hit in found], [(hit.path, hit.score) for hit, _ in near], depth)
        if recency:
            newest = sorted(by_path, key=lambda path: by_path[path].updated or "", reverse=True)
            scores = fused([list(scores), newest], [1.0, recency])
        best = list(scores.items())[:limit]
        snippets = self._snippets(match, [ids[path] for path, _ in best if path in ids])
        pieces = {hit.path: piece for hit, piece in near}  # a hit by words shows where its words are; else
        texts = self._pieces([pieces[path] for path, _ in best  # the piece found by meaning
                              if path in pieces and snippets.get(ids.get(path, -1)) is None])
        shown = []
        for path, score in best:
            snippet = snippets.get(ids[path]) if path in ids else None
            if snippet is None:
                snippet = texts.get(pieces[path], "") if path in pieces else ""
            shown.append(replace(by_path[path], score=score, snippet=snippet))
        return shown

    def _words(self, words: list[str], any_word: bool, clauses: str, params: list[str], limit: int,
               ids: dict[Path, int] | None = None) -> tuple[str, list[Hit]]:
        """The BM25 ranking of search(), and the FTS5 query it ran. `ids`: see _search()."""
        if any_word and len(words) > 1:
            match = " OR ".join(words)
            return match, self._search(match, clauses, params, limit, ids)
        if len(words) > 1:
            common = max(self.broad, self._entries() // 10)
            narrow = [word for word in words if not self._more_than(word, common)]
            if narrow:
                match = " OR ".join(narrow)
                return match, self._search(match, clauses, params, limit, ids)
        match = " ".join(words)
        if self._more_than(match, self.broad):
            titled = f"title : ({match})"
            hits = self._search(titled, clauses, params, limit, ids)
            if len(hits) >= limit:
                return titled, hits
            if ids is not None:
                ids.clear()
        return match, self._search(match, clauses, params, limit, ids)

    # --- by meaning ------------------------------------------------------------------------

    def waiting(self) -> int:
        """How many documents the model has not embedded yet (after a model change, every one):
        a search by meaning finds them by their words alone until `sentient index` or serve's
        background embedding does. Counted from the tables' pages, not a walk of their rows."""
        with self._reading() as conn:
            return pending(conn)

    def semantic_model(self) -> Embedder | None:
        """The embedding model this index ranks by meaning with; None when it has none (or it
        cannot load: embedding.problem() says why)."""
        return None if self._embedder is None else self._embedder()

    def embed(self, progress: Callable[[int, int], None] | None = None, most: int | None = None) -> int:
        """Embed the documents that wait for it; Index does (a Reader has nothing to write with)."""
        return 0

    def _helpers(self) -> ThreadPoolExecutor:
        """The threads a hybrid search ranks by words in, while its own ranks by meaning."""
        with self._readers_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(HELPERS, thread_name_prefix="sentient-search")
            return self._pool

    def _query_vector(self, model: Embedder, query: str) -> Any:
        """The embedding of `query`, kept for the next few searches (`sentient search` asks twice:
        for the sessions apart)."""
        queries = self._queries
        known = queries.get((model.id, query))
        if known is None:
            known = model.query(query)
            if len(queries) >= QUERIES_KEPT:  # a new dict, not one another thread is reading emptied
                queries = self._queries = {}
            queries[(model.id, query)] = known
        return known

    def _nearest(self, query: Any, clauses: str, params: list[str], limit: int) -> list[tuple[Hit, tuple[int, int]]]:
        """The `limit` documents passing the filters whose best piece is nearest the query, by
        closeness (Matrix.nearest), each with its best piece's (doc, part), its snippet not read yet
        (_pieces reads those shown: a piece's row is a lookup in a large table, 0.1 ms when its
        page is not cached, and a hybrid search ranks 50 to show 10)."""
        with self._reading() as conn:
            matrix = self._matrix = Matrix.load(conn, self.path, self._generation, self._matrix)
        most = limit * PREFETCH if clauses else limit  # (without filters every document passes)
        while True:
            near = matrix.nearest(query, most)
            if not near:
                return []
            wanted = json.dumps([doc for doc, _, _ in near])
            with self._reading() as conn:  # which pass the filters, then the rows of the best of those only
                passing = {r[0] for r in conn.execute(f"SELECT d.id FROM json_each(?) w CROSS JOIN documents d ON "
                                                      f"d.id = w.value WHERE 1{clauses}", [wanted, *params])}
                best = [(doc, part, score) for doc, part, score in near if doc in passing][:limit]
                if len(best) >= limit or len(near) < most:
                    rows = {r[0]: r for r in conn.execute(  # again: a row may have changed since
                        f"SELECT {_HIT.format(snippet=repr(''))} FROM json_each(?) w CROSS JOIN documents d ON "
                        f"d.id = w.value WHERE 1{clauses}", [json.dumps([doc for doc, _, _ in best]), *params])}
                    return [(Hit(r[1], r[2], self.vault.root / r[3], r[4], "", score, r[6], r[7], r[8], r[9],
                                 bool(r[10]), _loads(r[11])), (doc, part))
                            for doc, part, score in best if (r := rows.get(doc))]
            most *= 4

    def _pieces(self, pieces: list[tuple[int, int]]) -> dict[tuple[int, int], str]:
        """The text of each (doc, part) of `pieces` still in the index, shortened for a snippet."""
        if not pieces:
            return {}
        with self._reading() as conn:
            return {(r[0], r[1]): _shortened(r[2]) for r in conn.execute(
                "SELECT v.doc, v.part, v.text FROM json_each(?) w JOIN vectors v ON v.doc = "
                "json_extract(w.value, '$[0]') AND v.part = json_extract(w.value, '$[1]')",
                [json.dumps([list(piece) for piece in pieces])])}

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

    def _search(self, match: str, clauses: str, params: list[str], limit: int,
                ids: dict[Path, int] | None = None) -> list[Hit]:
        """Rank first, then fetch rows and snippets of the best `limit` only (a snippet costs a
        re-tokenise). `ids`: when given, the rows are fetched without snippets (a hybrid search
        ranks 50 by words to show 10) and each hit's row id is put in it, for _snippets()."""
        with self._reading() as conn:
            scores = self._ranked(conn, match, clauses, params, limit)
            if not scores:
                return []
            marks = ", ".join("?" for _ in scores)
            if ids is None:  # CROSS JOIN: FTS5 outside, else SQLite may run the whole MATCH once for each row inside
                rows = conn.execute(
                    f"SELECT {_HIT.format(snippet=_SNIPPET)} FROM documents_fts CROSS JOIN documents d "
                    f"ON d.id = documents_fts.rowid WHERE documents_fts MATCH ? AND documents_fts.rowid IN ({marks})",
                    [match, *scores]).fetchall()
            else:
                rows = conn.execute(f"SELECT {_HIT.format(snippet=repr(''))} FROM documents d WHERE d.id IN ({marks})",
                                    list(scores)).fetchall()
        hits = [(r[0], Hit(r[1], r[2], self.vault.root / r[3], r[4], r[5], -scores[r[0]], r[6], r[7], r[8], r[9],
                           bool(r[10]), _loads(r[11]))) for r in rows]
        if ids is not None:
            ids.update((hit.path, rowid) for rowid, hit in hits)
        return sorted((hit for _, hit in hits), key=lambda hit: -hit.score)

    def _snippets(self, match: str, ids: list[int]) -> dict[int, str]:
        """rowid -> the snippet of `match` in that document, for the rows `ids`."""
        if not ids:
            return {}
        with self._reading() as conn:
            return dict(conn.execute(f"SELECT rowid, {_SNIPPET} FROM documents_fts WHERE documents_fts MATCH ? AND "
                                     f"rowid IN ({', '.join('?' for _ in ids)})", [match, *ids]).fetchall())

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
        where = {"kind = ?": kind, _scope_clause("scope", scope): scope}
        sql = " AND ".join(clause for clause, value in where.items() if value is not None)
        return self._select(f"WHERE {sql}" if sql else "", tuple(v for v in where.values() if v is not None))

    def each(self, kind: str | None = None, *, flagged: bool = False) -> Iterator[IndexedDoc]:
        """Every indexed document (of one kind), a chunk at a time, in no particular order: what
        goes through a whole vault holding a chunk of it, not all of it, in memory. `flagged`:
        only those whose `threat` (the index's judgment) is set."""
        where = " AND ".join(["id > ?", *(["kind = ?"] if kind is not None else []),
                              *(["threat IS NOT NULL"] if flagged else [])])
        after = 0
        while True:
            with self._reading() as conn:
                rows = conn.execute(f"SELECT id, {', '.join(_COLUMNS)} FROM documents WHERE {where} ORDER BY id "
                                    f"LIMIT {CHUNK}", (after, *([kind] if kind is not None else []))).fetchall()
            if not rows:
                return
            after = rows[-1][0]
            yield from self._documents([row[1:] for row in rows])

    def counts(self) -> dict[str, int]:
        """How many documents of each kind the index holds."""
        with self._reading() as conn:
            return dict(conn.execute("SELECT kind, count(*) FROM documents GROUP BY kind").fetchall())

    def _select(self, where: str, params: tuple[str, ...]) -> list[IndexedDoc]:
        with self._reading() as conn:
            rows = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM documents {where} ORDER BY kind, key, path",
                                params).fetchall()
        return self._documents(rows)

    def _documents(self, rows: list[Any]) -> list[IndexedDoc]:
        return [IndexedDoc(kind=r[1], key=r[2], path=self.vault.root / r[0], rel=r[0], title=r[7], revision=r[5],
                           stored_revision=r[6], meta=json.loads(r[8]), body=r[9], scope=r[10], category=r[11],
                           created=r[12], updated=r[13], mtime_ns=r[3], size=r[4], untrusted=bool(r[14]),
                           threat=_loads(r[15])) for r in rows]

    def sessions_of(self, user: str) -> list[tuple[str, str, str | None, str]]:
        """(key, path relative to the vault, persona, title) of every session of a caller (its
        frontmatter's `user`), oldest first."""
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT key, path, json_extract(frontmatter, '$.persona'), title FROM documents "
                "WHERE kind = 'session' AND json_extract(frontmatter, '$.user') = ? "
                "ORDER BY coalesce(nullif(created, ''), ''), key", (user,)).fetchall()
        return [(r[0], r[1], r[2] if isinstance(r[2], str) else None, str(r[3])) for r in rows]

    def session_users(self) -> list[str]:
        """The caller (frontmatter `user`) of each session that names one: one per session."""
        with self._reading() as conn:
            rows = conn.execute("SELECT json_extract(frontmatter, '$.user') FROM documents "
                                "WHERE kind = 'session' AND json_extract(frontmatter, '$.user') IS NOT NULL").fetchall()
        return [r[0] for r in rows if isinstance(r[0], str)]

    def newest(self, kind: str, scopes: Sequence[str], *, flagged: bool = False,
               limit: int | None = None) -> list[Listed]:
        """The documents of one kind in `scopes` (or with no scope), newest first: what a listing
        of thousands needs, without the frontmatter, paths or typed rows of `documents()`.
        `flagged`: only those whose `threat` (the index's judgment) is set; `limit`: the newest
        this many (read along the index of newest first, not sorted whole)."""
        marks = ", ".join("?" for _ in scopes)
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT key, title, body, category, revision, json_extract(frontmatter, '$.threat.allowed_revision'), "
                "json_extract(frontmatter, '$.source'), untrusted "
                f"FROM documents WHERE kind = ? AND (scope IS NULL OR scope IN ({marks})) "
                + ("AND threat IS NOT NULL " if flagged else "")
                + f"ORDER BY {_NEWEST} DESC, key DESC" + ("" if limit is None else f" LIMIT {int(limit)}"),
                (kind, *scopes)).fetchall()
        return [Listed(r[0], r[1], r[2], r[3], r[4], r[5] if isinstance(r[5], str) else None,
                       r[6] if isinstance(r[6], str) else None, bool(r[7])) for r in rows]  # fmt: skip

    def count(self, kind: str, scopes: Sequence[str]) -> int:
        """How many documents of one kind are in `scopes` (or have no scope)."""
        marks = ", ".join("?" for _ in scopes)
        with self._reading() as conn:
            found: int = conn.execute(f"SELECT count(*) FROM documents WHERE kind = ? AND (scope IS NULL OR scope IN "
                                      f"({marks}))", (kind, *scopes)).fetchone()[0]
        return found

    def conflicted(self, kind: str) -> set[str]:
        """The keys of `kind` that have a conflict copy beside them (kept by `sentient sync`),
        from the files the index could not read as entries: each is withheld until resolved."""
        with self._reading() as conn:
            rows = conn.execute("SELECT key FROM problems WHERE kind = ? AND key LIKE '%.conflict-%'",
                                (kind,)).fetchall()
        return {found.original for found in map(conflict_of, (row[0] for row in rows)) if found is not None}

    def problems(self) -> list[Problem]:
        """The vault's folders that cannot be listed (looked at now), then the files that cannot be read."""
        with self._reading() as conn:
            rows = conn.execute("SELECT path, reason, fix, kind FROM problems ORDER BY path").fetchall()
        return self.vault.folder_problems() + [Problem(self.vault.root / r[0], r[1], r[2], r[3]) for r in rows]


def _scope_clause(column: str, scope: str | None) -> str:
    """A filter on scope: an entry with none is global (the scope a written entry gets by default)."""
    return f"({column} = ? OR {column} IS NULL)" if scope == "global" else f"{column} = ?"


def _shortened(text: str) -> str:
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1].rstrip() + "…"


def _until(value: str | None) -> str | None:
    if value is not None and len(value) == 10:  # a bare date: the whole day
        return f"{value}T23:59:59Z"
    return _when(value)
