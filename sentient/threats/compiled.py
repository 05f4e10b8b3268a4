"""The compiled pattern set, kept in the vault's `.sentient/` so that a command does not compile
it again: `load_compiled()` is `PatternSet.load()` for a process that starts often.

Loading the set parses and checks a few hundred regular expressions and reads each for its
fastest form (expressions.py): a few tenths of a second, which every `sentient search` would
otherwise wait for. So the loaded set is written to `.sentient/patterns.cache` as plain JSON:
each pattern's fields, and each regex as its source with the engine's compiled form of it (a list
of numbers), under a key made of everything it is made from: the pattern files' bytes and the
vault's own patterns, the code of this package, and Python's version (whose engine the numbers
are for). A later process whose key is the same reads it back in milliseconds, without parsing a
regex; any change of a pattern, of sentient.yaml's patterns or of the package makes another key,
and the set is loaded (and checked) again and the file replaced. The file's head, before the set,
names it (its version and fingerprint: `cached_name()`), so that a command that only needs to know
which set judges now (a no-change `sentient index`, a search whose hits the index judged with it)
reads three lines and loads no set at all.

Reading the file runs nothing: it is JSON, made into this package's dataclasses field by field,
and the regex engine checks every compiled form it is given (`_sre.compile` validates the code,
as for any regex), so a file put there by something else can at worst change what is judged, the
same as editing the index (docs/security.md). A file that does not read back as a whole set is
refused and the set loaded again. A cache that cannot be read or written is skipped. Nothing is
written where `.sentient/` does not exist.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sentient.threats.learned import DATA
from sentient.threats.learned import digest as learned_digest

if TYPE_CHECKING:
    from sentient.threats.expressions import Searcher
    from sentient.threats.patterns import Pattern, PatternSet

CACHE_FILE = "patterns.cache"
# patterns.PATTERNS_FILE, named here without importing what loads and scans a set: what only names
# the cached set (cached_name) imports nothing else of the package (tests/test_start_cost.py)
PATTERNS_FILE = DATA / "patterns.yaml"
FORMAT = b"sentient-patterns 4 json\n"  # then the key's hex digest, the set's name (JSON) and the set (JSON)
_PACKAGE = Path(__file__).resolve().parent
_sre: Any = __import__("_sre")
_parser: Any = __import__("re._parser", fromlist=["_parser"])
_compiler: Any = __import__("re._compiler", fromlist=["_compiler"])


def load_compiled(extra: Sequence[Mapping[str, Any]] | None = None, extra_file: Path | None = None,
                  state_dir: Path | None = None, *, base: Path = PATTERNS_FILE) -> PatternSet:
    """PatternSet.load(extra, extra_file), read from `state_dir`/patterns.cache when it holds this
    very set, else loaded and written there (when `state_dir` exists) for the next process."""
    from sentient.threats.patterns import PatternSet

    if state_dir is None:
        return PatternSet.load(extra, extra_file, base=base)
    path = state_dir / CACHE_FILE
    try:
        key = cache_key(extra, extra_file, base)
    except (OSError, TypeError, ValueError):  # a file that cannot be read: load() says why
        return PatternSet.load(extra, extra_file, base=base)
    found = _read(path, key)
    if found is not None:
        return found
    patterns = PatternSet.load(extra, extra_file, base=base)
    if state_dir.is_dir():
        _write(path, key, patterns)
    return patterns


def cached_name(extra: Sequence[Mapping[str, Any]] | None = None, extra_file: Path | None = None,
                state_dir: Path | None = None, *, base: Path = PATTERNS_FILE) -> tuple[int, str] | None:
    """(version, fingerprint) of the set load_compiled() would give, read from the head of
    `state_dir`/patterns.cache without loading the set; None when the file does not hold this very
    set (then only loading it tells)."""
    if state_dir is None:
        return None
    try:
        key = cache_key(extra, extra_file, base)
        with open(state_dir / CACHE_FILE, "rb") as handle:
            if handle.readline() != FORMAT or handle.readline() != key.encode() + b"\n":
                return None
            name = json.loads(handle.readline())
    except Exception:  # missing, unreadable, torn, a file the key is made of fails: loading says why
        return None
    version, fingerprint = (name.get("version"), name.get("fingerprint")) if isinstance(name, dict) else (None, None)
    if type(version) is not int or not isinstance(fingerprint, str):
        return None
    return version, fingerprint


def cache_key(extra: Sequence[Mapping[str, Any]] | None, extra_file: Path | None, base: Path = PATTERNS_FILE) -> str:
    """A digest of everything the loaded set is made from."""
    digest = hashlib.sha256(FORMAT)
    digest.update(f"{sys.version}|{_sre.MAGIC}|{sys.hexversion}".encode())
    for name in sorted(os.listdir(_PACKAGE)):
        if name.endswith(".py"):
            digest.update(name.encode() + b"\0" + (_PACKAGE / name).read_bytes() + b"\0")
    digest.update(base.read_bytes() + b"\0")
    digest.update(learned_digest().encode() + b"\0")  # the learned detector's files, in the fingerprint
    digest.update(json.dumps(extra, sort_keys=True, default=str).encode() + b"\0")
    if extra_file is not None:
        digest.update(str(extra_file).encode() + b"\0" + extra_file.read_bytes())
    return digest.hexdigest()


def _read(path: Path, key: str) -> PatternSet | None:
    try:
        with open(path, "rb") as handle:
            if handle.readline() != FORMAT or handle.readline() != key.encode() + b"\n":
                return None
            name = json.loads(handle.readline())
            patterns = set_from(json.loads(handle.read()))
    except Exception:  # missing, truncated, from another version, not a set: loaded again
        return None
    if name != _name(patterns):  # a head that does not name the set below it would misname verdicts
        return None
    return patterns


def _write(path: Path, key: str, patterns: PatternSet) -> None:
    try:
        body = json.dumps(set_data(patterns), separators=(",", ":")).encode()
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(handle, "wb") as out:
            out.write(FORMAT + key.encode() + b"\n" + json.dumps(_name(patterns)).encode() + b"\n" + body)
        os.replace(temp, path)  # whole or not at all, if two processes race
    except (OSError, ValueError, TypeError):
        return


def _name(patterns: PatternSet) -> dict[str, Any]:
    """What the file's head says of the set: what names its verdicts (cached_name)."""
    return {"version": patterns.version, "fingerprint": patterns.fingerprint}


