"""Supersets: each pattern regex rewritten for Hyperscan so that it matches wherever Python's
engine would match the regex, and perhaps in a few more places.

Hyperscan only says which expressions may match a text; the scanner then runs exactly those
with Python's engine for the match itself. So a rewrite may match more than the regex (a
little wasted work) but never less (a missed attack). Python's engine and Hyperscan disagree on
details, and the rewrite takes the side that matches more:

- \\w, \\s, \\d and their negations are exact on ASCII; Python's Unicode tables are not
  Hyperscan's, so every non-ASCII character is taken to be in \\w, \\s and \\d, and in \\W, \\S
  and \\D too (inside [^...] only the ASCII part is left out);
- case-insensitive parts spell out their letters' cases, including the odd ones Python's engine
  folds (İ and ı for i, K for k, ſ for s), and any non-ASCII character for a non-ASCII letter;
- word boundaries, lookarounds and atomic or possessive behaviour are dropped (each only ever
  rules a match out), and so are ^ and $ outside multi-line expressions, which the scanner's
  batches would otherwise have to keep at the start and end of a document;
- a possessive repeat is read as greedy, a lazy one as greedy: what matches is the same;
- what follows a long window after a selective part is dropped (see _before_window): a match
  of the whole starts where a match of the part before it does;
- no rewrite matches NUL (a text holding one is scanned without Hyperscan), so that in a batch
  of texts joined by NUL no match runs from one text into the next.

The expressions are read from the parse tree of Python's own engine, so Python-only syntax
((?P<name>...), \\Z, inline flags, verbose mode) needs no handling of its own. Anything not
understood (a backreference, a conditional group) makes the rewrite None: that expression is
then always run by Python.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

_parser: Any = importlib.import_module("re._parser")  # the engine's own parser; no public one

# Characters other than A-Z and a-z whose case Python's engine folds to an ASCII letter.
ODD_CASES = {"i": "\u0130\u0131", "k": "\u212a", "s": "\u017f"}

MAX_BOUND = 4
WINDOW = 60  # see _before_window
SELECTIVE = 8
# A longer bounded repeat of one character is kept as a repeat of bytes up to this many (see
# _byte_repeat); other long repeats become unbounded.
MAX_BYTES_BOUND = 4000
LAST = 0x10FFFF
NON_ASCII = (0x80, LAST)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_DIGIT = ((0x30, 0x39),)
_SPACE = ((0x09, 0x0D), (0x1C, 0x20))  # what Python's engine counts as ASCII whitespace

_CATEGORIES = {"DIGIT": _DIGIT, "WORD": _WORD, "SPACE": _SPACE}

Intervals = list[tuple[int, int]]


class Unsupported(Exception):
    """The expression uses something the rewrite does not handle."""


def superset(regex: re.Pattern[str], reverse: bool = False) -> str | None:
    """A Hyperscan expression over UTF-8 bytes (multi-line mode) matching at least everywhere `regex`
    matches, or None when there is none to give. With `reverse`, it matches the reversed bytes
    (where a match ends, the regex's match starts)."""
    try:
        parsed = _parser.parse(regex.pattern, regex.flags)
        return _items(_before_window(parsed), parsed.state.flags, reverse)
    except (Unsupported, re.error, RecursionError):
        return None


def _before_window(parsed: Any) -> list[tuple[Any, Any]]:
    """The expression's items, without what follows a window when what comes before it is
    selective: a repeat of WINDOW or more characters at the top level, after items that match at
    least SELECTIVE characters. Every match of the whole starts with a match of the part before
    (so the rewrite is still a superset), and the window and the short words usually after it
    ("<div style=...>" then up to 600 characters then "ignore", "send" or "ai"; "send ... the
    vault" then up to 80 characters then "to" and an address) are where Hyperscan spends its time.
    On 5 MB of notes, cutting after windows of 60 or more behind at least 8 characters took the
    flat view's database from 63 to 27 ms and the lines view's from 31 to 14, for 15% and 46%
    more reports (each one regex tried at one place)."""
    items = list(parsed)
    for at in range(len(items) - 1, 0, -1):
        op, value = items[at]
        if str(op) in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and value[1] >= WINDOW:
            if _parser.SubPattern(parsed.state, items[:at]).getwidth()[0] >= SELECTIVE:
                return items[:at]
            break
    return items


def names_non_ascii(regex: re.Pattern[str]) -> bool:
    """Whether the expression names a character outside ASCII (as a literal, in a class or a
    range); True when it cannot be parsed."""
    try:
        return _names_non_ascii(list(_parser.parse(regex.pattern, regex.flags)))
    except (re.error, RecursionError):
        return True


def _names_non_ascii(items: list[tuple[Any, Any]]) -> bool:
    for op, value in items:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL"):
            if value > 0x7F:
                return True
        elif name == "IN":
            for kind, member in value:
                if (str(kind) == "LITERAL" and member > 0x7F) or (str(kind) == "RANGE" and member[1] > 0x7F):
                    return True
        elif name == "BRANCH":
            if any(_names_non_ascii(list(alternative)) for alternative in value[1]):
                return True
        elif name == "SUBPATTERN":
            if _names_non_ascii(list(value[3])):
                return True
        elif name == "ATOMIC_GROUP":
            if _names_non_ascii(list(value)):
                return True
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            if _names_non_ascii(list(value[2])):
                return True
        elif name in ("ASSERT", "ASSERT_NOT"):
            if _names_non_ascii(list(value[1])):
                return True
        elif name not in ("ANY", "AT", "CATEGORY", "GROUPREF", "GROUPREF_EXISTS"):
            return True
    return False


def _items(items: list[tuple[Any, Any]], flags: int, reverse: bool) -> str:
    parts = [_item(str(op), value, flags, reverse) for op, value in items]
    return "".join(reversed(parts) if reverse else parts)


def _item(op: str, value: Any, flags: int, reverse: bool) -> str:
    spans = _spans(op, value, flags)
    if spans is not None:
        return _class(spans, reverse)
    if op == "BRANCH":
        return "(?:" + "|".join(_items(list(alternative), flags, reverse) for alternative in value[1]) + ")"
    if op == "SUBPATTERN":
        _, add, remove, inner = value
        return "(?:" + _items(list(inner), (flags | add) & ~remove, reverse) + ")"
    if op == "ATOMIC_GROUP":
        return "(?:" + _items(list(value), flags, reverse) + ")"
    if op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        low, high, inner = value
        if MAX_BOUND < high <= MAX_BYTES_BOUND // 4 and (spans := _one_character(list(inner), flags)) is not None:
            return _byte_repeat(spans, min(low, MAX_BOUND), high)
        bound = "" if high == _parser.MAXREPEAT or high > MAX_BOUND else str(high)
        return "(?:" + _items(list(inner), flags, reverse) + ")" + f"{{{min(low, MAX_BOUND)},{bound}}}"
    if op == "AT":
        return _anchor(str(value), flags, reverse)
    if op in ("ASSERT", "ASSERT_NOT"):
        return ""
    raise Unsupported(op)


def _spans(op: str, value: Any, flags: int) -> Intervals | None:
    """The characters one item matches (a literal, `.` or a class), or None for any other item."""
    caseless = bool(flags & re.IGNORECASE)
    if op == "LITERAL":
        return _cased(value) if caseless else [(value, value)]
    if op == "NOT_LITERAL":
        return _complement([(value, value)])
    if op == "ANY":
        return [(0, LAST)] if flags & re.DOTALL else [(0, 9), (11, LAST)]
    if op == "IN":
        return _set_spans(value, caseless)
    return None


def _one_character(items: list[tuple[Any, Any]], flags: int) -> Intervals | None:
    """The characters of a repeated item that is one character (a literal, `.` or a positive
    class, maybe with lookarounds, which the rewrite drops), or None for anything else (a
    negated class too: its repeat takes the general way)."""
    chars = [(str(op), value) for op, value in items if str(op) not in ("ASSERT", "ASSERT_NOT")]
    if len(chars) != 1:
        return None
    op, value = chars[0]
    if op == "IN" and value and str(value[0][0]) == "NEGATE":
        return None
    return _spans(op, value, flags)


def _byte_repeat(spans: Intervals, low: int, high: int) -> str:
    """`high` characters at most of `spans` as a bounded repeat of bytes: a character outside
    ASCII is two to four bytes of UTF-8, so it may be any byte from 0x80 up, up to four times
    as many. Hyperscan compiles a repeat of one byte class quickly, unlike a repeat of the
    alternatives _class gives."""
    merged = [(max(low_, 1), high_) for low_, high_ in _merge(spans) if high_ >= 1]
    narrow = [(start, min(end, 0x7F)) for start, end in merged if start <= 0x7F]
    wide = any(end > 0x7F for _, end in merged)
    if wide:
        narrow.append((0x80, 0xFF))
    if not narrow:
        raise Unsupported("no character but NUL")
    return _bytes_class(narrow) + f"{{{low},{high * 4 if wide else high}}}"


def _anchor(at: str, flags: int, reverse: bool) -> str:
    """^ and $ of a multi-line expression are kept (a batch puts line breaks around each
    document); every other anchor only rules matches out, so it goes."""
    if flags & re.MULTILINE and at in ("AT_BEGINNING", "AT_END"):
        return "$" if (at == "AT_BEGINNING") == reverse else "^"
    return ""


def _set_spans(members: list[tuple[Any, Any]], caseless: bool) -> Intervals:
    """The characters of a class, widened when positive, its excluded ones narrowed when negated."""
    negated = bool(members) and str(members[0][0]) == "NEGATE"
    found: Intervals = []
    for kind, value in members[1:] if negated else members:
        name = str(kind)
        if name == "LITERAL":
            found += _cased(value) if caseless and not negated else [(value, value)]
        elif name == "RANGE":
            found += _cased_range(*value) if caseless and not negated else [value]
        elif name == "CATEGORY":
            found += _category(str(value), widen=not negated)
        else:
            raise Unsupported(name)
    return _complement(found) if negated else found


def _cased_range(low: int, high: int) -> Intervals:
    """The characters Python's engine takes for a range when ignoring case: the range, the other
    cases of its ASCII letters (with ODD_CASES), and for a range beyond ASCII any character
    outside ASCII, and the ASCII letters its ODD_CASES fold to (İ and ı to i, K to k, ſ to s)."""
    found = [(low, high)] + [span for code in range(low, min(high, 0x7F) + 1) for span in _cased(code)]
    if high > 0x7F:
        found.append(NON_ASCII)
        for letter, odd in ODD_CASES.items():
            if any(low <= ord(char) <= high for char in odd):
                found += [(ord(letter), ord(letter)), (ord(letter.upper()), ord(letter.upper()))]
    return found


def _category(name: str, widen: bool) -> Intervals:
    """The ASCII part of \\d, \\w, \\s or a negation, plus every non-ASCII character when `widen`."""
    base = _CATEGORIES.get(name.removeprefix("CATEGORY_").removeprefix("NOT_"))
    if base is None:
        raise Unsupported(name)
    ascii_part = _complement(list(base), 0x7F) if "_NOT_" in name else list(base)
    return ascii_part + [NON_ASCII] if widen else ascii_part


def _complement(found: Intervals, last: int = LAST) -> Intervals:
    """The characters up to `last` not in `found`."""
    result: Intervals = []
    start = 0
    for low, high in _merge(found):
        if low > start:
            result.append((start, low - 1))
        start = high + 1
    if start <= last:
        result.append((start, last))
    return result


def _cased(code: int) -> Intervals:
    """The characters Python's engine takes for `code` when ignoring case."""
    char = chr(code)
    if not char.isascii():
        return [(0, LAST)]  # its folds may be anywhere: take any character
    lower = char.lower()
    if not lower.isalpha():
        return [(code, code)]
    return [(ord(c), ord(c)) for c in lower + lower.upper() + ODD_CASES.get(lower, "")]


def _merge(found: Intervals) -> Intervals:
    merged: Intervals = []
    for low, high in sorted(found):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _class(found: Intervals, reverse: bool) -> str:
    """The characters `found`, as bytes of UTF-8: ASCII ones as themselves, one other character
    as its own bytes, several as a run of bytes from 0x80 up (which holds any of them, and more).
    Counting a run as one character keeps a bounded repeat a superset."""
    merged = [(max(low, 1), high) for low, high in _merge(found) if high >= 1]  # never NUL: see NUL
    if not merged:
        raise Unsupported("no character but NUL")
    narrow = [(low, min(high, 0x7F)) for low, high in merged if low <= 0x7F]
    wide = [(max(low, 0x80), high) for low, high in merged if high > 0x7F]
    if not wide:
        return _bytes_class(narrow)
    if len(wide) == 1 and wide[0][0] == wide[0][1]:
        encoded = chr(wide[0][0]).encode("utf-8", "surrogatepass")
        one = "".join(f"\\x{byte:02x}" for byte in (encoded[::-1] if reverse else encoded))
    else:
        one = "[\\x80-\\xff]+"
    return "(?:" + _bytes_class(narrow) + "|" + one + ")" if narrow else "(?:" + one + ")"


def _bytes_class(spans: Intervals) -> str:
    if len(spans) == 1 and spans[0][0] == spans[0][1]:
        return _byte(spans[0][0])
    return "[" + "".join(_byte(low) if low == high else _byte(low) + "-" + _byte(high) for low, high in spans) + "]"


def _byte(code: int) -> str:
    char = chr(code)
    return char if char.isascii() and char.isalnum() else f"\\x{code:02x}"
