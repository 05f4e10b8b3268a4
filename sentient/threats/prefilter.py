"""The prefilter: which expressions of a pattern set may match a text, from Hyperscan.

Python's engine runs one expression at a time, so a scan in pure Python pays for every
expression whose keywords a text holds, at every place it may start; notes dense with words
like "system", "password" and "instructions" make that most of the set. Hyperscan compiles all
the expressions of a view into one automaton and runs it over the text in one pass of C, about
as fast for 150 expressions as for one. So:

- each expression is rewritten as a superset (supersets.py): it matches wherever Python's engine
  would, and perhaps in a few more places;
- per view, the rewrites go into one database, compiled once per set of expressions and shared
  by equal sets; it runs over the lower-cased view, case-sensitive rewrites ignoring case there;
- a scan asks where matches of each expression may start (`starts`): the rewrites run
  backwards over the reversed text, and every match Hyperscan reports there ends where a match
  may start here;
- only those expressions are then tried by Python's engine, and only at those places, for the
  match itself and its excerpt.

An expression Hyperscan does not take (no rewrite, or a rewrite it will not compile) and every
expression on the raw view is in `python_only`: the scanner always runs it the pure-Python way.
Without the `hyperscan` package, `load()` gives None and everything is scanned in pure Python.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from sentient.threats import supersets
from sentient.threats.automata import Automaton, available, compiles, remembered
from sentient.threats.normalisation import character_offsets
from sentient.threats.supersets import names_non_ascii, superset
from sentient.threats.views import Normalised

Key = tuple[int, int]  # (pattern number, expression number)
Subject = tuple[str, bool]  # (view, as written?)


class Prefiltered(Protocol):
    """What the prefilter needs of a pattern (patterns.Pattern)."""

    @property
    def view(self) -> str: ...
    @property
    def case_sensitive(self) -> bool: ...
    @property
    def regexes(self) -> Sequence[Any]: ...


class Prefilter:
    """Hyperscan databases for the expressions of a pattern set, one per subject (a view as
    lower-cased). Safe to share between threads."""

    def __init__(self, patterns: Sequence[Prefiltered]) -> None:
        by_subject: dict[Subject, list[tuple[Key, bytes, bool]]] = {}
        python_only: set[int] = set()
        rewrites = iter(_rewrites(patterns))
        for number, pattern in enumerate(patterns):
            for index, _ in enumerate(pattern.regexes):
                backward = next(rewrites)
                if backward is None:
                    python_only.add(number)
                else:  # a case-sensitive one too runs over the lower-cased view, ignoring case
                    by_subject.setdefault((pattern.view, False), []).append(
                        ((number, index), backward.encode(), pattern.case_sensitive)
                    )
        self._keys: dict[Subject, tuple[Key, ...]] = {}
        self._automata: dict[Subject, Automaton] = {}
        as_written: set[Key] = set()
        for subject, items in by_subject.items():
            automaton = _build(items)
            if automaton is None:  # find what Hyperscan will not take
                items = [item for item in items if compiles([item[1]], caseless=[item[2]])]
                automaton = _build(items) if items else None
            taken = {key for key, _, _ in items} if automaton is not None else set()
            python_only.update(key[0] for key, _, _ in by_subject[subject] if key not in taken)
            if automaton is not None:
                self._keys[subject], self._automata[subject] = tuple(key for key, _, _ in items), automaton
                as_written.update(key for key, _, cased in items if cased)
        # Case-sensitive expressions run ignoring case over the lower-cased view. That finds every
        # place they may match the view as written, at the same offsets, when lower-casing changed
        # ASCII letters only, or also letters outside ASCII each into one other letter outside
        # ASCII (which the rewrites match as any such letter) in a text, for an expression that
        # names no character outside ASCII. Otherwise they run again over the view as written,
        # from a database of their own (see `starts`).
        self._as_written = frozenset(as_written)
        self._naming = frozenset(  # those that name a character outside ASCII
            (number, index) for number, index in as_written if names_non_ascii(patterns[number].regexes[index])
        )
        self._written: dict[Subject, tuple[tuple[Key, ...], Automaton]] = {}
        for (view, _), items in by_subject.items():
            cased = [(key, source, False) for key, source, case_sensitive in items if key in as_written]
            automaton = _build(cased) if cased else None
            if automaton is not None:
                self._written[(view, True)] = (tuple(key for key, _, _ in cased), automaton)
            else:  # Hyperscan will not take them as written: Python runs them (every time)
                python_only.update(number for (number, _), _, _ in cased)
        self.python_only = frozenset(python_only)
        self.python_only_raw = all(patterns[number].view == "raw" for number in python_only)

    @property
    def subjects(self) -> tuple[Subject, ...]:
        return tuple(self._keys)

    def keys(self, subject: Subject) -> tuple[Key, ...]:
        """The expressions on a subject, by their number in its database."""
        return self._keys[subject]

    def starts(self, text: Normalised) -> dict[Key, list[int] | None]:
        """For each expression that may match the text, where its matches may start (character
        offsets in its subject, ascending; None: anywhere): no match of it starts elsewhere."""
        found: dict[Key, list[int] | None] = {}
        for subject, keys in self._keys.items():
            self._starts(text, subject, keys, self._automata[subject], found)
        again = self.as_written(text.cased)
        if again:  # some case-sensitive ones run on the view as written
            written: dict[Key, list[int] | None] = {}
            for subject, (keys, automaton) in self._written.items():
                self._starts(text, subject, keys, automaton, written)
            for key in again:
                found.pop(key, None)
                if key in written:
                    found[key] = written[key]
        return found

    def as_written(self, cased: frozenset[str]) -> frozenset[Key]:
        """The case-sensitive expressions to run over the views as written too, for a text whose
        lower-casing changes these letters outside ASCII (`cased`; see `starts`). A set of
        letters needs some exactly when one of its letters does."""
        if not cased:
            return frozenset()
        return self._naming if _one_for_one(cased) else self._as_written

    @staticmethod
    def _starts(text: Normalised, subject: Subject, keys: tuple[Key, ...], automaton: Automaton,
                found: dict[Key, list[int] | None]) -> None:  # fmt: skip
        data = text.encoded(*subject)
        if data is None or b"\x00" in data:  # no UTF-8 (a lone surrogate), or a NUL: anywhere
            found.update(dict.fromkeys(keys))
            return
        reported = _start_bytes(automaton, data)
        if data.isascii():
            found.update((keys[number], offsets) for number, offsets in reported.items())
            return
        at = character_offsets(data, sorted({offset for offsets in reported.values() for offset in offsets}))
        for number, offsets in reported.items():  # one count of characters for every expression
            found[keys[number]] = [at[offset] for offset in offsets if offset in at]

    def start_bytes(self, subject: Subject, data: bytes) -> dict[int, list[int]]:
        """Where matches may start in `data` (UTF-8 of the subject), by the number of the
        expression in the subject's database, as ascending byte offsets."""
        return _start_bytes(self._automata[subject], data)


