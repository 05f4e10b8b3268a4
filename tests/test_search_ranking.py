"""Search ranks at least as well as a bare FTS5 BM25 `a OR b` query over the same texts, and any
text is a query: through the index, `sentient search`, the API and the memory_recall tool."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sentient.api.app import create_app
from sentient.config import load_settings
from sentient.index import Index, fts_query
from sentient.vault.store import Vault
from tests.agent_support import SCRIPTED, agent_on, sentient
from tests.scripted import Scripted, call, text

# (key, title, body): short turns that answer, and long sessions that mention every word once
DOCS = [
    ("anika-job", "Anika", "Anika teaches maths at the primary school."),
    ("long-chat", "Catch-up",
     "We talked about where to go, what the school does about homework, whether Anika should teach "
     "piano, the weather, the football, the neighbours, the garden, dinner plans, the car, and more. "
     * 3),
    ("boiler", "Boiler", "The boiler lost pressure overnight again; the plumber comes Tuesday."),
    ("week", "Week", "Busy week: the plumber, the dentist, the school run, and where to park the car on "
                     "Tuesday, does anyone know? " * 2),
    ("cello", "Lessons", "Tom started cello lessons on Thursdays."),
]
# (query, the entry that answers it)
QUESTIONS = [
    ("where does Anika teach", "anika-job"),
    ("when does the plumber come for the boiler", "boiler"),
    ("what lessons does Tom take on Thursdays", "cello"),
]


def bare_ranking(query: str) -> list[str]:
    """Keys ranked by a bare FTS5 bm25() OR-query over title and body as one text."""
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute("CREATE VIRTUAL TABLE fts USING fts5(key UNINDEXED, text, tokenize='porter unicode61')")
        conn.executemany("INSERT INTO fts VALUES (?, ?)", [(key, f"{title}\n{body}") for key, title, body in DOCS])
        match = fts_query(query, " OR ")
        return [row[0] for row in conn.execute("SELECT key FROM fts WHERE fts MATCH ? ORDER BY bm25(fts)", (match,))]


def write_docs(root: Path) -> None:
    (root / "memory").mkdir(parents=True, exist_ok=True)
    for key, title, body in DOCS:
        (root / "memory" / f"{key}.md").write_text(f"---\ntitle: {title}\n---\n\n{body}\n", encoding="utf-8")


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    vault = Vault(tmp_path / "vault")
    write_docs(vault.root)
    with Index(vault) as index:
        index.sync()
        yield index


@pytest.mark.parametrize(("query", "gold"), QUESTIONS)
def test_the_answer_ranks_no_lower_than_with_a_bare_bm25_query(index: Index, query: str, gold: str) -> None:
    bare = bare_ranking(query)
    ours = [hit.key for hit in index.search(query)]
    assert gold in bare  # the fixture holds what a bare query finds
    assert gold in ours and ours.index(gold) <= bare.index(gold), (ours, bare)


def test_a_possessive_finds_the_word_it_is_made_of(index: Index) -> None:
    """"Tom's": the tokenizer reads it as the phrase "tom s", which no entry holds."""
    assert [hit.key for hit in index.search("Tom's")] == ["cello"]
    assert "anika-job" in [hit.key for hit in index.search("Anika’s")]


HOSTILE = ['"', '""', "'", 'say "hi', "AND", "OR", "NOT", "a AND b", "a OR", "NEAR(a b)", "NEAR(", "a*", "*",
           "^a", "^", "(a", "a)", "((", "title:a", "body : x", "-a", "+a", "{a b}", "[x]", "a:b:c", "\\", "%", "_",
           "🙂", "🙂 teaches 🎉", "Anika🙂", "\u200b", "\x00", "\x01 a", "' OR 1=1 --", "c++ -- ;DROP TABLE x",
           "a\nb\tc", "Anika " * 2000, ("lorem ipsum AND (dolor OR sit*) NEAR/3 \"amet\" ^x 🙂 " * 300)[:10_240]]


def test_hostile_queries_never_raise_in_the_index(index: Index) -> None:
    for query in HOSTILE:
        assert isinstance(index.search(query), list), query
        assert isinstance(index.search(query, any_word=True, kind="memory"), list), query
    assert len(HOSTILE[-1]) == 10_240


def test_hostile_queries_never_fail_in_the_cli(make_vault: Callable[[str], Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    tmp_path = make_vault("basic")
    write_docs(tmp_path)
    for query in HOSTILE:
        code, out, err = sentient(capsys, "--vault", str(tmp_path), "search", "--json", "--", query)
        assert code == 0, (query, err)
        assert isinstance(json.loads(out), list)


def test_hostile_queries_never_500_in_the_api_nor_fail_the_recall_tool(make_vault: Callable[[str], Path],
                                                                       scripted: Scripted) -> None:
    tmp_path = make_vault("basic")
    write_docs(tmp_path)
    settings = load_settings(tmp_path, {"SENTIENT_MODEL": SCRIPTED})
    app = create_app(settings, environ={}, watch=False, schedule=False)
    with TestClient(app, base_url="http://localhost", headers={"Authorization": f"Bearer {app.state.token}"}) as client:
        for query in HOSTILE:
            if "\x00" in query:
                continue  # not a URL's character
            response = client.get("/api/memory/search", params={"q": query})
            assert response.status_code in (200, 422), (query, response.text)
            assert response.status_code == 200 or not query.strip(), (query, response.text)
    agent = agent_on(tmp_path)
    for query in HOSTILE[:: 3] + HOSTILE[-2:]:
        scripted.queue(call("memory_recall", query=query), text("ok"))
        agent.turn("recall that")
        result = str(scripted.requests[-1]["messages"][-1]["content"])
        assert not result.startswith("Error") or "give a query" in result, (query, result)


def test_recall_finds_the_answer_in_a_hostile_looking_query(make_vault: Callable[[str], Path],
                                                            scripted: Scripted) -> None:
    tmp_path = make_vault("basic")
    write_docs(tmp_path)
    agent = agent_on(tmp_path)
    scripted.queue(call("memory_recall", query='where does "Anika" teach?? (NEAR* ^'), text("ok"))
    agent.turn("where does she teach")
    assert "Anika teaches maths" in str(scripted.requests[-1]["messages"][-1]["content"])
