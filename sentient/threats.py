"""Threat patterns: does a text read as instructions to the model rather than as something known?

Memory is where outside text can settle for good, so every entry is judged when it is written
and again when it is read. This module is the judging, and nothing else:

- `PatternSet.load()` reads the versioned pattern set (`sentient/data/patterns.yaml`) plus a
  vault's own patterns, and compiles them. A bad pattern is a ConfigError naming it.
- `scan(text, patterns)` normalises the text (invisible characters, look-alike letters, HTML
  entities, odd spacing) and returns the findings. Pure: no I/O, no state.
- `ThreatJudge` caches judgments by (content revision, pattern-set fingerprint), so judging an
  unchanged entry on every read costs a dictionary lookup, and it fits the vault's `Judge`.

Patterns catch the blunt cases only; docs/security.md says what they miss.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from sentient.errors import ConfigError
from sentient.vault.document import Document

PATTERNS_FILE = Path(__file__).parent / "data" / "patterns.yaml"

CLASSES = (
    "override",
    "identity",
    "fake-header",
    "exfiltration",
    "tool-coercion",
    "secrecy",
    "self-persistence",
    "credentials",
    "hidden",
)
VIEWS = ("flat", "lines", "raw")

# Bumped when normalisation changes what a pattern can match; part of every fingerprint.
NORMALISER_VERSION = 1
EXCERPT_CHARS = 80
CACHE_ENTRIES = 100_000
# Long texts are scanned in overlapping pieces so the keyword pre-check stays selective.
PIECE_CHARS = 8_192
PIECE_OVERLAP = 1_024

_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_PATTERN_KEYS = {"id", "class", "description", "regex", "view", "keywords", "case_sensitive", "not_after"}


# --- Normalisation -----------------------------------------------------------------------

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
_UNHIDE: dict[int, str | None] = {code: None for code in _INVISIBLE}
_UNHIDE.update({0xE0000 + code: chr(code) for code in range(0x20, 0x7F)})
_UNHIDE.update({0xE0000: None, 0xE0001: None, 0xE007F: None})

# Letters from other scripts that pass for Latin ones (applied after NFKC), and typographic
# quotes, so "ignоre" with a Cyrillic о and "don’t" with a curly apostrophe match.
_LOOKALIKES = {
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
_FOLDABLE = re.compile("[" + "".join(_LOOKALIKES) + "]")
_UNHIDABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)
# Keywords that are words are looked up in the set of a text's words: '*' and '~' (emphasis)
# are dropped, and every other byte but a-z, 0-9, '_' and non-ASCII splits words.
_WORD_BYTES = bytes(b if (48 <= b <= 57 or 97 <= b <= 122 or b == 95 or b >= 128) else 32 for b in range(256))
_WORD_KEYWORD = re.compile(r"[a-z0-9_]+")

# Runs of three or more single letters split by one space, dot, dash or asterisk: "i g n o r e".
# They are looked for only when the text has three one-letter words in a row.
_SPACED_LETTERS = re.compile(r"(?<![^\W\d_])(?:[^\W\d_][ .*-]){2,}[^\W\d_](?![^\W\d_])")
_SPACER = re.compile(r"[ .*-]")
# HTML tags and comment markers; inline formatting tags vanish, others become a space.
_TAG = re.compile(r"<!--|-->|</?([a-zA-Z][a-zA-Z0-9]*)\b[^<>]{0,300}>")
_INLINE_TAGS = {"b", "i", "u", "s", "em", "strong", "span", "mark", "small", "sup", "sub", "font", "code",
                "kbd", "del", "ins", "a", "abbr", "q", "tt", "strike"}  # fmt: skip
_EMPHASIS = re.compile(r"\*+|~~|_{2,}")


def _unhide(match: re.Match[str]) -> str:
    return _UNHIDE.get(ord(match.group())) or ""


def _fold(match: re.Match[str]) -> str:
    return _LOOKALIKES[match.group()]


def _join_letters(match: re.Match[str]) -> str:
    return _SPACER.sub("", match.group(0))


def _untag(match: re.Match[str]) -> str:
    name = match.group(1)
    return "" if name is not None and name.lower() in _INLINE_TAGS else " "


class Normalised:
    """The views of one text that patterns match against (see `view:` in patterns.yaml).

    raw    the text with HTML entities decoded
    lines  raw, with invisible characters removed, Unicode tags decoded to the ASCII they
           hide, NFKC, look-alike letters folded to Latin and letter-spaced words joined;
           line breaks kept
    plain  lines without HTML tags, comment markers and emphasis (what keywords are looked
           for in, for the flat view)
    flat   plain with every run of whitespace one space

    `hidden` is true when the text held invisible characters (normalisation removed some).
    Views are made on first use; `lowered(view)` is the lower-cased view patterns match on.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        raw = html.unescape(text) if "&" in text else text
        lines = raw
        self.hidden = False
        if not raw.isascii():
            if _UNHIDABLE.search(raw) is not None:
                lines = _UNHIDABLE.sub(_unhide, raw)
                self.hidden = lines != raw
            if not unicodedata.is_normalized("NFKC", lines):
                lines = unicodedata.normalize("NFKC", lines)
            if _FOLDABLE.search(lines) is not None:
                lines = _FOLDABLE.sub(_fold, lines)
        lowered = lines.lower()
        tokens = _tokens_of(lowered)
        if _spaced_letters_possible(tokens):
            joined = _SPACED_LETTERS.sub(_join_letters, lines)
            if joined != lines:
                lines, lowered = joined, joined.lower()
                tokens = _tokens_of(lowered)
        self.raw = raw
        self.lines = lines
        self._views: dict[str, str] = {"raw": raw, "lines": lines}
        self._lowered = {"lines": lowered}
        self._line_words = set(tokens)
        self._words: set[bytes] | None = None

    @property
    def words(self) -> set[bytes]:
        """The lower-cased words of the lines and plain views, for word keywords."""
        if self._words is None:
            # Emphasis marks are dropped when splitting words, so only tags can make the plain
            # view's words differ ("ig<b></b>nore").
            self._words = self._line_words
            if "<" in self.lines:
                self._words = self._line_words | _words_of(self.lowered("plain"))
        return self._words

    @property
    def plain(self) -> str:
        return self.view("plain")

    @property
    def flat(self) -> str:
        return self.view("flat")

    def view(self, name: str) -> str:
        text = self._views.get(name)
        if text is None:
            if name == "plain":
                text = self.lines
                if "<" in text:
                    text = _TAG.sub(_untag, text)
                if "*" in text or "~" in text or "__" in text:
                    text = _EMPHASIS.sub("", text)
            elif name == "flat":
                text = " ".join(self.view("plain").split())
            else:
                raise ValueError(f"no view {name!r}; one of {', '.join(VIEWS)} or plain")
            self._views[name] = text
        return text

    def lowered(self, name: str) -> str:
        cached = self._lowered.get(name)
        if cached is None:
            text = self.view(name)
            if text is self.lines:
                cached = self._lowered["lines"]
            else:
                cached = text.lower()
            self._lowered[name] = cached
        return cached


