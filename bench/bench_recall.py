"""Recall benchmark: `python bench/bench_recall.py [--sessions 400] [--scale 100000]`.

A conversation data set generated here, deterministically (seeded): people who talk to Maya over
months, each with facts about their lives (work, family, pets, places, hobbies, plans) said once in
one of several wordings, among small talk that repeats their names and everyday words. Every turn
is one memory entry (title: who said it and the day; body: what they said). Questions come with
the turns that answer them, of four sorts:

- literal: the question uses the words of the answer ("Where did Tom move to?");
- paraphrased: it shares no content word with the answer but the name ("What does Anika do for a
  living?" against "I teach maths at the primary school now.");
- multi-hop: it names a person by another fact ("Where does the one who plays the cello live?"),
  answered by two turns, either of which counts;
- time: it names the day ("What did Priya say on 14 March 2026 about food?").

Reported: recall@5 and @10 (a question counts when at least one of its turns is in the top k) for
each search mode (Index.search, kind=memory) and for a bare SQLite FTS5 `a OR b` query ranked by
bm25() over the same texts; cold indexing throughput with embeddings; query latency (median, p95)
on this set and at `--scale` entries: the set's entries, then small talk up to that size, indexed
by the same sync, with the added rows' vectors copied from the set's own (plus noise) rather than
computed, to keep the run short (the query's cost does not depend on their values). Writes its
section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import write_section
from sentient import embedding
from sentient.index import Index, fts_query
from sentient.index.reader import MODES
from sentient.vault.store import Vault

NAMES = ["Anika", "Tom", "Priya", "Ben", "Clara", "Raj", "Elena", "Leo", "Ines", "Sam", "Nadia", "Omar", "Yuki",
         "Felix", "Hana", "Marco", "Zara", "Ivan", "Lena", "Kofi", "Maren", "Diego", "Saoirse", "Tariq"]
# (fact, what the person says: wordings, literal question, paraphrased question, the fact in a multi-hop)
FACTS = [
    ("job", ["I teach maths at the primary school now.", "Still teaching maths to the little ones."],
     "Where does {n} teach maths?", "What does {n} do for a living?", None),
    ("job", ["My shifts at the hospital ward are brutal this month, nights again.", "Nursing on the night ward again."],
     "Which ward shifts does {n} work?", "What is {n}'s profession?", None),
    ("job", ["I finally got the offer from the bank, I start in the risk team.", "Signed the contract with the bank."],
     "Which bank offer did {n} get?", "Did {n} find a new job?", None),
    ("pet", ["Our beagle {v} chewed the sofa again.", "{v} the beagle needs a walk every two hours."],
     "What did {n}'s beagle chew?", "Does {n} have a dog?", "the owner of {v}"),
    ("move", ["We moved to Lisbon last week, the flat has a view of the river.", "Unpacking boxes in Lisbon."],
     "When did {n} move to Lisbon?", "Which city does {n} live in now?", None),
    ("move", ["I've relocated to Toronto for the research post.", "Toronto is freezing, the post-doc started."],
     "Why did {n} go to Toronto?", "Where did {n} emigrate?", None),
    ("hobby", ["Started {v} lessons on Thursdays, my fingers hurt.", "Practising the {v} every evening."],
     "When are {n}'s {v} lessons?", "Which instrument is {n} learning?", "the one who practises the {v}"),
    ("hobby", ["Ran my first half marathon in under two hours!", "Training for the half marathon, 15 km today."],
     "How fast was {n}'s half marathon?", "Does {n} do any sport?", None),
    ("health", ["The physio says it's a strained muscle in my back, stretch daily.", "My back still hurts."],
     "What did the physio tell {n}?", "Why is {n} in pain?", None),
    ("family", ["Our daughter is due at the start of February.", "Baby arrives in February, nursery is painted."],
     "When is {n}'s daughter due?", "Is {n} expecting a child?", None),
    ("family", ["Priya and I are tying the knot in June!", "The wedding is booked for June."],
     "When is {n}'s wedding?", "Is {n} getting married?", None),
    ("food", ["I can't eat peanuts, I react badly to them.", "Careful, peanuts make me ill."],
     "What can't {n} eat?", "Is {n} allergic to anything?", None),
    ("trip", ["Two weeks in Crete in August, mostly on the beach.", "Back from Crete, so tanned."],
     "How long was {n} in Crete?", "Where did {n} go on holiday?", None),
    ("car", ["We bought a second-hand electric Renault Zoe.", "The Zoe charges overnight in the drive."],
     "Which Renault did {n} buy?", "What vehicle does {n} drive?", None),
    ("home", ["The boiler keeps losing pressure overnight, plumber on Tuesday.", "No hot water again."],
     "When is the plumber coming to fix {n}'s boiler?", "What is wrong with {n}'s heating?", None),
    ("study", ["Practising Japanese with an app every evening.", "My Japanese teacher says my kanji improved."],
     "Which language app is {n} practising?", "What is {n} studying?", None),
]
SMALL_TALK = ["Did you see the match last night?", "It rained all day here, again.", "Coffee later this week?",
              "I'm so tired, work was long today.", "Happy Friday! Any plans for the weekend?",
              "Sorry, I missed your call, I was in a meeting.", "The traffic this morning was awful.",
              "Let me know when you are free to talk.", "Haha, that's brilliant.", "Can you send me that photo?",
              "We should do dinner soon, it's been ages.", "How is your week going?", "Just got home, long day.",
              "Thanks for yesterday, it was lovely.", "Did you finish that book you were reading?",
              "I'll call you tomorrow evening.", "The new cafe on the corner is nice.", "Weekend went too fast.",
              "Are you coming to the party on Saturday?", "My phone died, sorry for the late reply."]
# what {v} is for each person (one each: a multi-hop question names a person by it)
VALUES = {"pet": ["Biscuit", "Pepper", "Mango", "Rex", "Luna", "Milo", "Nala", "Otis", "Poppy", "Bruno", "Ziggy",
                  "Hazel", "Juno", "Waffles", "Kiwi", "Marble", "Pickle", "Toffee", "Sprout", "Nutmeg", "Pixel",
                  "Clover", "Fudge", "Basil"],
          "hobby": ["cello", "violin", "piano", "flute", "trumpet", "harp", "drums", "banjo", "oboe", "clarinet",
                    "saxophone", "ukulele", "accordion", "mandolin", "harmonica", "trombone", "bassoon", "viola",
                    "sitar", "tuba", "xylophone", "bagpipes", "lute", "cornet"]}
TOPIC = {"job": "work", "pet": "their pet", "move": "moving", "hobby": "their hobby", "health": "their health",
         "family": "family news", "food": "food", "trip": "travel", "car": "their car", "home": "their home",
         "study": "what they study"}


@dataclass(frozen=True)
class Turn:
    key: str
    speaker: str
    day: date
    text: str


@dataclass(frozen=True)
class Question:
    text: str
    gold: frozenset[str]
    sort: str


def spoken(day: date) -> str:
    return f"{day.day} {day.strftime('%B %Y')}"


def value(fact: str, person: str) -> str:
    return VALUES[fact][NAMES.index(person)] if fact in VALUES else ""


def generate(sessions: int, seed: int = 24) -> tuple[list[Turn], list[Question]]:
    """Turns of `sessions` chats (each between Maya and one person, on one day), and questions."""
    rng = random.Random(seed)
    turns: list[Turn] = []
    questions: list[Question] = []
    facts = list(FACTS)
    told: dict[str, list[tuple[int, str]]] = defaultdict(list)  # person -> (fact index, turn key)
    start = date(2025, 9, 1)
    for number in range(sessions):
        person = NAMES[number % len(NAMES)]
        day = start + timedelta(days=rng.randrange(0, 420))
        available = [at for at in range(len(facts)) if at not in {fact for fact, _ in told[person]}]
        fact_at = rng.choice(available) if available and rng.random() < 0.6 else None
        lines = [(rng.choice([person, "Maya"]), rng.choice(SMALL_TALK)) for _ in range(rng.randrange(6, 14))]
        lines += [(person, f"{rng.choice(SMALL_TALK)} {rng.choice(NAMES)} says hi.")]
        said = ""
        if fact_at is not None:
            said = rng.choice(facts[fact_at][1]).format(v=value(facts[fact_at][0], person))
            lines.insert(rng.randrange(len(lines)), (person, said))
        for line, (speaker, text) in enumerate(lines):
            key = f"s{number:05d}-t{line:02d}"
            turns.append(Turn(key, speaker, day, text))
            if fact_at is not None and text == said and speaker == person:
                told[person].append((fact_at, key))
                name, literal, paraphrase = facts[fact_at][0], facts[fact_at][2], facts[fact_at][3]
                v = value(name, person)
                questions.append(Question(literal.format(n=person, v=v), frozenset({key}), "literal"))
                questions.append(Question(paraphrase.format(n=person, v=v), frozenset({key}), "paraphrased"))
                questions.append(Question(f"What did {person} say on {spoken(day)} about {TOPIC[name]}?",
                                          frozenset({key}), "time"))
    for person, facts_told in sorted(told.items()):
        for fact, key in facts_told:
            for other, other_key in facts_told:
                clue = facts[other][4]
                if clue is None or facts[fact][0] not in ("move", "job"):
                    continue
                ask = "Where does {c} live now?" if facts[fact][0] == "move" else "What does {c} do for work?"
                clue = clue.format(v=value(facts[other][0], person))
                questions.append(Question(ask.format(c=clue), frozenset({key, other_key}), "multi-hop"))
    return turns, questions


def write_vault(root: Path, turns: list[Turn]) -> None:
    folder = root / "memory"
    folder.mkdir(parents=True, exist_ok=True)
    for turn in turns:
        (folder / f"{turn.key}.md").write_text(
            f"---\ntitle: {turn.speaker}, {spoken(turn.day)}\ncreated: {turn.day.isoformat()}T12:00:00Z\n---\n\n"
            f"{turn.text}\n", encoding="utf-8")


def bare_fts(turns: list[Turn]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE fts USING fts5(key UNINDEXED, text, tokenize='porter unicode61')")
    conn.executemany("INSERT INTO fts VALUES (?, ?)",
                     [(t.key, f"{t.speaker}, {spoken(t.day)}\n{t.text}") for t in turns])
    return conn


def ranked(index: Index, bare: sqlite3.Connection, mode: str, question: str, limit: int = 10) -> list[str]:
    if mode == "bare FTS5":
        match = fts_query(question, " OR ")
        return [r[0] for r in bare.execute("SELECT key FROM fts WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT ?",
                                           (match, limit))] if match else []
    return [hit.key for hit in index.search(question, kind="memory", limit=limit, mode=mode)]


def latencies(index: Index, bare: sqlite3.Connection, mode: str, questions: list[Question]) -> tuple[float, float]:
    ranked(index, bare, mode, questions[0].text)  # the first query loads the matrix
    times = []
    for question in questions:
        start = time.perf_counter()
        ranked(index, bare, mode, question.text)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


def scale_up(root: Path, index: Index, turns: list[Turn], size: int) -> float:
    """Add small talk up to `size` entries, index it, and give the new rows vectors copied from
    the set's own, with noise. Returns the seconds the sync took."""
    import numpy as np

    rng = random.Random(7)
    extra = [Turn(f"x{n:07d}", rng.choice(NAMES), date(2025, 1, 1) + timedelta(days=rng.randrange(700)),
                  f"{rng.choice(SMALL_TALK)} {rng.choice(SMALL_TALK)}") for n in range(size - len(turns))]
    write_vault(root, extra)
    start = time.perf_counter()
    index.sync()
    took = time.perf_counter() - start
    with index._reading() as conn:
        known = np.frombuffer(b"".join(r[0] for r in conn.execute("SELECT vector FROM vectors")), dtype=np.float32)
        rows = conn.execute("SELECT id, revision FROM documents WHERE key LIKE 'x%'").fetchall()
    known = known.reshape(-1, embedding.DIMENSIONS)
    noise = np.random.default_rng(7)
    picked = known[noise.integers(0, len(known), len(rows))] + noise.normal(0, 0.05, (len(rows), known.shape[1]))
    picked = (picked / np.linalg.norm(picked, axis=1, keepdims=True)).astype(np.float32)
    with index._writing() as conn:
        conn.executemany("INSERT INTO embedded VALUES (?, ?)", rows)
        conn.executemany("INSERT INTO vectors VALUES (?, 0, 'synthetic', ?)",
                         [(doc, picked[n].tobytes()) for n, (doc, _) in enumerate(rows)])
    index.keep_vectors()  # the vectors file, as `sentient index` or serve's embedding pass writes it
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--seed", type=int, default=24, help="of the data set (24: the one the fusion was tuned on)")
    parser.add_argument("--scale", type=int, default=100_000, help="entries for the latency at scale (0: skip)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    args = parser.parse_args()
    model = embedding.embedder()
    if model is None:
        sys.exit(embedding.problem())
    turns, questions = generate(args.sessions, args.seed)
    sorts = sorted({q.sort for q in questions})
    modes = ["bare FTS5", *MODES]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "vault"
        write_vault(root, turns)
        with Index(Vault(root), embedder=lambda: model) as index:
            start = time.perf_counter()
            index.sync()
            synced = time.perf_counter() - start
            start, threads = time.perf_counter(), embedding.threads()
            index.embed(threads=threads)  # as `sentient index` does
            embedded = time.perf_counter() - start
            bare = bare_fts(turns)
            recall: dict[tuple[str, str, int], list[bool]] = defaultdict(list)
            for question in questions:
                for mode in modes:
                    found = ranked(index, bare, mode, question.text)
                    for k in (5, 10):
                        hit = bool(question.gold & set(found[:k]))
                        recall[(mode, question.sort, k)].append(hit)
                        recall[(mode, "all", k)].append(hit)
            small = {mode: latencies(index, bare, mode, questions[:200]) for mode in modes}
            large: dict[str, tuple[float, float]] = {}
            scaled = 0.0
            if args.scale > len(turns):
                scaled = scale_up(root, index, turns, args.scale)
                big = bare_fts([*turns])  # the bare query's latency is shown at the set's size only
                large = {mode: latencies(index, big, mode, questions[:200]) for mode in MODES}
    lines = [f"## Recall (issue 24), seed {args.seed}\n",
             f"`python bench/bench_recall.py --sessions {args.sessions} --seed {args.seed} --scale {args.scale}` "
             f"on {platform.node()} "
             f"({os.cpu_count()} cores, shared; load {os.getloadavg()[0]:.1f} at the end), "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. {len(turns)} turns in {args.sessions} sessions, "
             f"{len(questions)} questions ({', '.join(f'{sum(q.sort == s for q in questions)} {s}' for s in sorts)}). "
             f"Model: {model.id}.\n",
             "| mode | " + " | ".join(f"{s} @5 | {s} @10" for s in [*sorts, "all"]) + " |",
             "|---|" + "---|---|" * (len(sorts) + 1)]
    for mode in modes:
        cells = [f"{statistics.mean(recall[(mode, s, k)]):.2f}" for s in [*sorts, "all"] for k in (5, 10)]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    lines += ["", f"Cold index of the {len(turns)} turns: FTS sync {synced:.1f} s, embedding {embedded:.1f} s "
              f"({len(turns) / embedded:.0f} turns/s embedded in {threads} thread{'s' if threads != 1 else ''}; "
              f"{len(turns) / (synced + embedded):.0f} turns/s in all).",
              "", "| mode | median ms | p95 ms |" + (f" median ms at {args.scale:,} | p95 ms at {args.scale:,} |"
                                                      if large else ""),
              "|---|---|---|" + ("---|---|" if large else "")]
    for mode in modes:
        at_scale = f" {large[mode][0]:.1f} | {large[mode][1]:.1f} |" if mode in large else (" - | - |" if large else "")
        lines.append(f"| {mode} | {small[mode][0]:.1f} | {small[mode][1]:.1f} |{at_scale}")
    if large:
        lines += ["", f"At {args.scale:,}: the set plus small talk, FTS sync of the added entries {scaled:.0f} s; "
                  "their vectors copied from the set's with noise (not computed)."]
    section = "\n".join(lines) + "\n"
    print(section)
    if not args.no_write:
        write_section(section)


if __name__ == "__main__":
    main()
