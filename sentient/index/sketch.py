"""Sketches: each vector of a large vectors file cut to the few directions the vault's vectors differ
most along, so that a search multiplies its query with a short row for each piece and with the
whole vector only for the pieces that row puts first.

A product with every vector is one pass over them all: about 25 ms at 100,000 entries (303,160
pieces, 444 MB) and ten times that at a million, more than a search may take. A vectors file of
SKETCH_FROM rows or more is written with a sketch beside it (vectors.write_file): each row's
difference from the vault's average vector, projected on the DIMS directions along which the rows
vary most (the covariance's leading eigenvectors, from a sample of the rows: `Spread`), in the
rows' order. A search ranks every row by its sketch (a product with DIMS floats a row, not 384),
then the first `candidates(...)` of them by their whole vectors, as it ranks without one
(vectors.Matrix.nearest): the sketch chooses which rows are ranked, never how. When those hold
too few documents near enough (a query near nothing the vault holds, a filter few pass), every
row is ranked, as without a sketch.

It is an approximation: a piece whose sketch puts it below the candidates is missed. What sets
pieces apart lies mostly along a few directions (at 100,000 entries, the first 48 hold about three
quarters of the variance), and the candidates are many times the pieces wanted; bench/bench_sketch.py
measures how many of the documents every row's product finds the sketch finds too (recall,
docs/benchmarks.md: 1.000 for the first 10 there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

SKETCH_FROM = 65_536  # rows from which a vectors file has a sketch (a product with fewer takes ~5 ms)
DIMS = 48  # of a sketch
SPREAD_ROWS = 65_536  # rows of a file its directions are found from, at least (whole chunks, one in so many)
CANDIDATES_LEAST = 4096  # rows ranked by their whole vectors, at least
CANDIDATES_PER_PIECE = 8  # rows ranked by their whole vectors, for each piece a search wants
# candidates more than a SHARE-th of the file: every row instead (copying them out of the file
# would cost about what one product with every row does)
SHARE = 4


def dims(rows: int, width: int) -> int:
    """The floats of a sketch of a file of `rows` vectors of `width`: 0 (none) below SKETCH_FROM."""
    return 0 if rows < SKETCH_FROM else min(DIMS, width)


def candidates(pieces: int, rows: int) -> int:
    """How many of `rows` rows a search wanting `pieces` pieces ranks by their whole vectors first."""
    return min(rows, max(CANDIDATES_LEAST, pieces * CANDIDATES_PER_PIECE))


class Spread:
    """The directions along which rows vary most, from the rows given to `add` (a chunk at a time:
    held is one dims x dims sum, not the rows)."""

    def __init__(self, width: int) -> None:
        import numpy as np

        self.rows = 0
        self.sum = np.zeros(width, dtype=np.float64)
        self.products = np.zeros((width, width), dtype=np.float64)

    def add(self, chunk: npt.NDArray[np.float32]) -> None:
        import numpy as np

        self.rows += len(chunk)
        self.sum += chunk.sum(axis=0, dtype=np.float64)
        self.products += (chunk.T @ chunk).astype(np.float64)

    def axes(self, count: int) -> npt.NDArray[np.float32]:
        """The `count` directions (width x count, float32, unit columns) of the largest variance,
        largest first: the covariance's leading eigenvectors."""
        import numpy as np

        mean = self.sum / max(self.rows, 1)
        covariance = self.products / max(self.rows, 1) - np.outer(mean, mean)
        values, vectors = np.linalg.eigh(covariance)  # ascending
        return np.ascontiguousarray(vectors[:, np.argsort(-values)[:count]], dtype=np.float32)


def every(rows: int, chunk: int) -> int:
    """Of how many chunks of `chunk` rows one is added to a Spread, for about SPREAD_ROWS of `rows`."""
    return max(1, rows // max(SPREAD_ROWS, chunk))
