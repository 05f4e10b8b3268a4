"""Whether a running process keeps an index current: the watcher's lease, in the index's `meta`.

`sentient serve`'s watcher applies every file event to the index as it comes; while it does, a
command of the same vault need not walk the whole vault first to find what changed (a stat of
every file: half a second at 100,000 entries). So the watcher leases the index: after each
sync or batch it applied while file events flow, the `watched_by` row names its process (id,
start time, host). It drops the row when events stop (it falls back to polling), when a batch
fails, and when it stops. A command takes the lease as valid only if that process still runs
(the same process: its start time too, where /proc tells it) on this host; a server killed
without stopping leaves a row naming a process that is gone, which counts for nothing.
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing, suppress
from pathlib import Path
from typing import Any

LEASE = "watched_by"


def this_process() -> dict[str, Any]:
    """What names this process in a lease."""
    return {"pid": os.getpid(), "started": _started(os.getpid()), "host": _host()}


def _host() -> str:
    import socket  # here: socket (and selectors) are 2-3 ms of a command that never asks

    return socket.gethostname()


def valid(lease: str | None) -> bool:
    """Whether a lease names a process that runs now on this host."""
    try:
        found: Any = json.loads(lease) if lease else {}
        pid, started, host = found["pid"], found["started"], found["host"]
    except (ValueError, TypeError, KeyError):
        return False
    if not isinstance(pid, int) or pid <= 0 or host != _host():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # runs, as another user
        pass
    except OSError:
        return False
    now = _started(pid)
    return started is None or now is None or started == now


def watched_now(index_file: Path) -> str | None:
    """The lease of the index file, when it names a process that runs now (for a bench or a
    tool that has no Index open); else None."""
    if not index_file.exists():
        return None
    with suppress(sqlite3.Error), closing(sqlite3.connect(f"file:{index_file}?mode=ro", uri=True)) as conn:
        row = conn.execute("SELECT value FROM meta WHERE name = ?", (LEASE,)).fetchone()
        lease = None if row is None else str(row[0])
        return lease if valid(lease) else None
    return None


def _started(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), so that a reused pid is not
    taken for the process that leased; None where there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None
