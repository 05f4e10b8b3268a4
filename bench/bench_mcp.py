"""One memory_recall round trip over stdio: `sentient mcp` on a generated vault of N memory
entries, driven by the `mcp` SDK's own client as a desktop app drives it. Measures the time from
sending `tools/call` to holding the result, beside two floors: a `ping` round trip (the
protocol and the pipes alone) and the same search in-process (`search.find` and the judge).

    .venv/bin/python bench/bench_mcp.py [--entries 10000] [--calls 500] [--write]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
import mcp.types as mt
from mcp import ClientSession, StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gen_vault import COMMON, generate  # noqa: E402
from bench.results import machine, write_section  # noqa: E402
from sentient.config import load_settings  # noqa: E402
from sentient.search import find  # noqa: E402
from sentient.workspace import open_workspace  # noqa: E402

TARGET_MS = 20.0
HEADING = "## MCP recall over stdio (issue 27)"




def quantile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def queries(count: int, seed: int = 27) -> list[str]:
    """One or two common words a query: some match thousands of entries, most a few hundred."""
    rng = random.Random(seed)
    return [" ".join(rng.sample(COMMON, rng.choice((1, 2)))) for _ in range(count)]


async def over_stdio(vault: Path, asked: list[str], pings: int) -> tuple[list[float], list[float], float]:
    """(recall round trips, ping round trips, seconds from start to the first answer)."""
    server = StdioServerParameters(command=sys.executable, args=["-m", "sentient.cli", "--vault", str(vault), "mcp"],
                                   env={"PYTHONPATH": str(ROOT)})
    started = time.perf_counter()
    recalls: list[float] = []
    floor: list[float] = []
    async with stdio_client(server) as (read, write), \
            ClientSession(read, write, client_info=mt.Implementation(name="bench", version="1")) as session:
        await session.initialize()
        first = time.perf_counter() - started
        for query in asked[:20]:  # warm-up: the first calls of a process compile and cache
            await session.call_tool("memory_recall", {"query": query})
        for query in asked:
            begin = time.perf_counter()
            result = await session.call_tool("memory_recall", {"query": query, "limit": 10})
            recalls.append(time.perf_counter() - begin)
            assert not result.is_error, result.content
        for _ in range(pings):
            begin = time.perf_counter()
            await session.send_ping()
            floor.append(time.perf_counter() - begin)
    return recalls, floor, first


def in_process(vault: Path, asked: list[str]) -> list[float]:
    with open_workspace(load_settings(vault, {})) as workspace:
        workspace.index.sync()
        times = []
        for query in asked:
            begin = time.perf_counter()
            for hit in find(workspace.index, query, kind="memory", limit=10).hits:
                doc = workspace.index.get("memory", hit.key)
                assert doc is not None
                workspace.visible(doc)
            times.append(time.perf_counter() - begin)
        return times


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--write", action="store_true", help="put the results in bench/RESULTS.md")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="sentient-bench-mcp-")) / "vault"
    try:
        generate(args.entries, folder)
        asked = queries(args.calls)
        search = in_process(folder, asked)  # also builds the index, so the server starts on a current one
        recalls, pings, first = anyio.run(over_stdio, folder, asked, args.calls)
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    p95 = quantile(recalls, 0.95)
    verdict = "met" if p95 * 1000 < TARGET_MS else "missed"
    rows = [("memory_recall round trip", recalls), ("ping round trip (protocol floor)", pings),
            ("the same search in-process (find + judge)", search)]
    table = "\n".join(f"| {name} | {ms(statistics.median(t))} | {ms(quantile(t, 0.95))} | {ms(quantile(t, 0.99))} |"
                      for name, t in rows)
    command = f"python bench/bench_mcp.py --entries {args.entries} --calls {args.calls}"
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = f"""{HEADING}

`{command}` on {when}; {machine()}. `sentient mcp` started by the SDK's stdio client on a
generated vault of {args.entries:,} memory entries (index current at start); {args.calls} recall calls
(`limit` 10, one or two common words each, after 20 warm-up calls), then as many pings.

| what | p50 | p95 | p99 |
|---|---|---|---|
{table}

Start to the first answer (process start, imports, index check, watcher): {first:.2f} s.
Target: one recall round trip p95 under {TARGET_MS:.0f} ms at 10,000 entries: **{verdict}** (p95 {ms(p95)}).
"""
    print(section)
    if args.write:
        write_section(section)


if __name__ == "__main__":
    main()
