"""Embedding model benchmark: `python bench/bench_embedding.py [--rounds 3]`.

Quality on a small paraphrase set written for this (each question shares no content word with
the turn that answers it; every question is ranked against all 30 turns): top-1 and mean
reciprocal rank. Throughput: texts a second over 1,200 short turns, in one process. Prints
only (docs/benchmarks.md keeps the figures of the choice).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sentient import embedding

PAIRS = [
    ("what does my sister do for work", "Anika teaches maths at the primary school in Leeds."),
    ("where did we go on holiday last summer", "We spent two weeks in Crete in August, mostly on the beach."),
    ("which pet do they own", "Our dog Biscuit is a very lazy beagle."),
    ("what instrument is he learning", "Tom has started taking cello lessons on Thursdays."),
    ("when is the car being repaired", "The garage will fix the brakes next Tuesday morning."),
    ("what food is she allergic to", "Maya can't eat peanuts, she reacts badly to them."),
    ("how did the job interview go", "I got the offer from the bank after the second round!"),
    ("what sport does the kid play", "Leo joined the under-10 football team this autumn."),
    ("where does grandma live now", "Nana moved into a care home near Brighton in March."),
    ("what is he reading at the moment", "I'm halfway through a novel by Ishiguro, it's slow but lovely."),
    ("why was the flight cancelled", "They grounded the plane because of the storm over the Alps."),
    ("what did the doctor say about my back", "The physio said the pain is a strained muscle and to stretch daily."),
    ("how much does the new flat cost", "Rent on the apartment is 1400 a month including heating."),
    ("who is getting married", "Priya and Sam are tying the knot in June."),
    ("what present did I buy for dad", "I got my father a leather wallet for his birthday."),
    ("how is the garden doing", "The tomatoes are finally ripening and the roses bloomed."),
    ("what language is she studying", "Elena practises Japanese with an app every evening."),
    ("when does the baby arrive", "Our daughter is due at the start of February."),
    ("what happened to the laptop", "I spilled coffee on my computer and the keyboard died."),
    ("which film did we watch", "We saw the new Dune movie at the cinema on Friday."),
    ("is he feeling better", "Raj has recovered from the flu and is back at the office."),
    ("what is the name of their cat", "The kitten is called Pepper, she is grey and tiny."),
    ("where is the conference this year", "The summit takes place in Lisbon in October."),
    ("what did she cook for dinner", "Ines made a big pot of vegetable curry last night."),
    ("how old is the house", "The cottage was built around 1890."),
    ("who won the chess game", "Ben beat me at chess again, checkmate in thirty moves."),
    ("what car did they buy", "They picked up a second-hand electric Renault Zoe."),
    ("why is she moving abroad", "Clara accepted a research post at a university in Toronto."),
    ("what is wrong with the boiler", "The heating system keeps losing pressure overnight."),
    ("how was the wedding", "The ceremony was beautiful and everyone danced until 2am."),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = embedding.embedder()
    if model is None:
        sys.exit(embedding.problem())
    questions = [model.query(question) for question, _ in PAIRS]  # as a search embeds its query
    answers = model.embed([answer for _, answer in PAIRS])
    similarity = questions @ answers.T
    ranks = [int((similarity[row] > similarity[row, row]).sum()) for row in range(len(PAIRS))]
    print(f"{model.id}: top-1 {sum(rank == 0 for rank in ranks) / len(PAIRS):.2f}, "
          f"MRR {sum(1 / (rank + 1) for rank in ranks) / len(PAIRS):.2f}")
    texts = [answer for _, answer in PAIRS] * 40
    for _ in range(args.rounds):
        start = time.perf_counter()
        model.embed(texts)
        print(f"{len(texts) / (time.perf_counter() - start):.0f} texts/s")


if __name__ == "__main__":
    main()
