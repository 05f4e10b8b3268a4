"""Workspace: one vault opened with its settings, index and judge. Made at an entry point
(CLI command, server lifespan) and passed down; closed when that entry point ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType

from sentient.config import Settings
from sentient.index import Index, IndexedDoc
from sentient.vault import Document, Vault


@dataclass
class Workspace:
    settings: Settings
    vault: Vault
    _index: Index | None = field(default=None, repr=False)

    @property
    def index(self) -> Index:
        """The index, opened on first use (a command that never searches never creates it)."""
        if self._index is None:
            self._index = Index(self.vault)
        return self._index

    watching: bool = False  # a watcher keeps the index current (serve); else turns sync first

    def visible(self, item: IndexedDoc | Document) -> bool:
        """May this entry's text reach a model? Re-judged with the current patterns."""
        return True

    def judge_text(self, text: str) -> bool:
        """True when the text reads like instructions (the current patterns match)."""
        return False

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def open_workspace(settings: Settings) -> Workspace:
    vault = Vault(settings.vault, max_file_bytes=settings.limits.max_file_bytes)
    return Workspace(settings, vault)
