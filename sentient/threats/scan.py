"""Scanning: which patterns of a set match a text, and the text each one matched.

`scan(text, patterns)` is pure (no I/O, no state) and finds exactly what running every
pattern's expressions on its view would find; the keyword pre-checks and the faster forms of
the expressions (expressions.py) only decide where not to look.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from sentient.threats.expressions import Searcher
from sentient.threats.patterns import Pattern, PatternSet
from sentient.threats.views import UNHIDE, Normalised, is_word_char

EXCERPT_CHARS = 80


@dataclass(frozen=True)
class Finding:
    pattern_id: str
    class_: str
    description: str
    excerpt: str  # the matched text, normalised, at most EXCERPT_CHARS long


def scan(text: str, patterns: PatternSet) -> list[Finding]:
    """Every pattern of the set that matches the text (one finding each, in set order)."""
    views = patterns.normalise(text)
    found: list[Finding] = []
    for number in patterns.candidates(views):
        pattern = patterns.patterns[number]
        span = first_match(pattern, views)
        if span is not None:
            shown = views.view(pattern.view)
            subject = views.subject(pattern.view, pattern.case_sensitive)
            # Excerpts come from the view as written when lower-casing kept the length.
            source = shown if len(shown) == len(subject) else subject
            found.append(Finding(pattern.id, pattern.class_, pattern.description, _excerpt(source[span[0] : span[1]])))
    return found


def first_match(pattern: Pattern, text: Normalised) -> tuple[int, int] | None:
    """Where the pattern first matches its view of the text: the leftmost match of its first
    expression that matches at all, as (start, end) in the view as lower-cased (or as written,
    for a case-sensitive pattern)."""
    subject = text.subject(pattern.view, pattern.case_sensitive)
    # Needles are looked for by the lower-cased view's blocks: as written, it must be as long.
    by_needles = pattern.leads and (not pattern.case_sensitive or len(subject) == len(text.lowered(pattern.view)))
    starts: dict[int, list[int]] = {}
    if by_needles:
        present = pattern.leads.intersection(text.words(pattern.view))
        if present:
            starts = text.needle_starts(pattern.view, pattern.needle_plan, present, pattern.case_sensitive)
    for number, searcher in enumerate(pattern.searchers):
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


def _excerpt(text: str) -> str:
    """The matched text on one line, invisible characters spelled out, cut to EXCERPT_CHARS."""
    text = " ".join(text.split())
    if not text.isascii():
        text = "".join(_visible(char) for char in text)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"
