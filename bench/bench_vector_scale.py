"""The ranking by meaning at a million entries: `python bench/bench_vector_scale.py VAULT [--times 1,3,10]`.

VAULT: a vault indexed with embeddings (bench/bench_scale.py's 100,000-entry vault, after its
run). Its vectors (the vectors file, as a search maps it) are repeated `--times` over, each copy
given documents of its own, so the rows keep the vault's own spread (a sentence model's vectors
sit in a narrow cone, which sets how many pass MIN_COSINE and so what the ranking sorts); then
`Matrix.nearest` (the vector half of a hybrid search: the best pieces' documents, by one product
with every row, and, when the vault's vectors file has a sketch (sentient/index/sketch.py), by the
sketch's candidates, the copies' sketches the vault's repeated) is timed for 200 queries, each asked
once (no query's closeness is kept from an earlier one), p50 and p95 by size. Prints a table;
bench/RESULTS.md gets what a person copies. (The copies tie with each other: this times the
ranking; bench/bench_sketch.py measures what the sketch finds, on the vault as it is.)

What this leaves out of a whole search: the query's embedding (0.7 ms by the int8 encoder, 4-9 ms
by the float32 pass, whatever the vault's size) and the BM25 half (bench/bench_scale.py's
in-process search).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_scale import percentile, words  # noqa: E402
from bench.results import machine  # noqa: E402
from sentient import embedding  # noqa: E402
from sentient.index.vectors import Matrix, Sketch, _mean, _products  # noqa: E402


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("vault", type=Path)
    parser.add_argument("--times", default="1,3,10", help="how many copies of the vault's vectors, comma-separated")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    index = args.vault / ".sentient" / "index.sqlite"
    conn = sqlite3.connect(index)
    base = Matrix.load(conn, index, 0)
    entries = conn.execute("SELECT count(*) FROM documents WHERE kind = 'memory'").fetchone()[0]
    conn.close()
    vectors = np.asarray(base.blocks[0])  # the file's rows (not those of documents changed since: no sketch)
    owners, parts = base.docs[: len(vectors)], base.parts[: len(vectors)]
    model = embedding.embedder()
    assert model is not None, embedding.problem()
    queries = [model.query(query) for query in words(args.queries, 11)]
    print(f"{machine()}; {args.vault}: {entries:,} entries, {len(vectors):,} pieces", flush=True)
    sketched = base.sketch
    print("| entries (pieces) | matrix | every row p50 | p95 | with the sketch p50 | p95 |\n|---|---|---|---|---|---|")
    for times in (int(value) for value in args.times.split(",")):
        docs = np.concatenate([owners + copy * (int(owners.max()) + 1) for copy in range(times)])
        matrix = np.concatenate([vectors] * times)
        mean = _mean(matrix)
        ranked = Matrix(base.state, docs, np.concatenate([parts] * times), (matrix,),
                        np.empty(0, dtype=np.intp), mean, _products(matrix, mean))
        row = [f"{entries * times:,} ({len(matrix):,})", f"{matrix.nbytes / 2**20:,.0f} MB"]
        rankings = [ranked]
        if sketched is not None:  # the copies' sketches are the vault's, repeated
            rankings.append(replace(ranked, shared=np.zeros(0, dtype=np.float32), blocks=(matrix, matrix[:0]),
                                    sketch=Sketch(np.concatenate([sketched.rows] * times), sketched.axes)))
        for ranking in rankings:
            ranking.nearest(queries[0], 200)  # the pages in
            seconds = []
            for query in queries:
                ranking.known.clear()  # each query new, as a person's are
                start = time.perf_counter()
                ranking.nearest(query, 200)
                seconds.append(time.perf_counter() - start)
            row += [f"{statistics.median(seconds) * 1e3:.1f} ms", f"{percentile(seconds, 0.95) * 1e3:.1f} ms"]
        print("| " + " | ".join(row + ["(no sketch)"] * (6 - len(row))) + " |", flush=True)
        del ranked, rankings, matrix, docs


if __name__ == "__main__":
    main()
