"""Caller facts benchmark: `python bench/bench_facts.py [--entries 1000] [--turns 100] [--rounds 5]`.

Does keeping facts slow a chat down? A generated vault (bench/gen_vault.py) with a persona is
served by `create_app` under uvicorn on 127.0.0.1 in a separate process, twice and side by
side: without a `facts:` section (off) and with one (on, an extraction every 2 turns, so
extractions run all the time). The model is the scripted one of tests/scripted.py: a chat turn
is answered at once, an extraction after EXTRACTION_DELAY seconds (as a real model takes its
time) with a valid replacement set, so the background worker reads sessions, validates and
writes while the chats go on. What a request takes is the server's own work per turn.

From httpx clients in this process it measures latency p50/p95 and requests per second of
`POST /api/chat` with `user_id` and `character_id`, sequential and with 4 concurrent clients
(each client one caller, a new session every 10 messages), in rounds that alternate between the
two servers (off first in odd rounds, on first in even ones; after a round of facts on, its
extractions end before the next round starts: /api/health's facts.busy). Each figure is the
median over the rounds; the ratio is on against off of the same run. It counts the extractions
written, and times in this process the turn path's read of a set of 40 facts: unchanged (a
stat) and just changed (read and judged).

Prints markdown tables and writes them under "## Caller facts (issue 20)" in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(BENCH)]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before anything imports litellm

from bench_api import free_port, machine, ms, quantile, served, vault_copy  # noqa: E402
from results import write_section  # noqa: E402

HEADING = "## Caller facts (issue 20)"
CONVERSATION = 10
EXTRACTION_DELAY = 0.3  # seconds the scripted extraction model takes
EXTRACTION = "You keep a short list of facts"
NOTES = (
    "Notes: a turn waits for nothing an extraction holds. The worker writes no session file (what it read is "
    "marked by the session's next turn, in the write that turn makes anyway), reads the index without a sync "
    "(no walk of the vault, no index lock), skips sessions unchanged since it read them whole, and shares with "
    "the turn only a lock around dictionary updates (no file is read or written under it) and one around the "
    "tiny job files. What facts add to a turn itself is the set's read (the "
    "figure above), a longer prompt and, at every 2nd turn here, the small job file that keeps a scheduled "
    "extraction across a restart. What is left is the workers' CPU in the same Python process (an extraction: "
    "about 4 ms of reading, checking and writing, and its litellm call), which shares the GIL and the 2 CPUs "
    "with the turns; with a real model a turn takes seconds and an extraction runs every 4 turns by default, so "
    "its share is far smaller than here. Before these changes the worker synced the index (a walk of the whole "
    "vault) and wrote each session it read, under the lock the turn takes to write the same file: p95 with one "
    "client was 15.2 ms off and 26.4 ms on (2026-12-04, one round of each), and this bench with alternating "
    "rounds gave 1.36× / 1.43× with one client and 1.04× / 1.20× with four (2026-12-07 07:45 UTC, 5 × 100). "
    "The machine is shared, so a single round moves by several ms; the medians of alternating rounds are what "
    "compares.")
PERSONA = "---\nid: companion\nname: Ada\n---\n\nYou are Ada, a warm companion. Be brief and kind.\n"


def register_model() -> None:
    """Chat answered at once; an extraction after EXTRACTION_DELAY, with a valid set."""
    import litellm

    from tests.scripted import PROVIDER, Scripted, ScriptedReply, text

    class Model(Scripted):
        def _next(self, model: str, messages: list[Any], optional_params: dict[str, Any], stream: bool,
                  api_base: str | None, api_key: str | None, timeout: Any) -> ScriptedReply:
            first = str(messages[0].get("content") or "") if messages else ""
            if first.startswith(EXTRACTION):
                time.sleep(EXTRACTION_DELAY)
                facts = [{"category": "garden", "text": "They plan the garden every week."},
                         {"category": "time", "text": f"They last talked at {time.time():.0f}."}]
                return text(json.dumps({"facts": facts}))
            return text("ok")

    litellm.custom_provider_map = [{"provider": PROVIDER, "custom_handler": Model()}]


def serve(vault: Path, port: int) -> None:
    import uvicorn

    from sentient.api.app import create_app
    from sentient.config import load_settings

    register_model()
    app = create_app(load_settings(vault, {"SENTIENT_MODEL": "scripted/test"}), environ={}, schedule=False)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


@contextmanager
def server_process(vault: Path) -> Iterator[tuple[str, str]]:
    port = free_port()
    with served([sys.executable, __file__, "--serve", str(vault), str(port)], vault, port) as (url, token, _):
        yield url, token


def conversation(client: httpx.Client, caller: str, turns: int, times: list[float]) -> None:
    session: str | None = None
    for number in range(turns):
        body: dict[str, Any] = {"message": f"message {number}: I plan the garden on Sundays, remember?"}
        if number % CONVERSATION:
            body["session_id"] = session
        else:
            body.update(user_id=caller, character_id="companion")
        start = time.perf_counter()
        response = client.post("/api/chat", json=body)
        times.append(time.perf_counter() - start)
        if response.status_code != 200:
            raise SystemExit(f"/api/chat: {response.status_code} {response.text[:300]}")
        session = response.json()["session_id"]


def load(url: str, token: str, clients: int, turns: int, tag: str) -> tuple[list[float], float]:
    per_client: list[list[float]] = [[] for _ in range(clients)]
    start_line = threading.Barrier(clients + 1)

    def run(number: int) -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as client:
            client.get("/api/health")
            start_line.wait()
            conversation(client, f"{tag}-c{number}", turns // clients, per_client[number])

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    start_line.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return [t for times in per_client for t in times], time.perf_counter() - began


def written(url: str, token: str, callers: list[str]) -> int:
    """How many of the callers' fact sets an extraction wrote (their last outcome `written`)."""
    count = 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        for caller in callers:
            held = client.get(f"/api/people/{caller}")
            if held.status_code == 200:
                count += sum(1 for facts in held.json()["facts"]
                             if (facts.get("last_extraction") or {}).get("status") == "written")
    return count


