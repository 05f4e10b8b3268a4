"""What the sketch of a large vectors file loses against multiplying every row, and what it saves:
`python bench/bench_sketch.py VAULT [--queries 100]`.

VAULT: a vault indexed with embeddings whose vectors file has a sketch (sketch.SKETCH_FROM rows or
more: bench/bench_scale.py's 100,000-entry vault after its run). For each query, the vector half of
a hybrid search (Matrix.nearest for 200 documents, as Reader._nearest asks for a filtered hybrid
search's 50: `--most 50` for an unfiltered one's) runs as a search runs it and over every row's
whole vector; printed: the share of the exact ranking's first 10 and first 50 documents the
sketched one finds (recall), and the time of each, p50 and p95. Queries: `--queries` of the bench's
random words (as bench_scale.py searches) and as many opening words of pieces picked at random
(text the vault holds).
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_scale import percentile, words  # noqa: E402
from bench.results import machine  # noqa: E402
from sentient import embedding  # noqa: E402
from sentient.index import sketch  # noqa: E402
from sentient.index.vectors import Matrix, _products  # noqa: E402

TIE = 1e-5  # closenesses apart by less are one (a product in another order differs in its last bits)
MOST = 200  # documents Matrix.nearest is asked for: a filtered hybrid search's depth (50) times PREFETCH


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("vault", type=Path)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--most", type=int, default=MOST, help="documents asked for")
    parser.add_argument("--least", type=int, default=None, help="sketch.CANDIDATES_LEAST to try instead")
    parser.add_argument("--per-piece", type=int, default=None, help="sketch.CANDIDATES_PER_PIECE to try instead")
    args = parser.parse_args()
    sketch.CANDIDATES_LEAST = args.least or sketch.CANDIDATES_LEAST
    sketch.CANDIDATES_PER_PIECE = args.per_piece or sketch.CANDIDATES_PER_PIECE
    index = args.vault / ".sentient" / "index.sqlite"
    conn = sqlite3.connect(index)
    sketched = Matrix.load(conn, index, 0)
    assert sketched.sketch is not None, f"{index}: its vectors file has no sketch (fewer than " \
                                        f"{sketch.SKETCH_FROM:,} rows?)"
    rng = random.Random(5)
    count = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    texts = [conn.execute("SELECT text FROM vectors LIMIT 1 OFFSET ?", (rng.randrange(count),)).fetchone()[0]
             for _ in range(args.queries)]
    conn.close()
    exact = Matrix(sketched.state, sketched.docs, sketched.parts, sketched.blocks, sketched.hidden, sketched.mean,
                   np.concatenate([_products(block, sketched.mean) for block in sketched.blocks if len(block)]))
    model = embedding.embedder()
    assert model is not None, embedding.problem()
    sets = {"random words": words(args.queries, 11),
            "a piece's opening words": [" ".join(text.split()[:8]) for text in texts]}
    print(f"{machine()}; {args.vault}: {len(sketched.docs):,} pieces, sketches of {sketched.sketch.axes.shape[1]} "
          f"floats, {sketch.candidates(args.most * 4, len(sketched.blocks[0])):,} candidates", flush=True)
    print("| queries | recall@10 | recall@50 | sketched p50 / p95 | every row p50 / p95 |\n|---|---|---|---|---|")
    for name, queries in sets.items():
        at10, at50, fast, slow = [], [], [], []
        for query in (model.query(text) for text in queries):
            start = time.perf_counter()
            found = sketched.nearest(query, args.most)
            fast.append(time.perf_counter() - start)
            start = time.perf_counter()
            truth = exact.nearest(query, args.most)
            slow.append(time.perf_counter() - start)
            for cut, into in ((10, at10), (50, at50)):
                if truth[:cut]:  # a document found counts when it is as near as the exact ranking's last
                    last = truth[: cut][-1][2] - TIE  # (the bench's vaults repeat messages: ties)
                    into.append(sum(score >= last for _, _, score in found[:cut]) / len(truth[:cut]))
        print(f"| {name} ({len(queries)}) | {statistics.mean(at10):.3f} | {statistics.mean(at50):.3f} | "
              f"{statistics.median(fast) * 1e3:.1f} / {percentile(fast, 0.95) * 1e3:.1f} ms | "
              f"{statistics.median(slow) * 1e3:.1f} / {percentile(slow, 0.95) * 1e3:.1f} ms |", flush=True)


if __name__ == "__main__":
    main()
