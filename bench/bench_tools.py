"""The two tool profiles on the embedded model: what a memory-on chat turn costs with the full
set of tools and with the compact one (agent/compact.py), on a copy of the example vault.

For each profile and round: one turn on a warm model ("Where does Anika teach?"), its time,
and the prompt tokens llama.cpp counted over the turn's model calls (`usage`). Also, once per
profile: the tokens of the system prompt and the tool schemas before the person's message
(litellm's count, as tests/test_compact.py measures it, for a message that no entry matches).

    .venv/bin/python bench/bench_tools.py --rounds 3 [--write]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import litellm  # noqa: E402

from bench.bench_local import machine  # noqa: E402
from bench.results import write_section  # noqa: E402
from sentient.agent.compact import compact  # noqa: E402
from sentient.agent.turn import Agent, open_agent  # noqa: E402
from sentient.config import load_settings  # noqa: E402
from sentient.workspace import open_workspace  # noqa: E402

QUESTION = "Where does Anika teach?"


def fixed_tokens(agent: Agent, profile: str) -> tuple[int, int]:
    """(tools offered, tokens of system prompt and tool schemas) of a memory-on chat turn."""
    ctx = agent.context(incognito=False, channel="chat", session=None)
    tools = agent.registry.offered(ctx)
    if profile == "compact":
        tools = compact(tools)
    system = agent.system_prompt(ctx, "Tell me a joke.")
    count = litellm.token_counter(model="gpt-4o", messages=[{"role": "system", "content": system}],
                                  tools=[item.schema() for item in tools])
    return len(tools), int(count)


def measure(profile: str, rounds: int) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix="sentient-bench-tools-")) / "vault"
    shutil.copytree(ROOT / "vault", folder, ignore=shutil.ignore_patterns(".sentient", "tasks"))
    config = folder / "sentient.yaml"
    config.write_text(config.read_text() + f"\nmodels:\n  chat:\n    tools: {profile}\nlocal:\n  max_tokens: 48\n")
    agent = open_agent(open_workspace(load_settings(folder, {})), {})
    seconds: list[float] = []
    prompt: list[int] = []
    try:
        offered, before = fixed_tokens(agent, profile)
        agent.llm.complete("chat", [{"role": "user", "content": "Say OK."}], None)  # load it outside the measure
        for _ in range(rounds):
            started = time.perf_counter()
            result = agent.turn(QUESTION)
            seconds.append(time.perf_counter() - started)
            prompt.append(result.usage.get("prompt_tokens", 0))
    finally:
        agent.close()
        shutil.rmtree(folder.parent, ignore_errors=True)
    return {"offered": offered, "before": before, "seconds": statistics.median(seconds),
            "prompt": statistics.median(prompt)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="put the table in bench/RESULTS.md")
    args = parser.parse_args()
    rows = ["| profile | tools offered | tokens before the message | turn p50 | prompt tokens of the turn p50 |",
            "|---|---|---|---|---|"]
    for profile in ("full", "compact"):
        got = measure(profile, args.rounds)
        rows.append(f"| {profile} | {got['offered']:.0f} | {got['before']:.0f} | {got['seconds']:.1f} s | "
                    f"{got['prompt']:.0f} |")
    header = (f"`{' '.join(['.venv/bin/python', 'bench/bench_tools.py', *sys.argv[1:]])}` on "
              f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {machine()}; SmolLM2-135M Q4_1, 1 thread; the example "
              f"vault; {args.rounds} rounds of \"{QUESTION}\", medians. Tokens before the message: the system "
              "prompt and the tool schemas (litellm's count); prompt tokens of the turn: llama.cpp's, over all "
              "the turn's calls (the embedded model is told the tools as a list in its constrained choice).")
    table = header + "\n\n" + "\n".join(rows) + "\n"
    print(table)
    if args.write:
        write_section(f"## Tool profiles (issue 22)\n\n{table}")


if __name__ == "__main__":
    main()
