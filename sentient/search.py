"""What `sentient search` shows a person: what the agent knows (memory entries, notes, plans,
skills, tasks, facts) first, and chat sessions after them, so that a person's own recent chats,
which repeat every name they mention, do not push the rest off the page.

`find(index, query, kind=None, limit=10, mode=None)`: with a `kind`, that kind alone, ranked;
without, the best hits of every other kind, ranked, then sessions in what room the limit leaves,
and whether more sessions matched than were shown (`--kind session` lists them). `mode`: bm25,
vector or hybrid (Reader.search); None: hybrid when the index has an embedding model, else bm25.

`show(workspace, query, ...)`: the same search as a person is shown it, each hit judged now
(flagged, withheld), as plain rows: what `sentient search` prints, and what `GET /api/search`
answers, so that a command can ask a running server instead of opening the index itself (and
print the same). Nothing of the index is imported with this module: it names the modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sentient.index import Hit
    from sentient.index.reader import Reader
    from sentient.workspace import Workspace

CHATS = "session"
MODES = ("bm25", "vector", "hybrid")


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


@dataclass(frozen=True)
class Shown:
    """A search as a person is shown it. `hits`: a row each (kind, id, path, title, snippet,
    score, flagged, withheld, allowed, patterns, ref: what to name with `sentient memory show`,
    None for a kind not judged); `problem`: why it could not rank by meaning when asked to;
    `waiting`: documents not embedded yet, found by their words alone (0 when it ranked by
    words alone anyway)."""

    hits: list[dict[str, Any]]
    more_chats: bool
    problem: str | None
    waiting: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"hits": self.hits, "more_chats": self.more_chats, "problem": self.problem, "waiting": self.waiting}


def show(workspace: Workspace, query: str, *, kind: str | None = None, limit: int = 10,
         mode: str | None = None) -> Shown:
    """`find`, after a sync unless a watcher keeps the index current, each hit judged now."""
    from sentient.memory import judge_hit
    from sentient.vault.kinds import one_line

    if not workspace.index.watched():  # else `sentient serve`'s watcher has applied every change
        workspace.index.sync()
    problem = workspace.semantic_problem() if mode not in (None, "bm25") else None
    mode = mode or default_mode(workspace.index)
    found = find(workspace.index, query, kind=kind, limit=limit, mode=mode)
    waiting = workspace.index.waiting() if mode != "bm25" and workspace.index.semantic_model() is not None else 0
    rows = []
    for hit in found.hits:
        entry = judge_hit(workspace, hit.kind, hit.key)
        rows.append({
            "kind": hit.kind,
            "id": hit.key,
            "path": str(hit.path),
            "title": one_line(hit.title),
            "snippet": hit.snippet,
            "score": round(hit.score, 4),
            "flagged": entry is not None and entry.flagged,
            "withheld": entry is not None and entry.withheld,
            "allowed": entry is not None and entry.allowed,
            "patterns": list(entry.patterns) if entry is not None else [],
            "ref": entry.ref if entry is not None else None,
        })
    return Shown(rows, found.more_chats, problem, waiting)


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
