"""What the C library's allocator is told, where it is glibc's (Linux): the memory a process
holds is what `sentient index` at 100,000 entries is measured by (issue 23). Elsewhere (macOS,
musl) nothing is done: each allocator does as it does.

Both through ctypes, from the C library already loaded (no library of our own, nothing built)."""

from __future__ import annotations

from typing import Any

M_ARENA_MAX = -8  # mallopt's parameter (malloc.h)
ARENAS = 2  # the main thread's and one that every other thread shares


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None)


def give_back() -> bool:
    """Hand the blocks freed since back to the system: glibc keeps them for reuse, and after a
    sync that wrote many files (its batches of documents, rows and judgments) a process that goes
    on to embed (`sentient index`, a server's start) held 17 MB of them at 100,000 entries beside
    the model. Returns whether it could (malloc_trim)."""
    try:
        trim = _libc().malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def share_arenas() -> bool:
    """Let the process's threads share ARENAS allocator arenas at most, not one each (glibc makes
    up to 8 a core): each embedding thread's arena kept what its texts' tokens and the model's
    work had needed at their largest, 8 MB more at 10,000 entries with two threads, at the same
    speed (the threads allocate little: onnxruntime keeps its own buffers). Only counts before
    the process has made more than 8 arenas (glibc fixes its limit then). Returns whether it could
    (mallopt)."""
    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_ARENA_MAX, ARENAS))
