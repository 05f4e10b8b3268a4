"""Batches: many texts scanned together, with the findings each would have alone.

A note of a hundred bytes costs a scan more in Python calls (views, Hyperscan, lookups) than in
scanning, and a file of a few kilobytes still pays each normalisation step and each Hyperscan
database once. `scan_many` pays those once per batch instead: the texts are joined by SEPARATOR,
the views of the joined text are made once (normalisation.views_of, in pieces: each step of
normalisation.py gives, for texts joined by SEPARATOR, their own views joined by it), and
Hyperscan runs once per view. A match it reports is put to the text it lies in (no rewrite
matches the NUL of a separator, so none runs from one text into the next); only the texts with
one, or with invisible characters (for the raw view's patterns), are then scanned in Python,
on their own views cut from the joined ones, for their own findings, and only where Hyperscan
says matches may start.

ASCII texts and texts with characters outside ASCII are joined apart: one such character makes
Python store the whole joined string wider (up to four bytes a character), and every pass over
it slower. Those texts are joined only up to WIDE_TEXT characters, where the calls a scan alone
would make cost more than the wider passes (a note with an emoji or a Cyrillic word). A longer
one, an ASCII text longer than LONE_TEXT, and every text of a batch holding a NUL, or a letter
whose lower case needs the views as written (İ, the Kelvin sign: see Prefilter.starts), are
scanned alone.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Sequence
from itertools import accumulate, compress

from sentient.threats import parallel
from sentient.threats.normalisation import SEPARATOR, characters, utf8, views_of
from sentient.threats.patterns import PatternSet
from sentient.threats.prefilter import Prefilter, Subject
from sentient.threats.scan import Finding, Plan, findings, learned, python_only
from sentient.threats.scan import scan_patterns as scan
from sentient.threats.views import Normalised

LONE_TEXT = 1_000_000  # characters; a longer text gains nothing from joining
WIDE_TEXT = 2_048  # a text with characters outside ASCII is joined with others like it up to this long
JOINED_CHARS = 4_000_000  # texts are joined in batches of about this many characters

Plans = dict[int, Plan]  # by text number


def scan_many(texts: Sequence[str], patterns: PatternSet, *, helpers: bool = True) -> list[list[Finding]]:
    """`[scan(text, patterns) for text in texts]`, faster for many texts. A batch of at least
    parallel.PARALLEL_FROM characters is scanned by helper processes too (parallel.py), unless `helpers`
    is False."""
    if helpers and len(texts) > 1 and sum(map(len, texts)) >= parallel.PARALLEL_FROM:
        return parallel.scan_parts(texts, patterns, _scan_here)
    return _scan_here(texts, patterns)


def _scan_here(texts: Sequence[str], patterns: PatternSet) -> list[list[Finding]]:
    """`scan_many` in this process: the patterns first, then the learned detector on all the
    texts they found nothing in, together."""
    found = _patterns_here(texts, patterns)
    passed = [number for number, judged in enumerate(found) if not judged]
    for number, judged in zip(passed, learned([texts[n] for n in passed], patterns), strict=True):
        found[number] = judged
    return found


def _patterns_here(texts: Sequence[str], patterns: PatternSet) -> list[list[Finding]]:
    """The patterns' findings in each text."""
    prefilter = patterns.prefilter
    if prefilter is None:
        return [scan(text, patterns) for text in texts]
    found: list[list[Finding]] = [[] for _ in texts]
    lengths = list(map(len, texts))
    is_ascii = list(map(str.isascii, texts))
    ascii_texts = list(compress(range(len(texts)), is_ascii))  # their numbers
    wide_texts = list(compress(range(len(texts)), map(operator.not_, is_ascii)))  # outside ASCII too
    if lengths and max(lengths) > WIDE_TEXT:  # some are scanned alone
        alone = {number for number, length in enumerate(lengths)
                 if length > (LONE_TEXT if is_ascii[number] else WIDE_TEXT)}  # fmt: skip
        for number in sorted(alone):
            found[number] = scan(texts[number], patterns)
        ascii_texts = [number for number in ascii_texts if number not in alone]
        wide_texts = [number for number in wide_texts if number not in alone]
    for numbers in (ascii_texts, wide_texts):
        ends = list(accumulate(lengths[number] for number in numbers))  # characters up to each text
        start = 0
        while start < len(numbers):  # in batches of about JOINED_CHARS characters
            before = ends[start - 1] if start else 0
            stop = min(bisect.bisect_left(ends, before + JOINED_CHARS, start), len(numbers) - 1) + 1
            batch = numbers[start:stop]
            for index, findings_of in _scan_joined([texts[n] for n in batch], patterns, prefilter).items():
                found[batch[index]] = findings_of
            start = stop
    return found