def _tokens_of(lowered: str) -> list[bytes]:
    return lowered.encode("utf-8", "surrogatepass").translate(_WORD_BYTES, b"*~").split()


def _words_of(lowered: str) -> set[bytes]:
    return set(_tokens_of(lowered))


def _spaced_letters_possible(tokens: list[bytes]) -> bool:
    """Three one-letter words in a row ("i g n o r e" splits into one-letter words)."""
    try:
        lengths = bytes(map(len, tokens))
    except ValueError:  # a word longer than 255 bytes
        lengths = bytes(min(len(token), 255) for token in tokens)
    start = lengths.find(b"\x01\x01\x01")
    while start != -1:
        if (tokens[start] + tokens[start + 1] + tokens[start + 2]).isalpha():
            return True
        start = lengths.find(b"\x01\x01\x01", start + 1)
    return False


def normalise(text: str) -> Normalised:
    return Normalised(text)


# --- Patterns ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Searcher:
    """One expression as the scanner runs it (see _fast_forms).

    `at_word_start`: a match must start at the start of a word (the scanner checks it, in
    place of a leading \\b the engine would be slow with). `lead`: a whole word every match
    has in its first, literal part `needle`; when the text does not have that word the search
    is skipped, and when it does the expression is tried only where `needle` occurs.
    """

    regex: re.Pattern[str]
    at_word_start: bool = False
    lead: bytes | None = None
    needle: str = ""  # the literal text every match starts with, when `lead` is set


