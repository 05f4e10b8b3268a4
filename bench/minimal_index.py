"""The floor for bench/bench_scale.py: the least a markdown indexer does, in about 80 lines.

    python bench/minimal_index.py index VAULT DB     # cold when DB is missing, else a resync
    python bench/minimal_index.py search DB WORD...  # the best 10 by BM25, with snippets

Walks the vault with scandir (hidden names skipped), stats every .md file, and re-reads those
whose (mtime_ns, size) differ from the row it holds: frontmatter by libyaml, the rest as the body,
all written in one SQLite transaction into a table and an FTS5 index (porter, as Sentient's).
No ids, kinds, duplicates, threat judging, problems report, batching or bounded memory: what
it does not do is what the comparison shows the price of.
"""

from __future__ import annotations

import os
import sqlite3
import sys

import yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SCHEMA = ("CREATE TABLE IF NOT EXISTS docs (id INTEGER PRIMARY KEY, path TEXT UNIQUE, mtime_ns INT, size INT, "
          "title TEXT, body TEXT)",
          "CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(title, body, content='docs', content_rowid='id', "
          "tokenize='porter unicode61 remove_diacritics 2')")


def walk(folder: str):  # type: ignore[no-untyped-def]
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                yield from walk(entry.path)
            elif entry.name.endswith(".md"):
                stat = entry.stat()
                yield entry.path, stat.st_mtime_ns, stat.st_size


def parse(path: str) -> tuple[str, str]:
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    meta, body = {}, text
    if text.startswith("---\n"):
        head, _, body = text[4:].partition("\n---\n")
        meta = yaml.load(head, Loader=LOADER) or {}
    return str(meta.get("title") or os.path.basename(path)[:-3]), body


def index(vault: str, db: str) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN")
    for statement in SCHEMA:
        conn.execute(statement)
    known = {path: (mtime, size, rowid) for rowid, path, mtime, size in conn.execute(
        "SELECT id, path, mtime_ns, size FROM docs")}
    changed = 0
    for path, mtime, size in walk(vault):
        old = known.pop(path, None)
        if old is not None and old[:2] == (mtime, size):
            continue
        if old is not None:
            conn.execute("INSERT INTO docs_fts (docs_fts, rowid, title, body) SELECT 'delete', id, title, body "
                         "FROM docs WHERE id = ?", (old[2],))
            conn.execute("DELETE FROM docs WHERE id = ?", (old[2],))
        title, body = parse(path)
        rowid = conn.execute("INSERT INTO docs (path, mtime_ns, size, title, body) VALUES (?, ?, ?, ?, ?)",
                             (path, mtime, size, title, body)).lastrowid
        conn.execute("INSERT INTO docs_fts (rowid, title, body) VALUES (?, ?, ?)", (rowid, title, body))
        changed += 1
    for _, _, rowid in known.values():  # files gone
        conn.execute("INSERT INTO docs_fts (docs_fts, rowid, title, body) SELECT 'delete', id, title, body "
                     "FROM docs WHERE id = ?", (rowid,))
        conn.execute("DELETE FROM docs WHERE id = ?", (rowid,))
    conn.execute("COMMIT")
    print(f"{changed} indexed, {len(known)} removed")


def search(db: str, words: list[str]) -> None:
    conn = sqlite3.connect(db)
    query = " ".join('"' + word.replace('"', '""') + '"' for word in words)
    rows = conn.execute("SELECT d.path, d.title, snippet(docs_fts, -1, '[', ']', '…', 12) FROM docs_fts "
                        "JOIN docs d ON d.id = docs_fts.rowid WHERE docs_fts MATCH ? "
                        "ORDER BY bm25(docs_fts, 10.0, 1.0) LIMIT 10", (query,)).fetchall()
    for path, title, snippet in rows:
        print(f"{title}\n    {path}\n    {snippet}")
    if not rows:
        print("no matches")


if __name__ == "__main__":
    if sys.argv[1] == "index":
        index(sys.argv[2], sys.argv[3])
    else:
        search(sys.argv[2], sys.argv[3:])
