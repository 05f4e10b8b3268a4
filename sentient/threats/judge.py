"""Judgments: what the current pattern set says about one revision of a text, cached.

Every memory entry is judged when it is written and again on every read, so `ThreatJudge`
keys judgments by (content revision, pattern-set fingerprint): re-judging an unchanged entry is
a dictionary lookup, and a changed pattern set judges everything again on its next read.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from sentient.vault.document import Document

if TYPE_CHECKING:
    from sentient.threats.patterns import PatternSet
    from sentient.threats.scan import Finding

CACHE_ENTRIES = 100_000
RELOAD_SECONDS = 1.0  # how often a judge with a `source` asks it for a new pattern set


# The guard model's verdict in an entry's frontmatter (guard.py), and what its finding is called.
GUARD_FIELD = "guard"
GUARD_PATTERN = "guard-model"
GUARD_CLASS = "guard"

# Frontmatter fields the model is shown beside a document's title and body (the knowledge
# index shows an entry's category; recall shows its category and source), so judged with them.
SHOWN_FIELDS = ("category", "source")


class Shown(Protocol):
    """What a judgment reads of a document (a Document, or an index row of one)."""

    @property
    def title(self) -> str: ...
    @property
    def body(self) -> str: ...
    @property
    def revision(self) -> str: ...
    @property
    def meta(self) -> Mapping[str, Any]: ...


def judged_text(document: Shown) -> str:
    """What the model would read of a document, and so what is judged: title and body, then
    the fields of SHOWN_FIELDS it has, a line each."""
    text = f"{document.title}\n{document.body}"
    fields = _shown_fields(document)
    return f"{text}\n\n{fields}" if fields else text


def judged_revision(document: Shown) -> str:
    """What a judgment of the document, and an allowance of it, is of: its revision (of title
    and body) when it has none of SHOWN_FIELDS, else that revision and those fields hashed
    together, so that editing a field the model is shown judges it afresh too."""
    fields = _shown_fields(document)
    if not fields:
        return document.revision
    return "sha256:" + hashlib.sha256(f"{document.revision}\n{fields}".encode("utf-8", "surrogatepass")).hexdigest()


def _shown_fields(document: Shown) -> str:
    return "\n".join(value for name in SHOWN_FIELDS if isinstance(value := document.meta.get(name), str) and value)


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


def _as_words(key: str) -> str:
    """An id as the words it spells (`ignore-all-previous` -> "ignore all previous")."""
    return key.replace("-", " ")


def judge_text(text: str, patterns: PatternSet, revision: str | None = None) -> Judgment:
    """Judge a text now, without a cache."""
    from sentient.threats.scan import scan  # here: a verdict looked up needs no scanner

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


def with_guard(judgment: Judgment, subject: Shown) -> Judgment:
    """The judgment with the guard model's finding, when the document's `guard:` mapping
    (guard.py) flagged exactly the revision judged; a verdict on an earlier text is stale."""
    guard = subject.meta.get(GUARD_FIELD)
    # a nested mapping's values are read back from the frontmatter as text: true is "true"
    if not isinstance(guard, Mapping) or str(guard.get("flagged")).lower() != "true" \
            or str(guard.get("checked")).lower() != "true":
        return judgment
    if guard.get("revision") != judgment.revision or GUARD_PATTERN in judgment.patterns:
        return judgment
    from sentient.threats.scan import Finding, one_line_excerpt  # only now: a guard finding is rare

    reason = guard.get("reason")
    finding = Finding(GUARD_PATTERN, GUARD_CLASS, f"the guard model ({guard.get('model')}) judged it an injection",
                      one_line_excerpt(reason if isinstance(reason, str) and reason else "judged an injection"))
    return replace(judgment, flagged=True, patterns=(*judgment.patterns, GUARD_PATTERN),
                   findings=(*judgment.findings, finding))  # fmt: skip


def is_withheld(document: Document, judgment: Judgment) -> bool:
    """True when the document must be kept out of what the model is told."""
    return judgment.withheld(allowed_revision(document))


class ThreatJudge:
    """Judges documents and texts, caching by (revision, pattern-set fingerprint).

    Set `patterns` to a new PatternSet (say, after sentient.yaml changed) and every text is
    judged again on its next read; old entries age out of the bounded cache. Safe to share
    between threads. Callable as the vault's and the index's `Judge`.
    """

    def __init__(self, patterns: PatternSet | Callable[[], PatternSet], *, named: tuple[int, str] | None = None,
                 max_entries: int = CACHE_ENTRIES,
                 source: Callable[[], PatternSet | None] | None = None) -> None:  # fmt: skip
        """`patterns`: the set, or what loads it when it is first needed (a scan); `named` is
        then the (version, fingerprint) it will have (compiled.cached_name), so that what only
        names the set (`fingerprint`, `clean`: a no-change sync, a search whose hits the index
        judged) loads none of it. `source`, when given, is asked for a new set before judging, at
        most once every RELOAD_SECONDS: the set that replaces this one, or None to keep it."""
        self._patterns = patterns if not callable(patterns) else None
        self._load = patterns if callable(patterns) else None
        if self._patterns is None and named is None:
            raise ValueError("a set loaded on first use needs its (version, fingerprint): named=")
        self._named = named
        self._loading = threading.Lock()
        self.max_entries = max_entries
        self._cache: OrderedDict[tuple[str, str], Judgment] = OrderedDict()
        # Ids' judgments apart, by (id, fingerprint): a document's id costs no hash of its own
        # and takes no room from the documents' judgments.
        self._names: OrderedDict[tuple[str, str], Judgment] = OrderedDict()
        self._lock = threading.Lock()
        self._source = source
        self._next_look = 0.0

    @property
    def patterns(self) -> PatternSet:
        """The set judging now (loaded now if it was given as a loader)."""
        found = self._patterns
        if found is None:
            with self._loading:
                found = self._patterns
                if found is None and self._load is not None:
                    found = self._patterns = self._load()
        assert found is not None
        return found

    @patterns.setter
    def patterns(self, patterns: PatternSet) -> None:
        self._patterns = patterns

    @property
    def loaded(self) -> bool:
        """Whether the set is loaded (one given as a loader is loaded by the first scan)."""
        return self._patterns is not None

    def current(self) -> PatternSet:
        """The set judging now, taken again first if its source has a new one (see `reload`)."""
        self.reload()
        return self.patterns

    @property
    def fingerprint(self) -> str:
        """`current().fingerprint`, without loading a set that is not loaded yet."""
        self.reload()
        return self._name()[1]

    def _name(self) -> tuple[int, str]:
        """(version, fingerprint) of the set judging now; loaded or named, it is the same."""
        found = self._patterns
        if found is None and self._named is not None:
            return self._named
        found = self.patterns
        return found.version, found.fingerprint

    @property
    def problem(self) -> str | None:
        """Why the patterns as the vault has them now do not judge (the set before does), if so."""
        self.reload()
        error = getattr(self._source, "error", None)
        return error if isinstance(error, str) else None

    def reload(self) -> None:
        """Take the set `source` has, if it has a new one and it is time to ask (see __init__)."""
        if self._source is None or time.monotonic() < self._next_look:
            return
        with self._lock:
            if time.monotonic() < self._next_look:
                return
            self._next_look = time.monotonic() + RELOAD_SECONDS
        fresh = self._source()
        if fresh is not None:
            self.patterns = fresh

    def judge(self, subject: Shown | str, revision: str | None = None) -> Judgment:
        """The judgment of a document (its judged_text, its id: see `_with_id`, and the guard
        model's verdict on it: see `with_guard`) or of a text at `revision`."""
        judgment = self._judge(subject, revision)
        return judgment if isinstance(subject, str) else with_guard(self._with_id(judgment, subject), subject)

    def _with_id(self, judgment: Judgment, subject: Shown, named: Mapping[str, Judgment] | None = None) -> Judgment:
        """The judgment with what the document's id says, read as words: the model is shown ids
        (`<memory id=...>`, the memory index), and an id is any slug a file name or the API gave,
        so `ignore-all-previous-instructions` is judged as the words it spells. Its own judgment,
        cached apart by id, is merged in when it finds something."""
        key = getattr(subject, "key", None)
        if not isinstance(key, str) or not key:
            return judgment
        patterns = self.patterns
        if named is not None and key in named:  # judged just now, and not kept
            name = named[key]
        else:
            with self._lock:
                found = self._names.get((key, patterns.fingerprint))
            name = found if found is not None else \
                self._name_judged(key, judge_text(_as_words(key), patterns), patterns)
        if not name.flagged:
            return judgment
        new = tuple(replace(finding, excerpt=f"{finding.excerpt} (in its id, {key})")  # where to look for it
                    for finding in name.findings if finding.pattern_id not in judgment.patterns)
        if not new:
            return judgment
        return Judgment(judgment.revision, True, judgment.patterns + tuple(f.pattern_id for f in new),
                        judgment.pattern_set, judgment.fingerprint, judgment.findings + new)

    def _name_judged(self, key: str, judgment: Judgment, patterns: PatternSet) -> Judgment:
        with self._lock:
            self._keep(self._names, {(key, patterns.fingerprint): judgment})
        return judgment

    def _keep(self, cache: OrderedDict[tuple[str, str], Judgment], judged: Mapping[tuple[str, str], Judgment]) -> None:
        """Add judgments to a cache, dropping its oldest beyond max_entries (under the lock)."""
        cache.update(judged)
        while len(cache) > self.max_entries:
            cache.popitem(last=False)

    def _judge(self, subject: Shown | str, revision: str | None) -> Judgment:
        self.reload()
        if isinstance(subject, str):
            key_revision = revision or text_revision(subject)
        else:
            key_revision = revision or judged_revision(subject)
        patterns = self.patterns
        key = (key_revision, patterns.fingerprint)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        text = subject if isinstance(subject, str) else judged_text(subject)  # only now: a lookup needs none
        judgment = judge_text(text, patterns, key_revision)
        with self._lock:
            self._keep(self._cache, {key: judgment})
        return judgment

    def clean(self, revision: str, fingerprint: str) -> Judgment | None:
        """The judgment of a revision that the set of `fingerprint` is known to find nothing in
        (an index built with it recorded so), without scanning it: the cache across processes
        that the index is. Cached like any other. None when another set judges now (it was
        just taken again): the verdict is not its own."""
        version, current = self._name()  # no set loaded for it
        if current != fingerprint:
            return None
        key = (revision, current)
        with self._lock:
            judgment = self._cache.get(key)
            if judgment is None:
                judgment = Judgment(revision, False, (), version, current)
                self._keep(self._cache, {key: judgment})
            return judgment

    def judge_many(self, subjects: Sequence[Shown | str], *, keep: bool = True) -> list[Judgment]:
        """The judgments of many documents (or texts), as `judge` gives them one by one, but
        with the ones not cached scanned together (`scan_many`): much faster for many short
        entries, as when an index is built. They are cached, so reading them afterwards with
        `judge` is a lookup; with `keep=False` they are not (an index sync keeps its verdicts in
        the index, and a cache of them all would grow with the vault up to CACHE_ENTRIES)."""
        from sentient.threats.batch import scan_many

        self.reload()
        patterns = self.patterns
        keys = [(text_revision(s) if isinstance(s, str) else judged_revision(s), patterns.fingerprint)
                for s in subjects]  # fmt: skip
        with self._lock:
            found = [self._cache.get(key) for key in keys]
        missing = list({keys[n]: n for n, judgment in reversed(list(enumerate(found))) if judgment is None}.values())
        texts = [s if isinstance(s, str) else judged_text(s) for s in (subjects[n] for n in missing)]
        judged = {keys[n]: _judgment(tuple(findings), patterns, keys[n][0])
                  for n, findings in zip(missing, scan_many(texts, patterns), strict=True)}  # fmt: skip
        if keep:
            with self._lock:
                self._keep(self._cache, judged)
        found = [judgment if judgment is not None else judged[key] for judgment, key in zip(found, keys, strict=True)]
        with self._lock:  # the ids not judged yet, together too
            names = {key for s in subjects if not isinstance(s, str) and isinstance(key := getattr(s, "key", None), str)
                     and key and (key, patterns.fingerprint) not in self._names}  # fmt: skip
        named = {key: _judgment(tuple(findings), patterns, text_revision(_as_words(key)))
                 for key, findings in zip(names, scan_many([_as_words(key) for key in names], patterns), strict=True)}
        if keep:
            for key, judgment in named.items():
                self._name_judged(key, judgment, patterns)
        return [judgment if isinstance(subject, str) else with_guard(self._with_id(judgment, subject, named), subject)
                for judgment, subject in zip(found, subjects, strict=True) if judgment is not None]

    def threats(self, documents: Sequence[Document]) -> list[dict[str, Any] | None]:
        """`threat(document)` of each, judged together (judge_many) and kept in no cache."""
        return [judgment.threat(self.allowance(document, allowed_revision(document)))
                for judgment, document in zip(self.judge_many(documents, keep=False), documents, strict=True)]

    def allowance(self, document: Shown, allowed: str | None) -> str | None:
        """The judged revision (see judged_revision) that the document's `allowed_revision`
        covers: itself; or, for one made before category and source were judged (of title and
        body alone), the document's judged revision while those fields on their own match
        nothing, so that such an allowance holds unless they are what reads as instructions."""
        fields = _shown_fields(document)
        if allowed is None or not fields or allowed != document.revision or self.judge(fields).flagged:
            return allowed
        return judged_revision(document)

    def is_withheld(self, document: Document) -> bool:
        return self.judge(document).withheld(self.allowance(document, allowed_revision(document)))

    def threat(self, document: Document) -> dict[str, Any] | None:
        """The `threat:` mapping for the document as it is now (None: nothing matched); an
        allowance from before category and source were judged is written in its new form."""
        return self.judge(document).threat(self.allowance(document, allowed_revision(document)))

    def __call__(self, document: Document) -> Mapping[str, Any] | None:
        return self.threat(document)

    def __len__(self) -> int:
        return len(self._cache)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._names.clear()