@dataclass(frozen=True)
class Pattern:
    """One compiled pattern. `keywords` is a tuple of groups: every group needs one word present."""

    id: str
    class_: str
    description: str
    regexes: tuple[re.Pattern[str], ...]
    view: str = "flat"
    keywords: tuple[tuple[str, ...], ...] = ()
    case_sensitive: bool = False
    not_after: tuple[str, ...] = ()
    origin: str = "patterns.yaml"
    searchers: tuple[Searcher, ...] = ()  # the regexes as scanned; empty: the regexes as written

    @property
    def keyword_view(self) -> str:
        """The view fragment keywords are looked for in (before whitespace is collapsed)."""
        return "plain" if self.view == "flat" else self.view

    def fragment_text(self, text: Normalised) -> str:
        view = self.keyword_view
        return text.view(view) if self.case_sensitive else text.lowered(view)

    @cached_property
    def gates(self) -> tuple[tuple[frozenset[bytes], tuple[str, ...]], ...]:
        """Each keyword group as (words, fragments): words must occur as whole words,
        fragments anywhere in the lower-cased view."""
        return _gates(self.keywords)

    def admits(self, text: Normalised, groups: int = 0) -> bool:
        """True when the keyword groups from `groups` on are all present in the text."""
        for words, fragments in self.gates[groups:]:
            if words and not words.isdisjoint(text.words):
                continue
            if fragments:
                subject = self.fragment_text(text)
                if any(fragment in subject for fragment in fragments):
                    continue
            return False
        return True

    def first_match(self, subject: str, words: set[bytes] | None = None) -> re.Match[str] | None:
        """The first match that starts where it may and follows no `not_after` word.

        `words` (the text's words, see Normalised.words) lets searches whose lead word is
        missing be skipped.
        """
        for searcher in self.searchers or tuple(Searcher(regex) for regex in self.regexes):
            if searcher.lead is not None and words is not None:
                # Every match starts with the lead word: try the expression only where it occurs.
                if searcher.lead not in words:
                    continue
                needle = searcher.needle
                start = subject.find(needle)
                while start != -1:
                    if not (start and _is_word_char(subject[start - 1])):
                        match = searcher.regex.match(subject, start)
                        if match is not None and not (self.not_after and self.excluded_at(subject, start)):
                            return match
                    start = subject.find(needle, start + 1)
                continue
            position = 0
            while (match := searcher.regex.search(subject, position)) is not None:
                start = match.start()
                position = start + 1
                if searcher.at_word_start and start and _is_word_char(subject[start - 1]):
                    continue
                if self.not_after and self.excluded_at(subject, start):
                    continue
                return match
        return None

    def excluded_at(self, subject: str, start: int) -> bool:
        """True when a match at `start` follows one of the `not_after` words."""
        before = subject[max(0, start - 40) : start].lower().rstrip()
        return any(
            before.endswith(word) and (len(before) == len(word) or not _is_word_char(before[-len(word) - 1]))
            for word in self.not_after
        )


def _gates(keywords: tuple[tuple[str, ...], ...]) -> tuple[tuple[frozenset[bytes], tuple[str, ...]], ...]:
    return tuple(
        (
            frozenset(k.encode() for k in group if _WORD_KEYWORD.fullmatch(k)),
            tuple(k for k in group if not _WORD_KEYWORD.fullmatch(k)),
        )
        for group in keywords
    )


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


@dataclass(frozen=True)
class Finding:
    pattern_id: str
    class_: str
    description: str
    excerpt: str  # the matched text, normalised, at most EXCERPT_CHARS long


