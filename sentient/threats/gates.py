"""The keyword pre-check: which patterns of a set are worth running on a text.

A pattern's `keywords` are groups; it runs only when every group has a word or a fragment in
the text (words as whole words of the lower-cased view, fragments anywhere in it). `Gates`
arranges the groups of a whole set so that a text is checked against all of them with a few
operations rather than a loop over patterns:

- every group with words has a bit, and every word the bits of the groups it is in; the
  text's words are intersected with all the set's words once, and the bits of those found
  or-ed together: a pattern whose groups of words are all met is `viable`;
- a viable pattern's other groups are met by fragments, looked for one by one; the patterns
  with no group of words only are looked at only when one of their first group's fragments is
  in the text, each looked for where its rarest character is.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Protocol

from sentient.threats.expressions import is_word_keyword
from sentient.threats.views import Normalised


class Gated(Protocol):
    """What the gates need of a pattern (patterns.Pattern)."""

    @property
    def view(self) -> str: ...
    @property
    def case_sensitive(self) -> bool: ...
    @property
    def keywords(self) -> tuple[tuple[str, ...], ...]: ...


def fragment_view(view: str, fragment: str) -> str:
    """Where a fragment keyword of a pattern on `view` is looked for: a fragment without spaces
    is in flat exactly when it is in plain, which is usually the lines view itself."""
    return "plain" if view == "flat" and not any(char.isspace() for char in fragment) else view


def words_source(view: str) -> str:
    """The view whose words a pattern's word keywords are looked up in (flat and plain agree)."""
    return "plain" if view == "flat" else view


@dataclass(frozen=True)
class _Entry:
    """One pattern's keyword groups: the bits of its groups of words only, and its other groups
    as (bit, fragments looked for as (fragment, view)), bit 0 for a group without words."""

    number: int
    need: int
    fragment_groups: tuple[tuple[int, tuple[tuple[str, str], ...]], ...]
    case_sensitive: bool
    opening: int  # the bit that opens it: its first group of words only, else its first group's


class Gates:
    """The keyword groups of a pattern set, arranged to check a text against all of them at once."""

    def __init__(self, patterns: Sequence[Gated]) -> None:
        words: dict[str, dict[bytes, int]] = {}  # per source of words: word -> bits
        self._by_first: dict[int, _Entry] = {}  # by its opening bit
        self._open: dict[tuple[str, bool], list[_Entry]] = {}  # first group has fragments; by view
        opening: dict[tuple[str, bool], list[str]] = {}
        self.always: tuple[int, ...] = ()
        self._always_shown: tuple[int, ...] = ()  # those not on the raw view
        bit = 1
        for number, pattern in enumerate(patterns):
            if not pattern.keywords:
                self.always += (number,)
                if pattern.view != "raw":
                    self._always_shown += (number,)
                continue
            need, fragment_groups = 0, []
            for group in pattern.keywords:
                pieces = tuple((k, fragment_view(pattern.view, k)) for k in group if not is_word_keyword(k))
                in_words = [k.encode() for k in group if is_word_keyword(k)]
                if in_words:
                    by_word = words.setdefault(words_source(pattern.view), {})
                    for word in in_words:
                        by_word[word] = by_word.get(word, 0) | bit
                    if not pieces:
                        need |= bit
                if pieces:
                    fragment_groups.append((bit if in_words else 0, pieces))
                if in_words:
                    bit <<= 1
            opening_bit = need & -need if need else fragment_groups[0][0]
            entry = _Entry(number, need, tuple(fragment_groups), pattern.case_sensitive, opening_bit)
            if opening_bit:
                self._by_first[opening_bit] = entry
            if not need:
                first = fragment_groups[0][1]
                where = (first[0][1], pattern.case_sensitive)
                if any(view != where[0] for _, view in first):
                    where = (pattern.view, pattern.case_sensitive)  # unusual: fragments in two views
                self._open.setdefault(where, []).append(entry)
                opening.setdefault(where, []).extend(fragment for fragment, _ in first)
        self._firsts = reduce(operator.or_, self._by_first, 0)
        self._words = {source: (frozenset(found), found) for source, found in words.items()}
        shared: dict[bytes, int] = {}
        for source in ("plain", "lines"):
            for word, bits in words.get(source, {}).items():
                shared[word] = shared.get(word, 0) | bits
        self._shared = (frozenset(shared), shared)
        self._opening = tuple(
            _opening(view, written, found, self._open, (view,)) for (view, written), found in opening.items()
        )
        # A text whose plain view is its lines view: one look for both views' fragments.
        merged: dict[tuple[str, bool], list[str]] = {}
        for (view, as_written), found in opening.items():
            merged.setdefault(("lines" if view == "plain" else view, as_written), []).extend(found)
        self._shared_opening = tuple(
            _opening(view, written, found, self._open, ("lines", "plain") if view == "lines" else (view,))
            for (view, written), found in merged.items()
        )

    def candidates(self, text: Normalised) -> list[int]:
        """Numbers of the patterns whose every keyword group is present in the text, in order."""
        shared = text.plain is text.lines
        if shared:
            known, bits = self._shared
            found = known.intersection(text.words("plain"))
            mask = reduce(operator.or_, map(bits.__getitem__, found)) if found else 0
        else:
            mask = 0
        for source, (known, bits) in self._words.items():
            if (shared and source != "raw") or (source == "raw" and not text.hidden):
                continue
            found = known.intersection(text.words(source))
            if found:
                mask |= reduce(operator.or_, map(bits.__getitem__, found))
        chosen = list(self.always if text.hidden else self._always_shown)
        opening = mask & self._firsts
        while opening:
            lowest = opening & -opening
            entry = self._by_first[lowest]
            if mask & entry.need == entry.need and (not entry.fragment_groups or _fragments_met(entry, mask, text)):
                chosen.append(entry.number)
            opening ^= lowest
        for view, as_written, any_char, lookups, lowered, entries in self._shared_opening if shared else self._opening:
            if view == "raw" and not text.hidden:
                continue
            if as_written:  # quicker first: a fragment as written is in the view lower-cased, lower-cased
                low = text.lowered(view)
                if not any(fragment in low for fragment in lowered):
                    continue
            subject = text.subject(view, as_written)
            if any_char.search(subject) is None:
                continue
            for char, fragments in lookups:
                if char in subject and any(fragment in subject for fragment in fragments):
                    break
            else:
                continue
            chosen += [e.number for e in entries if not e.opening & mask and _fragments_met(e, mask, text)]
        if len(chosen) > 1:
            chosen.sort()
        return chosen


