"""Session knowledge: what a session must be told (its pinned notes and plans, and the index
of what the agent has remembered), and a signature of it.

The signature covers every delivered item's id and content revision (and what is shown of it
besides, such as a category), the memory index's count, and the template's own revision, so
editing a pinned note or renaming its title re-sends the block, and nothing else does.

Nothing here may fail a send: `build` raises nothing; a source that cannot be read is left
out (never presented as empty) and the rest is still delivered.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sentient.errors import NotFound
from sentient.prompts import Prompts
from sentient.vault.document import Document
from sentient.vault.kinds import check_key
from sentient.workspace import Workspace

TEMPLATE = "session_knowledge.md.j2"
LINE_CHARS = 100
PIN_KINDS = {"note": "note", "plan": "plan"}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pin:
    kind: str
    id: str
    title: str
    body: str
    revision: str


@dataclass(frozen=True)
class IndexEntry:
    id: str
    title: str
    category: str | None
    line: str
    revision: str


@dataclass(frozen=True)
class MemoryIndex:
    entries: tuple[IndexEntry, ...]
    total: int

    @property
    def more(self) -> int:
        return self.total - len(self.entries)


@dataclass(frozen=True)
class Knowledge:
    text: str
    signature: str
    pins: tuple[Pin, ...]
    memory: MemoryIndex | None  # None: left out (memory off, absent, or failed to load)
    problems: tuple[str, ...] = ()  # what was left out and why


def parse_pin(ref: str) -> tuple[str, str]:
    """'note:<id>' or 'plan:<id>' -> (kind, id); ValueError otherwise."""
    kind, _, key = ref.partition(":")
    if kind not in PIN_KINDS or not key:
        raise ValueError(f"pin {ref!r} must be note:<id> or plan:<id>")
    check_key(kind, key)
    return kind, key


def first_line(body: str, title: str = "") -> str:
    """The first line of the body that says something beyond the title."""
    for line in body.splitlines():
        stripped = line.strip().lstrip("#").strip()
        if stripped and stripped != title:
            return stripped if len(stripped) <= LINE_CHARS else stripped[: LINE_CHARS - 1] + "…"
    return ""


class KnowledgeBuilder:
    """Builds blocks; keeps the memory index of each scope until the index changes."""

    def __init__(self, workspace: Workspace, prompts: Prompts) -> None:
        self.workspace = workspace
        self.prompts = prompts
        self._cache: dict[tuple[Any, ...], MemoryIndex] = {}
        self._paths: dict[tuple[str, str], Path] = {}
        self._docs: dict[Path, tuple[tuple[int, int], Document]] = {}
        self._lock = threading.Lock()

    def memory_index(self, scope: str | None) -> MemoryIndex:
        """Unflagged memory entries in the global scope and the session's scope, newest first."""
        index = self.workspace.index
        key = (index.version_of("memory"), scope, self.workspace.judge_fingerprint)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        judged = self.workspace.judged
        rows = [row for row in index.newest("memory", ["global", scope] if scope else ["global"])
                if not judged(row.title, row.body, row.revision, row.allowed_revision)[2]]
        entries = tuple(IndexEntry(row.key, row.title, row.category, first_line(row.body, row.title), row.revision)
                        for row in rows[: self.workspace.settings.chat.knowledge_entries])
        built = MemoryIndex(entries, len(rows))
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if k[0] == key[0]}
            self._cache[key] = built
        return built

    def _read_pin(self, kind: str, key: str) -> Document:
        """A pinned file, parsed again only when its stat changed (no read when unchanged)."""
        vault = self.workspace.vault
        path = self._paths.get((kind, key))
        try:
            stat = path.stat() if path is not None else None
        except FileNotFoundError:
            stat = None
        if path is None or stat is None:
            path = vault.locate(kind, key)
            if path is None:
                raise NotFound(f"no such {kind}")
            stat = path.stat()
            self._paths[(kind, key)] = path
        stamp = (stat.st_mtime_ns, stat.st_size)
        cached = self._docs.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        document = vault.read(kind, key, path)
        self._docs[path] = (stamp, document)
        return document

    def pins(self, refs: Sequence[str]) -> tuple[list[Pin], list[str]]:
        """The session's pins, read from their files (not the index, so they arrive even when
        the memory store or the index cannot be read)."""
        pins: list[Pin] = []
        problems: list[str] = []
        for ref in refs:
            try:
                kind, key = parse_pin(ref)
                doc = self._read_pin(kind, key)
            except Exception as exc:
                problems.append(f"{ref}: {exc}")
                continue
            if not self.workspace.visible(doc):
                problems.append(f"{ref}: withheld, it reads like instructions")
            else:
                pins.append(Pin(kind, key, doc.title, doc.body, doc.revision))
        return pins, problems

    def build(self, *, pins: Sequence[str], scope: str | None, memory_allowed: bool) -> Knowledge | None:
        """The block for a session, or None when there is nothing to tell or it failed."""
        try:
            return self._build(pins, scope, memory_allowed)
        except Exception:
            log.exception("session knowledge could not be built; sending without it")
            return None

    def _build(self, refs: Sequence[str], scope: str | None, memory_allowed: bool) -> Knowledge | None:
        pins, problems = self.pins(refs)
        memory: MemoryIndex | None = None
        if memory_allowed:
            try:
                memory = self.memory_index(scope)
            except Exception as exc:  # a failed store is left out, never shown as empty
                log.warning("memory index left out of session knowledge: %s", exc)
                problems.append(f"memory index: {exc}")
        if not pins and memory is None:
            return None
        text = self.prompts.render(TEMPLATE, pins=pins, memory=memory)
        signature = signature_of(self.prompts.revision(TEMPLATE), pins, memory)
        return Knowledge(text, signature, tuple(pins), memory, tuple(problems))


def signature_of(template_revision: str, pins: Sequence[Pin], memory: MemoryIndex | None) -> str:
    payload = {
        "template": template_revision,
        "pins": [[p.kind, p.id, p.revision] for p in pins],
        "memory": None
        if memory is None
        else [memory.total, [[e.id, e.revision, e.category] for e in memory.entries]],
    }
    digest = hashlib.sha256(json.dumps(payload, separators=(",", ":")).encode()).hexdigest()
    return f"sha256:{digest}"