@dataclass(frozen=True)
class _GateIndex:
    """The first keyword groups of a set, arranged for one quick pass over a text."""

    first_words: frozenset[bytes]
    opens: dict[bytes, tuple[int, ...]]
    # per (view, as written?): (first character, ((fragment, patterns), ...)), ...
    fragments: tuple[tuple[tuple[str, bool], tuple[tuple[str, tuple[tuple[str, tuple[int, ...]], ...]], ...]], ...]
    always: tuple[int, ...]

    @classmethod
    def build(cls, patterns: Sequence[Pattern]) -> _GateIndex:
        opens: dict[bytes, list[int]] = {}
        fragments: dict[tuple[str, bool], dict[str, dict[str, list[int]]]] = {}
        for number, pattern in enumerate(patterns):
            if not pattern.gates:
                continue
            words, pieces = pattern.gates[0]
            for word in words:
                opens.setdefault(word, []).append(number)
            for piece in pieces:
                by_char = fragments.setdefault((pattern.keyword_view, pattern.case_sensitive), {})
                by_char.setdefault(piece[0], {}).setdefault(piece, []).append(number)
        return cls(
            frozenset(opens),
            {word: tuple(numbers) for word, numbers in opens.items()},
            tuple(
                (view, tuple((char, tuple((f, tuple(n)) for f, n in found.items())) for char, found in by_char.items()))
                for view, by_char in fragments.items()
            ),
            tuple(n for n, pattern in enumerate(patterns) if not pattern.keywords),
        )


@dataclass(frozen=True)
class PatternSet:
    """A compiled, versioned set of patterns.

    `version` is the base file's version: it is what a flagged file records in
    `threat.pattern_set`. `fingerprint` changes whenever any pattern (base or the vault's own)
    or the normalisation changes; caches are keyed on it.
    """

    version: int
    patterns: tuple[Pattern, ...]
    fingerprint: str
    extra_count: int = 0

    @property
    def label(self) -> str:
        """'3' for the shipped set, '3+ab12cd34' when the vault adds patterns."""
        if not self.extra_count:
            return str(self.version)
        return f"{self.version}+{self.fingerprint.rsplit(':', 1)[-1][:8]}"

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(pattern.id for pattern in self.patterns)

    @cached_property
    def _index(self) -> _GateIndex:
        return _GateIndex.build(self.patterns)

    def candidates(self, text: Normalised) -> list[int]:
        """Numbers of the patterns worth running on this text, in set order.

        A pattern runs when each of its keyword groups has a word or fragment in the text. The
        first groups are looked up for all patterns at once (one set intersection for the
        words, one look for each fragment's first character), the other groups only for the
        patterns the first let through.
        """
        index = self._index
        words = text.words
        opened = set(index.always)
        for word in index.first_words.intersection(words):
            opened.update(index.opens[word])
        for (view, as_written), by_char in index.fragments:
            subject = text.view(view) if as_written else text.lowered(view)
            for char, fragments in by_char:
                if char in subject:
                    for fragment, numbers in fragments:
                        if fragment in subject:
                            opened.update(numbers)
        chosen: list[int] = []
        for number in sorted(opened):
            pattern = self.patterns[number]
            if pattern.view == "raw" and not text.hidden:
                continue
            if len(pattern.gates) > 1 and not pattern.admits(text, 1):
                continue
            chosen.append(number)
        return chosen

    @classmethod
    def load(
        cls,
        extra: Sequence[Mapping[str, Any]] | None = None,
        extra_file: Path | None = None,
        *,
        base: Path = PATTERNS_FILE,
    ) -> PatternSet:
        """The shipped set plus a vault's own patterns.

        `extra` is sentient.yaml's `threats: patterns:` list; `extra_file` a YAML file with a
        list of patterns (or `patterns:` holding one). Raises ConfigError naming the pattern
        and the field that is wrong.
        """
        data = _read_yaml(base)
        if not isinstance(data, dict) or not isinstance(data.get("patterns"), list):
            raise ConfigError(f"{base}: expected 'version:' and a 'patterns:' list. Restore the file from the package")
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ConfigError(f"{base}: 'version' must be a whole number of 1 or more, not {version!r}")
        raw: list[tuple[str, Any]] = [(f"{base.name} patterns[{n}]", item) for n, item in enumerate(data["patterns"])]
        base_count = len(raw)
        if extra:
            raw += [(f"sentient.yaml threats.patterns[{n}]", item) for n, item in enumerate(extra)]
        if extra_file is not None:
            loaded = _read_yaml(extra_file)
            items = loaded.get("patterns") if isinstance(loaded, dict) else loaded
            if not isinstance(items, list):
                raise ConfigError(
                    f"{extra_file}: expected a list of patterns (or 'patterns:' holding one). "
                    "See docs/security.md for the format"
                )
            raw += [(f"{extra_file} patterns[{n}]", item) for n, item in enumerate(items)]
        patterns: list[Pattern] = []
        seen: dict[str, str] = {}
        for where, item in raw:
            pattern = _compile(where, item)
            if pattern.id in seen:
                raise ConfigError(
                    f"{where}: the id '{pattern.id}' is already used by {seen[pattern.id]}; choose another id"
                )
            seen[pattern.id] = where
            patterns.append(pattern)
        canonical = json.dumps(
            {
                "normaliser": NORMALISER_VERSION,
                "version": version,
                "patterns": [
                    [p.id, p.class_, p.view, p.case_sensitive, [r.pattern for r in p.regexes], p.keywords, p.not_after]
                    for p in patterns
                ],
            },
            sort_keys=True,
        )
        digest = hashlib.sha256(canonical.encode()).hexdigest()[:16]
        return cls(version, tuple(patterns), f"{version}:{digest}", len(patterns) - base_count)


