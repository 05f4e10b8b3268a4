"""The prefilter: which expressions of a pattern set may match a text, from Hyperscan.

Python's engine runs one expression at a time, so a scan in pure Python pays for every
expression whose keywords a text holds, at every place it may start; notes dense with words
like "system", "password" and "instructions" make that most of the set. Hyperscan compiles all
the expressions of a view into one automaton and runs it over the text in one pass of C, about
as fast for 150 expressions as for one. So:

- each expression is rewritten as a superset (supersets.py): it matches wherever Python's engine
  would, and perhaps in a few more places;
- per view (as lower-cased or as written), the rewrites go into one database, compiled once per
  set of expressions and shared by equal sets;
- a scan asks where matches of each expression may start (`starts`): the rewrites run
  backwards over the reversed text, and every match Hyperscan reports there ends where a match
  may start here;
- only those expressions are then tried by Python's engine, and only at those places, for the
  match itself and its excerpt.

An expression Hyperscan does not take (no rewrite, or a rewrite it will not compile) and every
expression on the raw view is in `python_only`: the scanner always runs it the pure-Python way.
Without the `hyperscan` package, `load()` gives None and everything is scanned in pure Python.
"""

from __future__ import annotations

import hashlib
import os
import platform
import tempfile
import threading
from collections.abc import Sequence
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from sentient.threats.supersets import superset
from sentient.threats.views import Normalised

hyperscan: Any
try:
    import hyperscan
except ImportError:  # the pure-Python scan finds the same; it is only slower
    hyperscan = None

Key = tuple[int, int]  # (pattern number, expression number)
Subject = tuple[str, bool]  # (view, as written?)

_FLAGS = 0 if hyperscan is None else hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_PREFILTER
_VERSION = "" if hyperscan is None else metadata.version("hyperscan")
_CONTINUATION = bytes(1 if 0x80 <= byte < 0xC0 else 0 for byte in range(256))


class Prefiltered(Protocol):
    """What the prefilter needs of a pattern (patterns.Pattern)."""

    @property
    def view(self) -> str: ...
    @property
    def case_sensitive(self) -> bool: ...
    @property
    def regexes(self) -> Sequence[Any]: ...


def available() -> bool:
    return hyperscan is not None


class Prefilter:
    """Hyperscan databases for the expressions of a pattern set, one per subject (a view as
    lower-cased or as written). Safe to share between threads."""

    def __init__(self, patterns: Sequence[Prefiltered]) -> None:
        by_subject: dict[Subject, list[tuple[Key, bytes]]] = {}
        python_only: set[int] = set()
        for number, pattern in enumerate(patterns):
            for index, regex in enumerate(pattern.regexes):
                backward = superset(regex, reverse=True) if pattern.view != "raw" else None
                if backward is None:
                    python_only.add(number)
                else:
                    by_subject.setdefault((pattern.view, pattern.case_sensitive), []).append(
                        ((number, index), backward.encode())
                    )
        self._subjects: dict[Subject, tuple[tuple[Key, ...], tuple[bytes, ...]]] = {}
        for subject, items in by_subject.items():
            if not _compiles(tuple(source for _, source in items)):  # find what Hyperscan will not take
                items = [item for item in items if _compiles((item[1],), keep=False)]
            taken = {key for key, _ in items}
            python_only.update(key[0] for key, _ in by_subject[subject] if key not in taken)
            self._subjects[subject] = (tuple(key for key, _ in items), tuple(source for _, source in items))
        self.python_only = frozenset(python_only)
        self.python_only_raw = all(patterns[number].view == "raw" for number in python_only)
        self._local = threading.local()

    @property
    def subjects(self) -> tuple[Subject, ...]:
        return tuple(self._subjects)

    def keys(self, subject: Subject) -> tuple[Key, ...]:
        """The expressions on a subject, by their number in its database."""
        return self._subjects[subject][0]

    def starts(self, text: Normalised) -> dict[Key, list[int] | None]:
        """For each expression that may match the text, where its matches may start (character
        offsets in its subject, ascending; None: anywhere): no match of it starts elsewhere."""
        found: dict[Key, list[int] | None] = {}
        for subject, (keys, _) in self._subjects.items():
            view = text.subject(*subject)
            data = _encoded(view)
            if data is None or b"\x00" in data:  # no UTF-8 (a lone surrogate), or a NUL: anywhere
                found.update(dict.fromkeys(keys))
                continue
            for number, offsets in self.start_bytes(subject, data).items():
                found[keys[number]] = _characters(data, offsets)
        return found

    def start_bytes(self, subject: Subject, data: bytes) -> dict[int, list[int]]:
        """Where matches may start in `data` (UTF-8 of the subject), by the number of the
        expression in the subject's database, as ascending byte offsets."""
        sources = self._subjects[subject][1]
        database = _database(sources)
        scratches: dict[int, Any] | None = getattr(self._local, "scratches", None)
        if scratches is None:
            scratches = self._local.scratches = {}
        scratch = scratches.get(id(database))
        if scratch is None:
            scratch = scratches[id(database)] = hyperscan.Scratch(database)
        size = len(data)
        found: dict[int, list[int]] = {}

        def collect(number: int, start: int, end: int, flags: int, context: object) -> None:
            found.setdefault(number, []).append(size - end)

        database.scan(data[::-1], match_event_handler=collect, scratch=scratch)
        for offsets in found.values():
            offsets.reverse()
        return found


