"""The sketch of a large vectors file (sentient/index/sketch.py): written beside it, it chooses which
rows a search ranks by their whole vectors, never how they rank; and a search's query is embedded
by the int8 encoder once the process has it.

The thresholds are lowered here (a file of any size gets a sketch; few candidates) so that a
vault of sixty entries takes every path a vault of a million does."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sentient import embedding
from sentient.index import Index, sketch
from sentient.index.vectors import Matrix, _products, behind
from sentient.vault.store import Vault
from tests.semantic_support import write

PEOPLE = ("Anika", "Tom", "Priya", "Tariq", "Lena", "Omar")
DOINGS = ("started cello lessons", "moved to a flat near the river", "adopted a grey cat called Biscuit",
          "cannot eat peanuts", "is training for a marathon", "teaches maths at the primary school",
          "is learning to bake sourdough bread", "booked a holiday in Crete", "changed jobs to a bank",
          "repaired the boiler herself")
QUERIES = ("who plays a musical instrument", "which food is someone allergic to", "a pet animal at home",
           "running long distances", "a trip to a Greek island", "work at a school", "fixing the heating")


@pytest.fixture
def sketched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sketch, "SKETCH_FROM", 1)
    monkeypatch.setattr(sketch, "DIMS", 32)
    monkeypatch.setattr(sketch, "CANDIDATES_LEAST", 3)
    monkeypatch.setattr(sketch, "CANDIDATES_PER_PIECE", 1)


@pytest.fixture
def index(tmp_path: Path, model: embedding.Embedder, sketched: None) -> Iterator[Index]:
    """Sixty entries (each person, each doing), embedded by a whole pass: the file and its sketch."""
    vault = Vault(tmp_path / "vault")
    for number, (person, doing) in enumerate(itertools.product(PEOPLE, DOINGS)):
        write(vault.root, f"e{number:02d}", person, f"{person} {doing}.")
    with Index(vault, embedder=lambda: model) as index:
        index.sync()
        assert index.embed() == len(PEOPLE) * len(DOINGS)
        yield index


def files(index: Index) -> dict[str, Path]:
    """The vectors file's parts, by what follows its token: "" (the vectors), "rows", "sketch", "axes"."""
    found = {}
    for path in index.path.parent.glob(f"{index.path.name}.vectors-*.npy"):
        found[path.name.removesuffix(".npy").partition(".vectors-")[2].partition(".")[2]] = path
    return found


def exact(matrix: Matrix) -> Matrix:
    """The same rows, ranked by every row's whole vector."""
    return replace(matrix, sketch=None,
                   shared=np.concatenate([_products(block, matrix.mean) for block in matrix.blocks if len(block)]))


def test_a_large_file_gets_a_sketch_of_each_rows_difference_from_the_average(index: Index) -> None:
    parts = files(index)
    assert sorted(parts) == ["", "axes", "rows", "sketch"]
    vectors, short, axes = np.load(parts[""]), np.load(parts["sketch"]), np.load(parts["axes"])
    assert axes.shape == (embedding.DIMENSIONS, 32) and np.allclose(axes.T @ axes, np.eye(32), atol=1e-4)
    mean = vectors.mean(axis=0)
    assert np.allclose(short[:, 0], vectors @ mean, atol=1e-5)  # each row's product with the average
    assert np.allclose(short[:, 1:], (vectors - mean) @ axes, atol=1e-5)
    spread = [float(np.var((vectors - mean) @ axes[:, column])) for column in range(32)]
    assert spread == sorted(spread, reverse=True)  # the directions of the largest variance, largest first
    centred = vectors - mean
    assert spread[0] >= float(np.var(centred @ (centred[0] / np.linalg.norm(centred[0])))) - 1e-6


@pytest.mark.parametrize("most", [1, 5, 20, 60])
def test_the_sketch_chooses_which_rows_are_ranked_never_how(index: Index, model: embedding.Embedder,
                                                            monkeypatch: pytest.MonkeyPatch, most: int) -> None:
    """Rows found by the sketch (four for each piece wanted, here) are ranked by their whole
    vectors, and asked again with four times as many (then every row) while too few documents
    are near enough: the documents and closenesses are those of every row's product."""
    index.search(QUERIES[0], mode="vector")
    matrix = index._matrix
    assert matrix is not None and matrix.sketch is not None
    asked: list[int | None] = []
    closeness = Matrix._closeness
    monkeypatch.setattr(Matrix, "_closeness", lambda self, query, ranked: (asked.append(ranked),
                                                                           closeness(self, query, ranked))[1])
    chains = []
    for query in (model.query(text) for text in QUERIES):
        asked.clear()
        found, truth = matrix.nearest(query, most), exact(matrix).nearest(query, most)
        assert [doc for doc, _, _ in found] == [doc for doc, _, _ in truth]
        assert np.allclose([score for _, _, score in found], [score for _, _, score in truth], atol=1e-5)
        chains.append(tuple(asked[: -1]))  # (the last: the exact ranking's)
    first = sketch.candidates(most * 4, len(matrix.docs))
    assert {chain[0] for chain in chains} == {first if first * 2 <= len(matrix.docs) else None}
    if most < 20:  # too few near enough among the first candidates, for some query: asked again
        assert any(len(chain) > 1 for chain in chains) and any(len(chain) == 1 for chain in chains), chains
