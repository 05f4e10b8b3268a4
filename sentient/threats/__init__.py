"""Threat patterns: does a text read as instructions to the model rather than as something known?

Memory is where outside text can settle for good, so every entry is judged when it is written
and again when it is read. This package is the judging, and nothing else:

- normalisation.py the steps that make a text's views (invisible characters, look-alike
                  letters, HTML entities, markup, odd spacing undone), each over a whole string
- views.py        `Normalised`: the views of one text, lower-cased and encoded on demand, and
                  the word sets the keyword pre-checks use
- automata.py     Hyperscan databases: compiled once, kept on disk, scanned from any thread
- expressions.py  each pattern's regexes read once for a faster way to run them exactly
- patterns.py     `PatternSet.load()`: the versioned set in sentient/data/patterns.yaml plus a
                  vault's own patterns, checked and compiled; the keyword pre-check
- supersets.py    each regex rewritten for Hyperscan to match at least where it matches
- prefilter.py    Hyperscan's databases: where matches of which expressions may start
- scan.py         `scan(text, patterns)`: the findings. Pure: no I/O, no state
- learned.py      the second stage: a classifier shipped as plain data that judges what the
                  patterns pass (class `learned`)
- batch.py        `scan_many(texts, patterns)`: the same for many texts at once, joined
- parallel.py     helper processes that scan parts of a big batch beside this one
- judge.py        `ThreatJudge`: judgments cached by (content revision, pattern-set
                  fingerprint), so judging an unchanged entry on every read is a lookup
- guard.py        the optional guard model's verdict on what the agent stores (class `guard`)

Patterns catch the blunt cases only; docs/security.md says what they miss.
"""

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sentient.threats.batch import scan_many
    from sentient.threats.judge import (
        CACHE_ENTRIES,
        Judgment,
        ThreatJudge,
        allowed_revision,
        is_withheld,
        judge_text,
        judged_revision,
        judged_text,
        text_revision,
    )
    from sentient.threats.patterns import CLASSES, PATTERNS_FILE, Pattern, PatternSet
    from sentient.threats.scan import EXCERPT_CHARS, Finding, first_match, scan
    from sentient.threats.views import NORMALISER_VERSION, VIEWS, Normalised, normalise

# What each name is imported from, on first use (PEP 562): a command that only looks a verdict up
# or names the set (`sentient search`, a no-change `sentient index`) imports no scanner, pattern
# machinery, Hyperscan or helper processes.
_FROM = {
    **dict.fromkeys(("EXCERPT_CHARS", "Finding", "first_match", "scan"), "scan"),
    "scan_many": "batch",
    **dict.fromkeys(("CACHE_ENTRIES", "Judgment", "ThreatJudge", "allowed_revision", "is_withheld", "judge_text",
                     "judged_revision", "judged_text", "text_revision"), "judge"),
    **dict.fromkeys(("CLASSES", "PATTERNS_FILE", "Pattern", "PatternSet"), "patterns"),
    **dict.fromkeys(("NORMALISER_VERSION", "VIEWS", "Normalised", "normalise"), "views"),
}


def __getattr__(name: str) -> Any:
    module = _FROM.get(name)
    if module is None:
        raise AttributeError(f"module 'sentient.threats' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"sentient.threats.{module}"), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """This package, whose `scan` stays the function: importing the module scan.py sets the
    package's attribute of that name to the module, which is not what `from sentient.threats
    import scan` gives (the function is looked up on first use, above)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "scan" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "CACHE_ENTRIES",
    "CLASSES",
    "EXCERPT_CHARS",
    "NORMALISER_VERSION",
    "PATTERNS_FILE",
    "VIEWS",
    "Finding",
    "Judgment",
    "Normalised",
    "Pattern",
    "PatternSet",
    "ThreatJudge",
    "allowed_revision",
    "first_match",
    "is_withheld",
    "judge_text",
    "judged_revision",
    "judged_text",
    "normalise",
    "scan",
    "scan_many",
    "text_revision",
]
