"""Scanning: which patterns of a set match a text, and the text each one matched.

`scan(text, patterns)` is pure (no I/O, no state) and finds exactly what running every
pattern's expressions on its view would find. Everything else only decides where not to look:
with Hyperscan (prefilter.py), Python's engine runs just the expressions Hyperscan says may
match, and in a long text just where it says their matches may start; without it, the keyword
pre-checks (gates.py) and the faster forms of the expressions (expressions.py) decide.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sentient.threats.expressions import Searcher
from sentient.threats.learned import CLASS, PATTERN_ID
from sentient.threats.normalisation import UNHIDE
from sentient.threats.patterns import Pattern, PatternSet
from sentient.threats.views import Normalised, is_word_char

EXCERPT_CHARS = 80

# Per pattern to run: None for all its expressions, else its expressions that may match, each
# with where its matches may start (None: anywhere).
Plan = dict[int, dict[int, list[int] | None] | None]


@dataclass(frozen=True)
class Finding:
    pattern_id: str
    class_: str
    description: str
    excerpt: str  # the matched text, normalised, at most EXCERPT_CHARS long
    score: float | None = None  # the learned detector's, for its finding


def scan(text: str, patterns: PatternSet) -> list[Finding]:
    """Every pattern of the set that matches the text (one finding each, in set order), or when
    none does, the learned detector's finding if it flags the text (learned.py)."""
    return scan_patterns(text, patterns) or learned([text], patterns)[0]


def scan_patterns(text: str, patterns: PatternSet) -> list[Finding]:
    """The first stage alone: every pattern of the set that matches the text."""
    views = patterns.normalise(text)
    return findings(views, patterns, plan(views, patterns))


def learned(texts: Sequence[str], patterns: PatternSet) -> list[list[Finding]]:
    """The second stage: for each text, the learned detector's finding (its score, and the
    sentence that scored highest as the excerpt), or none. Nothing without a detector."""
    detector = patterns.detector
    if detector is None or not texts:
        return [[] for _ in texts]
    return [[] if hit is None else
            [Finding(PATTERN_ID, CLASS, detector.describe(hit), _excerpt(hit.sentence), hit.score)]
            for hit in detector.judge(texts)]  # fmt: skip


def plan(views: Normalised, patterns: PatternSet) -> Plan:
    """Which patterns to run on the text, and which of their expressions where."""
    prefilter = patterns.prefilter
    if prefilter is None or views.indexed:  # a short text: the keyword pre-checks are quicker
        return dict.fromkeys(patterns.candidates(views))
    found: dict[int, dict[int, list[int] | None]] = {}
    for (number, index), starts in prefilter.starts(views).items():
        found.setdefault(number, {})[index] = starts
    return python_only(views, patterns, dict(found))


def python_only(views: Normalised, patterns: PatternSet, found: Plan) -> Plan:
    """`found` plus the patterns Hyperscan does not run: raw-view ones on a text with invisible
    characters (only there, as in the pure-Python scan), others when their keywords are there."""
    prefilter = patterns.prefilter
    if prefilter is None or not prefilter.python_only:
        return found
    if prefilter.python_only_raw:
        if views.hidden:
            found.update(dict.fromkeys(prefilter.python_only))
        return found
    found.update((number, None) for number in patterns.candidates(views) if number in prefilter.python_only)
    return found


def findings(views: Normalised, patterns: PatternSet, to_run: Plan) -> list[Finding]:
    """The findings of the patterns in `to_run`, in set order."""
    found: list[Finding] = []
    for number in sorted(to_run):
        pattern = patterns.patterns[number]
        span = first_match(pattern, views, to_run[number])
        if span is not None:
            shown = views.view(pattern.view)
            subject = views.subject(pattern.view, pattern.case_sensitive)
            # Excerpts come from the view as written when lower-casing kept the length.
            source = shown if len(shown) == len(subject) else subject
            found.append(Finding(pattern.id, pattern.class_, pattern.description, _excerpt(source[span[0] : span[1]])))
    return found


