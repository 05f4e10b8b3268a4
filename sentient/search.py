"""What `sentient search` shows a person: what the agent knows (memory entries, notes, plans,
skills, tasks, facts) first, and chat sessions after them, so that a person's own recent chats,
which repeat every name they mention, do not push the rest off the page.

`find(index, query, kind=None, limit=10, mode=None)`: with a `kind`, that kind alone, ranked;
without, the best hits of every other kind, ranked, then sessions in what room the limit leaves,
and whether more sessions matched than were shown (`--kind session` lists them). `mode`: bm25,
vector or hybrid (Reader.search); None: hybrid when the index has an embedding model, else bm25.
"""

from __future__ import annotations

from dataclasses import dataclass

from sentient.index import Hit
from sentient.index.reader import Reader

CHATS = "session"


@dataclass(frozen=True)
class Found:
    hits: list[Hit]
    more_chats: bool  # sessions matched that the limit left out


def find(index: Reader, query: str, *, kind: str | None = None, limit: int = 10, mode: str | None = None) -> Found:
    mode = mode or default_mode(index)
    if kind is not None:
        return Found(index.search(query, kind=kind, limit=limit, mode=mode), False)
    known = index.search(query, not_kind=CHATS, limit=limit, mode=mode)
    room = limit - len(known)
    chats = index.search(query, kind=CHATS, limit=room + 1, mode=mode)  # one more than shown: are there others?
    return Found(known + chats[:room], len(chats) > room)


def default_mode(index: Reader) -> str:
    """hybrid when the index ranks by meaning too (its model loads), else bm25."""
    return "hybrid" if index.semantic_model() is not None else "bm25"


def snippet_line(snippet: str, title: str, most: int = 100) -> str:
    """A snippet on one line (its line breaks folded), at most `most` characters; "" when it
    says no more than the title does."""
    flat = " ".join(snippet.split())
    if flat.replace("[", "").replace("]", "").strip("… ") in title:
        return ""
    return flat if len(flat) <= most else flat[: most - 1].rstrip() + "…"