def _start_bytes(automaton: Automaton, data: bytes) -> dict[int, list[int]]:
    """Where matches of the automaton's (reversed) expressions may start in `data`, by expression."""
    size = len(data)
    found = automaton.ends(data[::-1])
    for offsets in found.values():
        offsets.reverse()
        offsets[:] = [size - end for end in offsets]
    return found


@lru_cache(maxsize=256)
def _one_for_one(cased: frozenset[str]) -> bool:
    """Lower-casing makes each of these letters one letter outside ASCII (not İ, which becomes
    two characters, nor the Kelvin sign, which becomes an ASCII k)."""
    return all(len(low := char.lower()) == 1 and not low.isascii() for char in cased)


def _rewrites(patterns: Sequence[Prefiltered]) -> list[str | None]:
    """Every expression's rewrite (supersets.py; None for the raw view's, and where there is
    none), in order. Rewriting the shipped set parses every expression, a few tenths of a
    second, so the rewrites are kept in the cache folder, by a hash of the expressions, the
    rewriter's own code and Python's version (whose parser it reads)."""
    expressions = [(pattern.view, regex.pattern, regex.flags) for pattern in patterns for regex in pattern.regexes]
    digest = hashlib.sha256(json.dumps([sys.version, expressions]).encode())
    digest.update(Path(supersets.__file__).read_bytes())

    def rewrite() -> list[str | None]:
        return [None if pattern.view == "raw" else superset(regex, reverse=True)
                for pattern in patterns for regex in pattern.regexes]  # fmt: skip

    return remembered(f"rewrites-{digest.hexdigest()[:32]}", rewrite)


def _build(items: Sequence[tuple[Key, bytes, bool]]) -> Automaton | None:
    return Automaton.build([source for _, source, _ in items], caseless=[cased for _, _, cased in items])


def load(patterns: Sequence[Prefiltered]) -> Prefilter | None:
    """The prefilter for a set, or None without Hyperscan."""
    return Prefilter(patterns) if available() else None
