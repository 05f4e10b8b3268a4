"""The index's vectors: what each document says, embedded a piece at a time, for ranking by meaning.

Memory entries, notes, plans and run answers are embedded whole (in windows of about the model's
64 tokens); sessions one message at a time (what the person and the assistant said, not tool
calls). Vectors live in the index file beside the rows they were computed from (`vectors`, float32
blobs keyed by document row and piece) and go with them: a trigger drops a document's vectors when
its row is deleted, so an edited file's new row is embedded again and a deleted one's are gone.
`embedded` names the model each document was embedded with; a model change empties both.

Searching is brute force: every vector in one float32 matrix (kept until the index changes), one
matrix-vector product, the best pieces collapsed to their documents.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sentient.embedding import Embedder, windows
from sentient.vault import transcript

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

EMBEDDED_KINDS = ("memory", "note", "plan", "session", "run")
MOST_PIECES = 256  # of one document: a session longer than that is embedded as far as this
EMBED_BATCH = 256  # documents embedded, then written in one short transaction
MODEL_META = "embedding_model"
# A piece less similar than this to the query is no hit: the nearest pieces to words the vault
# never speaks of (zzzqqq, lorem ipsum, a rare animal's name against a meeting) measure 0.10-0.26
# with this model, most paraphrases 0.3 up; on bench/bench_recall.py 0.25 and 0.35 fused alike
MIN_COSINE = 0.3
# Reciprocal rank fusion: a document scores the sum over rankings of weight / (FUSION_K + rank).
# A small constant lets the first few of each ranking count most; BM25 weighs twice the vectors.
# Chosen on bench/bench_recall.py's set (seed 24; docs/benchmarks.md): k 10, 30, 60 and vector
# weights 0.25-1.0 tried; the model is small, and a BM25 top hit (a name and a day) is the
# surer one. Equal weights with k=60 lost recall on questions naming a day (0.97 -> 0.42).
FUSION_K = 10
VECTOR_WEIGHT = 0.5
T = TypeVar("T")
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
    """How many documents wait to be embedded."""
    kinds = ", ".join(repr(kind) for kind in EMBEDDED_KINDS)
    count: int = conn.execute(f"SELECT count(*) FROM documents d WHERE d.kind IN ({kinds}) AND NOT EXISTS "
                              "(SELECT 1 FROM embedded e WHERE e.doc = d.id)").fetchone()[0]
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


def embed_pending(read: Callable[[int, int], list[tuple[int, str, str, str, str]]],
                  write: Callable[[list[tuple[int, str]], list[tuple[int, int, str, bytes]]], None],
                  embedder: Embedder, total: int, progress: Callable[[int, int], None] | None,
                  most: int | None = None, threads: int = 1) -> int:
    """Embed the documents `read(after, limit)` gives, a batch at a time, each batch written by
    `write(embedded (doc, revision), vectors)`, `most` of them at most. Returns how many were embedded.

    `threads` above 1 embeds that many batches at once, each in a thread of its own (numpy lets go
    of the interpreter's lock while it computes, so each has a core), while this thread reads the
    next batch and writes finished ones, in order; `read` and `write` are only called here. Work
    that fits in one batch runs here alone, starting no thread."""
    done = 0

    def batches() -> Iterator[tuple[list[tuple[int, str, str, str, str]], list[tuple[int, int]], list[str]]]:
        taken, after = 0, 0
        while (most is None or taken < most) and (rows := read(after, EMBED_BATCH if most is None
                                                               else min(EMBED_BATCH, most - taken))):
            after, taken = rows[-1][0], taken + len(rows)
            texts: list[str] = []
            owners: list[tuple[int, int]] = []  # (doc, part) of each text
            for doc, kind, title, body, _ in rows:
                for part, text in enumerate(pieces(kind, title, body)):
                    texts.append(text)
                    owners.append((doc, part))
            yield rows, owners, texts

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
            store(rows, owners, texts, embedder.embed(texts))
        return done
    pool = ThreadPoolExecutor(threads, thread_name_prefix="sentient-embedding")
    try:
        waiting: deque[tuple[tuple[Any, Any, Any], Future[npt.NDArray[np.float32]]]] = deque()
        for batch in batches():
            waiting.append((batch, pool.submit(embedder.embed, batch[2])))
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
    """Every vector of the index, as it was at `version`: row i is piece `parts[i]` of `docs[i]`."""

    version: tuple[int, int]
    docs: npt.NDArray[np.int64]
    parts: npt.NDArray[np.int64]
    vectors: npt.NDArray[np.float32]

    @staticmethod
    def load(conn: sqlite3.Connection, version: tuple[int, int]) -> Matrix:
        import numpy as np

        rows = conn.execute("SELECT doc, part, vector FROM vectors ORDER BY doc, part").fetchall()
        docs = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        parts = np.fromiter((row[1] for row in rows), dtype=np.int64, count=len(rows))
        flat = np.frombuffer(b"".join(row[2] for row in rows), dtype=np.float32)
        return Matrix(version, docs, parts, flat.reshape(len(rows), -1) if rows else flat.reshape(0, 0))

    def nearest(self, query: npt.NDArray[np.float32], most: int) -> list[tuple[int, int, float]]:
        """(doc, part, cosine) of the best piece of each of the `most` nearest documents (of those
        with a piece at MIN_COSINE or more), best first."""
        import numpy as np

        if not len(self.docs):
            return []
        scores = self.vectors @ query
        close = int((scores >= MIN_COSINE).sum())
        if not close:
            return []
        wanted = min(close, most * 4)  # pieces: a document may hold several of the best
        while True:
            top = np.argpartition(-scores, wanted - 1)[:wanted]
            top = top[np.argsort(-scores[top], kind="stable")]
            found: dict[int, tuple[int, int, float]] = {}
            for at in top:
                doc = int(self.docs[at])
                if doc not in found:
                    found[doc] = (doc, int(self.parts[at]), float(scores[at]))
            if len(found) >= most or wanted >= close:
                return list(found.values())[:most]
            wanted = min(close, wanted * 4)


def fused(rankings: Sequence[Sequence[T]], weights: Sequence[float], k: int = FUSION_K) -> dict[T, float]:
    """Reciprocal rank fusion: item -> the sum over rankings of weight / (k + rank), best first
    (ties in the order of the first ranking holding them)."""
    scores: dict[T, float] = {}
    for number, ranking in enumerate(rankings):
        weight = weights[number]
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return {item: scores[item] for item in sorted(scores, key=lambda item: -scores[item])}
