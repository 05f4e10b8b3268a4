"""Files kept in the user's cache folder for the next process (the embedding model's weights,
its int8 graph, the query tokenizer's vocabulary: embedding.py, wordpiece.py): each written whole
or not at all, marked as used when read, and those of other installs pruned when unused."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any


def keep_file(target: Path, write: Callable[[Any], object]) -> None:
    """Write `target` by `write(binary file)` under a temporary name in its folder (made if
    missing), then rename it: a process that reads it at the same time sees it whole or not at all."""
    import tempfile

    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            write(out)
        os.replace(temp, target)
    finally:
        Path(temp).unlink(missing_ok=True)


# The cache folder holds the files of every install of the model package a process read from
# (named by its version and files' times: a reinstall or an upgrade makes new ones, 70 MB with the
# int8 graph). A process marks the files it reads as used (their mtime, once a day at most); when
# a new install's are written, those of any other no process read for UNUSED_DAYS are deleted
# (another install still in use, unused that long, makes its own again: about half a second).
UNUSED_DAYS = 30
_DAY = 86_400


def mark_used(path: Path) -> None:
    """Say that a process read `path` from the cache (its mtime), once a day at most."""
    import time

    with suppress(OSError):
        if time.time() - path.stat().st_mtime > _DAY:
            os.utime(path)


def prune(folder: Path, keep: str) -> list[str]:
    """Delete the cache files in `folder` (weights, layouts, graphs, vocabularies, and the
    temporary files of a write that died) of every name but `keep` whose files none was used for
    UNUSED_DAYS (a temporary file: for a day). Returns the names deleted."""
    import time

    now, newest, files = time.time(), dict[str, float](), dict[str, list[Path]]()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        name = entry.name.lstrip(".").partition(".")[0]  # "<key>.npy", or ".<key>.npy.<random>" (a write's)
        if len(name) != 32 or name == keep or not entry.is_file(follow_symlinks=False):
            continue  # not one of ours, or this install's
        with suppress(OSError):
            used = entry.stat(follow_symlinks=False).st_mtime
            if entry.name.startswith("."):  # a write that died a day ago or more
                if now - used > _DAY:
                    Path(entry.path).unlink()
                continue
            newest[name] = max(newest.get(name, 0.0), used)
            files.setdefault(name, []).append(Path(entry.path))
    gone = [name for name, used in newest.items() if now - used > UNUSED_DAYS * _DAY]
    for name in gone:
        for path in files[name]:
            with suppress(OSError):
                path.unlink()
    return gone