def test_a_sketched_file_never_gives_an_edited_documents_old_vector(index: Index, model: embedding.Embedder) -> None:
    """Rows of the file whose documents changed since are hidden among the candidates too, and
    the documents embedded since (not in the file) are ranked with them. The entry edited is
    the last row's: its new row takes the same id, so only the log tells its vectors apart."""
    with index._reading() as conn:
        doc, key, title, body = conn.execute("SELECT id, key, title, body FROM documents ORDER BY id DESC "
                                             "LIMIT 1").fetchone()
    old, new = f"{title}\n{body.strip()}", f"{title} sold the car and cycles to work now."
    assert index.search(old, mode="vector", limit=1)[0].key == key
    write(index.vault.root, key, title, new)
    index.sync()
    write(index.vault.root, "zz", "Zoe", "Zoe plays the violin in an orchestra.")
    index.sync()
    assert index.embed(most=10) == 2  # the two, not the file again: fewer than REWRITE_AFTER changed
    with index._reading() as conn:
        assert conn.execute("SELECT id FROM documents WHERE key = ?", (key,)).fetchone()[0] == doc
    index.search(old, mode="vector", limit=1)
    matrix = index._matrix
    assert matrix is not None and matrix.sketch is not None and len(matrix.hidden) == 1 and len(matrix.blocks[1])
    query = model.query(old)
    apart = query - matrix.mean
    now = float(model.embed([f"{title}\n{new}"])[0] @ apart) / float(np.linalg.norm(apart))
    scored = {found: score for found, _, score in matrix.nearest(query, 1)}  # four candidates
    assert doc not in scored or abs(scored[doc] - now) < 1e-4, (scored.get(doc), now)  # never its old row's
    assert index.search(old, mode="vector", limit=1)[0].key != key
    assert [hit.key for hit in index.search(new, mode="vector", limit=1)] == [key]  # by its vectors of now
    assert [hit.key for hit in index.search("who plays the violin", mode="vector", limit=1)] == ["zz"]


def test_a_torn_sketch_is_searched_without_and_written_again(index: Index, model: embedding.Embedder) -> None:
    before = [hit.key for hit in index.search(QUERIES[1], mode="vector", limit=5)]
    for damage in ("torn", "missing", "another shape"):
        parts = files(index)
        if damage == "torn":
            parts["sketch"].write_bytes(parts["sketch"].read_bytes()[:100])
        elif damage == "missing":
            parts["axes"].unlink()
        else:
            np.save(parts["sketch"], np.ones((60, 9), dtype=np.float32))
        with Index(index.vault, embedder=lambda: model) as again:
            assert [hit.key for hit in again.search(QUERIES[1], mode="vector", limit=5)] == before
            assert again._matrix is not None and again._matrix.sketch is None  # every row's product
            with again._reading() as conn:
                assert behind(conn, again.path)
            assert again.embed() == 0  # nothing to embed: the file and its sketch written again
            assert sorted(files(again)) == ["", "axes", "rows", "sketch"]
            assert [hit.key for hit in again.search(QUERIES[1], mode="vector", limit=5)] == before
            assert again._matrix is not None and again._matrix.sketch is not None


def test_a_small_file_has_no_sketch(tmp_path: Path, model: embedding.Embedder) -> None:
    vault = Vault(tmp_path / "vault")
    write(vault.root, "one", "One", "Tom started cello lessons.")
    with Index(vault, embedder=lambda: model) as index:
        index.sync()
        index.embed()
        assert sorted(files(index)) == ["", "rows"]


def test_a_query_is_embedded_by_the_int8_encoder_once_the_process_has_it(model: embedding.Embedder) -> None:
    fresh = embedding.Embedder(model._folder, model._version)
    text = "which food is she allergic to"
    assert np.array_equal(fresh.query(text), fresh.full([text])[0])  # no onnxruntime loaded for one query
    assert fresh.ready()
    assert np.array_equal(fresh.query(text), fresh.embed([text])[0])
    assert float(fresh.query(text) @ fresh.full([text])[0]) > 0.99


def test_serve_makes_the_int8_encoder_at_its_start(tmp_path: Path, model: embedding.Embedder) -> None:
    from sentient.index.background import BackgroundEmbedding

    fresh = embedding.Embedder(model._folder, model._version)
    vault = Vault(tmp_path / "vault")
    write(vault.root, "one", "One", "Tom started cello lessons.")
    with Index(vault, embedder=lambda: model) as index:
        index.sync()
        index.embed()
    with Index(vault, embedder=lambda: fresh) as index:
        index.sync()
        background = BackgroundEmbedding(index, idle=0.05)
        background.start()
        try:
            for _ in range(200):
                if fresh._session is not None:
                    break
                background._stop.wait(0.05)
        finally:
            background.stop()
        assert fresh._session is not None and background.embedded == 0  # with nothing to embed
