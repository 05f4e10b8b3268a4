"""Workspace: one vault opened with its settings, threat judge and index. Made at an entry
point (CLI command, server lifespan) and passed down; closed when that entry point ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType

from sentient.config import Settings
from sentient.index import Index, IndexedDoc
from sentient.threats import Judgment, PatternSet, ThreatJudge, allowed_revision
from sentient.vault import Document, Vault


@dataclass
class Workspace:
    settings: Settings
    vault: Vault
    judge: ThreatJudge
    watching: bool = False  # a watcher keeps the index current (serve); else turns sync first
    _index: Index | None = field(default=None, repr=False)

    @property
    def index(self) -> Index:
        """The index, opened on first use (a command that never searches never creates it)."""
        if self._index is None:
            self._index = Index(self.vault, judge=self.judge, judge_version=self.judge_fingerprint,
                                judge_many=self.judge.judge_many)
        return self._index

    @property
    def judge_fingerprint(self) -> str:
        return self.judge.patterns.fingerprint

    def judgment_of(self, item: IndexedDoc | Document) -> tuple[bool, tuple[str, ...], bool]:
        """(flagged, pattern ids, withheld) for an entry's text as it is now, with the current
        patterns; a cache lookup when the revision was judged before."""
        judgment, allowed = self.full_judgment(item)
        return judgment.flagged, judgment.patterns, judgment.withheld(allowed)

    def full_judgment(self, item: IndexedDoc | Document) -> tuple[Judgment, str | None]:
        """The judgment of an entry's text as it is now (with its findings: the patterns and
        the text they matched), and the revision the person allowed; a lookup when cached."""
        threat = item.meta.get("threat")
        allowed = threat.get("allowed_revision") if isinstance(threat, dict) else None
        if isinstance(item, Document):
            allowed = allowed_revision(item)
        if isinstance(item, IndexedDoc) and item.threat is None and self._judged_by_index():
            judgment = self.judge.clean(item.revision)  # the index judged this revision with these patterns
        else:
            judgment = self.judge.judge(f"{item.title}\n{item.body}", item.revision)
        return judgment, allowed if isinstance(allowed, str) else None

    def _judged_by_index(self) -> bool:
        """Whether the index's rows were judged with the current patterns (then a row with no
        `threat` is a revision they find nothing in: a lookup, in any process)."""
        return self._index is not None and self._index.judge_version == self.judge_fingerprint

    def judged(self, title: str, body: str, revision: str, allowed: str | None) -> tuple[bool, tuple[str, ...], bool]:
        """judgment_of for an entry given by its parts (`allowed`: its threat.allowed_revision)."""
        judgment = self.judge.judge(f"{title}\n{body}", revision)
        return judgment.flagged, judgment.patterns, judgment.withheld(allowed)

    def visible(self, item: IndexedDoc | Document) -> bool:
        """May this entry's text reach a model? Re-judged on every read, never from a stale flag."""
        return not self.judgment_of(item)[2]

    def judge_text(self, text: str) -> bool:
        """True when the text reads like instructions (the current patterns match)."""
        return self.judge.judge(text).flagged

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


def load_patterns(settings: Settings) -> PatternSet:
    """The packaged pattern set plus the vault's own (sentient.yaml `threats:`)."""
    extra_file = settings.vault / settings.threats.file if settings.threats.file else None
    return PatternSet.load(settings.threats.patterns or None, extra_file)


def open_workspace(settings: Settings) -> Workspace:
    judge = ThreatJudge(load_patterns(settings))
    vault = Vault(settings.vault, max_file_bytes=settings.limits.max_file_bytes, judge=judge)
    return Workspace(settings, vault, judge)