# --- the set as plain data, and back -------------------------------------------------------------


def set_data(patterns: PatternSet) -> dict[str, Any]:
    """The set as JSON: its plain fields as they are (every one, so a field added to PatternSet
    comes along), its patterns field by field."""
    from sentient.threats.patterns import PatternSet

    found: dict[str, Any] = {field.name: getattr(patterns, field.name) for field in fields(PatternSet)
                             if field.name != "patterns"}
    found["patterns"] = [_pattern_data(p) for p in patterns.patterns]
    return found


def set_from(data: Mapping[str, Any]) -> PatternSet:
    """The set `set_data` wrote; a KeyError, TypeError or ValueError (from the regex engine's check
    of a compiled form) for anything else."""
    from sentient.threats.patterns import PatternSet

    plain = {field.name: data[field.name] for field in fields(PatternSet) if field.name != "patterns"}
    return PatternSet(patterns=tuple(_pattern_from(p) for p in data["patterns"]), **plain)


def _pattern_data(pattern: Pattern) -> dict[str, Any]:
    return {"id": pattern.id, "class": pattern.class_, "description": pattern.description,
            "regexes": [_regex_data(regex) for regex in pattern.regexes], "view": pattern.view,
            "keywords": [list(group) for group in pattern.keywords], "case_sensitive": pattern.case_sensitive,
            "not_after": list(pattern.not_after), "origin": pattern.origin,
            "searchers": [_searcher_data(searcher) for searcher in pattern.searchers]}


