"""The sketch of a large vectors file (sentient/index/sketch.py): written beside it, it chooses which
rows a search ranks by their whole vectors, never how they rank; and a search's query is embedded
by the int8 encoder once the process has it.

The thresholds are lowered here (a file of any size gets a sketch; few candidates) so that a
vault of sixty entries takes every path a vault of a million does."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sentient import embedding
from sentient.index import Index, sketch
from sentient.index.vectors import FILE_META, Matrix, _products, behind, pieces
from sentient.vault.store import Vault
from tests.semantic_support import write

PEOPLE = ("Anika", "Tom", "Priya", "Tariq", "Lena", "Omar")
DOINGS = ("started cello lessons", "moved to a flat near the river", "adopted a grey cat called Biscuit",
          "cannot eat peanuts", "is training for a marathon", "teaches maths at the primary school",
          "is learning to bake sourdough bread", "booked a holiday in Crete", "changed jobs to a bank",
          "repaired the boiler herself")
NOTES = {"garden": "Plant the tulip bulbs along the fence in October.",
         "car": "The car's MOT is due in May; book the garage early."}
QUERIES = ("who plays a musical instrument", "which food is someone allergic to", "a pet animal at home",
           "running long distances", "a trip to a Greek island", "work at a school", "fixing the heating")


@pytest.fixture
def sketched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sketch, "SKETCH_FROM", 1)
    monkeypatch.setattr(sketch, "DIMS", 32)
    monkeypatch.setattr(sketch, "CANDIDATES_LEAST", 3)
    monkeypatch.setattr(sketch, "CANDIDATES_PER_PIECE", 1)
    monkeypatch.setattr(sketch, "SHARE", 1)  # candidates up to every row of the file (a million's are a fraction)


@pytest.fixture
def index(tmp_path: Path, model: embedding.Embedder, sketched: None) -> Iterator[Index]:
    """Sixty entries (each person, each doing) and two pinned notes, embedded by a whole pass:
    the file and its sketch."""
    vault = Vault(tmp_path / "vault")
    for number, (person, doing) in enumerate(itertools.product(PEOPLE, DOINGS)):
        write(vault.root, f"e{number:02d}", person, f"{person} {doing}.")
    for name, said in NOTES.items():
        note = vault.root / "pins" / "notes" / f"{name}.md"
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(f"# {name.title()}\n\n{said}\n", encoding="utf-8")
    with Index(vault, embedder=lambda: model) as index:
        index.sync()
        assert index.embed() == len(PEOPLE) * len(DOINGS) + len(NOTES)
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


@pytest.mark.parametrize("most", [1, 2, 5, 20])
def test_the_sketch_chooses_which_rows_are_ranked_never_how(index: Index, model: embedding.Embedder,
                                                            monkeypatch: pytest.MonkeyPatch, most: int) -> None:
    """The rows the sketch puts first (four for each document asked for, here) are ranked by
    their whole vectors, and every row when they hold too few documents near enough: the
    documents and closenesses are those of every row's product."""
    matrix = asked_of(index, monkeypatch)
    rows = len(matrix.blocks[0])
    first = sketch.candidates(most * 4, rows)
    chains = []
    for query in (model.query(text) for text in QUERIES):
        found, truth = matrix.nearest(query, most), exact(matrix).nearest(query, most)
        assert [doc for doc, _, _ in found] == [doc for doc, _, _ in truth]
        assert np.allclose([score for _, _, score in found], [score for _, _, score in truth], atol=1e-5)
        chains.append(tuple(ASKED[:-1]))  # (the last: the exact ranking's, asked here)
        ASKED.clear()
    assert {chain[0] for chain in chains} == {first if first * sketch.SHARE <= rows else None}
    assert all(chain[1:] in ((), (None,)) for chain in chains)  # then every row, or done
    if most == 5:  # too few near enough among 20 candidates, for some query
        assert any(len(chain) == 2 for chain in chains) and any(len(chain) == 1 for chain in chains), chains


ASKED: list[int | None] = []


def asked_of(index: Index, monkeypatch: pytest.MonkeyPatch) -> Matrix:
    """The index's vectors as a search loads them (with the sketch), each count of candidates its
    closeness is computed for noted in ASKED (None: every row)."""
    index.search(QUERIES[0], mode="vector")
    matrix = index._matrix
    assert matrix is not None and matrix.sketch is not None
    closeness = Matrix._closeness
    ASKED.clear()
    monkeypatch.setattr(Matrix, "_closeness", lambda self, query, ranked: (ASKED.append(ranked),
                                                                           closeness(self, query, ranked))[1])
    return matrix


