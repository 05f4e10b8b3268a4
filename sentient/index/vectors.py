"""The index's vectors: what each document says, embedded a piece at a time, for ranking by meaning.

Memory entries, notes, plans and run answers are embedded whole (in windows of about the model's
64 tokens); sessions one message at a time (what the person and the assistant said, not tool
calls). Vectors live in the index file beside the rows they were computed from (`vectors`, float32
blobs keyed by document row and piece) and go with them: a trigger drops a document's vectors when
its row is deleted, so an edited file's new row is embedded again and a deleted one's are gone.
`embedded` names the model each document was embedded with; a model change empties both.

Searching is one matrix-vector product over every vector (a large file's sketch first chooses
which: sketch.py), the best pieces collapsed to their documents. Pieces are ranked by how near they
are to the query once the vault's average vector is taken out of it (Matrix.nearest): a piece like
every other (small talk, "how is your week going?") is near any question, and without this it
outranked the answer. The vectors are kept as one float32 matrix in a file beside the index
(`index.sqlite.vectors-TOKEN.npy`, their average named in the index with it), memory-mapped by
every process that searches: a search in a new process costs milliseconds, not a read of every
vector, and the pages are shared, not copied. The file is written by the embedding passes
(`sentient index`, serve's background embedding), never by a search; the index names it with the
last change it holds (`vectors_log` numbers every document whose vectors changed), and a search
hides the file's rows of every document changed since and reads those documents' vectors from the
index: a stale file never gives a deleted or edited document's old vector.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from sentient.embedding import Embedder, cpus, windows
from sentient.index import sketch
from sentient.vault import transcript
from sentient.vault.kinds import KINDS

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

EMBEDDED_KINDS = ("memory", "note", "plan", "session", "run")
MOST_PIECES = 256  # of one document: a session longer than that is embedded as far as this
EMBED_BATCH = 256  # documents read at a time, embedded, then written in short transactions
EMBED_PIECES = 512  # texts (pieces of documents) of a batch at most: embedded, then written in one transaction
MODEL_META = "embedding_model"
# A piece less similar than this to the query (its plain cosine) is no hit: the nearest pieces to
# words the vault never speaks of (zzzqqq, lorem ipsum, a rare animal's name against a meeting)
# measure 0.10-0.26 with this model, most paraphrases 0.3 up; on bench/bench_recall.py 0.25 and
# 0.35 fused alike
MIN_COSINE = 0.3
QUERIES_KEPT = 4  # closenesses a Matrix keeps: of a query to every row (a float32 each), or to its candidates
# Hybrid ranking blends the two lists' scores, each scaled to 0-1 within its list: BM25 from the
# last of its list to its first, a closeness (Matrix.nearest) from the last of the vector list (0,
# no nearer than the vault's average, when that list is short) to its first; a document missing
# from a list gets 0 there. The words weigh
# WORDS_WEIGHT, unless their ranking is flat (its 10th score within FLAT_GAP of its first: the
# query's words single out no document, as when a paraphrase shares only a name with its answer);
# then FLAT_WORDS_WEIGHT, and meaning decides. Chosen on bench/bench_recall.py's sets (seeds 7 and
# 24, docs/benchmarks.md): reciprocal rank fusion (k 10, the vectors at half weight) gave recall@10
# 0.73/0.70, these 0.79/0.75; a fixed weight either lost the questions naming a day (meaning
# cannot read a date) or the paraphrases (the name matches every turn of its speaker). Chosen with
# plain cosines; since vectors are ranked apart from the vault's average (Matrix.nearest), the
# same weights give 0.87/0.83 there, and 0.83-0.85 on seeds 99 and 301-303, never chosen on.
WORDS_WEIGHT = 0.7
FLAT_WORDS_WEIGHT = 0.2
FLAT_GAP = 0.1
FLAT_RANK = 10
# Reciprocal rank fusion, for a ranking by recency blended in (the history tools' recent_first): a
# document scores the sum over rankings of weight / (FUSION_K + rank).
FUSION_K = 10
# The vectors file: every vector as one float32 matrix beside the index file (index.sqlite.vectors-
# TOKEN.npy, and the (doc, part) of each row in TOKEN.rows.npy), named in the meta row FILE_META
# with the last change of vectors_log it holds. Written again by an embedding pass once more than
# REWRITE_AFTER documents changed since: until then a search reads those documents' vectors from
# the index (a few milliseconds) and hides their rows of the file.
FILE_META = "vectors_file"
FILE_INFIX = ".vectors-"
REWRITE_AFTER = 500
WRITE_CHUNK = 1024  # vectors read and written at a time (about 2 MB, held three times over)
T = TypeVar("T")
log = logging.getLogger(__name__)
_PENDING = (f"SELECT d.id, d.kind, d.title, d.body, d.revision FROM documents d WHERE d.kind IN "
            f"({', '.join(repr(kind) for kind in EMBEDDED_KINDS)}) AND d.id > ? AND NOT EXISTS "
            "(SELECT 1 FROM embedded e WHERE e.doc = d.id) ORDER BY d.id LIMIT ?")


def pieces(kind: str, title: str, body: str) -> list[str]:
    """The texts of a document that are embedded, each about the model's input or shorter."""
    if kind == "session":
        texts = [message.text for message in transcript.parse(body).messages
                 if message.role in ("user", "assistant") and message.text.strip()]
    else:
        texts = [f"{title}\n{body}"]
    return [piece for text in texts for piece in windows(text)][:MOST_PIECES]