_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader when libyaml is there


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror}). Check the path under 'threats: file:'") from None
    try:
        return yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{line}. Fix the file") from None


def _has_capitals(source: str) -> bool:
    """True when a regex has upper-case letters outside escapes (\\S, \\U0001F3F4, ...)."""
    skip = {"x": 2, "u": 4, "U": 8}
    index = 0
    while index < len(source):
        char = source[index]
        if char == "\\" and index + 1 < len(source):
            follower = source[index + 1]
            if follower == "N" and source[index + 2 : index + 3] == "{":
                index = source.find("}", index) + 1 or len(source)
            else:
                index += 2 + skip.get(follower, 0)
            continue
        if char.isupper():
            return True
        index += 1
    return False


_LEADING_WORDS = re.compile(r"\(\?:((?:[a-z0-9' -]+\|)+[a-z0-9' -]+)\)")


def _structure(source: str) -> Iterator[tuple[int, str, int]]:
    """(index, character, group depth) for each character of a regex outside escapes and
    character classes; '(' is reported at its new depth, ')' at the depth it closes."""
    depth, index, in_class = 0, 0, False
    while index < len(source):
        char = source[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if source[index + 1 : index + 2] == "]":
                index += 1
        else:
            if char == "(":
                depth += 1
            yield index, char, depth
            if char == ")":
                depth -= 1
        index += 1


def _top_level_alternation(source: str) -> bool:
    return any(char == "|" and depth == 0 for _, char, depth in _structure(source))


def _group_end(source: str) -> int:
    """Index of the ')' closing the group `source` starts with, or -1."""
    return next((index for index, char, depth in _structure(source) if char == ")" and depth == 1), -1)


def _split_alternatives(source: str) -> list[str]:
    cuts = [index for index, char, depth in _structure(source) if char == "|" and depth == 0]
    return [source[begin + 1 : end] for begin, end in zip([-1, *cuts], [*cuts, len(source)], strict=True)]


def _starts_with_word_char(source: str) -> bool:
    """True when every match of the expression starts with a word character."""
    if source[:1].isalnum() or source[:1] == "_":
        return True
    if not source.startswith("(?:"):
        return False
    end = _group_end(source)
    if end < 0 or source[end + 1 : end + 2] in ("?", "*", "{"):
        return False
    return all(_starts_with_word_char(alternative) for alternative in _split_alternatives(source[3:end]))


_APART = (" ", "\\b", "\\s", "\\W", "\\.", "\\(", "\\)", "\\[", "\\?", "\\*",
          "'", ",", ":", ";", "!", "-", "/", "@", "`", '"', "=")  # fmt: skip
_QUANTIFIER = re.compile(r"(?:[?*]|\{0,?\d*\})\??")


def _begins_apart(rest: str, depth: int = 0) -> bool:
    """True when every match of `rest` starts with a character that cannot continue a word, so
    a literal word just before it is a whole word. Conservative: False when unsure."""
    if depth > 8 or not rest:
        return False
    if rest.startswith(_APART):
        return True
    if rest.startswith("[") and not rest.startswith("[^"):
        members = rest[1 : rest.find("]", 2)]
        return bool(members) and "\\" not in members and not any(_is_word_char(char) for char in members)
    if not rest.startswith("(") or rest.startswith(("(?=", "(?!", "(?<")):
        return False
    end = _group_end(rest)
    if end < 0:
        return False
    inner = rest[3:end] if rest.startswith("(?:") else rest[1:end]
    after = rest[end + 1 :]
    optional = _QUANTIFIER.match(after)
    if optional is not None:
        after = after[optional.end() :]
    elif after[:1] == "+":
        after = after[1:].removeprefix("?")
    if any(not _begins_apart(alternative + after, depth + 1) for alternative in _split_alternatives(inner)):
        return False
    return optional is None or _begins_apart(after, depth + 1)


def _lead_word(literal: str, rest: str) -> bytes | None:
    """The longest word certain to be whole in a match of `literal` + `rest` (one that starts
    a word)."""
    words = _WORD_KEYWORD.findall(literal)
    if not words or not _WORD_KEYWORD.match(literal):
        return None
    if literal.endswith(words[-1]) and not _begins_apart(rest):
        words = words[:-1]
    return max(words, key=len).encode() if words else None


def _fast_forms(source: str, case_sensitive: bool) -> tuple[str, bool, list[tuple[bytes | None, str]]]:
    """A faster way to run one expression: (expression, at_word_start, [(lead, needle), ...]).

    A leading \\b is dropped: the scanner checks that a match starts a word instead, which
    keeps Python's engine on its fast path. When every match starts with literal text, each
    possible start (one per word of a leading group such as (?:ignore|disregard|forget)) is a
    needle with a lead word: the scanner looks the lead word up in the text's words and tries
    the expression only where its needle occurs. An empty list: search the whole text.
    """
    if _top_level_alternation(source):
        return source, False, []
    at_word_start = source.startswith("\\b") and _starts_with_word_char(source[2:])
    body = source[2:] if at_word_start else source
    if not at_word_start or case_sensitive:
        return body, at_word_start, []
    group = _LEADING_WORDS.match(body)
    if group is not None and body[group.end() : group.end() + 1] not in ("*", "+", "?", "{"):
        rest = body[group.end() :]
        needles = [(_lead_word(word, rest), word) for word in group.group(1).split("|")]
    else:
        literal = re.match(r"[a-z0-9_' -]+", body)
        text = literal.group() if literal is not None else ""
        if text and body[len(text) : len(text) + 1] in ("?", "*", "{"):
            text = text[:-1]
        needles = [(_lead_word(text, body[len(text) :]) if text else None, text)]
    if any(lead is None for lead, _ in needles):
        return body, at_word_start, []
    return body, at_word_start, needles


def _words(name: str, field: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(w, str) and w for w in value):
        raise ConfigError(f"{name}: '{field}' must be a list of words, not {value!r}")
    return tuple(value)


def _compile(where: str, item: Any) -> Pattern:
    """One pattern from its YAML mapping, or a ConfigError saying which field to fix."""
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: a pattern must be a mapping with id, class, description and regex")
    pattern_id = item.get("id")
    if not isinstance(pattern_id, str) or not _ID.fullmatch(pattern_id):
        raise ConfigError(
            f"{where}: 'id' must be kebab-case text such as 'override-my-phrase', not {pattern_id!r}. Add or fix the id"
        )
    name = f"{where} (id '{pattern_id}')"
    unknown = sorted(set(item) - _PATTERN_KEYS)
    if unknown:
        raise ConfigError(f"{name}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_PATTERN_KEYS))}")
    class_ = item.get("class")
    if class_ not in CLASSES:
        raise ConfigError(f"{name}: 'class' must be one of {', '.join(CLASSES)}, not {class_!r}")
    description = item.get("description")
    if not isinstance(description, str) or not description.strip():
        raise ConfigError(f"{name}: 'description' is missing; add one line saying what the pattern catches")
    view = item.get("view", "flat")
    if view not in VIEWS:
        raise ConfigError(f"{name}: 'view' must be one of {', '.join(VIEWS)}, not {view!r}")
    case_sensitive = item.get("case_sensitive", False)
    if not isinstance(case_sensitive, bool):
        raise ConfigError(f"{name}: 'case_sensitive' must be true or false, not {case_sensitive!r}")
    keywords: tuple[tuple[str, ...], ...] = ()
    raw_keywords = item.get("keywords")
    if raw_keywords is not None:
        if isinstance(raw_keywords, list) and raw_keywords and all(isinstance(g, list) for g in raw_keywords):
            keywords = tuple(_words(name, "keywords", group) for group in raw_keywords)
        else:
            keywords = (_words(name, "keywords", raw_keywords),)
        if not case_sensitive and any(word != word.lower() for group in keywords for word in group):
            raise ConfigError(
                f"{name}: 'keywords' must be lower case (the text is lower-cased before they are "
                "looked up), or set 'case_sensitive: true'"
            )
    not_after = _words(name, "not_after", item["not_after"]) if "not_after" in item else ()
    sources = item.get("regex")
    if isinstance(sources, str):
        sources = [sources]
    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) and s for s in sources):
        raise ConfigError(f"{name}: 'regex' must be a regular expression or a list of them")
    regexes: list[re.Pattern[str]] = []
    for number, source in enumerate(sources):
        which = "'regex'" if len(sources) == 1 else f"'regex' item {number}"
        if not case_sensitive and "(?-i" in source:
            raise ConfigError(
                f"{name}: {which} turns case-sensitivity on for a part; set 'case_sensitive: true' "
                "on the pattern and mark the case-insensitive parts with (?i:...)"
            )
        # Case-insensitive patterns match the lower-cased text; an expression written in lower
        # case is compiled as it is (much faster), one with capitals gets IGNORECASE.
        flags = re.MULTILINE if view == "lines" else 0
        if not case_sensitive and _has_capitals(source):
            flags |= re.IGNORECASE
        try:
            regex = re.compile(source, flags)
        except re.error as exc:
            raise ConfigError(f"{name}: {which} does not compile ({exc}): {source!r}. Fix the expression") from None
        if regex.search("") is not None:
            raise ConfigError(
                f"{name}: {which} {source!r} matches empty text, so it would flag everything. Fix the expression"
            )
        regexes.append(regex)
    searchers: list[Searcher] = []
    for regex in regexes:
        body, at_word_start, needles = _fast_forms(regex.pattern, case_sensitive)
        fast = regex if body == regex.pattern else re.compile(body, regex.flags)
        if view == "raw" or not needles:
            searchers.append(Searcher(fast, at_word_start))
        else:
            searchers += [Searcher(fast, at_word_start, lead, needle) for lead, needle in needles]
    return Pattern(
        pattern_id,
        class_,
        description.strip(),
        tuple(regexes),
        view,
        keywords,
        case_sensitive,
        not_after,
        where,
        tuple(searchers),
    )


