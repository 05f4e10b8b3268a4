"""What the tests of search by meaning share: the shipped embedding model, loaded once a session
(the `model` fixture; a module's own `model` fixture overrides it), and a memory entry written by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from sentient import embedding


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