def load(patterns: Sequence[Prefiltered]) -> Prefilter | None:
    """The prefilter for a set, or None without Hyperscan."""
    return Prefilter(patterns) if hyperscan is not None else None


@lru_cache(maxsize=8)
def _database(sources: tuple[bytes, ...]) -> Any:
    """One compiled database, reporting every match. Cached in the process, and on disk (see
    `_cache_file`): compiling the shipped set takes two or three seconds, which the first long
    text a process scans would otherwise wait for; loading a compiled one takes milliseconds."""
    cached = _cache_file(sources)
    if cached is not None:
        try:
            return hyperscan.loadb(cached.read_bytes(), hyperscan.HS_MODE_BLOCK)
        except (OSError, hyperscan.error):  # none yet, or made elsewhere (another CPU): compile again
            pass
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    database.compile(expressions=list(sources), ids=list(range(len(sources))), elements=len(sources), flags=_FLAGS)
    if cached is not None:
        _store(cached, hyperscan.dumpb(database))
    return database


def _cache_file(sources: tuple[bytes, ...]) -> Path | None:
    """Where the compiled database of these expressions is kept: the user's cache folder
    ($XDG_CACHE_HOME or ~/.cache, then sentient/hyperscan/), named by a hash of the expressions,
    the flags, the Hyperscan version and the machine. None when there is no home to put it in."""
    try:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:  # no home directory
        return None
    digest = hashlib.sha256(f"{_VERSION}|{_FLAGS}|{platform.machine()}".encode())
    for source in sources:
        digest.update(len(source).to_bytes(4, "big") + source)
    return root / "sentient" / "hyperscan" / f"{digest.hexdigest()[:32]}.db"


def _store(path: Path, data: bytes) -> None:
    """Write a compiled database for the next process; a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temp, path)  # whole or not at all, if two processes race
    except OSError:
        pass


def _compiles(sources: tuple[bytes, ...], keep: bool = True) -> bool:
    try:
        if keep:
            _database(sources)
        else:
            hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK).compile(
                expressions=list(sources), ids=list(range(len(sources))), elements=len(sources), flags=_FLAGS
            )
    except hyperscan.error:
        return False
    return True


def _encoded(text: str) -> bytes | None:
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate (from a file read with surrogateescape)
        return None


def _characters(data: bytes, offsets: list[int]) -> list[int]:
    """Byte offsets in UTF-8 `data` as character offsets; those inside a character are dropped
    (no match starts there)."""
    if data.isascii():
        return offsets
    marks = data.translate(_CONTINUATION)
    found: list[int] = []
    before, counted = 0, 0
    for offset in offsets:
        if offset < len(data) and marks[offset]:
            continue
        counted += marks.count(1, before, offset)
        before = offset
        found.append(offset - counted)
    return found