# --- Scanning ----------------------------------------------------------------------------


def _visible(char: str) -> str:
    return f"<U+{ord(char):04X}>" if unicodedata.category(char) in ("Cf", "Cc") or ord(char) in _UNHIDE else char


def _excerpt(text: str) -> str:
    """The matched text on one line, invisible characters spelled out, cut to EXCERPT_CHARS."""
    text = " ".join(text.split())
    if not text.isascii():
        text = "".join(_visible(char) for char in text)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


def _scan_piece(text: str, patterns: PatternSet) -> list[tuple[int, Finding]]:
    views = Normalised(text)
    found: list[tuple[int, Finding]] = []
    for number in patterns.candidates(views):
        pattern = patterns.patterns[number]
        shown = views.view(pattern.view)
        subject = shown if pattern.case_sensitive else views.lowered(pattern.view)
        match = pattern.first_match(subject, views.words)
        if match is not None:
            # Excerpts come from the view as written when lower-casing kept the length.
            source = shown if len(shown) == len(subject) else subject
            excerpt = _excerpt(source[match.start() : match.end()])
            found.append((number, Finding(pattern.id, pattern.class_, pattern.description, excerpt)))
    return found


def _pieces(text: str) -> Iterator[str]:
    """Overlapping pieces of a long text; each starts at a line start where it can."""
    start = 0
    while start < len(text):
        begin = start
        if start:
            floor = max(0, start - 2 * PIECE_OVERLAP)
            newline = text.rfind("\n", floor, start - PIECE_OVERLAP)
            begin = newline + 1 if newline != -1 else start - PIECE_OVERLAP
        yield text[begin : start + PIECE_CHARS]
        start += PIECE_CHARS