def _pattern_from(data: Mapping[str, Any]) -> Pattern:
    from sentient.threats.patterns import Pattern

    return Pattern(id=_text(data["id"]), class_=_text(data["class"]), description=_text(data["description"]),
                   regexes=tuple(_regex_from(regex) for regex in data["regexes"]), view=_text(data["view"]),
                   keywords=tuple(tuple(_text(word) for word in group) for group in data["keywords"]),
                   case_sensitive=bool(data["case_sensitive"]),
                   not_after=tuple(_text(word) for word in data["not_after"]), origin=_text(data["origin"]),
                   searchers=tuple(_searcher_from(searcher) for searcher in data["searchers"]))


def _searcher_data(searcher: Searcher) -> dict[str, Any]:
    return {"regex": _regex_data(searcher.regex), "at_word_start": searcher.at_word_start,
            "needles": [[needle.text, needle.lead.hex(), needle.offset] for needle in searcher.needles],
            "after_newline": None if searcher.after_newline is None else _regex_data(searcher.after_newline),
            "at_hidden": searcher.at_hidden}


def _searcher_from(data: Mapping[str, Any]) -> Searcher:
    from sentient.threats.expressions import Needle, Searcher

    after = data["after_newline"]
    return Searcher(regex=_regex_from(data["regex"]), at_word_start=bool(data["at_word_start"]),
                    needles=tuple(Needle(_text(text), bytes.fromhex(lead), int(offset))
                                  for text, lead, offset in data["needles"]),
                    after_newline=None if after is None else _regex_from(after), at_hidden=bool(data["at_hidden"]))


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, found {type(value).__name__}")
    return value


def _regex_data(regex: re.Pattern[str]) -> dict[str, Any]:
    """The regex's source and flags, and the engine's compiled form when it gives the regex back
    exactly (else it is compiled again from the source on reading)."""
    found: dict[str, Any] = {"pattern": regex.pattern, "flags": regex.flags}
    parts = _parts(regex)
    if parts is not None:
        found.update(zip(("compiled_flags", "code", "groups", "groupindex", "indexgroup"), parts[1:], strict=True))
    return found


def _regex_from(data: Mapping[str, Any]) -> re.Pattern[str]:
    pattern, flags = _text(data["pattern"]), int(data["flags"])
    if "code" not in data:
        return re.compile(pattern, flags)
    code = data["code"]  # numbers, or the engine refuses it (TypeError)
    groupindex = {_text(name): int(number) for name, number in data["groupindex"].items()}
    indexgroup = tuple(None if name is None else _text(name) for name in data["indexgroup"])
    return _regex(pattern, int(data["compiled_flags"]), code, int(data["groups"]), groupindex, indexgroup)


def _regex(pattern: str, flags: int, code: list[int], groups: int, groupindex: dict[str, int],
           indexgroup: tuple[str | None, ...]) -> re.Pattern[str]:
    """A regex from the engine's compiled code: what re.compile makes, without parsing. The engine
    checks the code and raises RuntimeError on code it would not make."""
    try:
        compiled: re.Pattern[str] = _sre.compile(pattern, flags, code, groups, groupindex, indexgroup)
    except RuntimeError as error:
        raise ValueError(f"not a compiled form of {pattern!r}: {error}") from error
    return compiled


def _parts(regex: re.Pattern[str]) -> tuple[Any, ...] | None:
    """The arguments of _regex for this regex (as re._compiler.compile makes them), or None when
    they do not give it back exactly."""
    parsed = _parser.parse(regex.pattern, regex.flags)
    groupindex = dict(parsed.state.groupdict)
    indexgroup: list[str | None] = [None] * parsed.state.groups
    for name, number in groupindex.items():
        indexgroup[number] = name
    code = [int(op) for op in _compiler._code(parsed, regex.flags)]
    parts = (regex.pattern, regex.flags | parsed.state.flags, code,
             parsed.state.groups - 1, groupindex, tuple(indexgroup))
    return parts if _regex(*parts) == regex else None