def test_a_query_near_nothing_and_a_filter_few_pass_rank_every_row(index: Index, model: embedding.Embedder,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = asked_of(index, monkeypatch)
    nothing = model.query("zzzqqq xylograph quaternion")
    assert matrix.nearest(nothing, 3) == exact(matrix).nearest(nothing, 3)
    assert ASKED[:2] == [sketch.candidates(12, len(matrix.docs)), None]  # then every row, once
    ASKED.clear()
    hits = index.search("when is the car's test due", kind="note", mode="vector", limit=1)
    assert [hit.key for hit in hits] == ["car"]  # two notes among sixty entries: the sketch's first are entries
    assert ASKED[0] is not None and None in ASKED
    ASKED.clear()
    monkeypatch.setattr(sketch, "SHARE", 4)  # candidates more than a quarter of the rows: every row at once
    matrix.nearest(nothing, 4)
    assert ASKED == [None] and sketch.candidates(16, len(matrix.docs)) * 4 > len(matrix.blocks[0])


def test_rows_of_documents_changed_since_are_never_candidates(index: Index, model: embedding.Embedder) -> None:
    """Fifty of the sixty entries edited since the file was written (fewer than REWRITE_AFTER:
    it is not written again): their rows of the file are no candidates, even when the candidates
    asked for are more than the rows left, and their vectors of now are ranked."""
    for number, (person, doing) in enumerate(itertools.product(PEOPLE, DOINGS)):
        if number < 50:
            write(index.vault.root, f"e{number:02d}", person, f"{person} once {doing}, long ago.")
    index.sync()
    assert index.embed() == 50
    index.search(QUERIES[0], mode="vector")
    matrix = index._matrix
    assert matrix is not None and matrix.sketch is not None and len(matrix.hidden) == 50
    for most in (1, 3, 5):  # 4, 12 and 20 candidates among 12 rows of the file not stale
        for query in (model.query(text) for text in QUERIES):
            found, truth = matrix.nearest(query, most), exact(matrix).nearest(query, most)
            assert [doc for doc, _, _ in found] == [doc for doc, _, _ in truth]
            assert np.allclose([score for _, _, score in found], [score for _, _, score in truth], atol=1e-5)


def test_a_search_after_the_sketch_is_gone_ranks_every_row(index: Index, model: embedding.Embedder) -> None:
    """A process that loaded the file with its sketch, then finds it gone (a writer deleting the
    replaced file's parts) with the same file named: its products with the average are the
    sketch's no more, and are computed again."""
    before = [hit.key for hit in index.search(QUERIES[2], mode="vector", limit=5)]
    assert index._matrix is not None and index._matrix.sketch is not None
    files(index)["sketch"].unlink()
    write(index.vault.root, "zz", "Zoe", "Zoe plays the violin in an orchestra.")
    index.sync()
    index.embed(most=5)  # a change since the file: loaded again, the same file named
    assert [hit.key for hit in index.search(QUERIES[2], mode="vector", limit=5)] == before
    assert index._matrix is not None and index._matrix.sketch is None


def test_a_large_file_written_before_sketches_is_written_again_with_one(index: Index) -> None:
    with index._writing() as conn:
        stored = json.loads(conn.execute("SELECT value FROM meta WHERE name = ?", (FILE_META,)).fetchone()[0])
        conn.execute("UPDATE meta SET value = ? WHERE name = ?",
                     (json.dumps({k: v for k, v in stored.items() if k != "sketch"}), FILE_META))
    for path in (files(index)["sketch"], files(index)["axes"]):
        path.unlink()
    with index._reading() as conn:
        assert behind(conn, index.path)
    assert index.embed() == 0 and sorted(files(index)) == ["", "axes", "rows", "sketch"]
    with index._reading() as conn:
        assert not behind(conn, index.path)


def test_a_sketched_file_never_gives_an_edited_documents_old_vector(index: Index, model: embedding.Embedder) -> None:
    """Rows of the file whose documents changed since are hidden among the candidates too, and
    the documents embedded since (not in the file) are ranked with them. The entry edited is
    the last row's: its new row takes the same id, so only the log tells its vectors apart."""
    with index._reading() as conn:
        doc, key, path, title, body = conn.execute("SELECT id, key, path, title, body FROM documents ORDER BY id "
                                                   "DESC LIMIT 1").fetchone()
    old, new = f"{title}\n{body.strip()}", f"{title}: sold the car, cycles to work now."
    assert index.search(old, mode="vector", limit=1)[0].key == key
    file = index.vault.root / path
    file.write_text(file.read_text(encoding="utf-8").replace(body.strip(), new), encoding="utf-8")
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
    with index._reading() as conn:
        kind, title, body = conn.execute("SELECT kind, title, body FROM documents WHERE id = ?", (doc,)).fetchone()
    now = float(model.embed(pieces(kind, title, body))[0] @ apart) / float(np.linalg.norm(apart))
    scored = {found: score for found, _, score in matrix.nearest(query, 1)}  # four candidates
    assert doc not in scored or abs(scored[doc] - now) < 1e-4, (scored.get(doc), now)  # never its old row's
    first = index.search(old, mode="vector", limit=1)[0]
    assert first.key != key or abs(first.score - now) < 1e-4
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


def test_a_spread_without_directions_writes_the_file_without_a_sketch(
        index: Index, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The sketch's directions cannot be found (a vector that is not a number makes the
    covariance's eigenvectors fail): the file is written all the same, named without a sketch,
    and not written again by every pass after."""
    before = [hit.key for hit in index.search(QUERIES[1], mode="vector", limit=5)]

    def failing(self: sketch.Spread, count: int) -> np.ndarray:
        raise np.linalg.LinAlgError("Eigenvalues did not converge")

    monkeypatch.setattr(sketch.Spread, "axes", failing)
    for path in files(index).values():
        path.unlink()
    assert index.embed() == 0  # nothing to embed: the file written again
    assert sorted(files(index)) == ["", "rows"] and "without a sketch" in caplog.text
    with index._reading() as conn:
        assert not behind(conn, index.path)
        assert json.loads(conn.execute("SELECT value FROM meta WHERE name = ?", (FILE_META,)).fetchone()[0])[
            "sketch"] == 0
    assert [hit.key for hit in index.search(QUERIES[1], mode="vector", limit=5)] == before