def scan(text: str, patterns: PatternSet) -> list[Finding]:
    """Every pattern of the set that matches the text (one finding each, in set order)."""
    if len(text) <= PIECE_CHARS + PIECE_OVERLAP:
        return [finding for _, finding in _scan_piece(text, patterns)]
    first: dict[int, Finding] = {}
    for piece in _pieces(text):
        for number, finding in _scan_piece(piece, patterns):
            first.setdefault(number, finding)
    return [first[number] for number in sorted(first)]


# --- Judgments ---------------------------------------------------------------------------


def judged_text(document: Document) -> str:
    """What the model would read of a document, and so what is judged: title and body."""
    return f"{document.title}\n{document.body}"


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


def judge_text(text: str, patterns: PatternSet, revision: str | None = None) -> Judgment:
    """Judge a text now, without a cache."""
    findings = tuple(scan(text, patterns))
    return Judgment(
        revision=revision if revision is not None else text_revision(text),
        flagged=bool(findings),
        patterns=tuple(finding.pattern_id for finding in findings),
        pattern_set=patterns.version,
        fingerprint=patterns.fingerprint,
        findings=findings,
    )


def is_withheld(document: Document, judgment: Judgment) -> bool:
    """True when the document must be kept out of what the model is told."""
    return judgment.withheld(allowed_revision(document))