def prepare(vault: Path, facts: bool) -> None:
    (vault / "personas").mkdir(exist_ok=True)
    (vault / "personas" / "companion.md").write_text(PERSONA)
    config = (vault / "sentient.yaml").read_text()
    config += "\napi:\n  allow_memory: true\n" if "api:" not in config else ""
    if facts:
        config += "\nfacts:\n  every_n_turns: 2\n"
    (vault / "sentient.yaml").write_text(config)


def settle(url: str, token: str, callers: list[str], timeout: float = 30.0) -> None:
    """Wait until the callers' extractions have ended (none queued or running), so that the
    next round is timed without them."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        while time.monotonic() < deadline:
            if not client.get("/api/health").json().get("facts", {}).get("busy"):
                return
            time.sleep(EXTRACTION_DELAY / 3)


def read_path(scratch: Path, reads: int) -> tuple[float, float]:
    """Seconds per FactReader.told of a 40-fact set: unchanged, and changed before each read."""
    from sentient.config import load_settings
    from sentient.facts.sets import FactReader
    from sentient.prompts import Prompts
    from sentient.workspace import open_workspace

    vault = scratch / "read-vault"
    (vault / "people" / "maya").mkdir(parents=True)
    (vault / "sentient.yaml").write_text("facts: {}\n")
    path = vault / "people" / "maya" / "companion.md"
    lines = [f"- **fact{n}**: She said thing number {n} about her week, her garden and her cat." for n in range(40)]
    path.write_text("\n".join(lines) + "\n")
    with open_workspace(load_settings(vault, {})) as workspace:
        reader = FactReader(workspace, Prompts(vault))
        reader.told("maya", "companion")
        start = time.perf_counter()
        for _ in range(reads):
            reader.told("maya", "companion")
        unchanged = (time.perf_counter() - start) / reads
        start = time.perf_counter()
        for number in range(reads // 10):
            path.write_text("\n".join(lines) + f"\n- **n**: Edit {number}.\n")
            reader.told("maya", "companion")
        changed = (time.perf_counter() - start) / (reads // 10)
    return unchanged, changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=100, help="turns of one round (of each client count)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each condition, alternating")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(Path(args.serve[0]), int(args.serve[1]))
        return 0
    # rounds[(label, clients)] = [(p50, p95, requests/s) of each round]
    rounds: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    extracted: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="sentient-bench-facts-") as scratch, ExitStack() as servers:
        urls: dict[str, tuple[str, str]] = {}
        for facts in (False, True):
            label = "on" if facts else "off"
            workdir = Path(scratch) / label
            workdir.mkdir()
            vault = vault_copy(args.entries, workdir)
            prepare(vault, facts)
            urls[label] = servers.enter_context(server_process(vault))
            load(*urls[label], 1, 20, f"warm-{label}")  # first turns pay one-time costs
        settle(*urls["on"], ["warm-on-c0"])
        callers: dict[str, list[str]] = {"off": [], "on": []}
        for number in range(args.rounds):
            # alternating which goes first, so a drift of the shared machine falls on both alike
            for label in (("off", "on") if number % 2 == 0 else ("on", "off")):
                for clients in (1, 4):
                    tag = f"{label}{clients}r{number}"
                    times, wall = load(*urls[label], clients, args.turns, tag)
                    made = [f"{tag}-c{n}" for n in range(clients)]
                    callers[label] += made
                    rounds.setdefault((label, clients), []).append(
                        (quantile(times, 0.5), quantile(times, 0.95), len(times) / wall))
                    if label == "on":  # the extractions still going end before the next round is timed
                        settle(*urls[label], made)
                    print(f"round {number + 1} facts {label}, {clients} client(s): p50 {ms(quantile(times, 0.5))}, "
                          f"p95 {ms(quantile(times, 0.95))}", flush=True)
        for label in ("off", "on"):
            extracted[label] = written(*urls[label], callers[label])
        unchanged, changed = read_path(Path(scratch), 2000)
    rows: list[str] = []
    for clients in (1, 4):
        off, on = rounds[("off", clients)], rounds[("on", clients)]
        for label, measured in (("off", off), ("on", on)):
            p50 = statistics.median(r[0] for r in measured)
            p95 = statistics.median(r[1] for r in measured)
            rate = statistics.median(r[2] for r in measured)
            base50, base95 = statistics.median(r[0] for r in off), statistics.median(r[1] for r in off)
            versus = "" if label == "off" else f" {p50 / base50:.2f}× / {p95 / base95:.2f}×"
            rows.append(f"| {label} | {clients} | {len(measured)} × {args.turns} | {ms(p50)} | {ms(p95)} | {rate:.0f} |"
                        f"{versus} |")
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = "\n".join([
        HEADING, "",
        f"`python bench/bench_facts.py --entries {args.entries} --turns {args.turns} --rounds {args.rounds}` on "
        f"{machine()}, {now}.", "",
        "Server overhead of `POST /api/chat` with `user_id` and `character_id` (the scripted model answers a chat "
        f"turn at once; an extraction takes {EXTRACTION_DELAY:g} s). Facts on: an extraction every 2 turns, on the "
        "background workers. Both servers run side by side; rounds alternate between them (off first, then on "
        "first), and each figure is the median over the rounds of that round's p50 or p95; the ratio is on "
        "against off in this same run.", "",
        "| facts | clients | requests | p50 | p95 | requests/s | on / off (p50 / p95) |",
        "| --- | --- | --- | --- | --- | --- | --- |", *rows, "",
        f"Fact sets written by the background extraction while this ran (facts on): {extracted.get('on', 0)} "
        f"of the callers' sets had their last extraction written; facts off: {extracted.get('off', 0)}.", "",
        f"The turn path's read of a 40-fact set (`FactReader.told`): {unchanged * 1e6:.0f} µs unchanged (one "
        f"stat and a cache lookup), {changed * 1000:.2f} ms just changed (read, every line judged, rendered).", "",
        NOTES, ""])
    print(section)
    write_section(section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
