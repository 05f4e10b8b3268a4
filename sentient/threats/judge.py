"""Judgments: what the current pattern set says about one revision of a text, cached.

Every memory entry is judged when it is written and again on every read, so `ThreatJudge`
keys judgments by (content revision, pattern-set fingerprint): re-judging an unchanged entry is
a dictionary lookup, and a changed pattern set judges everything again on its next read.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sentient.threats.batch import scan_many
from sentient.threats.patterns import PatternSet
from sentient.threats.scan import Finding, scan
from sentient.vault.document import Document

CACHE_ENTRIES = 100_000


def judged_text(document: Document) -> str:
    """What the model would read of a document, and so what is judged: title and body."""
    return f"{document.title}\n{document.body}"


def text_revision(text: str) -> str:
    """The revision of a bare text; for a document's title + body it equals its revision."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def allowed_revision(document: Document) -> str | None:
    """The revision the person allowed in the stored `threat:` mapping, if any."""
    threat = document.meta.get("threat")
    if isinstance(threat, Mapping):
        value = threat.get("allowed_revision")
        return value if isinstance(value, str) else None
    return None


@dataclass(frozen=True)
class Judgment:
    """What the current pattern set says about one revision of a text."""

    revision: str
    flagged: bool
    patterns: tuple[str, ...]
    pattern_set: int
    fingerprint: str
    findings: tuple[Finding, ...] = ()

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(finding.class_ for finding in self.findings))

    def withheld(self, allowed: str | None = None) -> bool:
        """Kept from the model: flagged, unless the person allowed exactly this revision."""
        return self.flagged and allowed != self.revision

    def threat(self, allowed: str | None = None) -> dict[str, Any] | None:
        """The frontmatter `threat:` mapping, or None when nothing matched.

        An allowance survives only while it names this revision; an edit drops it.
        """
        if not self.flagged:
            return None
        return {
            "flagged": True,
            "patterns": list(self.patterns),
            "pattern_set": self.pattern_set,
            "allowed_revision": allowed if allowed == self.revision else None,
        }


def judge_text(text: str, patterns: PatternSet, revision: str | None = None) -> Judgment:
    """Judge a text now, without a cache."""
    return _judgment(tuple(scan(text, patterns)), patterns, revision if revision is not None else text_revision(text))


def _judgment(findings: tuple[Finding, ...], patterns: PatternSet, revision: str) -> Judgment:
    return Judgment(
        revision=revision,
        flagged=bool(findings),
        patterns=tuple(finding.pattern_id for finding in findings),
        pattern_set=patterns.version,
        fingerprint=patterns.fingerprint,
        findings=findings,
    )


def is_withheld(document: Document, judgment: Judgment) -> bool:
    """True when the document must be kept out of what the model is told."""
    return judgment.withheld(allowed_revision(document))


class ThreatJudge:
    """Judges documents and texts, caching by (revision, pattern-set fingerprint).

    Set `patterns` to a new PatternSet (say, after sentient.yaml changed) and every text is
    judged again on its next read; old entries age out of the bounded cache. Safe to share
    between threads. Callable as the vault's and the index's `Judge`.
    """

    def __init__(self, patterns: PatternSet, *, max_entries: int = CACHE_ENTRIES) -> None:
        self.patterns = patterns
        self.max_entries = max_entries
        self._cache: OrderedDict[tuple[str, str], Judgment] = OrderedDict()
        self._lock = threading.Lock()

    def judge(self, subject: Document | str, revision: str | None = None) -> Judgment:
        """The judgment of a document (its title + body) or of a text at `revision`."""
        if isinstance(subject, Document):
            key_revision = revision or subject.revision
        else:
            key_revision = revision or text_revision(subject)
        patterns = self.patterns
        key = (key_revision, patterns.fingerprint)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        text = judged_text(subject) if isinstance(subject, Document) else subject
        judgment = judge_text(text, patterns, key_revision)
        with self._lock:
            self._cache[key] = judgment
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return judgment

    def clean(self, revision: str) -> Judgment:
        """The judgment of a revision that this pattern set is known to find nothing in (an
        index built with this judge recorded so), without scanning it: the cache across
        processes that the index is. Cached like any other."""
        patterns = self.patterns
        key = (revision, patterns.fingerprint)
        with self._lock:
            judgment = self._cache.get(key)
            if judgment is None:
                judgment = self._cache[key] = _judgment((), patterns, revision)
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
            return judgment

    def judge_many(self, subjects: Sequence[Document | str]) -> list[Judgment]:
        """The judgments of many documents (or texts), as `judge` gives them one by one, but
        with the ones not cached scanned together (`scan_many`): much faster for many short
        entries, as when an index is built. They are cached, so reading them afterwards with
        `judge` is a lookup."""
        patterns = self.patterns
        keys = [(subject.revision if isinstance(subject, Document) else text_revision(subject), patterns.fingerprint)
                for subject in subjects]  # fmt: skip
        with self._lock:
            found = [self._cache.get(key) for key in keys]
        missing = list({keys[n]: n for n, judgment in reversed(list(enumerate(found))) if judgment is None}.values())
        texts = [judged_text(s) if isinstance(s, Document) else s for s in (subjects[n] for n in missing)]
        judged = {keys[n]: _judgment(tuple(findings), patterns, keys[n][0])
                  for n, findings in zip(missing, scan_many(texts, patterns), strict=True)}  # fmt: skip
        with self._lock:
            self._cache.update(judged)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        found = [judgment if judgment is not None else judged[key] for judgment, key in zip(found, keys, strict=True)]
        return [judgment for judgment in found if judgment is not None]

    def is_withheld(self, document: Document) -> bool:
        return is_withheld(document, self.judge(document))

    def threat(self, document: Document) -> dict[str, Any] | None:
        """The `threat:` mapping for the document as it is now (None: nothing matched)."""
        return self.judge(document).threat(allowed_revision(document))

    def __call__(self, document: Document) -> Mapping[str, Any] | None:
        return self.threat(document)

    def __len__(self) -> int:
        return len(self._cache)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