class ThreatJudge:
    """Judges documents and texts, caching by (revision, pattern-set fingerprint).

    Set `patterns` to a new PatternSet (say, after sentient.yaml changed) and every text is
    judged again on its next read; old entries age out of the bounded cache. Safe to share
    between threads. Callable as the vault's and the index's `Judge`.
    """

    def __init__(self, patterns: PatternSet, *, max_entries: int = CACHE_ENTRIES) -> None:
        self.patterns = patterns
        self.max_entries = max_entries
        self._cache: OrderedDict[tuple[str, str], Judgment] = OrderedDict()
        self._lock = threading.Lock()

    def judge(self, subject: Document | str, revision: str | None = None) -> Judgment:
        """The judgment of a document (its title + body) or of a text at `revision`."""
        if isinstance(subject, Document):
            key_revision = revision or subject.revision
        else:
            key_revision = revision or text_revision(subject)
        patterns = self.patterns
        key = (key_revision, patterns.fingerprint)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        text = judged_text(subject) if isinstance(subject, Document) else subject
        judgment = judge_text(text, patterns, key_revision)
        with self._lock:
            self._cache[key] = judgment
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return judgment

    def is_withheld(self, document: Document) -> bool:
        return is_withheld(document, self.judge(document))

    def threat(self, document: Document) -> dict[str, Any] | None:
        """The `threat:` mapping for the document as it is now (None: nothing matched)."""
        return self.judge(document).threat(allowed_revision(document))

    def __call__(self, document: Document) -> Mapping[str, Any] | None:
        return self.threat(document)

    def __len__(self) -> int:
        return len(self._cache)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
