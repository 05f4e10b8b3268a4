"""What a search by meaning costs a new process: `python bench/bench_vector_cost.py VAULT [--runs 9] [--word garden]`.

VAULT: a vault indexed with embeddings (`bench/gen_vault.py 10000 DIR`, then `sentient --vault DIR
index`; its minimal index is made beside it). Prints, in one run:
- the model's weights: parsed out of the ONNX graph, and read from the user's cache (embedding.py);
- every vector of the index: read out of SQLite (as a search did before the vectors file), and
  memory-mapped from the vectors file (vectors.Matrix.load);
- whole processes, alternating: `sentient search WORD` (hybrid, the default) and `--mode bm25`,
  beside bench/minimal_index.py's search (one FTS5 query), medians of `--runs`, and the load.
Prints only; bench/RESULTS.md gets what a person copies there.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import median_seconds  # noqa: E402
from sentient import embedding  # noqa: E402
from sentient.index.vectors import Matrix  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("vault", type=Path)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--word", default="garden")
    args = parser.parse_args()
    spec = importlib.util.find_spec(embedding.PACKAGE)
    assert spec is not None and spec.submodule_search_locations, embedding.problem()
    graph = Path(next(iter(spec.submodule_search_locations))) / embedding.MODEL_FILE
    version = importlib.metadata.version(embedding.PACKAGE)
    embedding.cached_weights(graph, version)  # the cache made, if it was not
    parsed = median_seconds(lambda: embedding._bert_weights(graph), args.runs)
    cached = median_seconds(lambda: embedding.cached_weights(graph, version), args.runs)
    print(f"weights: parsed from the graph {parsed * 1000:.1f} ms, from the cache {cached * 1000:.2f} ms")

    index = args.vault / ".sentient" / "index.sqlite"
    conn = sqlite3.connect(f"file:{index}?mode=ro", uri=True, isolation_level=None)
    rows = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    from_sqlite = median_seconds(lambda: Matrix.load(conn, index.with_name("none"), 0), 3)  # no file there: read it all
    mapped = median_seconds(lambda: Matrix.load(conn, index, 0), args.runs)
    print(f"vectors ({rows:,}): read from SQLite {from_sqlite * 1000:.0f} ms, "
          f"mapped from the file {mapped * 1000:.1f} ms")

    floor_db = args.vault.parent / f"{args.vault.name}-minimal.sqlite"
    python = sys.executable
    if not floor_db.exists():
        subprocess.run([python, str(ROOT / "bench" / "minimal_index.py"), "index", str(args.vault), str(floor_db)],
                       check=True, stdout=subprocess.DEVNULL)
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    sentient = [python, "-m", "sentient.cli", "--vault", str(args.vault), "search"]
    cases = {"minimal (one FTS5 query)": [python, str(ROOT / "bench" / "minimal_index.py"), "search", str(floor_db),
                                          args.word],
             "sentient search (hybrid)": [*sentient, args.word],
             "sentient search --mode bm25": [*sentient, "--mode", "bm25", args.word]}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, command in cases.items():
            start = time.perf_counter()
            subprocess.run(command, env=environ, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - start)
    floor = statistics.median(times["minimal (one FTS5 query)"])
    for name, taken in times.items():
        print(f"{name}: median {statistics.median(taken) * 1000:.0f} ms ({statistics.median(taken) / floor:.1f}x)")
    print(f"load average {' '.join(f'{value:.2f}' for value in os.getloadavg())}; {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
