"""Views: a text as threat patterns see it, made once, with the word sets keyword pre-checks use.

A pattern sees a text the way a model would read it, not the way it is spelled: HTML entities
decoded, invisible characters removed, look-alike letters folded to Latin, letter-spaced words
joined, markup and emphasis dropped, whitespace collapsed (normalisation.py has the steps).
`Normalised` holds those views of one text, makes the lower-cased ones and their UTF-8 lazily,
each once, and keeps the word sets the keyword pre-checks look words up in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from sentient.threats.normalisation import collapse, collapse_bytes, lower_bytes, views_of

VIEWS = ("flat", "lines", "raw")
# Bumped when normalisation changes what a pattern can match; part of every fingerprint.
NORMALISER_VERSION = 5
# Long views are cut into blocks of about this many characters, each with its own word set,
# so that a word is looked for only in the blocks that hold it.
BLOCK_CHARS = 512
BLOCKS_FROM = 2 * BLOCK_CHARS  # shorter views are one block, searched whole

# Words, for keywords: a-z, 0-9 and '_'; every other character (any non-ASCII one too) splits.
_WORD_BYTES = bytes(b if (48 <= b <= 57 or 97 <= b <= 122 or b == 95) else 32 for b in range(256))
_SPACE = re.compile(r"\s")


def tokens(lowered: str) -> list[bytes]:
    """The words of a lower-cased text (see _WORD_BYTES), in order."""
    return lowered.encode("utf-8", "surrogatepass").translate(_WORD_BYTES).split()


def is_word_char(char: str) -> bool:
    """What the regular expression engine counts as a word character (\\w)."""
    return char.isalnum() or char == "_"


Words = set[bytes] | frozenset[bytes]
NeedlePlan = Mapping[bytes, tuple[tuple[int, str, int], ...]]  # lead word -> (expression, needle, offset)
Starts = dict[int, list[int]]  # expression number -> where its needles start


class Block:
    """A stretch [start, end) of a lower-cased view, cut in whitespace, and its words."""

    __slots__ = ("start", "end", "words")

    def __init__(self, start: int, end: int, words: Words) -> None:
        self.start, self.end, self.words = start, end, words


class Normalised:
    """The views of one text that patterns match against (see `view:` in patterns.yaml).

    raw    the text with HTML entities decoded
    lines  raw, with invisible characters removed, Unicode tags decoded to the ASCII they
           hide, NFKC, look-alike letters folded to Latin and letter-spaced words joined;
           line breaks kept
    plain  lines without HTML tags, comment markers, emphasis and code marks (`)
    flat   plain with every run of whitespace one space

    `hidden_at` holds the positions in raw of the invisible characters (`hidden`: there are
    some). `lowered(view)` is the lower-cased view patterns match on and `words(view)` the set
    of its words, limited to the `vocabulary` when one is given (the words a pattern set looks
    up). Long views are cut into blocks, each with its own words, so that a word is looked for
    only in the blocks that hold it. Everything but lines and plain is made on first use.
    """

    __slots__ = ("text", "raw", "lines", "plain", "hidden_at", "cased", "vocabulary", "indexed", "_lowered",
                 "_encoded", "_words", "_blocks", "_flat", "_found", "_holding_by_view")  # fmt: skip

    def __init__(self, text: str, vocabulary: frozenset[bytes] | None = None, *, indexed: bool = True) -> None:
        raw, lines, plain, hidden_at, cased = views_of(text)
        self._set(text, raw, lines, plain, hidden_at, cased, vocabulary, indexed)

    @classmethod
    def of_views(
        cls, text: str, raw: str, lines: str, plain: str, hidden_at: tuple[int, ...], cased: frozenset[str],
        vocabulary: frozenset[bytes] | None = None,
    ) -> Normalised:  # fmt: skip
        """The views of a text made elsewhere (batch.py: for many texts at once), not indexed.
        `cased`: the non-ASCII characters of raw and lines that lower-casing changes (normalisation.clean)."""
        views = cls.__new__(cls)
        views._set(text, raw, lines, plain, hidden_at, cased, vocabulary, False)
        return views

    def _set(
        self, text: str, raw: str, lines: str, plain: str, hidden_at: tuple[int, ...], cased: frozenset[str],
        vocabulary: frozenset[bytes] | None, indexed: bool,
    ) -> None:  # fmt: skip
        self.text, self.raw, self.lines, self.plain, self.hidden_at = text, raw, lines, plain, hidden_at
        self.cased = cased
        self.vocabulary = vocabulary
        self.indexed = indexed  # words and blocks made ahead for the keyword pre-checks; not for Hyperscan
        low = lines.lower() if indexed or lines.isascii() else None
        self._lowered: dict[str, str] = {}
        if low is not None:
            self._lowered["lines"] = low
            if plain is lines:
                self._lowered["plain"] = low
            if lines is raw:
                self._lowered["raw"] = low
        self._encoded: dict[tuple[str, bool], bytes | None] = {}
        self._words: dict[str, Words] = {}
        if indexed and low is not None and plain is lines and len(low) <= BLOCKS_FROM:  # looked up first
            found = low.encode("utf-8", "surrogatepass").translate(_WORD_BYTES).split()
            self._words["plain"] = set(found) if vocabulary is None else vocabulary.intersection(found)
        self._blocks: dict[str, tuple[Block, ...]] | None = None
        self._flat: str | None = None
        self._found: dict[tuple[str, str, bytes, int], list[int]] | None = None  # where needles are
        self._holding_by_view: dict[str, dict[bytes, list[int]]] | None = None

    @property
    def hidden(self) -> bool:
        return bool(self.hidden_at)

    @property
    def flat(self) -> str:
        if self._flat is None:
            self._flat = collapse(self.plain)
        return self._flat

    def view(self, name: str) -> str:
        if name == "flat":
            return self.flat
        if name == "lines":
            return self.lines
        if name == "plain":
            return self.plain
        if name == "raw":
            return self.raw
        raise ValueError(f"no view {name!r}; one of {', '.join(VIEWS)} or plain")

    def lowered(self, name: str) -> str:
        text = self._lowered.get(name)
        if text is None:
            if name == "flat" and self.indexed and len(self.blocks("plain")) > 1:
                self.blocks("flat")  # makes lowered flat with its blocks
                return self._lowered["flat"]
            data = self.encoded(name, False)
            if data is not None:
                text = data.decode()
            elif name == "flat":
                text = collapse(self.lowered("plain"))
            else:
                text = self.view(name).lower()
            self._lowered[name] = text
        return text

    def encoded(self, name: str, as_written: bool) -> bytes | None:
        """The UTF-8 of a view as written or lower-cased (see `subject`); None when it holds a
        lone surrogate (from a file read with surrogateescape), which has no UTF-8."""
        key = (name, as_written)
        if key in self._encoded:
            return self._encoded[key]
        data: bytes | None = None
        try:
            if name == "flat":
                plain = self.encoded("plain", as_written)
                data = collapse_bytes(plain) if plain is not None else None
                if data is None and plain is not None:  # whitespace outside ASCII
                    data = (self.flat if as_written else collapse(self.lowered("plain"))).encode()
            elif as_written:
                data = self.view(name).encode()
            elif name in self._lowered:
                data = self._lowered[name].encode()
            elif name == "lines" and self.plain is self.lines:
                data = self.encoded("plain", False)
            else:
                data = lower_bytes(self.view(name), self.cased)
        except UnicodeEncodeError:
            data = None
        self._encoded[key] = data
        return data

    def know(self, name: str, as_written: bool, data: bytes) -> None:
        """Take `data` as the UTF-8 of a view (see `encoded`), made elsewhere (batch.py)."""
        self._encoded[(name, as_written)] = data
        if not as_written:
            self._lowered[name] = data.decode()
        elif name == "flat":
            self._flat = data.decode()

    def subject(self, name: str, case_sensitive: bool) -> str:
        """What an expression on this view runs on: the view as written, or lower-cased."""
        return self.view(name) if case_sensitive else self.lowered(name)

    def words(self, name: str) -> Words:
        """The words of the lower-cased view, in the vocabulary (plain and flat have the same)."""
        if name == "flat" or (name == "lines" and self.plain is self.lines):
            name = "plain"
        found = self._words.get(name)
        if found is None:
            lowered = self.lowered(name)
            if len(lowered) <= BLOCKS_FROM:
                found = _known(tokens(lowered), self.vocabulary)
            else:
                found = set().union(*(block.words for block in self.blocks(name)))
            self._words[name] = found
        return found

    def blocks(self, name: str) -> tuple[Block, ...]:
        """The lower-cased view cut into blocks of about BLOCK_CHARS, each with its words."""
        if name == "lines" and self.plain is self.lines:
            name = "plain"
        if self._blocks is None:
            self._blocks = {}
        found = self._blocks.get(name)
        if found is None:
            if name == "flat":
                found = self._flat_blocks()
            else:
                lowered = self.lowered(name)
                if len(lowered) <= BLOCKS_FROM:
                    found = (Block(0, len(lowered), self.words(name)),)
                else:
                    found = _cut(lowered, self.vocabulary)
            self._blocks[name] = found
        return found

    def _flat_blocks(self) -> tuple[Block, ...]:
        """Flat's blocks, made with flat itself from plain's (cut in whitespace: the same words)."""
        plain = self.lowered("plain")
        blocks = self.blocks("plain")
        if len(blocks) == 1:
            flat = self.lowered("flat")
            return (Block(0, len(flat), blocks[0].words),)
        pieces: list[str] = []
        found: list[Block] = []
        start = 0
        for block in blocks:
            piece = " ".join(plain[block.start : block.end].split())
            if piece:
                if found:  # the space between two pieces ends the block before
                    previous = found[-1]
                    found[-1] = Block(previous.start, previous.end + 1, previous.words)
                    start += 1
                pieces.append(piece)
                found.append(Block(start, start + len(piece), block.words))
                start += len(piece)
        self._lowered["flat"] = " ".join(pieces)
        return tuple(found)

    def _holding(self, name: str) -> dict[bytes, list[int]]:
        """For each word, the numbers of the view's blocks that hold it."""
        if self._holding_by_view is None:
            self._holding_by_view = {}
        found = self._holding_by_view.get(name)
        if found is None:
            found = self._holding_by_view[name] = {}
            for number, block in enumerate(self.blocks(name)):
                for word in block.words:
                    found.setdefault(word, []).append(number)
        return found

    def needle_starts(self, name: str, plan: NeedlePlan, leads: Iterable[bytes], as_written: bool) -> Starts:
        """Where needles start words of the lower-cased view (or of the view as written, which
        must then be as long), by the number of the expression they are for.

        `plan` holds, for each lead word, its needles as (expression number, needle, offset of
        the lead word in it); only the `leads` (which must be among the view's words) are
        looked for, and in a long view only in the blocks that hold them. The places of one
        needle are kept for the other patterns that look for it.
        """
        subject = self.view(name) if as_written else self.lowered(name)
        starts: Starts = {}
        whole = len(subject) <= BLOCKS_FROM
        if whole:
            for lead in leads:
                for number, needle, _ in plan[lead]:
                    at = subject.find(needle)
                    while at != -1:
                        if not at or not (subject[at - 1].isalnum() or subject[at - 1] == "_"):
                            starts.setdefault(number, []).append(at)
                        at = subject.find(needle, at + 1)
            return starts
        blocks = self.blocks(name)
        holding = self._holding(name)
        if self._found is None:
            self._found = {}
        cache = self._found
        for lead in leads:
            spans = [(blocks[n].start, blocks[n].end) for n in holding.get(lead, ())]
            for number, needle, offset in plan[lead]:
                key = (name, needle, lead, offset)
                found = cache.get(key)
                if found is None:
                    found = cache[key] = _find_words(subject, needle, offset, spans)
                if found:
                    starts.setdefault(number, []).extend(found)
        return starts


def normalise(text: str) -> Normalised:
    return Normalised(text)


def _find_words(subject: str, needle: str, offset: int, spans: list[tuple[int, int]]) -> list[int]:
    """Where `needle` starts a word, for the needles whose lead word (`offset` characters in)
    starts in one of the spans."""
    found: list[int] = []
    size = len(needle)
    for start, end in spans:
        stop = end - offset - 1 + size
        at = subject.find(needle, max(0, start - offset), stop)
        while at != -1:
            if not (at and is_word_char(subject[at - 1])):
                found.append(at)
            at = subject.find(needle, at + 1, stop)
    return found


def _cut(lowered: str, vocabulary: frozenset[bytes] | None) -> tuple[Block, ...]:
    """Blocks of about BLOCK_CHARS, cut at whitespace (so no word and no run of spaces is split
    in a way flat would not be)."""
    # One byte per character ('?' for any non-ASCII one, which splits words like any other), so
    # the blocks' words come from slices of one translation.
    words = lowered.encode("ascii", "replace").translate(_WORD_BYTES)
    blocks: list[Block] = []
    start = 0
    while start < len(lowered):
        cut = _SPACE.search(lowered, start + BLOCK_CHARS)
        end = len(lowered) if cut is None or len(lowered) - cut.start() < BLOCK_CHARS // 2 else cut.start()
        blocks.append(Block(start, end, _known(words[start:end].split(), vocabulary)))
        start = end
    return tuple(blocks)


def _known(found: list[bytes], vocabulary: frozenset[bytes] | None) -> Words:
    return set(found) if vocabulary is None else vocabulary.intersection(found)