def pending(conn: sqlite3.Connection) -> int:
    """How many documents wait to be embedded: those of the embedded kinds less those embedded
    (an `embedded` row is always one of them, and goes with its document's row), counted without a
    walk of every row: SQLite counts a whole table from its pages, and the other kinds are few
    (asking for the documents without an `embedded` row took 10 ms at 10,000, every search)."""
    others = ", ".join(repr(kind) for kind in KINDS if kind not in EMBEDDED_KINDS)
    count: int = conn.execute(f"SELECT (SELECT count(*) FROM documents) - (SELECT count(*) FROM documents WHERE "
                              f"kind IN ({others})) - (SELECT count(*) FROM embedded)").fetchone()[0]
    return count


def nothing_to_embed(conn: sqlite3.Connection, model: str | None) -> bool:
    """Whether every document has its vectors, from `model`: then there is no model to load."""
    row = conn.execute("SELECT value FROM meta WHERE name = ?", (MODEL_META,)).fetchone()
    return model is not None and row is not None and row[0] == model and pending(conn) == 0


def forget_other_models(conn: sqlite3.Connection, model: str) -> None:
    """Drop every vector computed by another model than `model` (inside a transaction)."""
    row = conn.execute("SELECT value FROM meta WHERE name = ?", (MODEL_META,)).fetchone()
    if row is None or row[0] != model:
        conn.execute("DELETE FROM vectors")
        conn.execute("DELETE FROM embedded")
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (MODEL_META, model))


REMEMBERED = 1024  # pieces whose vectors an index keeps in memory (about 2 MB; 4 sessions of MOST_PIECES)


