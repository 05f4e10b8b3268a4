"""Embedded model through the full turn path against the bare llama.cpp server, same prompt.

For each round: one chat turn on a copy of the example vault (`Agent.turn` with a streaming
callback: system prompt, knowledge block, memories, litellm, the constrained-tools provider),
then the exact request that turn's answer was streamed from, replayed straight to the same
llama.cpp server. Reported: first-token latency and tokens/s (medians), and their ratios.

    .venv/bin/python bench/bench_local.py --rounds 5 [--routing] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import machine, write_section  # noqa: E402
from sentient.agent.turn import open_agent  # noqa: E402
from sentient.config import load_settings  # noqa: E402
from sentient.workspace import open_workspace  # noqa: E402

QUESTION = "In two sentences, what is Maya working on this month?"




def bare(address: str, body: dict[str, object]) -> tuple[float, float, int]:
    """(first-token seconds, total seconds, pieces) streaming `body` straight to the server."""
    started = time.perf_counter()
    first = None
    pieces = 0
    with httpx.stream("POST", f"{address}/v1/chat/completions", json=body, timeout=600) as response:
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = (json.loads(line[6:]).get("choices") or [{}])[0].get("delta") or {}
            if delta.get("content"):
                pieces += 1
                first = first if first is not None else time.perf_counter() - started
    return first or 0.0, time.perf_counter() - started, pieces


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--routing", action="store_true", help="keep constrained tool routing on (an extra call)")
    parser.add_argument("--write", action="store_true", help="append the table to bench/RESULTS.md")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="sentient-bench-local-")) / "vault"
    shutil.copytree(ROOT / "vault", folder, ignore=shutil.ignore_patterns(".sentient"))
    config = folder / "sentient.yaml"
    config.write_text(config.read_text() + f"\nlocal:\n  max_tokens: 64\n  tool_routing: {str(args.routing).lower()}\n")
    agent = open_agent(open_workspace(load_settings(folder, {})), {})
    turn_first: list[float] = []
    turn_rate: list[float] = []
    bare_first: list[float] = []
    bare_rate: list[float] = []
    try:
        agent.turn("Say OK.")  # start the server and warm the cache outside the measurement
        for _ in range(args.rounds):
            started = time.perf_counter()
            stamps: list[float] = []
            agent.turn(QUESTION, on_text=lambda piece, seen=stamps: seen.append(time.perf_counter()))
            total = time.perf_counter() - started
            if not stamps:
                continue
            turn_first.append(stamps[0] - started)
            turn_rate.append(len(stamps) / max(total - turn_first[-1], 1e-6))
            body = dict(agent.llm.local_requests()[-1])
            (address,) = agent.llm.embedded_servers()
            first, whole, pieces = bare(address, body)
            bare_first.append(first)
            bare_rate.append(pieces / max(whole - first, 1e-6))
    finally:
        agent.close()
        shutil.rmtree(folder.parent, ignore_errors=True)
    med = statistics.median
    rows = [
        "| path | first token p50 | tokens/s p50 |",
        "|---|---|---|",
        f"| full turn (routing {'on' if args.routing else 'off'}) | {med(turn_first) * 1000:.0f} ms | "
        f"{med(turn_rate):.1f} |",
        f"| bare llama.cpp, same request | {med(bare_first) * 1000:.0f} ms | {med(bare_rate):.1f} |",
        f"| ratio turn / bare | {med(turn_first) / med(bare_first):.2f}x | {med(turn_rate) / med(bare_rate):.2f}x |",
    ]
    header = (f"`{' '.join(['.venv/bin/python', 'bench/bench_local.py', *sys.argv[1:]])}` on "
              f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {machine()}; SmolLM2-135M Q4_1, 1 thread; "
              f"{len(turn_first)} rounds, medians; the bare request is the one the turn streamed its answer from.")
    table = header + "\n\n" + "\n".join(rows) + "\n"
    print(table)
    if args.write:
        write_section(f"## Embedded model (issue 7)\n\n{table}")


if __name__ == "__main__":
    main()
