"""Normalisation: the steps that make the views of a text (views.py).

A pattern sees a text the way a model would read it, not the way it is spelled. The steps, in
order: HTML entities decoded (`unescape`: the raw view); invisible characters removed, Unicode
tags decoded, NFKC, look-alike letters folded to Latin (`clean`) and letter-spaced words joined
(`join_spaced`): the lines view; HTML tags, comment markers, emphasis and code marks dropped
(`strip_markup`): the plain view; whitespace collapsed: the flat view.

Speed comes from a few passes of C over the string and Python only where a step can change
something: invisible characters, NFKC and look-alikes are all non-ASCII, so only the
non-ASCII runs of a text are touched (ASCII is NFKC-stable and no composition pairs an ASCII
character with the one before it, so normalising runs one by one gives the same text as
normalising the whole), and a run already seen is looked up, not worked out again;
letter-spaced words are joined only on lines that hold three single letters in a row. A long
text is taken in pieces of a few thousand characters (`views_of`), so that each step works
only on the pieces that hold what it changes.

Every step gives the same text for texts joined by SEPARATOR as for each text alone, joined
by it (batch.py relies on that): each works within a line, but tags, which in a joined text
(`joined=True`) never run across a NUL; and lower-casing sees a line break at a text's ends just
as it sees the start or end of a string.
"""

from __future__ import annotations

import html
import operator
import re
import unicodedata
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sentient.threats.automata import Automaton


# Texts joined by this make a joined text whose views are the texts' views joined by it.
SEPARATOR = "\n\x00\n"

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
    # Quotes, dashes, and the braille blank, which shows as a space (between words, it hides them)
    "\u2800": " ",
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
# From this many characters on, Hyperscan finds spaced letters quicker than Python.
LONG_TEXT = 2048
MANY_CASED = 8  # with more non-ASCII characters that lower-casing changes, lower-case as text
# In a text of more bytes than this, those letters are looked for by Hyperscan first (a replace a
# letter costs more there than a Hyperscan pass), and found one by one while they are at most one
# byte in FEW_CASED.
LETTERS_BY_HYPERSCAN = 65_536
FEW_CASED = 2048
# The same as bytes of UTF-8, for Hyperscan: a single letter (an ASCII one after no ASCII letter,
# or the last byte of any other character), a spacer, a letter alone, a spacer, and a letter not
# followed by an ASCII one (or the first byte of any other character).
_SPACED_BYTES = (
    rb"(?:(?:^|[^a-zA-Z])[a-zA-Z]|[\x80-\xbf])[ .*\-](?:[a-zA-Z]|[\xc0-\xff][\x80-\xbf]{1,3})[ .*\-]"
    rb"(?:[a-zA-Z](?:[^a-zA-Z]|$)|[\xc0-\xff])"
)
# HTML tags and comment markers; inline formatting tags vanish, others become a space. A tag
# holds at most TAG_REACH characters after its name.
TAG_REACH = 300
TAG = re.compile(rf"<!--|-->|</?([a-zA-Z][a-zA-Z0-9]*)\b[^<>]{{0,{TAG_REACH}}}>")
# TAG's matches that start with '<': starting with a literal character, they are found much
# faster. In texts joined by SEPARATOR, none runs across a NUL (from one text into the next;
# texts are joined only when none of them holds a NUL).
_OPENING_TAG = re.compile(rf"<(?:!--|/?([a-zA-Z][a-zA-Z0-9]*)\b[^<>]{{0,{TAG_REACH}}}>)")
_OPENING_TAG_JOINED = re.compile(rf"<(?:!--|/?([a-zA-Z][a-zA-Z0-9]*)\b[^<>\x00]{{0,{TAG_REACH}}}>)")
# Where a tag that may run on past a line break starts (see `views_of`).
_TAG_NAME = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*\b")
INLINE_TAGS = {"b", "i", "u", "s", "em", "strong", "span", "mark", "small", "sup", "sub", "font", "code",
               "kbd", "del", "ins", "a", "abbr", "q", "tt", "strike"}  # fmt: skip