class Remembered:
    """The vectors of the last `most` pieces an index embedded, by their text. A document's row is
    new after any edit, so all of it is embedded again; a session that grew by one message, or an
    entry edited at its end, then costs the pieces that changed, not every piece again (serve
    embeds each session after every turn). Thread-safe."""

    def __init__(self, most: int = REMEMBERED) -> None:
        self.most = most
        self.computed = 0  # pieces the model embedded through this
        self._model: str | None = None
        self._vectors: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def embed(self, model: Embedder, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """`model.embed(texts)`, the model asked only for the pieces not remembered."""
        import numpy

        with self._lock:
            if self._model != model.id:  # another model's vectors are no use
                self._vectors.clear()
                self._model = model.id
            known = {}
            for text in texts:
                if text in self._vectors:
                    self._vectors.move_to_end(text)
                    known[text] = self._vectors[text]
        missing = list(dict.fromkeys(text for text in texts if text not in known))
        fresh = model.embed(missing) if missing else numpy.zeros((0, model.dimensions), dtype=numpy.float32)
        with self._lock:
            self.computed += len(missing)
            for text, vector in zip(missing, fresh, strict=True):
                self._vectors[text] = known[text] = vector.copy()
            while len(self._vectors) > self.most:
                self._vectors.popitem(last=False)
        out: npt.NDArray[np.float32] = numpy.array([known[text] for text in texts], dtype=numpy.float32)
        return out.reshape(len(texts), model.dimensions)


def embed_pending(read: Callable[[int, int], list[tuple[int, str, str, str, str]]],
                  write: Callable[[list[tuple[int, str]], list[tuple[int, int, str, bytes]]], None],
                  embed: Callable[[Sequence[str]], npt.NDArray[np.float32]], total: int,
                  progress: Callable[[int, int], None] | None, most: int | None = None, threads: int = 1) -> int:
    """Embed the documents `read(after, limit)` gives, a batch at a time, each batch written by
    `write(embedded (doc, revision), vectors)`, `most` of them at most, their pieces' vectors by
    `embed(texts)` (a model's embed, or Remembered.embed for it). Returns how many were embedded.

    `threads` above 1 embeds that many batches at once, each in a thread of its own (numpy lets go
    of the interpreter's lock while it computes, so each has a core), while this thread reads the
    next batch and writes finished ones, in order; `read` and `write` are only called here. Work
    that fits in one batch runs here alone, starting no thread."""
    done = 0

    def batches() -> Iterator[tuple[list[tuple[int, str, str, str, str]], list[tuple[int, int]], list[str]]]:
        """The documents read, EMBED_BATCH at a time, in batches of EMBED_PIECES pieces at most
        (or one document's): 256 sessions of 20 messages each would hold 5,000 texts and their
        vectors at once, three batches at a time."""
        taken, after = 0, 0
        while (most is None or taken < most) and (rows := read(after, EMBED_BATCH if most is None
                                                               else min(EMBED_BATCH, most - taken))):
            after, taken = rows[-1][0], taken + len(rows)
            batch: list[tuple[int, str, str, str, str]] = []
            texts: list[str] = []
            owners: list[tuple[int, int]] = []  # (doc, part) of each text
            for row in rows:
                doc, kind, title, body, _ = row
                parts = pieces(kind, title, body)
                if batch and len(texts) + len(parts) > EMBED_PIECES:
                    yield batch, owners, texts
                    batch, texts, owners = [], [], []
                batch.append(row)
                texts += parts
                owners += [(doc, part) for part in range(len(parts))]
            if batch:
                yield batch, owners, texts

    def store(rows: list[tuple[int, str, str, str, str]], owners: list[tuple[int, int]], texts: list[str],
              vectors: npt.NDArray[np.float32]) -> None:
        nonlocal done
        write([(row[0], row[4]) for row in rows],
              [(doc, part, text, vectors[n].tobytes()) for n, ((doc, part), text) in enumerate(zip(owners, texts,
                                                                                                 strict=True))])
        done += len(rows)
        if progress is not None:
            progress(done, max(total, done))

    if threads <= 1 or min(total, most or total) <= EMBED_BATCH:
        for rows, owners, texts in batches():
            store(rows, owners, texts, embed(texts))
        return done
    pool = ThreadPoolExecutor(threads, thread_name_prefix="sentient-embedding")
    try:
        waiting: deque[tuple[tuple[Any, Any, Any], Future[npt.NDArray[np.float32]]]] = deque()
        for batch in batches():
            waiting.append((batch, pool.submit(embed, batch[2])))
            if len(waiting) > threads:  # one more than the threads: a thread never waits for this one
                finished, vectors = waiting.popleft()
                store(*finished, vectors.result())
        while waiting:
            finished, vectors = waiting.popleft()
            store(*finished, vectors.result())
    finally:
        pool.shutdown(cancel_futures=True)  # an error or an interrupt: what has not started never does
    return done


@dataclass(frozen=True)
class Matrix:
    """Every vector of the index, as of `state`: the rows of `blocks`, one after another, are piece
    `parts[i]` of document `docs[i]`; the rows `hidden` are not current (their documents changed
    since the file they come from was written) and never match. `sketch`: the first block's (the
    vectors file's), when it has one (sketch.py)."""

    state: tuple[int, str, int]  # (the index's generation, the file's token or "", the log's last change)
    docs: npt.NDArray[np.int64]
    parts: npt.NDArray[np.int64]
    blocks: tuple[npt.NDArray[np.float32], ...]
    hidden: npt.NDArray[np.intp]
    mean: npt.NDArray[np.float32]  # the average vector: of the file's rows, else of every row
    # each row's product with `mean`, in the rows' order (see nearest); with a sketch, of the rows
    # after the first block's only: the first block's are the sketch's column 0
    shared: npt.NDArray[np.float32]
    sketch: Sketch | None = None
    # each row's closeness to the last few queries (with a sketch, of the candidates' rows), by the
    # query's bytes and the candidates' count: a search asks twice with one query (sessions
    # apart), and again for more when too few pass its filters, and one product with every vector
    # is most of its time (25 ms at 100,000 entries)
    known: dict[tuple[bytes, int], tuple[npt.NDArray[np.intp] | None, npt.NDArray[np.float32], int]] = field(
        default_factory=dict, init=False, compare=False, repr=False)

    @staticmethod
    def load(conn: sqlite3.Connection, index: Path, generation: int, known: Matrix | None = None) -> Matrix:
        """The vectors of the index file `index` (read through `conn`) as they are now: `known`
        when nothing changed since it was loaded; else the vectors file, memory-mapped, with the
        rows of every document changed since it was written hidden and those documents' vectors
        read from the index; or, without a file that can be read, every vector read from the index."""
        import numpy as np

        conn.execute("BEGIN")  # one snapshot: the file named, the changes since, their vectors
        try:
            stored = _stored(conn)
            state = (generation, stored.token if stored else "", _last_change(conn))
            if known is not None and known.state == state:
                return known
            base = stored.open(index) if stored is not None else None
            if stored is None or base is None:
                docs, parts, vectors = _rows(conn, "")
                mean = _mean(vectors)
                return Matrix(state, docs, parts, (vectors,), np.empty(0, dtype=np.intp), mean,
                              _products(vectors, mean))
            changed = [row[0] for row in conn.execute("SELECT doc FROM vectors_log WHERE seq > ?", (stored.seq,))]
            docs, parts, vectors = _rows(conn, f"WHERE doc IN (SELECT doc FROM vectors_log WHERE seq > {stored.seq:d})")
        finally:
            conn.execute("COMMIT")
        rows, matrix, sketched = base
        hidden = np.flatnonzero(np.isin(rows[:, 0], np.array(changed, dtype=np.int64))) if changed else \
            np.empty(0, dtype=np.intp)
        if known is not None and known.state[1] == stored.token and len(known.blocks) == 2 and \
                (known.sketch is None) == (sketched is None):  # the same file, read alike: its products are known
            mean, shared = known.mean, known.shared[: len(known.shared) - len(known.blocks[1])]
        else:  # a file written before its average was kept is averaged here, once
            mean = np.array(stored.mean, dtype=np.float32) if len(stored.mean) == stored.dims else _mean(matrix)
            shared = np.zeros(0, dtype=np.float32) if sketched is not None else _products(matrix, mean)
        return Matrix(state, np.concatenate([rows[:, 0], docs]), np.concatenate([rows[:, 1], parts]),
                      (matrix, vectors), hidden, mean, np.concatenate([shared, _products(vectors, mean)]), sketched)

    def nearest(self, query: npt.NDArray[np.float32], most: int) -> list[tuple[int, int, float]]:
        """(doc, part, closeness) of the best piece of each of the `most` nearest documents (of
        those with a piece at a cosine of MIN_COSINE or more), best first.

        The closeness of a piece is its cosine with the query less the vault's average vector
        (unit length): the query's cosine with the piece less the average's, scaled. What every
        piece shares (a sentence model puts all its vectors in a narrow cone: here small talk,
        greetings, the shape of a question) then counts for nothing, and what sets the piece apart
        decides. Recall@10 by meaning alone on bench/bench_recall.py went from 0.47-0.50 to
        0.70-0.72 (docs/benchmarks.md). One product with every vector: the plain cosine is the
        closeness scaled back plus the piece's product with the average (`shared`, computed when
        the vectors were loaded; a product with two columns at once cost twice one).

        With a sketch, the rows of the file its sketch puts first (sketch.candidates) and those after
        the file's; every row when they hold too few documents near enough (a query near nothing,
        a filter few documents pass: one product, as without a sketch), or when they would be a
        good share of the file anyway."""
        if not len(self.docs):
            return []
        file = len(self.blocks[0])
        first = None if self.sketch is None else sketch.candidates(most * 4, file)
        if first is not None and first * sketch.SHARE > file:
            first = None
        for ranked in dict.fromkeys([first, None]):  # the sketch's candidates, then every row
            found = self._best(*self._closeness(query, ranked), most)
            if len(found) >= most:
                break
        return found[:most]

    def _best(self, rows: npt.NDArray[np.intp] | None, scores: npt.NDArray[np.float32], close: int,
              most: int) -> list[tuple[int, int, float]]:
        """(doc, part, closeness) of the best piece of each of the `most` documents (or fewer: all
        there are) whose pieces `rows` (None: every row) score best, `close` of them not -3."""
        import numpy as np

        found: dict[int, tuple[int, int, float]] = {}
        wanted = min(close, most * 4)  # pieces: a document may hold several of the best
        while wanted:
            top = np.argpartition(-scores, wanted - 1)[:wanted]
            top = top[np.argsort(-scores[top], kind="stable")]
            found = {}
            for at, score in zip((top if rows is None else rows[top]).tolist(), scores[top].tolist(), strict=True):
                doc = int(self.docs[at])
                if doc not in found:
                    found[doc] = (doc, int(self.parts[at]), score)
            if len(found) >= most or wanted >= close:
                break
            wanted = min(close, wanted * 4)
        return list(found.values())

    def _closeness(self, query: npt.NDArray[np.float32], ranked: int | None) -> tuple[
            npt.NDArray[np.intp] | None, npt.NDArray[np.float32], int]:
        """(rows, closeness of each to `query`, how many are not -3): -3 for a row too far or
        hidden (see nearest); the rows are every row (None) or, with a sketch, the `ranked` rows of
        the file its sketch puts first and those after the file's. Computed once for the last
        QUERIES_KEPT (query, ranked) (never changed after)."""
        import numpy as np

        key = (query.tobytes(), ranked or 0)
        if (known := self.known.get(key)) is not None:
            return known
        apart = query - self.mean
        size = float(np.linalg.norm(apart))
        direction = apart / size if size > 0 else query  # the query is the average itself: the plain cosine ranks
        rows: npt.NDArray[np.intp] | None = None
        if ranked is None or self.sketch is None:
            scores = np.concatenate([product(block, direction) for block in self.blocks if len(block)])
            shared = self.shared if self.sketch is None else np.concatenate([self.sketch.rows[:, 0], self.shared])
        else:
            scores, shared, rows = self._candidates(direction, ranked)
        far = (scores * size + shared if size > 0 else scores) < MIN_COSINE
        scores[far] = -3.0  # below any closeness
        if rows is None:  # (a sketch's candidates are none of them)
            scores[self.hidden] = -3.0
        found = (rows, scores, int((scores > -3.0).sum()))
        if len(self.known) >= QUERIES_KEPT:  # (another thread's search may add one meanwhile: harmless)
            self.known.clear()
        self.known[key] = found
        return found

    def _candidates(self, direction: npt.NDArray[np.float32], ranked: int) -> tuple[
            npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.intp]]:
        """(each row's product with `direction`, its product with the mean, its number) of the
        `ranked` rows of the file whose sketches' products with `direction` are largest (a row's
        sketch is its difference from the mean, projected: its product less the mean's, nearly;
        the file's product with the mean is kept beside it, column 0), in the file's order, and of
        the rows after the file's."""
        import numpy as np

        assert self.sketch is not None
        file = self.blocks[0]
        near = product(self.sketch.rows, np.concatenate([[0.0], self.sketch.axes.T @ direction]).astype(np.float32))
        near[self.hidden] = -np.inf  # a stale row is no candidate (the hidden rows are all the file's)
        chosen = np.sort(np.argpartition(-near, ranked - 1)[:ranked]) if ranked < len(near) else np.arange(len(near))
        chosen = chosen[near[chosen] > -np.inf]  # (more candidates than rows not stale)
        scores, shared, numbers = file[chosen] @ direction, self.sketch.rows[chosen, 0], chosen.astype(np.intp)
        if len(self.blocks) > 1 and len(self.blocks[1]):
            scores = np.concatenate([scores, self.blocks[1] @ direction])
            shared = np.concatenate([shared, self.shared])
            numbers = np.concatenate([numbers, np.arange(len(file), len(file) + len(self.blocks[1]), dtype=np.intp)])
        return scores, shared, numbers


