"""`sentient doctor`: what in the vault cannot be read, and why, and what to do."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sentient.memory import EntryView, flagged_everywhere
from sentient.vault import Problem
from sentient.vault.kinds import KINDS
from sentient.workspace import Workspace


@dataclass(frozen=True)
class Diagnosis:
    vault: str
    counts: dict[str, int]
    problems: list[Problem]
    flagged: list[EntryView] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems


def examine(workspace: Workspace) -> Diagnosis:
    """Bring the index up to date and report what it holds and what it could not read."""
    index = workspace.index
    index.sync()
    counts = Counter(doc.kind for doc in index.documents())
    return Diagnosis(
        vault=str(workspace.vault.root),
        counts={name: counts.get(name, 0) for name in KINDS},
        problems=index.problems(),
        flagged=flagged_everywhere(workspace),
    )