def _scan_joined(texts: Sequence[str], patterns: PatternSet, prefilter: Prefilter) -> dict[int, list[Finding]]:
    """The findings of the texts (by their number among them) that may have some."""
    joined = SEPARATOR.join(texts)
    if len(texts) < 2:
        return dict(enumerate(scan(text, patterns) for text in texts))
    if joined.count("\x00") != len(texts) - 1:  # a text holds a NUL
        return _apart(texts, {number for number, text in enumerate(texts) if "\x00" in text}, patterns, prefilter)
    raw, lines, plain, hidden_at, cased = views_of(joined, joined=True)
    raws = raw.split(SEPARATOR) if raw is not joined else list(texts)
    if prefilter.as_written(cased):  # rare (İ, the Kelvin sign: see Prefilter.starts): those texts alone
        odd = {char for char in cased if prefilter.as_written(frozenset(char))}
        cleaned = lines.split(SEPARATOR) if lines is not raw else raws
        alone = {number for number, (text, clean_text) in enumerate(zip(raws, cleaned, strict=True))
                 if any(char in text or char in clean_text for char in odd)}  # fmt: skip
        return _apart(texts, alone, patterns, prefilter)
    views = Normalised.of_views(joined, raw, lines, plain, hidden_at, cased)
    plans: Plans = {}
    pieces: dict[int, list[tuple[Subject, bytes]]] = {}  # by text: its subjects' UTF-8, for its views
    for subject in prefilter.subjects:
        data = views.encoded(*subject)
        if data is None:  # a lone surrogate (no UTF-8): those texts alone
            return _apart(
                texts, {number for number, text in enumerate(raws) if utf8(text) is None}, patterns, prefilter
            )
        _put(prefilter, subject, data, plans, pieces)
    lines_of = lines.split(SEPARATOR) if lines is not raw else raws
    plains = plain.split(SEPARATOR) if plain is not lines else lines_of
    hidden_by_text: dict[int, list[int]] = {}
    if hidden_at:
        starts = list(accumulate((len(text) + len(SEPARATOR) for text in raws[:-1]), initial=0))
        for at in hidden_at:
            number = bisect.bisect_right(starts, at) - 1
            hidden_by_text.setdefault(number, []).append(at - starts[number])
    found: dict[int, list[Finding]] = {}
    # Only texts with a report, or with invisible characters (the raw view's patterns), may have
    # findings; every text, when the set has patterns Hyperscan cannot run on other views.
    looked_at = range(len(texts)) if not prefilter.python_only_raw else sorted(plans.keys() | hidden_by_text.keys())
    for number in looked_at:
        hidden = hidden_by_text.get(number, ())
        seen = Normalised.of_views(texts[number], raws[number], lines_of[number], plains[number], tuple(hidden),
                                   cased, patterns.vocabulary)  # fmt: skip
        for subject, data in pieces.get(number, ()):
            seen.know(*subject, data)
        found[number] = findings(seen, patterns, python_only(seen, patterns, plans.get(number, {})))
    return found


def _apart(
    texts: Sequence[str], alone: set[int], patterns: PatternSet, prefilter: Prefilter
) -> dict[int, list[Finding]]:
    """`_scan_joined` with the texts numbered in `alone` scanned one by one, the others joined."""
    if not alone:  # cannot happen (the joined text's trouble is some text's); never loop
        alone = set(range(len(texts)))
    found = {number: scan(texts[number], patterns) for number in alone}
    others = [number for number in range(len(texts)) if number not in alone]
    if others:
        for index, findings_of in _scan_joined([texts[n] for n in others], patterns, prefilter).items():
            found[others[index]] = findings_of
    return found


def _put(prefilter: Prefilter, subject: Subject, data: bytes, plans: Plans,
         pieces: dict[int, list[tuple[Subject, bytes]]]) -> None:  # fmt: skip
    """Add to `plans` the expressions Hyperscan reports in the joined view `data`, to the texts
    their matches may start in, with where in the text (character offsets in its own view); and
    to `pieces` those texts' parts of `data`."""
    keys = prefilter.keys(subject)
    reported: dict[int, dict[int, list[int]]] = {}  # by text: byte offsets in `data` by expression
    bounds: dict[int, tuple[int, int]] = {}
    text, counted, begin = 0, 0, 0
    ordered = sorted((offset, number) for number, offsets in prefilter.start_bytes(subject, data).items()
                     for offset in offsets)  # fmt: skip
    for offset, number in ordered:  # the text a match starts in is the count of separators before
        separators = data.count(b"\x00", counted, offset)
        if separators:
            text += separators
            begin = data.rfind(b"\x00", counted, offset) + 2  # a separator is "\n\x00\n", or " \x00 " in flat
        counted = offset
        if text not in bounds:
            end = data.find(b"\x00", offset)
            bounds[text] = (begin, len(data) if end == -1 else end - 1)
        reported.setdefault(text, {}).setdefault(number, []).append(offset - begin)
    for text, by_expression in reported.items():
        begin, end = bounds[text]
        piece = data[begin:end]
        pieces.setdefault(text, []).append((subject, piece))
        plan = plans.setdefault(text, {})
        for number, offsets in by_expression.items():
            pattern, expression = keys[number]
            expressions = plan.setdefault(pattern, {})
            if expressions is not None:
                expressions[expression] = characters(piece, offsets)