@dataclass(frozen=True)
class Stored:
    """The vectors file of an index, as its meta row names it: `rows` vectors of `dims` floats,
    every vector of the index when the log's last change was `seq`; with a sketch of `sketch`
    floats a row when it is not 0 (sketch.py)."""

    token: str
    seq: int
    rows: int
    dims: int
    mean: tuple[float, ...] = ()  # the average of the rows (a file written before it was kept: none)
    sketch: int | None = 0  # None: written before files had sketches

    def paths(self, index: Path) -> tuple[Path, ...]:
        """The file of the vectors (float32, rows x dims) and of their (doc, part) (int64, rows x 2);
        then, with a sketch, the file of the sketches (float32, rows x 1 + sketch: each row's
        product with the mean, then its sketch) and of the directions the sketches are the
        vectors' projections on (float32, dims x sketch)."""
        named = f"{index.name}{FILE_INFIX}{self.token}"
        parts = (".npy", ".rows.npy", *((".sketch.npy", ".axes.npy") if self.sketch else ()))
        return tuple(index.with_name(named + part) for part in parts)

    def sizes(self) -> tuple[int, ...]:
        """The bytes after its header of each file of paths()."""
        return (self.rows * self.dims * 4, self.rows * 16,
                *((self.rows * (1 + self.sketch) * 4, self.dims * self.sketch * 4) if self.sketch else ()))

    def open(self, index: Path) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], Sketch | None] | None:
        """(doc, part) of each row, the vectors and their sketch (memory-mapped; None without one);
        None when the vectors cannot be read as the meta row describes them (gone, torn, not ours):
        then the index is read instead. A sketch that cannot be read is none: every row's whole
        vector is multiplied (and the next embedding pass writes the file again: behind())."""
        import numpy as np

        vectors_path, rows_path, *sketch_paths = self.paths(index)
        try:
            vectors = np.load(vectors_path, mmap_mode="r", allow_pickle=False)
            rows = np.load(rows_path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError):
            return None
        if (vectors.dtype != np.float32 or vectors.shape != (self.rows, self.dims) or rows.dtype != np.int64
                or rows.shape != (self.rows, 2)):
            return None
        found = None
        if sketch_paths:
            try:
                short = np.load(sketch_paths[0], mmap_mode="r", allow_pickle=False)
                axes = np.load(sketch_paths[1], allow_pickle=False)
            except (OSError, ValueError):
                short = axes = None
            if short is not None and axes is not None and short.dtype == axes.dtype == np.float32 and \
                    short.shape == (self.rows, 1 + (self.sketch or 0)) and axes.shape == (self.dims, self.sketch):
                found = Sketch(np.asarray(short), axes)
        return np.asarray(rows), np.asarray(vectors), found


