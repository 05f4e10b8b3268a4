"""Samples: texts made at random from a regular expression, to check a pattern's keywords.

Keywords are a pre-check (gates.py): a pattern whose keywords are missing from a text is not
run on it. So each keyword group must be met by everything the pattern's expressions can
match, or the pattern misses what its expression would catch. Texts made from the expression
itself show when it is not: `unmet_keywords` gives one such text. The tests check the shipped
set this way; `PatternSet.load` checks a vault's own patterns.
"""

from __future__ import annotations

import importlib
import random
import re
from collections.abc import Iterator, Sequence
from typing import Any

_parser: Any = importlib.import_module("re._parser")  # the engine's own parser; no public one

# The characters a sample is made of where an expression allows many.
SAFE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;!?'\"-/()[]{}=@#%+\n\t_*`~<>&|$^"
_CLASSES = {"CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W", "CATEGORY_SPACE": r"\s",
            "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D"}  # fmt: skip


def samples(regex: re.Pattern[str], count: int, seed: int = 11) -> Iterator[str]:
    """`count` texts made from the expression with random choices (repeats taken at most two
    more times than their least). Lookarounds and anchors are not made: a sample may not match."""
    parsed = _parser.parse(regex.pattern, regex.flags)
    rng = random.Random(seed)
    for _ in range(count):
        yield _make(parsed, rng)


def in_context(text: str) -> tuple[str, ...]:
    """A sample, and the sample with word characters glued on: a keyword word must be a whole
    word of the text, which a match inside a longer word ("protocols") is not."""
    return text, text + "s", "x" + text, "_" + text + "_"


def _make(items: Any, rng: random.Random) -> str:
    out = []
    for op, value in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(value))
        elif name in ("NOT_LITERAL", "ANY"):
            out.append(rng.choice([c for c in SAFE if c != "\n" and (name == "ANY" or c != chr(value))]))
        elif name == "IN":
            out.append(rng.choice([c for c in SAFE if _in_class(value, c)] or ["x"]))
        elif name == "BRANCH":
            out.append(_make(rng.choice(value[1]), rng))
        elif name in ("SUBPATTERN", "ATOMIC_GROUP"):
            out.append(_make(value[-1], rng))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, item = value
            out += [_make(item, rng) for _ in range(rng.randint(low, min(high, low + 2)))]
    return "".join(out)


def _in_class(items: Sequence[tuple[Any, Any]], char: str) -> bool:
    """Whether `char` is in a character class of the parsed form."""
    found, negate = False, False
    for kind, value in items:
        name = str(kind)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            found |= char == chr(value)
        elif name == "RANGE":
            found |= value[0] <= ord(char) <= value[1]
        elif name == "CATEGORY":
            found |= re.fullmatch(_CLASSES[str(value)], char) is not None
    return found != negate
