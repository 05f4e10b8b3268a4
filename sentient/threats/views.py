"""Normalisation: the views of a text that threat patterns match against.

A pattern sees a text the way a model would read it, not the way it is spelled: HTML entities
decoded, invisible characters removed, look-alike letters folded to Latin, letter-spaced words
joined, markup and emphasis dropped, whitespace collapsed. `Normalised` makes those views
lazily, each once, and keeps the word sets the keyword pre-checks look words up in.

Speed comes from doing the expensive steps only where they can change something: invisible
characters, NFKC and look-alikes are all non-ASCII, so only the non-ASCII runs of a text are
touched (ASCII is NFKC-stable and no composition pairs an ASCII character with the one before
it, so normalising runs one by one gives the same text as normalising the whole); letter-spaced
words are joined only on lines that hold three single letters in a row.
"""

from __future__ import annotations

import bisect
import html
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence

VIEWS = ("flat", "lines", "raw")
# Bumped when normalisation changes what a pattern can match; part of every fingerprint.
NORMALISER_VERSION = 2
# Long views are cut into blocks of about this many characters, each with its own word set,
# so that a word is looked for only in the blocks that hold it.
BLOCK_CHARS = 512
BLOCKS_FROM = 2 * BLOCK_CHARS  # shorter views are one block, searched whole

# Removed before matching: zero-width characters, joiners, bidirectional controls, soft hyphen,
# variation selectors, fillers that render as nothing. Unicode tag characters (U+E0020-E007E)
# spell ASCII invisibly, so they are decoded to the ASCII they hide rather than dropped.
_INVISIBLE = (
    [0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x3164, 0xFEFF, 0xFFA0]
    + list(range(0x200B, 0x2010))
    + list(range(0x202A, 0x202F))
    + list(range(0x2060, 0x2070))
    + list(range(0xFE00, 0xFE10))
    + list(range(0xE0100, 0xE01F0))
)
UNHIDE: dict[int, str | None] = {code: None for code in _INVISIBLE}
UNHIDE.update({code: None for code in range(0xE0000, 0xE0080)})
UNHIDE.update({0xE0000 + code: chr(code) for code in range(0x20, 0x7F)})

# Letters from other scripts that pass for Latin ones (applied after NFKC), and typographic
# quotes, so "ignоre" with a Cyrillic о and "don’t" with a curly apostrophe match.
LOOKALIKES = {
    # Cyrillic
    "а": "a", "в": "b", "с": "c", "ԁ": "d", "е": "e", "ё": "e", "һ": "h", "і": "i", "ї": "i",
    "ј": "j", "к": "k", "ӏ": "l", "м": "m", "н": "h", "о": "o", "р": "p", "ԛ": "q", "г": "r",
    "ѕ": "s", "т": "t", "ц": "u", "ѵ": "v", "ԝ": "w", "х": "x", "у": "y",
    "А": "A", "В": "B", "С": "C", "Е": "E", "Н": "H", "І": "I", "Ј": "J", "К": "K", "М": "M",
    "О": "O", "Р": "P", "Ѕ": "S", "Т": "T", "Х": "X", "У": "Y", "Ԛ": "Q", "Ԝ": "W", "Ү": "Y",
    # Greek
    "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p",
    "τ": "t", "υ": "u", "χ": "x", "γ": "y", "ω": "w", "ς": "s",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N",
    "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    # Latin and Armenian variants
    "ı": "i", "ɩ": "i", "ɑ": "a", "ɡ": "g", "ʟ": "l", "ᴀ": "a", "ᴇ": "e", "ᴏ": "o", "օ": "o",
    "ս": "u", "հ": "h", "ո": "n",
    # Quotes and dashes
    "\u2018": "'", "\u2019": "'", "\u201b": "'", "\u2032": "'", "\u02bc": "'",
    "\u201c": '"', "\u201d": '"', "\u201f": '"', "\u2033": '"',
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
}  # fmt: skip
# Every expression below starts with a character or a class, so that the engine can skip ahead
# to where a match may start instead of trying every position.
FOLDABLE = re.compile("[" + "".join(LOOKALIKES) + "]")
UNHIDABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)
_NON_ASCII = re.compile("[^\x00-\x7f][^\x00-\x7f]*")
# Runs of three or more single letters split by one space, dot, dash or asterisk: "i g n o r e".
SPACED_LETTERS = re.compile(r"[^\W\d_](?<![^\W\d_].)(?:[ .*-][^\W\d_]){2,}(?![^\W\d_])")
_SPACER = re.compile(r"[ .*-]")
# Where spaced letters may be: with ASCII letters as 'a', spacers ' ', the lead byte of any
# other character (a letter or not) 'u' and anything else '#', and every run of two or more
# 'a' then made 'b', a join needs three of 'a' or 'u' split by single spaces.
_LETTER_BYTES = bytes(
    97 if (65 <= b <= 90 or 97 <= b <= 122) else 117 if b >= 0xC0 else 32 if b in b" .*-" else 35 for b in range(256)
)
_SPACED_HINT = re.compile(rb"[au] [au] [au]")
_SPACED_MIDDLE = re.compile(rb" a a(?!a)")  # in ASCII text: the last two of three single letters
_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))
# HTML tags and comment markers; inline formatting tags vanish, others become a space.
TAG = re.compile(r"<!--|-->|</?([a-zA-Z][a-zA-Z0-9]*)\b[^<>]{0,300}>")
INLINE_TAGS = {"b", "i", "u", "s", "em", "strong", "span", "mark", "small", "sup", "sub", "font", "code",
               "kbd", "del", "ins", "a", "abbr", "q", "tt", "strike"}  # fmt: skip
