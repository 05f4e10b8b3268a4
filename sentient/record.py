"""`sentient doctor --record`: write the app's view of hand-edited files into their frontmatter.

Reading never writes (DESIGN section 1): what the app knows about a file edited in an editor,
its current revision and its threat judgment, lives in the index. When the person asks, it is
recorded in the files themselves, through the same conditional writes as every other change, so
that the frontmatter says again what the text is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sentient.errors import SentientError
from sentient.index import IndexedDoc
from sentient.vault.kinds import kind
from sentient.workspace import Workspace


@dataclass(frozen=True)
class Recorded:
    written: list[Path]
    failed: list[str]  # one message per file that could not be written (it is left as it was)


def _threat(value: Any) -> tuple[bool, tuple[str, ...], Any, Any] | None:
    """A `threat:` value as a comparable tuple (None: nothing matched)."""
    if not isinstance(value, Mapping) or not value.get("flagged"):
        return None
    patterns = value.get("patterns")
    return (True, tuple(patterns) if isinstance(patterns, list) else (), value.get("pattern_set"),
            value.get("allowed_revision"))


def _records(document_kind: str) -> bool:
    return any(spec.name == "revision" for spec in kind(document_kind).fields)


def stale(workspace: Workspace, *, unrecorded: bool = True) -> list[IndexedDoc]:
    """The documents whose stored revision or threat judgment is not what they are now, by kind,
    key and path (the index is gone through a chunk at a time). A file that holds no revision at
    all (made by hand, never written by the app) counts only with `unrecorded`: nothing in its
    frontmatter is out of date (what `doctor` reports), but `--record` writes its revision in all
    the same."""
    workspace.index.sync()
    found = [doc for doc in workspace.index.each()
             if _records(doc.kind) and (_threat(doc.meta.get("threat")) != _threat(doc.threat)
                                        or (doc.edited_outside and (unrecorded or doc.stored_revision is not None)))]
    return sorted(found, key=lambda doc: (doc.kind, doc.key, doc.rel))


def record(workspace: Workspace) -> Recorded:
    """Write each stale document's revision and judgment into its frontmatter. A file changed
    again meanwhile is left alone (a conflict) and reported."""
    written: list[Path] = []
    failed: list[str] = []
    for doc in stale(workspace):
        try:
            written.append(workspace.vault.update(doc.kind, doc.key, expected_revision=doc.revision, touch=False,
                                                   why="record", source="user").path)
        except SentientError as exc:
            failed.append(exc.message)
    if written:
        workspace.index.sync()
    return Recorded(written, failed)