# Emphasis and code marks: asterisks, backticks, pairs of tildes, and underscores but one between
# two letters or digits (snake_case keeps its underscore; "_ignore_" and "__all__" lose theirs).
# Each branch starts with its mark, so that the engine looks for the marks alone (a branch
# starting with a lookbehind made it try every place: 20 times slower).
EMPHASIS = re.compile(r"\*\**|`+|~~|_(?:_+|(?<![^\W_]_)|(?![^\W_]))")
_UNDERSCORES = re.compile(r"_(?:_+|(?<![^\W_]_)|(?![^\W_]))")
# What str.split() splits at, as bytes of ASCII ('\x1c'-'\x1f' too), each made a space.
_SPACES = bytes(32 if (9 <= b <= 13 or 28 <= b <= 32) else b for b in range(256))
_WIDE_SPACE_BYTES = re.compile(
    b"|".join(re.escape(chr(code).encode()) for code in range(0x80, 0x3001) if chr(code).isspace())
)
_ASCII_BYTES = bytes(range(0x80))


# A text longer than twice this many characters is made into views in pieces (see `views_of`).
PIECE_CHARS = 8192

Views = tuple[str, str, str, tuple[int, ...], frozenset[str]]  # raw, lines, plain, hidden_at, cased


def views_of(text: str, joined: bool = False) -> Views:
    """The raw, lines and plain views of a text, where the invisible characters of raw are, and
    the characters `clean` says lower-casing changes: every step above, in order. `joined`: the
    text is texts joined by SEPARATOR (see `strip_markup`).

    A long text is taken in pieces of about PIECE_CHARS characters, each but the last ending
    with a line break ("\\n"): a long text holds every kind of markup somewhere, so each step
    would work over all of it, where a piece holds few kinds and each step does its work only on
    the pieces that need it (a quick check in C still looks at every piece); and a piece of ASCII
    is stored a byte a character, when one emoji makes Python store a whole text four. The views
    are the pieces' views joined, as every step works within a line, but tags: pieces are
    stripped of their markup together while a tag may run on from one into the next."""
    if len(text) <= 2 * PIECE_CHARS:
        return _views(text, joined)
    pieces = _pieces(text)
    raws: list[str] = []
    lines: list[str] = []
    hidden: list[int] = []
    cased = _NONE
    done = 0  # characters of raw so far
    for piece in pieces:
        raw = unescape(piece)
        cleaned, hidden_at, cased_here = clean(raw)
        raws.append(raw)
        lines.append(join_spaced(cleaned))
        hidden += [done + at for at in hidden_at]
        cased |= cased_here
        done += len(raw)
    plains: list[str] = []
    unchanged = True
    together: list[str] = []
    reach = -1  # how many more characters a tag begun and not ended may take (none: below 0)
    for number, piece in enumerate(lines, 1):
        together.append(piece)
        opening = piece.rfind("<")  # a tag holds no '<' or '>' but its own two
        if opening != -1:
            tag = _TAG_NAME.match(piece, opening)
            if tag is None or piece.find(">", opening) != -1:
                reach = -1
            else:
                reach = TAG_REACH - (len(piece) - tag.end())
        elif reach >= 0:
            reach = -1 if ">" in piece else reach - len(piece)
        if reach < 0 or number == len(lines):
            stripped = strip_markup(chunk := together[0] if len(together) == 1 else "".join(together), joined)
            plains.append(stripped)
            unchanged = unchanged and stripped is chunk
            together = []
    raw = text if all(map(operator.is_, raws, pieces)) else "".join(raws)
    cleaned = raw if all(map(operator.is_, lines, raws)) else "".join(lines)
    return raw, cleaned, cleaned if unchanged else "".join(plains), tuple(hidden), cased


def _views(text: str, joined: bool) -> Views:
    raw = unescape(text)
    lines, hidden_at, cased = clean(raw)
    lines = join_spaced(lines)
    return raw, lines, strip_markup(lines, joined), hidden_at, cased