EMPHASIS = re.compile(r"\*\**|~~|__+")
_UNDERSCORES = re.compile("__+")
# Words, for keywords: a-z, 0-9 and '_'; every other character (any non-ASCII one too) splits.
_WORD_BYTES = bytes(b if (48 <= b <= 57 or 97 <= b <= 122 or b == 95) else 32 for b in range(256))
_SPACE = re.compile(r"\s")


def _unhide(match: re.Match[str]) -> str:
    return UNHIDE[ord(match.group())] or ""


def _fold(match: re.Match[str]) -> str:
    return LOOKALIKES[match.group()]


def _join_letters(match: re.Match[str]) -> str:
    return _SPACER.sub("", match.group(0))


def _untag(match: re.Match[str]) -> str:
    name = match.group(1)
    return "" if name is not None and name.lower() in INLINE_TAGS else " "


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
    plain  lines without HTML tags, comment markers and emphasis
    flat   plain with every run of whitespace one space

    `hidden_at` holds the positions in raw of the invisible characters (`hidden`: there are
    some). `lowered(view)` is the lower-cased view patterns match on and `words(view)` the set
    of its words, limited to the `vocabulary` when one is given (the words a pattern set looks
    up). Long views are cut into blocks, each with its own words, so that a word is looked for
    only in the blocks that hold it. Everything but lines and plain is made on first use.
    """

    __slots__ = ("text", "raw", "lines", "plain", "hidden_at", "vocabulary", "indexed", "_lowered", "_words",
                 "_blocks", "_flat", "_found", "_holding_by_view")  # fmt: skip

    def __init__(self, text: str, vocabulary: frozenset[bytes] | None = None, *, indexed: bool = True) -> None:
        self.text = text
        self.vocabulary = vocabulary
        self.indexed = indexed  # words and blocks made ahead for the keyword pre-checks; not for Hyperscan
        self.raw = raw = html.unescape(text) if "&" in text else text
        encoded: bytes | None = None
        self.hidden_at: tuple[int, ...] = ()
        if raw.isascii():
            lines = raw
            low = lines.lower()
            encoded = low.encode()
            if _may_be_spaced(encoded.translate(_LETTER_BYTES)):
                lines = _join_spaced(lines)
                low = lines.lower()
                encoded = None
        else:
            lines, self.hidden_at = _clean(raw)
            lines = _join_spaced(lines)
            low = lines.lower()
        plain = TAG.sub(_untag, lines) if "<" in lines or "-->" in lines else lines
        if "*" in plain or "~" in plain or "__" in plain:
            plain = _unemphasise(plain)
        self.lines, self.plain = lines, plain
        self._lowered = {"lines": low, "plain": low} if plain is lines else {"lines": low}
        if lines is raw:
            self._lowered["raw"] = low
        self._words: dict[str, Words] = {}
        if indexed and plain is lines and len(low) <= BLOCKS_FROM:  # the words every scan looks up first
            found = (encoded or low.encode("utf-8", "surrogatepass")).translate(_WORD_BYTES).split()
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
            self._flat = " ".join(self.plain.split())
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
            if name == "flat":
                if self.indexed and len(self.blocks("plain")) > 1:
                    self.blocks("flat")  # makes lowered flat with its blocks
                    return self._lowered["flat"]
                text = " ".join(self.lowered("plain").split())
            else:
                text = self.view(name).lower()
            self._lowered[name] = text
        return text

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


def _clean(raw: str) -> tuple[str, tuple[int, ...]]:
    """Invisible characters removed (tags decoded), NFKC, look-alikes folded: on the non-ASCII
    runs only. Returns the text and the positions of the invisible characters in `raw`."""
    parts: list[str] = []
    hidden: list[int] = []
    done = 0
    for run in _NON_ASCII.finditer(raw):
        start, end = run.span()
        chunk = run.group()
        if UNHIDABLE.search(chunk) is not None:
            hidden += [start + found.start() for found in UNHIDABLE.finditer(chunk)]
            chunk = UNHIDABLE.sub(_unhide, chunk)
        if start:  # the ASCII character before may compose with the run ("e" + U+0301)
            parts.append(raw[done : start - 1])
            chunk = raw[start - 1] + chunk
        if not unicodedata.is_normalized("NFKC", chunk):
            chunk = unicodedata.normalize("NFKC", chunk)
        if FOLDABLE.search(chunk) is not None:
            chunk = FOLDABLE.sub(_fold, chunk)
        parts.append(chunk)
        done = end
    parts.append(raw[done:])
    return "".join(parts), tuple(hidden)


def _unemphasise(text: str) -> str:
    """Emphasis marks removed (EMPHASIS). The three kinds use different characters, so when only
    one is there a plain replacement does the same, quicker."""
    stars, tildes, unders = "*" in text, "~~" in text, "__" in text
    if stars + tildes + unders > 1:
        return EMPHASIS.sub("", text)
    if stars:
        return text.replace("*", "")
    if tildes:
        return text.replace("~~", "")
    if unders:
        return _UNDERSCORES.sub("", text)
    return text


def _may_be_spaced(mapped: bytes) -> bool:
    """For ASCII text (see _LETTER_BYTES): three single letters split by single spacers."""
    found = _SPACED_MIDDLE.search(mapped)
    while found is not None:
        at = found.start()
        if at and mapped[at - 1] == 97 and (at < 2 or mapped[at - 2] != 97):
            return True
        found = _SPACED_MIDDLE.search(mapped, at + 1)
    return False


def _single_letters(mapped: bytes) -> bytes:
    """`mapped` (see _LETTER_BYTES) with every run of two or more 'a' made 'b'."""
    return mapped.replace(b"aa", b"bb").replace(b"ba", b"bb")


def _join_spaced(lines: str) -> str:
    """Letter-spaced words joined ("i g n o r e" -> "ignore"), line by line where they may be."""
    mapped = lines.encode("utf-8", "surrogatepass").translate(_LETTER_BYTES, _CONTINUATION_BYTES)
    singles = _single_letters(mapped)  # one byte per character: positions agree with `lines`
    hint = _SPACED_HINT.search(singles)
    if hint is None:
        return lines
    parts: list[str] = []
    done = 0
    while hint is not None:
        start = lines.rfind("\n", 0, hint.start()) + 1
        end = lines.find("\n", hint.start())
        end = len(lines) if end == -1 else end
        parts += [lines[done:start], SPACED_LETTERS.sub(_join_letters, lines[start:end])]
        done = end
        hint = _SPACED_HINT.search(singles, end)
    parts.append(lines[done:])
    return "".join(parts)


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


def unchanged(texts: Sequence[str], joined: str, starts: Sequence[int]) -> list[bool]:
    """Which texts are their own raw, lines and plain views: ASCII, with no entity, tag, comment
    marker, emphasis mark or letter-spaced word (so their flat view is their words joined by
    single spaces). `joined`: the texts joined, text k from `starts[k]`, apart by a character
    that is no letter, space, dot, dash or asterisk (for the one look for spaced letters)."""
    plain = [
        text.isascii() and not ("&" in text or "<" in text or "*" in text or "~" in text or "__" in text
                                or "-->" in text)
        for text in texts
    ]  # fmt: skip
    mapped = joined.encode("utf-8", "surrogatepass").translate(_LETTER_BYTES, _CONTINUATION_BYTES)
    hit = _SPACED_MIDDLE.search(mapped)  # as in _may_be_spaced; one byte per character
    while hit is not None:
        at = hit.start()
        if at and mapped[at - 1] == 97 and (at < 2 or mapped[at - 2] != 97):
            plain[bisect.bisect_right(starts, at) - 1] = False
        hit = _SPACED_MIDDLE.search(mapped, at + 1)
    return plain
