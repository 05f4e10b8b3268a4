"""Batches: many short texts scanned together, with the findings each would have alone.

A note of a hundred bytes costs a scan more in Python calls (views, Hyperscan, lookups) than in
scanning. `scan_many` pays those calls once per batch instead: the texts are joined with a
separator, each view of the whole batch is made with a few calls over one long string, and
Hyperscan runs once per view. A match it reports is put to the text it starts in; only the
texts with one are then scanned in Python, for their own findings. A match across two texts is
only an extra text to look at: every finding comes from scanning a text alone.

The joined views are made at once for texts that are their own raw, lines and plain views
(ASCII, no markup; views.unchanged), most notes; the others' views are made one by one, then
joined. A text longer than SHORT_TEXT is scanned alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

from sentient.threats.patterns import SHORT_TEXT, PatternSet
from sentient.threats.prefilter import Prefilter, Subject
from sentient.threats.scan import Finding, findings, python_only, scan
from sentient.threats.views import unchanged

SEPARATOR = "\n\x00\n"  # line breaks keep ^ and $ of multi-line expressions at a text's ends


def scan_many(texts: Sequence[str], patterns: PatternSet) -> list[list[Finding]]:
    """`[scan(text, patterns) for text in texts]`, faster for many short texts (a longer one is
    scanned alone: joining it would gain nothing)."""
    short = [number for number, text in enumerate(texts) if len(text) <= SHORT_TEXT]
    found: list[list[Finding]] = [[] for _ in texts]
    for number, findings_of in zip(short, _scan_short([texts[n] for n in short], patterns), strict=True):
        found[number] = findings_of
    for number in set(range(len(texts))).difference(short):
        found[number] = scan(texts[number], patterns)
    return found


def _scan_short(texts: Sequence[str], patterns: PatternSet) -> list[list[Finding]]:
    prefilter = patterns.prefilter
    joined = SEPARATOR.join(texts)
    if prefilter is None or len(texts) < 2 or joined.count("\x00") != len(texts) - 1:  # a text holds one
        return [scan(text, patterns) for text in texts]
    starts = [0, *accumulate(len(text) + len(SEPARATOR) for text in texts[:-1])]
    plain = unchanged(texts, joined, starts)
    plans: Plans = {}
    lowered, flat = joined.lower(), None
    for subject in prefilter.subjects:  # the texts that are their own views, all at once
        view, as_written = subject
        if view == "flat":
            flat = flat if flat is not None else " ".join(joined.split())  # a separator is " \x00 " there
            text = flat if as_written else flat.lower()
        else:
            text = joined if as_written else lowered
        _put(prefilter, subject, text, range(len(texts)), plans)
    others = [number for number, unchanged_text in enumerate(plain) if not unchanged_text]
    views = {number: patterns.normalise(texts[number]) for number in others}
    for subject in prefilter.subjects:  # the others, view by view
        text = SEPARATOR.join(views[number].subject(*subject) for number in others)
        if text.count("\x00") != len(others) - 1:
            plans.update({number: dict.fromkeys(patterns.candidates(views[number])) for number in others})
            break
        _put(prefilter, subject, text, others, plans)
    found: list[list[Finding]] = []
    for number, text in enumerate(texts):
        if number not in plans and plain[number] and prefilter.python_only_raw:
            found.append([])  # nothing may match, and it has no invisible characters
            continue
        seen = views.get(number) or patterns.normalise(text)
        found.append(findings(seen, patterns, python_only(seen, patterns, dict(plans.get(number, {})))))
    return found


Plans = dict[int, dict[int, dict[int, list[int] | None] | None]]  # by text number: its plan (scan.Plan)


def _put(prefilter: Prefilter, subject: Subject, text: str, numbers: Sequence[int], plans: Plans) -> None:
    """Add to `plans` the expressions Hyperscan reports in the joined view `text` of the texts
    `numbers`, to the texts their matches start in (Python's engine then searches those whole)."""
    keys = prefilter.keys(subject)
    for place, number in _reported(prefilter, subject, text.encode("utf-8", "surrogatepass")):
        pattern, expression = keys[number]
        plan = plans.setdefault(numbers[place], {})
        expressions = plan.setdefault(pattern, {})
        if expressions is not None:
            expressions[expression] = None


def _reported(prefilter: Prefilter, subject: Subject, data: bytes) -> list[tuple[int, int]]:
    """(text number, expression number in the subject's database) of every match Hyperscan
    reports in the joined view: the text a match starts in is the count of separators before."""
    starts = prefilter.start_bytes(subject, data)
    ordered = sorted((offset, number) for number, offsets in starts.items() for offset in offsets)
    reported: list[tuple[int, int]] = []
    text, counted = 0, 0
    for offset, number in ordered:
        text += data.count(b"\x00", counted, offset)
        counted = offset
        reported.append((text, number))
    return reported
