"""Index: a SQLite FTS5 cache of the vault in `.sentient/index.sqlite`.

Files are the truth; this is a cache that can be deleted at any time. `sync()` walks the
vault (one stat per file) and re-reads only files whose (mtime_ns, size) changed; `update()`
and `remove()` keep it current one file at a time for the watcher; `search()` ranks with BM25,
the title weighing more than the body. Files that cannot be read are kept in `problems`.

Reading never writes: nothing outside `.sentient/` is touched. One writer connection sits
behind a lock; every thread reads through its own connection (WAL), so a search never waits
for a long sync. A database from another schema, other settings, or garbage bytes is rebuilt.
"""

from sentient.index.index import Index
from sentient.index.schema import (
    BATCH,
    BROAD_MATCHES,
    DB_NAME,
    FIX,
    JUDGED_BYTES,
    JUDGED_TOGETHER,
    OPTIMIZE_AFTER,
    PREFETCH,
    SCHEMA_VERSION,
    TITLE_WEIGHT,
    Hit,
    IndexedDoc,
    Judge,
    Listed,
    SyncReport,
    fts_query,
    phrases,
)

__all__ = [
    "BATCH",
    "JUDGED_BYTES",
    "JUDGED_TOGETHER",
    "BROAD_MATCHES",
    "DB_NAME",
    "FIX",
    "OPTIMIZE_AFTER",
    "PREFETCH",
    "SCHEMA_VERSION",
    "TITLE_WEIGHT",
    "Hit",
    "Index",
    "IndexedDoc",
    "Judge",
    "Listed",
    "SyncReport",
    "fts_query",
    "phrases",
]
