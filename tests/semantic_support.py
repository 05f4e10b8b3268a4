"""What the tests of search by meaning share: the shipped embedding model, loaded once a session
(the `model` fixture; a module's own `model` fixture overrides it), and a memory entry written by hand."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sentient import embedding
from sentient.index import Index
from sentient.vault.store import Vault

ENTRIES = {
    "anika": ("Anika", "Anika teaches maths at the primary school in Leeds."),
    "boiler": ("Boiler", "The boiler lost pressure overnight; the plumber comes on Tuesday."),
    "cello": ("Lessons", "Tom started cello lessons on Thursdays."),
    "crete": ("Holiday", "We spent two weeks in Crete in August, mostly on the beach."),
    "peanuts": ("Maya", "Maya cannot eat peanuts, she reacts badly to them."),
}


@pytest.fixture(scope="session")
def model() -> embedding.Embedder:
    loaded = embedding.embedder()
    assert loaded is not None, embedding.problem()
    return loaded


def write(root: Path, key: str, title: str, body: str) -> Path:
    path = root / "memory" / f"{key}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\ntitle: {title}\n---\n\n{body}\n", encoding="utf-8")
    return path


@contextmanager
def entries_index(root: Path, model: embedding.Embedder) -> Iterator[Index]:
    """An index of a vault at `root` holding ENTRIES, synced (not embedded yet)."""
    vault = Vault(root)
    for key, (title, body) in ENTRIES.items():
        write(vault.root, key, title, body)
    with Index(vault, embedder=lambda: model) as index:
        index.sync()
        yield index
