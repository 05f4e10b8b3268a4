"""Expressions as the scanner runs them: each pattern regex read once, at load, for a faster way
to find its first match that finds exactly what a plain search would.

Python's engine skips quickly to where a match may start only when an expression starts with a
literal character or a character class; it is slow on a leading \\b, a leading ^ and a leading
alternation of words. So, per expression:

- a leading \\b becomes a check the scanner makes on the character before a match;
- when every match starts with literal text, each possible start (one per word of a leading
  group such as (?:ignore|disregard|forget)) is a `Needle`: the scanner tries the expression
  only where a needle starts a word, and only in the blocks of text that hold its lead word;
- a ^ on the lines view becomes "\\n" + the rest (plus a try at the very start);
- on the raw view, an expression whose every match starts with an invisible character is tried
  only at the invisible characters normalisation found.

The reading is conservative: when unsure it leaves the expression as written.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sentient.threats.normalisation import UNHIDABLE

_parser: Any = importlib.import_module("re._parser")  # the engine's own parser; no public one

WORD_KEYWORD = re.compile(r"[a-z0-9_]+")


def is_word_keyword(keyword: str) -> bool:
    """A keyword looked up as a whole word: a-z, 0-9 and '_', not starting or ending with '_'
    (a word never does: 'memory_' is a fragment of memory_recall, memory_forget ...)."""
    return WORD_KEYWORD.fullmatch(keyword) is not None and not keyword.startswith("_") and not keyword.endswith("_")
_LEADING_WORDS = re.compile(r"\(\?:((?:[a-z0-9' -]+\|)+[a-z0-9' -]+)\)")
_LEADING_WORDS_ANY_CASE = re.compile(r"\(\?:((?:[a-zA-Z0-9' -]+\|)+[a-zA-Z0-9' -]+)\)")
_APART = (" ", "\\b", "\\s", "\\W", "\\.", "\\(", "\\)", "\\[", "\\?", "\\*",
          "'", ",", ":", ";", "!", "-", "/", "@", "`", '"', "=")  # fmt: skip
_QUANTIFIER = re.compile(r"(?:[?*]|\{0,?\d*\})\??")


@dataclass(frozen=True)
class Needle:
    """Literal text a match may start with; `lead` is a word of it certain to be whole in any
    match, `offset` characters in."""

    text: str
    lead: bytes
    offset: int


@dataclass(frozen=True)
class Searcher:
    """One expression as the scanner runs it.

    `regex` is the expression (without a leading \\b when `at_word_start`: a match must then
    start a word, which the scanner checks). Where to try it: at its `needles`, after each line
    break with `after_newline` (and at the start), at invisible characters (`at_hidden`), or,
    with none of those, everywhere.
    """

    regex: re.Pattern[str]
    at_word_start: bool = False
    needles: tuple[Needle, ...] = ()
    after_newline: re.Pattern[str] | None = None
    at_hidden: bool = False


def fast_searcher(regex: re.Pattern[str], view: str, case_sensitive: bool) -> Searcher:
    """The fastest exact way to run `regex` (compiled for `view`)."""
    body, at_word_start, needles = _fast_forms(regex.pattern, case_sensitive)
    fast = regex if body == regex.pattern else re.compile(body, regex.flags)
    if view == "raw":
        return Searcher(fast, at_word_start, at_hidden=_starts_hidden(regex))
    if needles:
        return Searcher(fast, at_word_start, tuple(needles))
    if view == "lines" and body.startswith("^") and not _top_level_alternation(body):
        return Searcher(fast, at_word_start, after_newline=re.compile("\n(?:" + body[1:] + ")", regex.flags))
    return Searcher(fast, at_word_start)


def has_capitals(source: str) -> bool:
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


def _fast_forms(source: str, case_sensitive: bool) -> tuple[str, bool, list[Needle]]:
    """(expression, at_word_start, needles): a leading \\b dropped, and the literal starts.

    A leading \\b is dropped when what follows starts with a word character: the scanner checks
    that a match starts a word instead. When every match starts with literal text, each
    possible start is a needle with a lead word (lower-cased: it is looked up among the words
    of the lower-cased view). An empty list: no needles.
    """
    if _top_level_alternation(source):
        return source, False, []
    at_word_start = source.startswith("\\b") and _starts_with_word_char(source[2:])
    body = source[2:] if at_word_start else source
    if not at_word_start:
        return body, at_word_start, []
    group = (_LEADING_WORDS_ANY_CASE if case_sensitive else _LEADING_WORDS).match(body)
    if group is not None and body[group.end() : group.end() + 1] not in ("*", "+", "?", "{"):
        rest = body[group.end() :]
        starts = [(word, rest) for word in group.group(1).split("|")]
    else:
        literal = re.match(r"[a-zA-Z0-9_' -]+" if case_sensitive else r"[a-z0-9_' -]+", body)
        text = literal.group() if literal is not None else ""
        if text and body[len(text) : len(text) + 1] in ("?", "*", "{"):
            text = text[:-1]
        starts = [(text, body[len(text) :])]
    needles: list[Needle] = []
    for text, rest in starts:
        lead = _lead_word(text.lower(), rest) if text else None
        if lead is None:
            return body, at_word_start, []
        needles.append(Needle(text, *lead))
    return body, at_word_start, needles


def _lead_word(literal: str, rest: str) -> tuple[bytes, int] | None:
    """The longest word certain to be whole in a match of `literal` + `rest` (one that starts
    a word), and where it is in `literal`."""
    words = list(WORD_KEYWORD.finditer(literal))
    if not words or words[0].start() != 0:
        return None
    if words[-1].end() == len(literal) and not _begins_apart(rest):
        words = words[:-1]
    if not words:
        return None
    longest = max(words, key=lambda word: len(word.group()))
    return longest.group().encode(), longest.start()


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


def _begins_apart(rest: str, depth: int = 0) -> bool:
    """True when every match of `rest` starts with a character that cannot continue a word, so
    a literal word just before it is a whole word. Conservative: False when unsure."""
    if depth > 8 or not rest:
        return False
    if rest.startswith(_APART):
        return True
    if rest.startswith("[") and not rest.startswith("[^"):
        members = rest[1 : rest.find("]", 2)]
        return bool(members) and "\\" not in members and not any(char.isalnum() or char == "_" for char in members)
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


def _starts_hidden(regex: re.Pattern[str]) -> bool:
    """True when every match of `regex` starts with an invisible character (see UNHIDABLE)."""
    if regex.flags & re.IGNORECASE:
        return False
    try:
        first = _first_characters(list(_parser.parse(regex.pattern, regex.flags)))
    except Exception:  # an engine detail changed: run the expression as written
        return False
    return first is not None and all(UNHIDABLE.fullmatch(chr(code)) is not None for code in first)


def _first_characters(items: list[Any]) -> set[int] | None:
    """The characters a match of the parsed items can start with; None when unsure."""
    for op, value in items:
        name = str(op)
        if name in ("AT", "ASSERT", "ASSERT_NOT"):  # take no characters
            continue
        if name == "LITERAL":
            return {value}
        if name == "IN":
            chars: set[int] = set()
            for kind, member in value:
                if str(kind) == "LITERAL":
                    chars.add(member)
                elif str(kind) == "RANGE" and member[1] - member[0] < 4096:
                    chars.update(range(member[0], member[1] + 1))
                else:
                    return None
            return chars
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            return _first_characters(list(value[2])) if value[0] > 0 else None
        if name in ("SUBPATTERN", "ATOMIC_GROUP"):
            return _first_characters(list(value[-1]))
        if name == "BRANCH":
            union: set[int] = set()
            for alternative in value[1]:
                first = _first_characters(list(alternative))
                if first is None:
                    return None
                union |= first
            return union
        return None
    return None