def first_match(
    pattern: Pattern, text: Normalised, expressions: Mapping[int, Sequence[int] | None] | None = None
) -> tuple[int, int] | None:
    """Where the pattern first matches its view of the text: the leftmost match of its first
    expression that matches at all, as (start, end) in the view as lower-cased (or as written,
    for a case-sensitive pattern).

    `expressions`, when given, names the only expressions that can match, each with every place
    a match of it may start (or None: anywhere)."""
    subject = text.subject(pattern.view, pattern.case_sensitive)
    if expressions is not None and all(starts is not None for starts in expressions.values()):
        return _at_starts(pattern, subject, expressions)
    # Needles are looked for by the lower-cased view's blocks: as written, it must be as long.
    by_needles = pattern.leads and (not pattern.case_sensitive or len(subject) == len(text.lowered(pattern.view)))
    starts: dict[int, list[int]] = {}
    if by_needles:
        present = pattern.leads.intersection(text.words(pattern.view))
        if present:
            starts = text.needle_starts(pattern.view, pattern.needle_plan, present, pattern.case_sensitive)
    for number, searcher in enumerate(pattern.searchers):
        if expressions is not None and number not in expressions:
            continue
        starts_at = expressions.get(number) if expressions is not None else None
        if starts_at is not None:
            span = _at_starts(pattern, subject, {number: starts_at})
            if span is not None:
                return span
            continue
        if searcher.needles and by_needles:
            found = starts.get(number)
            if not found:
                continue
            if len(found) > 1:
                found.sort()
            for start in found:  # each starts a word
                match = searcher.regex.match(subject, start)
                if match is not None and not (pattern.not_after and pattern.excluded_at(subject, start)):
                    return match.span()
            continue
        span = _leftmost(pattern, searcher, subject, text)
        if span is not None:
            return span
    return None


def _at_starts(
    pattern: Pattern, subject: str, expressions: Mapping[int, Sequence[int] | None]
) -> tuple[int, int] | None:
    """The first expression's leftmost match, trying each only at the given starts (ascending)."""
    for number in sorted(expressions):
        regex = pattern.regexes[number]
        for start in expressions[number] or ():
            match = regex.match(subject, start)
            if match is not None and not (pattern.not_after and pattern.excluded_at(subject, start)):
                return match.span()
    return None


def _leftmost(pattern: Pattern, searcher: Searcher, subject: str, text: Normalised) -> tuple[int, int] | None:
    regex = searcher.regex
    if searcher.at_hidden and len(subject) == len(text.raw):
        for start in text.hidden_at:
            match = regex.match(subject, start)
            if match is not None and _allowed(pattern, searcher, subject, start):
                return match.span()
        return None
    if searcher.after_newline is not None:
        match = regex.match(subject)
        if match is not None and _allowed(pattern, searcher, subject, 0):
            return match.span()
        position = 0
        while (match := searcher.after_newline.search(subject, position)) is not None:
            start = match.start() + 1
            if _allowed(pattern, searcher, subject, start):
                return start, match.end()
            position = start
        return None
    position = 0
    while (match := regex.search(subject, position)) is not None:
        start = match.start()
        if _allowed(pattern, searcher, subject, start):
            return match.span()
        position = start + 1
    return None


def _allowed(pattern: Pattern, searcher: Searcher, subject: str, start: int) -> bool:
    """A match at `start` counts: it starts a word when it must, and follows no `not_after` word."""
    if searcher.at_word_start and start and is_word_char(subject[start - 1]):
        return False
    return not (pattern.not_after and pattern.excluded_at(subject, start))


def _visible(char: str) -> str:
    return f"<U+{ord(char):04X}>" if unicodedata.category(char) in ("Cf", "Cc") or ord(char) in UNHIDE else char


def one_line_excerpt(text: str) -> str:
    """The text on one line, invisible characters spelled out, cut to EXCERPT_CHARS."""
    return _excerpt(text)


def _excerpt(text: str) -> str:
    """The matched text on one line, invisible characters spelled out, cut to EXCERPT_CHARS."""
    text = " ".join(text.split())
    if not (text.isascii() and text.isprintable()):  # control characters (an escape) are spelled out too
        text = "".join(_visible(char) for char in text)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"
