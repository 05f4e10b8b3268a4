"""The compiled pattern set, kept in the vault's `.sentient/` so that a command does not compile
it again: `load_compiled()` is `PatternSet.load()` for a process that starts often.

Loading the set parses and checks a few hundred regular expressions and reads each for its
fastest form (expressions.py): a few tenths of a second, which every `sentient search` would
otherwise wait for. So the loaded set is written to `.sentient/patterns.cache`, its regexes
as the engine's own compiled code, under a key made of everything it is made from: the pattern
files' bytes and the vault's own patterns, the code of this package, and Python's version (whose
engine the code is for). A later process whose key is the same reads it back in milliseconds,
without parsing a regex; any change of a pattern, of sentient.yaml's patterns or of the
package makes another key, and the set is loaded (and checked) again and the file replaced.

The file is read back only with the classes of this package (a restricted unpickler): a file
put there by something else is not run, just refused, and the set loaded again. A cache that
cannot be read or written is skipped. Nothing is written where `.sentient/` does not exist.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sentient.threats.learned import digest as learned_digest
from sentient.threats.patterns import PATTERNS_FILE, PatternSet

CACHE_FILE = "patterns.cache"
FORMAT = b"sentient-patterns 1\n"  # then the key's hex digest and a newline, then the pickle
_PACKAGE = Path(__file__).resolve().parent
_sre: Any = __import__("_sre")
_parser: Any = __import__("re._parser", fromlist=["_parser"])
_compiler: Any = __import__("re._compiler", fromlist=["_compiler"])
# what a cache file may name: the set's own classes and the regex maker below, nothing else
_ALLOWED = {
    ("sentient.threats.patterns", "PatternSet"),
    ("sentient.threats.patterns", "Pattern"),
    ("sentient.threats.expressions", "Searcher"),
    ("sentient.threats.expressions", "Needle"),
    ("sentient.threats.compiled", "_regex"),
    ("re", "_compile"),  # a regex _regex cannot give back exactly: compiled again
    ("builtins", "frozenset"),
    ("builtins", "set"),
}


def load_compiled(extra: Sequence[Mapping[str, Any]] | None = None, extra_file: Path | None = None,
                  state_dir: Path | None = None, *, base: Path = PATTERNS_FILE) -> PatternSet:
    """PatternSet.load(extra, extra_file), read from `state_dir`/patterns.cache when it holds this
    very set, else loaded and written there (when `state_dir` exists) for the next process."""
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
            found = _Unpickler(handle).load()
    except Exception:  # missing, truncated, from another version, refused: loaded again
        return None
    return found if isinstance(found, PatternSet) else None


def _write(path: Path, key: str, patterns: PatternSet) -> None:
    buffer = io.BytesIO()
    try:
        _Pickler(buffer).dump(patterns)
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(handle, "wb") as out:
            out.write(FORMAT + key.encode() + b"\n" + buffer.getvalue())
        os.replace(temp, path)  # whole or not at all, if two processes race
    except (OSError, pickle.PicklingError):
        return


def _regex(pattern: str, flags: int, code: list[int], groups: int, groupindex: dict[str, int],
           indexgroup: tuple[str | None, ...]) -> re.Pattern[str]:
    """A regex from the engine's compiled code: what re.compile makes, without parsing."""
    compiled: re.Pattern[str] = _sre.compile(pattern, flags, code, groups, groupindex, indexgroup)
    return compiled


def _parts(regex: re.Pattern[str]) -> tuple[Any, ...] | None:
    """The arguments of _regex for this regex (as re._compiler.compile makes them), or None when
    they do not give it back exactly."""
    parsed = _parser.parse(regex.pattern, regex.flags)
    groupindex = dict(parsed.state.groupdict)
    indexgroup: list[str | None] = [None] * parsed.state.groups
    for name, number in groupindex.items():
        indexgroup[number] = name
    code = [int(op) for op in _compiler._code(parsed, regex.flags)]  # plain ints: its opcodes do not pickle
    parts = (regex.pattern, regex.flags | parsed.state.flags, code,
             parsed.state.groups - 1, groupindex, tuple(indexgroup))
    return parts if _regex(*parts) == regex else None


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, re.Pattern) and isinstance(obj.pattern, str):
            parts = _parts(obj)
            if parts is not None:
                return _regex, parts
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a pattern set")
        return super().find_class(module, name)
