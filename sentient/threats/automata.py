"""Automata: Hyperscan databases, compiled once, kept on disk, and scanned from any thread.

Hyperscan compiles many expressions into one automaton and runs it over bytes in one pass of
C. Compiling the shipped pattern set takes two or three seconds, which the first long text a
process scans would otherwise wait for, so every compiled database is kept in the user's cache
folder and loaded in milliseconds by later processes. Without the `hyperscan` package there
are no automata and everything is scanned in pure Python.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

hyperscan: Any
try:
    import hyperscan
except ImportError:  # the pure-Python scan finds the same; it is only slower
    hyperscan = None

# Part of a cached database's name. The package's own attribute, not importlib.metadata, whose
# import a scan helper would wait for as it starts.
_VERSION = "" if hyperscan is None else str(getattr(hyperscan, "__version__", "unknown"))
# Multi-line: ^ and $ at line breaks. Prefilter: an expression Hyperscan would refuse is taken in
# a wider form that matches at least as much (the scanner only uses what it reports to choose).
MULTILINE = 0 if hyperscan is None else hyperscan.HS_FLAG_MULTILINE
PREFILTER = 0 if hyperscan is None else hyperscan.HS_FLAG_PREFILTER
# Caseless (ASCII letters only): how a case-sensitive expression is run over the lower-cased text.
CASELESS = 0 if hyperscan is None else hyperscan.HS_FLAG_CASELESS


def available() -> bool:
    return hyperscan is not None


class Automaton:
    """One compiled database of expressions (numbered in order). Safe to share between threads:
    each thread scans with its own scratch space."""

    def __init__(self, database: Any) -> None:
        self._database = database
        self._local = threading.local()

    @classmethod
    def build(cls, sources: Sequence[bytes], prefilter: bool = True, caseless: Sequence[bool] = ()) -> Automaton | None:
        """The automaton of the expressions, or None without Hyperscan or when it refuses one.
        `caseless`: per expression, whether it ignores the case of ASCII letters (none, if empty)."""
        if hyperscan is None:
            return None
        try:
            return cls(_database(tuple(sources), _flags(len(sources), prefilter, caseless)))
        except hyperscan.error:
            return None

    @classmethod
    def of_literals(cls, literals: Sequence[bytes]) -> Automaton | None:
        """An automaton that finds these byte strings, compiled here and not kept on disk (a
        few literals compile in well under a millisecond); None without Hyperscan."""
        if hyperscan is None:
            return None
        database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        sources = [b"".join(b"\\x%02x" % byte for byte in literal) for literal in literals]
        try:
            database.compile(expressions=sources, ids=list(range(len(sources))), elements=len(sources),
                             flags=[0] * len(sources))  # fmt: skip
        except hyperscan.error:
            return None
        return cls(database)

    def ends_up_to(self, data: bytes, most: int) -> list[tuple[int, int]] | None:
        """Where matches end in `data`, as (byte offset, expression number) in order; None as
        soon as there are more than `most` of them (each costs a call back into Python)."""
        found: list[tuple[int, int]] = []

        def collect(number: int, start: int, end: int, flags: int, context: object) -> bool:
            found.append((end, number))
            return len(found) > most  # stops the scan

        try:
            self._database.scan(data, match_event_handler=collect, scratch=self._scratch())
        except hyperscan.ScanTerminated:
            return None
        return found

    def ends(self, data: bytes) -> dict[int, list[int]]:
        """Where matches end in `data` (byte offsets, ascending), by expression number."""
        found: dict[int, list[int]] = {}

        def collect(number: int, start: int, end: int, flags: int, context: object) -> None:
            found.setdefault(number, []).append(end)

        self._database.scan(data, match_event_handler=collect, scratch=self._scratch())
        return found

    def _scratch(self) -> Any:
        """This thread's scratch space for the database (Hyperscan's scans may not share one)."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(self._database)
        return scratch


def compiles(sources: Sequence[bytes], prefilter: bool = True, caseless: Sequence[bool] = ()) -> bool:
    """Whether Hyperscan takes these expressions together (without keeping the result)."""
    try:
        hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK).compile(
            expressions=list(sources), ids=list(range(len(sources))), elements=len(sources),
            flags=list(_flags(len(sources), prefilter, caseless)),
        )  # fmt: skip
    except hyperscan.error:
        return False
    return True


def _flags(count: int, prefilter: bool, caseless: Sequence[bool]) -> tuple[int, ...]:
    base = MULTILINE | (PREFILTER if prefilter else 0)
    return tuple(base | (CASELESS if caseless and caseless[number] else 0) for number in range(count))


@lru_cache(maxsize=16)
def _database(sources: tuple[bytes, ...], flags: tuple[int, ...]) -> Any:
    """One compiled database, reporting every match. Cached in the process, and on disk (see
    `_cache_file`)."""
    cached = _cache_file(sources, flags)
    if cached is not None:
        try:
            return hyperscan.loadb(cached.read_bytes(), hyperscan.HS_MODE_BLOCK)
        except (OSError, hyperscan.error):  # none yet, or made elsewhere (another CPU): compile again
            pass
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    database.compile(expressions=list(sources), ids=list(range(len(sources))), elements=len(sources), flags=list(flags))
    if cached is not None:
        _store(cached, hyperscan.dumpb(database))
    return database


def _cache_file(sources: tuple[bytes, ...], flags: tuple[int, ...]) -> Path | None:
    """Where the compiled database of these expressions is kept: the user's cache folder
    ($XDG_CACHE_HOME or ~/.cache, then sentient/hyperscan/), named by a hash of the expressions,
    the flags, the Hyperscan version and the machine. None when there is no home to put it in."""
    digest = hashlib.sha256(f"{_VERSION}|{','.join(map(str, flags))}|{platform.machine()}".encode())
    for source in sources:
        digest.update(len(source).to_bytes(4, "big") + source)
    return _cache_path(f"{digest.hexdigest()[:32]}.db")


def _cache_path(name: str) -> Path | None:
    """A file of the cache folder; None when there is no home to put it in."""
    try:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:  # no home directory
        return None
    return root / "sentient" / "hyperscan" / name


def remembered(key: str, make: Callable[[], list[str | None]]) -> list[str | None]:
    """`make()`, kept in the cache folder under `key` (a hash of everything it depends on) and
    read from there by later processes; a file that is missing or unreadable is made again."""
    path = _cache_path(f"{key}.json")
    if path is not None:
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(found, list) and all(item is None or isinstance(item, str) for item in found):
                return found
        except (OSError, ValueError):
            pass
    made = make()
    if path is not None:
        _store(path, json.dumps(made).encode())
    return made


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