@dataclass(frozen=True)
class Sketch:
    """The sketch of a vectors file (sketch.py): row i of `rows` is the file's row i's product with
    the file's average, then that row less the average, projected on the columns of `axes`."""

    rows: npt.NDArray[np.float32]
    axes: npt.NDArray[np.float32]


def _stored(conn: sqlite3.Connection) -> Stored | None:
    row = conn.execute("SELECT value FROM meta WHERE name = ?", (FILE_META,)).fetchone()
    if row is None:
        return None
    try:
        found = json.loads(row[0])
        return Stored(str(found["token"]), int(found["seq"]), int(found["rows"]), int(found["dims"]),
                      tuple(float(x) for x in found.get("mean", ())),
                      int(found["sketch"]) if "sketch" in found else None)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _mean(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The average of the rows of `vectors` (zeros when there are none), a chunk at a time."""
    import numpy as np

    total = np.zeros(vectors.shape[1] if vectors.ndim == 2 else 0, dtype=np.float64)
    for at in range(0, len(vectors), WRITE_CHUNK):
        total += vectors[at : at + WRITE_CHUNK].sum(axis=0, dtype=np.float64)
    return (total / max(len(vectors), 1)).astype(np.float32)


def _products(vectors: npt.NDArray[np.float32], mean: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Each row of `vectors` times `mean` (none when there are no rows)."""
    import numpy as np

    found: npt.NDArray[np.float32] = product(vectors, mean) if len(vectors) else np.zeros(0, dtype=np.float32)
    return found


def product(matrix: npt.NDArray[np.float32], vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """`matrix @ vector`, a matrix of more than SPLIT_ROWS rows in parts, one a CPU, at once (numpy
    lets go of the interpreter's lock; BLAS runs one thread of its own: embedding.BLAS_THREADS). A
    product with every vector of the vault is one pass over them all, which one core reads at
    about 13 GB/s here and two at about 24: at 100,000 entries (303,160 pieces, 444 MB) 35.5 ->
    18.5 ms. Each row's product is the one the whole matrix gives, byte for byte (ALIGN)."""
    import numpy as np

    parts = min(cpus(), len(matrix) // SPLIT_ROWS)
    if parts < 2:
        found: npt.NDArray[np.float32] = matrix @ vector
        return found
    out = np.empty(len(matrix), dtype=np.result_type(matrix.dtype, vector.dtype))
    # each part starts at a multiple of ALIGN rows: BLAS takes rows a few at a time, and a row it
    # took among the remainder of a part would be summed otherwise (its last bit)
    cuts = [len(matrix) * part // parts // ALIGN * ALIGN for part in range(parts)] + [len(matrix)]
    helpers = [_products_pool().submit(np.matmul, matrix[start:end], vector, out=out[start:end])
               for start, end in zip(cuts[1:-1], cuts[2:], strict=True)]
    np.matmul(matrix[: cuts[1]], vector, out=out[: cuts[1]])  # the first part here, the others beside it
    for helper in helpers:
        helper.result()
    return out


SPLIT_ROWS = 65_536  # a smaller product is not split: starting the parts would cost what it saves
ALIGN = 16
_pool_lock = threading.Lock()
_pool: list[ThreadPoolExecutor] = []


def _products_pool() -> ThreadPoolExecutor:
    """The threads a split product's other parts run in (one fewer than the CPUs), made once a
    process: a process forked from this one (a task's run) has none of its threads, and makes its own."""
    with _pool_lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(max(1, cpus() - 1), thread_name_prefix="sentient-product"))
        return _pool[0]


def _forget_pool() -> None:
    global _pool_lock
    _pool_lock = threading.Lock()  # (a lock held by a thread of the parent's would never be let go here)
    _pool.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _last_change(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'vectors_log'").fetchone()
    return int(row[0]) if row is not None else 0


def _rows(conn: sqlite3.Connection, where: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                                                         npt.NDArray[np.float32]]:
    """(doc, part, vector) of the vectors `where` selects, in the order of (doc, part)."""
    import numpy as np

    rows = conn.execute(f"SELECT doc, part, vector FROM vectors {where} ORDER BY doc, part").fetchall()
    docs = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    parts = np.fromiter((row[1] for row in rows), dtype=np.int64, count=len(rows))
    flat = np.frombuffer(b"".join(row[2] for row in rows), dtype=np.float32)
    return docs, parts, flat.reshape(len(rows), -1) if rows else flat.reshape(0, 0)


def behind(conn: sqlite3.Connection, index: Path, most: int = REWRITE_AFTER) -> bool:
    """Whether the vectors file should be written again: there are vectors and no file (or it is
    gone or shorter than the index says, or large and written before files had sketches), or
    more than `most` documents' vectors changed since."""
    stored = _stored(conn)
    if stored is None or not all(_whole(path, size) for path, size in
                                 zip(stored.paths(index), stored.sizes(), strict=True)) or \
            (stored.sketch is None and sketch.dims(stored.rows, stored.dims)):
        return conn.execute("SELECT 1 FROM vectors LIMIT 1").fetchone() is not None
    changed: int = conn.execute("SELECT count(*) FROM (SELECT 1 FROM vectors_log WHERE seq > ? LIMIT ?)",
                                (stored.seq, most + 1)).fetchone()[0]
    return changed > most


def _whole(path: Path, data_bytes: int) -> bool:
    """Whether `path` is there and holds at least `data_bytes` after its header."""
    try:
        return path.stat().st_size >= data_bytes
    except OSError:
        return False


def write_file(reading: Callable[[], AbstractContextManager[sqlite3.Connection]],
               writing: Callable[[], AbstractContextManager[sqlite3.Connection]], index: Path) -> bool:
    """Write every vector of the index to a new vectors file beside it (a chunk at a time: what
    is held in memory is a chunk, not the vault), name it in the index, and delete the file it
    replaces. Returns whether it was written (not when another process wrote a newer one meanwhile).
    A file of sketch.SKETCH_FROM rows or more gets a sketch (sketch.py): the directions the rows
    vary most along are found while the rows are written, then the file is read back a chunk at a
    time and each row projected on them."""
    import secrets

    import numpy as np

    made: list[Path] = []
    try:
        with reading() as conn:
            conn.execute("BEGIN")  # one snapshot: the vectors and the last change they include
            try:
                seq = _last_change(conn)
                count = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
                first = conn.execute("SELECT length(vector) FROM vectors LIMIT 1").fetchone()
                dims = first[0] // 4 if first else 0
                stored = Stored(secrets.token_hex(8), seq, count, dims, sketch=sketch.dims(count, dims))
                made = [path.with_name(f".{path.name}.tmp") for path in stored.paths(index)]
                total, spread = _write_rows(conn, stored, made)
            finally:
                conn.execute("COMMIT")
        mean = (total / max(stored.rows, 1)).astype(np.float32)
        stored = replace(stored, mean=tuple(float(x) for x in mean))
        axes = _axes(spread, stored.sketch or 0) if spread is not None else None
        if axes is not None:
            _write_sketch(made, stored, mean, axes)
        elif stored.sketch:  # written without one, and so named: every row is ranked, as for a small file
            for path in made[2:]:
                with suppress(OSError):
                    path.unlink()
            made, stored = made[:2], replace(stored, sketch=0)
        for temp, path in zip(made, stored.paths(index), strict=True):
            os.replace(temp, path)
        made = list(stored.paths(index))
        with writing() as conn:
            now = _stored(conn)
            if (now is not None and now.seq > seq) or not all(path.is_file() for path in made):
                return False  # another process wrote a newer one (and may have deleted this one)
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (FILE_META, json.dumps(asdict(stored))))
            conn.execute("DELETE FROM vectors_log WHERE seq <= ?", (seq,))
            made = []
            for old in index.parent.glob(f"{index.name}{FILE_INFIX}*.npy"):  # replaced (a reader may still map it)
                if stored.token not in old.name:
                    with suppress(OSError):
                        old.unlink()
        return True
    finally:
        for path in made:  # not named in the index: never read
            with suppress(OSError):
                path.unlink()


def _write_rows(conn: sqlite3.Connection, stored: Stored, made: list[Path]) -> tuple[npt.NDArray[np.float64],
                                                                                   sketch.Spread | None]:
    """Write every vector and its (doc, part) to `made`, in the order of (doc, part), WRITE_CHUNK
    rows at a time; their sum, and their spread (from about sketch.SPREAD_ROWS of them) when the
    file gets a sketch."""
    import numpy as np

    total = np.zeros(stored.dims, dtype=np.float64)
    spread = sketch.Spread(stored.dims) if stored.sketch else None
    every = sketch.every(stored.rows, WRITE_CHUNK)
    with _npy(made[0], np.float32, (stored.rows, stored.dims)) as vectors, \
            _npy(made[1], np.int64, (stored.rows, 2)) as rows:
        cursor = conn.execute("SELECT doc, part, vector FROM vectors ORDER BY doc, part")
        for number, chunk in enumerate(iter(partial(cursor.fetchmany, WRITE_CHUNK), [])):  # as counted: one snapshot
            rows.write(np.array([(doc, part) for doc, part, _ in chunk], dtype=np.int64).tobytes())
            for doc, _, vector in chunk:
                if len(vector) != stored.dims * 4:
                    raise ValueError(f"a vector of {len(vector) // 4} floats among vectors of {stored.dims} "
                                     f"(document row {doc}); `sentient index --rebuild` embeds every document again")
            data = b"".join(vector for _, _, vector in chunk)
            vectors.write(data)
            floats = np.frombuffer(data, dtype=np.float32).reshape(len(chunk), stored.dims)
            total += floats.sum(axis=0, dtype=np.float64)
            if spread is not None and number % every == 0:
                spread.add(floats)
    return total, spread


def _axes(spread: sketch.Spread, count: int) -> npt.NDArray[np.float32] | None:
    """The directions of a sketch; None when the rows' spread has none (a vector not a number):
    the file is written without a sketch, not left unwritten."""
    import numpy as np

    try:
        axes = spread.axes(count)
    except np.linalg.LinAlgError:
        axes = None
    if axes is None or not np.isfinite(axes).all():
        log.warning("the vectors' spread has no directions (a vector that is not a number?); the vectors "
                    "file is written without a sketch: search by meaning ranks every row")
        return None
    return axes


def _write_sketch(made: list[Path], stored: Stored, mean: npt.NDArray[np.float32],
                  axes: npt.NDArray[np.float32]) -> None:
    """Write each row's product with `mean` and its sketch, for each row of the vectors file
    made[0] (read back a chunk at a time, not mapped), to made[2], and the directions `axes` to made[3]."""
    import numpy as np

    with made[0].open("rb") as vectors, _npy(made[2], np.float32, (stored.rows, 1 + (stored.sketch or 0))) as out:
        np.lib.format.read_magic(vectors)
        np.lib.format.read_array_header_1_0(vectors)
        for _ in range(0, stored.rows, WRITE_CHUNK):
            chunk = np.fromfile(vectors, dtype=np.float32, count=WRITE_CHUNK * stored.dims).reshape(-1, stored.dims)
            out.write(np.concatenate([(chunk @ mean)[:, None], (chunk - mean) @ axes], axis=1,
                                     dtype=np.float32).tobytes())
    with made[3].open("wb") as out:  # (np.save given a path adds .npy to its name)
        np.save(out, axes, allow_pickle=False)


@contextmanager
def _npy(path: Path, dtype: Any, shape: tuple[int, int]) -> Iterator[BinaryIO]:
    """A new .npy file of `shape`, its header written: the rows are written after it, in order, as
    bytes (a chunk at a time, never the whole matrix in memory, nor mapped: a mapped file's
    written pages count in the process's memory until it is closed)."""
    import numpy as np

    with path.open("wb") as out:
        np.lib.format.write_array_header_1_0(out, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                   "fortran_order": False, "shape": shape})
        yield out


def fused(rankings: Sequence[Sequence[T]], weights: Sequence[float], k: int = FUSION_K) -> dict[T, float]:
    """Reciprocal rank fusion: item -> the sum over rankings of weight / (k + rank), best first
    (ties in the order of the first ranking holding them)."""
    scores: dict[T, float] = {}
    for number, ranking in enumerate(rankings):
        weight = weights[number]
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return {item: scores[item] for item in sorted(scores, key=lambda item: -scores[item])}


def blended(words: Sequence[tuple[T, float]], meaning: Sequence[tuple[T, float]], depth: int) -> dict[T, float]:
    """Items of both rankings (each (item, score), best first: BM25 scores, higher better;
    closenesses, Matrix.nearest) by their blended score (see WORDS_WEIGHT), best first; `depth`: how
    long a list the vector search was asked for (a shorter one ran out above MIN_COSINE)."""
    weight = WORDS_WEIGHT
    if len(words) >= FLAT_RANK and words[0][1] > 0 and \
            (words[0][1] - words[FLAT_RANK - 1][1]) / words[0][1] < FLAT_GAP:
        weight = FLAT_WORDS_WEIGHT
    scores: dict[T, float] = {}
    for share, ranking, floor in ((weight, words, words[-1][1] if words else 0.0),
                                  (1.0 - weight, meaning, meaning[-1][1] if len(meaning) >= depth
                                   else min(0.0, meaning[-1][1]) if meaning else 0.0)):
        if not ranking:
            continue
        top = ranking[0][1]
        for item, score in ranking:
            scores[item] = scores.get(item, 0.0) + share * ((score - floor) / (top - floor) if top > floor else 1.0)
    return {item: scores[item] for item in sorted(scores, key=lambda item: -scores[item])}