def _pieces(text: str) -> list[str]:
    """The text cut after the first line break at or past every PIECE_CHARS characters."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > PIECE_CHARS:
        cut = text.find("\n", start + PIECE_CHARS) + 1
        if not cut:
            break
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def unescape(text: str) -> str:
    """The raw view: HTML entities decoded."""
    return html.unescape(text) if "&" in text else text


def clean(raw: str) -> tuple[str, tuple[int, ...], frozenset[str]]:
    """Invisible characters removed (tags decoded), NFKC, look-alikes folded: on the non-ASCII
    runs only. Returns the text, the positions of the invisible characters in `raw`, and the
    non-ASCII characters of `raw` and of the text that lower-casing changes (see `lower_bytes`)."""
    if raw.isascii():
        return raw, (), _NONE
    parts: list[str] = []
    hidden: list[int] = []
    cased = _NONE
    done = 0
    for start, end in _runs(raw):
        before = raw[start - 1] if start else ""  # the ASCII character before may compose with the run
        cleaned, offsets, cased_here = _cleaned(before, raw[start:end])
        if cased_here:
            cased |= cased_here
        if offsets:
            hidden += [start + offset for offset in offsets]
        if cleaned is not None:
            parts += [raw[done : start - len(before)], cleaned]
            done = end
    if not parts:
        return raw, tuple(hidden), cased
    parts.append(raw[done:])
    return "".join(parts), tuple(hidden), cased


_NONE: frozenset[str] = frozenset()


def _runs(text: str) -> list[tuple[int, int]]:
    """Where the runs of non-ASCII characters of a text are, as [start, end) character offsets.

    Encoded as ASCII with "?" for every other character (its own "?"s made "\\x01" first), the
    text keeps its offsets; with every "?" made 1 and every other byte 0, runs start and end
    where memchr finds them."""
    marked = text.replace("?", "\x01") if "?" in text else text
    flags = marked.encode("ascii", "replace").translate(_MARKS)
    runs: list[tuple[int, int]] = []
    start = flags.find(1)
    while start != -1:
        end = flags.find(0, start)
        if end == -1:
            end = len(flags)
        runs.append((start, end))
        start = flags.find(1, end)
    return runs


_MARKS = bytes(1 if byte == 63 else 0 for byte in range(256))  # '?': a character outside ASCII


def utf8(text: str) -> bytes | None:
    """The UTF-8 of a text, or None when it has none."""
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate (from a file read with surrogateescape)
        return None


@lru_cache(maxsize=8192)
def _cleaned(before: str, run: str) -> tuple[str | None, tuple[int, ...], frozenset[str]]:
    """One non-ASCII run of a text, with the ASCII character before it (if any) in front:
    (the two cleaned, or None when unchanged; where the invisible characters of the run are;
    the non-ASCII characters of the run, as read or cleaned, that lower-casing changes)."""
    chunk = run
    offsets: tuple[int, ...] = ()
    if UNHIDABLE.search(chunk) is not None:
        offsets = tuple(found.start() for found in UNHIDABLE.finditer(chunk))
        chunk = UNHIDABLE.sub(_unhide, chunk)
    chunk = before + chunk
    if not unicodedata.is_normalized("NFKC", chunk):
        chunk = unicodedata.normalize("NFKC", chunk)
    if FOLDABLE.search(chunk) is not None:
        chunk = FOLDABLE.sub(_fold, chunk)
    cased = frozenset(char for char in set(chunk).union(run) if not char.isascii() and char.lower() != char)
    return (None if chunk == before + run else chunk), offsets, cased


def _unhide(match: re.Match[str]) -> str:
    return UNHIDE[ord(match.group())] or ""


def _fold(match: re.Match[str]) -> str:
    return LOOKALIKES[match.group()]


def join_spaced(lines: str) -> str:
    """Letter-spaced words joined ("i g n o r e" -> "ignore"), line by line where they may be."""
    if lines.isascii() and _spaced_by(lines) is None:  # (with Hyperscan, the hints are as quick)
        if not _may_be_spaced(lines.encode().translate(_LETTER_BYTES)):
            return lines
    starts = _spaced_hints(lines)
    if not starts:
        return lines
    parts: list[str] = []
    done = -1  # the end of the last line joined (a hint may be at its line break)
    for at in starts:
        if at <= done:
            continue
        start = lines.rfind("\n", 0, at) + 1
        end = lines.find("\n", at)
        end = len(lines) if end == -1 else end
        parts += [lines[max(done, 0) : start], SPACED_LETTERS.sub(_join_letters, lines[start:end])]
        done = end
    parts.append(lines[max(done, 0) :])
    return "".join(parts)


def _join_letters(match: re.Match[str]) -> str:
    return _SPACER.sub("", match.group(0))


def _may_be_spaced(mapped: bytes) -> bool:
    """For ASCII text (see _LETTER_BYTES): three single letters split by single spacers."""
    found = _SPACED_MIDDLE.search(mapped)
    while found is not None:
        at = found.start()
        if at and mapped[at - 1] == 97 and (at < 2 or mapped[at - 2] != 97):
            return True
        found = _SPACED_MIDDLE.search(mapped, at + 1)
    return False


def _spaced_hints(lines: str) -> list[int]:
    """Places (character offsets, ascending) on the lines where three single letters split by
    single spacers may be: every such line has one. By Hyperscan when it is there."""
    automaton = _spaced_by(lines)
    data = utf8(lines) if automaton is not None else None
    if automaton is None or data is None:
        mapped = lines.encode("utf-8", "surrogatepass").translate(_LETTER_BYTES, _CONTINUATION_BYTES)
        singles = mapped.replace(b"aa", b"bb").replace(b"ba", b"bb")  # one byte per character
        return [hint.start() for hint in _SPACED_HINT.finditer(singles)]
    ends = automaton.ends(data)
    if not ends:
        return []
    return characters(data, sorted({end - 1 for found in ends.values() for end in found}))


def _spaced_by(lines: str) -> Automaton | None:
    """The automaton that finds the spaced-letter hints of a long text, or None (then Python)."""
    return _spaced_automaton() if len(lines) > LONG_TEXT else None


@lru_cache(maxsize=1)
def _spaced_automaton() -> Automaton | None:
    from sentient.threats.automata import Automaton  # Hyperscan, imported when a long text needs it

    return Automaton.build((_SPACED_BYTES,), prefilter=False)


def strip_markup(lines: str, joined: bool = False) -> str:
    """The plain view: HTML tags and comment markers removed (inline formatting tags vanish,
    others become a space), then emphasis marks. `joined`: the text is texts joined by
    SEPARATOR, whose tags do not run from one into the next."""
    plain = lines
    if "<" in lines:
        plain = _strip_tags(lines, _contains(lines, "-->", key=2), _OPENING_TAG_JOINED if joined else _OPENING_TAG)
    elif _contains(lines, "-->", key=2):
        plain = lines.replace("-->", " ")
    if "*" in plain or "_" in plain or "`" in plain or "~" in plain:
        plain = _unemphasise(plain)
    return plain


# How many times _contains compares a mark where its key character is before it gives up.
CONTAINS_TRIES = 16


def _contains(text: str, mark: str, key: int = 0) -> bool:
    """`mark in text`, quicker for a mark with a rare character (the one at `key`): CPython looks
    for two or three characters at about a nanosecond a character (5 us in 4 KB, found or not),
    and for one with memchr, so that one is looked for and the mark compared around it, up to
    CONTAINS_TRIES times (then `in` after all: the character was not rare here)."""
    char = mark[key]
    at = text.find(char, key)
    for _ in range(CONTAINS_TRIES):
        if at == -1:
            return False
        if text.startswith(mark, at - key):
            return True
        at = text.find(char, at + 1)
    return mark in text


def _strip_tags(text: str, comment_ends: bool, opening: re.Pattern[str]) -> str:
    """TAG's substitution, quicker: the matches starting with '<' (`opening`) are found on their
    own (none holds another '<', and no "-->" holds one), and a "-->" (`comment_ends`: there are
    some) counts where none of them covers it."""
    if not comment_ends:
        return opening.sub(_untag, text)
    parts: list[str] = []
    done = 0
    for tag in opening.finditer(text):
        parts += [text[done : tag.start()].replace("-->", " "), _untag(tag)]
        done = tag.end()
    parts.append(text[done:].replace("-->", " "))
    return "".join(parts)


def _untag(match: re.Match[str]) -> str:
    name = match.group(1)
    return "" if name is not None and name.lower() in INLINE_TAGS else " "


def _unemphasise(text: str) -> str:
    """Emphasis and code marks removed (EMPHASIS). The kinds use different characters, so they
    can be removed one kind after another: underscores first (whether one is a mark depends on
    its neighbours as written), asterisks and backticks last (removing one never makes another
    that the single pass would not have seen), unless a tilde touches an underscore."""
    tildes, unders = "~" in text, "_" in text
    if tildes and unders and (_contains(text, "~_") or _contains(text, "_~", key=1)):
        return EMPHASIS.sub("", text)
    if unders:
        text = _UNDERSCORES.sub("", text)
    if tildes and _contains(text, "~~"):
        text = text.replace("~~", "")
    if "*" in text:
        text = text.replace("*", "")
    return text.replace("`", "") if "`" in text else text


def collapse(plain: str) -> str:
    """The flat view: every run of whitespace one space, none at the ends. On the UTF-8 bytes
    when it can be (twice as quick as splitting the text into words and joining them)."""
    data = utf8(plain)
    flat = collapse_bytes(data) if data is not None else None
    return flat.decode() if flat is not None else " ".join(plain.split())


def collapse_bytes(data: bytes) -> bytes | None:
    """`collapse` on UTF-8 bytes, or None when they hold whitespace outside ASCII (then use
    `collapse` on the text)."""
    if not data.isascii() and _WIDE_SPACE_BYTES.search(data.translate(None, _ASCII_BYTES)) is not None:
        return None
    # Split at two spaces, ends stripped, empty parts dropped, joined by one: twice as quick as
    # a regular expression, which stops at every space.
    parts = data.translate(_SPACES).split(b"  ")
    if len(parts) == 1:
        return parts[0].strip(b" ")
    return b" ".join([part for part in map(bytes.strip, parts) if part])


def lower_bytes(text: str, cased: frozenset[str]) -> bytes:
    """The UTF-8 of the text lower-cased. `cased`: the non-ASCII characters of the text that
    lower-casing changes (see `clean`). Lower-casing changes each character on its own (but a
    final sigma, which depends on its neighbours), so ASCII is lower-cased as bytes and each of
    those characters replaced."""
    if "Σ" in cased or len(cased) > MANY_CASED:
        return text.lower().encode()
    data = text.encode().lower()
    if not cased:
        return data
    chars = tuple(sorted(cased))
    automaton = _letters_automaton(chars) if len(data) > LETTERS_BY_HYPERSCAN else None
    # Each replace is a pass at about a nanosecond a byte (5 ms in 5 MB). Hyperscan finds all the
    # letters in one pass, but calls back into Python for each (about a microsecond): it is
    # asked first, and gives up for a text where they are more than one byte in FEW_CASED.
    found = automaton.ends_up_to(data, len(data) // FEW_CASED) if automaton is not None else None
    if found is None:
        for char in chars:
            data = data.replace(char.encode(), char.lower().encode())
        return data
    parts: list[bytes] = []
    done = 0
    for end, number in sorted(found):  # UTF-8 characters never overlap
        char = chars[number]
        parts += [data[done : end - len(char.encode())], char.lower().encode()]
        done = end
    parts.append(data[done:])
    return b"".join(parts)


@lru_cache(maxsize=64)
def _letters_automaton(chars: tuple[str, ...]) -> Automaton | None:
    from sentient.threats.automata import Automaton

    return Automaton.of_literals([char.encode() for char in chars])


def characters(data: bytes, offsets: list[int]) -> list[int]:
    """Byte offsets in `data` (the UTF-8 of a text, ascending) as character offsets; those
    inside a character are dropped."""
    if data.isascii():
        return offsets
    return list(character_offsets(data, offsets).values())


def character_offsets(data: bytes, offsets: list[int]) -> dict[int, int]:
    """For each byte offset in `data` (the UTF-8 of a text; ascending, each once) that starts a
    character or ends the text, its character offset. The characters between two offsets are
    counted by decoding them (in C, and quickest for the mostly ASCII text between)."""
    found: dict[int, int] = {}
    before, counted = 0, 0  # counted: the characters of data[:before]
    size = len(data)
    for offset in offsets:
        if offset < size and 0x80 <= data[offset] < 0xC0:
            continue
        counted += len(data[before:offset].decode("utf-8", "surrogatepass"))
        before = offset
        found[offset] = counted
    return found