def _fragments_met(entry: _Entry, mask: int, text: Normalised) -> bool:
    """True when each of the pattern's groups with fragments is met, by a word or a fragment."""
    for bit, fragments in entry.fragment_groups:
        if bit & mask:
            continue
        view, subject = "", ""
        for fragment, where in fragments:
            if where != view:
                view, subject = where, text.subject(where, entry.case_sensitive)
            if fragment in subject:
                break
        else:
            return False
    return True


# Characters from common to rare in notes: a fragment is looked for only where its rarest
# character is, which a plain substring search finds quickly.
_BY_FREQUENCY = " \netaoinsrhldcu.,mfpgwyb-v'k0123456789:\"()ETAOINSRHLDCUMFPGWYBVKxjqzXJQZ/!?;_[]<>|{}#*=~@$%&+\\^`"

Lookups = tuple[tuple[str, tuple[str, ...]], ...]  # (rarest character, fragments with it)


Opening = tuple[str, bool, re.Pattern[str], Lookups, tuple[str, ...], tuple[_Entry, ...]]


def _opening(view: str, as_written: bool, fragments: list[str], open_: dict[tuple[str, bool], list[_Entry]],
             views: tuple[str, ...]) -> Opening:  # fmt: skip
    """How to look for the first-group fragments of the patterns with no group of words only, in
    one view: (view, as written?, any rarest character, the fragments by rarest character, the
    fragments lower-cased, the patterns they open)."""
    by_char: dict[str, list[str]] = {}
    for fragment in dict.fromkeys(fragments):
        rarest = max(fragment, key=lambda char: _BY_FREQUENCY.find(char) % (len(_BY_FREQUENCY) + 1))
        by_char.setdefault(rarest, []).append(fragment)
    any_char = re.compile("[" + "".join(re.escape(char) for char in by_char) + "]")
    lookups = tuple((char, tuple(found)) for char, found in by_char.items())
    entries = tuple(entry for name in views for entry in open_.get((name, as_written), ()))
    lowered = tuple(dict.fromkeys(fragment.lower() for fragment in fragments))
    return view, as_written, any_char, lookups, lowered, entries
