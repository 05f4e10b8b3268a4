"""Vault: the folder of markdown files, kind by kind. List, get, create, update, delete.

Reading never writes. Writes are atomic and conditional: an update re-reads the file under a
lock, refuses if its content revision is not the one the caller expected, applies the change
on top of what is on disk now (so a frontmatter edit made meanwhile survives) and replaces
the file only if its bytes are still the ones just read.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from sentient.errors import AlreadyExists, BadFile, Conflict, InvalidId, NotFound
from sentient.vault.document import (
    ABSENT,
    Document,
    atomic_write,
    is_temp_name,
    read_file,
)
from sentient.vault.kinds import KINDS, check_key, classify, default_path, kind

DEFAULT_MAX_BYTES = 1024 * 1024
SKIPPED_DIRS = {".sentient", ".git"}


class Judge(Protocol):
    """Judges a document about to be written; returns its `threat:` value or None."""

    def __call__(self, document: Document) -> Mapping[str, Any] | None: ...


@dataclass(frozen=True)
class Problem:
    """A file that could not be loaded, and what to do about it."""

    path: Path
    reason: str
    fix: str
    kind: str | None = None

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}. {self.fix}"


@dataclass(frozen=True)
class Listing:
    documents: list[Document]
    problems: list[Problem]


@dataclass(frozen=True)
class Found:
    """One document file found by walking the vault (not yet read)."""

    path: Path
    rel: PurePosixPath
    kind: str
    key: str
    mtime_ns: int
    size: int


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Vault:
    """The vault folder. Cheap to make; holds no open files."""

    def __init__(
        self,
        root: Path,
        *,
        max_file_bytes: int = DEFAULT_MAX_BYTES,
        judge: Judge | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.root = root.resolve()
        self.max_file_bytes = max_file_bytes
        self.judge = judge
        self.clock = clock

    @property
    def state_dir(self) -> Path:
        return self.root / ".sentient"

    # --- finding files --------------------------------------------------------------

    def walk(self, kinds: set[str] | None = None) -> Iterator[Found]:
        """Every document file in the vault, with its stat; one scandir pass per folder."""
        tops = {kind(name).folder.split("/")[0] for name in (kinds or KINDS)}
        for top in sorted(tops):
            start = self.root / top
            if start.is_dir():
                yield from self._walk_dir(start, kinds)

    def _walk_dir(self, folder: Path, kinds: set[str] | None) -> Iterator[Found]:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in sorted(entries, key=lambda e: e.name):
            if is_temp_name(entry.name) or entry.name in SKIPPED_DIRS:
                continue
            path = Path(entry.path)
            try:
                if entry.is_dir(follow_symlinks=False):
                    yield from self._walk_dir(path, kinds)
                    continue
                if not entry.is_file() or not entry.name.endswith(".md"):
                    continue
                rel = PurePosixPath(path.relative_to(self.root).as_posix())
                found = classify(rel)
                if found is None or (kinds is not None and found[0] not in kinds):
                    continue
                stat = entry.stat()
            except OSError:
                continue
            yield Found(path, rel, found[0], found[1], stat.st_mtime_ns, stat.st_size)

    def classify_path(self, path: Path) -> tuple[str, str] | None:
        try:
            rel = PurePosixPath(path.resolve().relative_to(self.root).as_posix())
        except ValueError:
            return None
        if any(part in SKIPPED_DIRS for part in rel.parts):
            return None
        return classify(rel)

    def locate(self, kind_name: str, key: str) -> Path | None:
        """The file of (kind, key), or None. Raises BadFile when two files claim the key."""
        check_key(kind_name, key)
        spec = kind(kind_name)
        if not spec.nested and kind_name != "session":
            path = default_path(self.root, kind_name, key)
            return path if path.is_file() else None
        base = self.root / spec.folder
        pattern = f"*/{key}.md" if kind_name == "session" else f"**/{key}.md"
        matches = sorted(
            p for p in base.glob(pattern) if p.is_file() and not any(is_temp_name(x) for x in p.parts[-1:])
        ) if base.is_dir() else []
        if len(matches) > 1:
            where = ", ".join(str(p.relative_to(self.root)) for p in matches)
            raise BadFile(matches[0], f"the id '{key}' is used by {len(matches)} files ({where})", "Rename all but one")
        return matches[0] if matches else None

    # --- reading ---------------------------------------------------------------------

    def read(self, found_kind: str, key: str, path: Path) -> Document:
        """Parse one file known to be of this kind and key; BadFile when it cannot be."""
        try:
            check_key(found_kind, key)
        except InvalidId as exc:
            raise BadFile(path, f"the file name does not make a valid id ({exc.message})", "Rename the file") from None
        return read_file(path, kind=found_kind, key=key, fields=kind(found_kind).fields, max_bytes=self.max_file_bytes)

    def get(self, kind_name: str, key: str) -> Document:
        path = self.locate(kind_name, key)
        if path is None:
            raise NotFound(f"no {kind_name} '{key}' in {self.root}")
        return self.read(kind_name, key, path)

    def scan(self, kinds: set[str] | None = None) -> Listing:
        """Read every document of the given kinds. Bad files become problems; the rest load."""
        documents: list[Document] = []
        problems: list[Problem] = []
        by_key: dict[tuple[str, str], list[Found]] = {}
        for found in self.walk(kinds):
            by_key.setdefault((found.kind, found.key), []).append(found)
        for (kind_name, key), founds in by_key.items():
            if len(founds) > 1:
                where = ", ".join(str(f.rel) for f in founds)
                for found in founds:
                    problems.append(
                        Problem(found.path, f"the id '{key}' is used by {len(founds)} files ({where})",
                                "Rename all but one, so each id names one file", kind_name)
                    )
                continue
            try:
                documents.append(self.read(kind_name, key, founds[0].path))
            except BadFile as exc:
                problems.append(Problem(exc.path, exc.reason, exc.fix, kind_name))
        return Listing(documents, problems)

    def documents(self, kind_name: str) -> list[Document]:
        return self.scan({kind_name}).documents

    # --- writing ---------------------------------------------------------------------

    @contextmanager
    def lock(self, kind_name: str, key: str) -> Iterator[None]:
        """Serialise the app's own writers of one document (threads and processes)."""
        folder = self.state_dir / "locks"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{kind_name}--{key.replace('/', '--')}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _stamp(self, document: Document, now: str) -> Document:
        """Fill in what the app maintains on every write: updated, revision, threat."""
        names = {f.name for f in document.fields}
        updates: dict[str, Any] = {}
        if "updated" in names:
            updates["updated"] = now
        if "revision" in names:
            updates["revision"] = document.revision
        stamped = document.replace(updates)
        if "threat" in names and self.judge is not None:
            threat = self.judge(stamped)
            if threat is None:
                stamped = stamped.replace({"threat": None})
            else:
                stamped = stamped.replace({"threat": dict(threat)})
        return stamped

    def create(
        self,
        kind_name: str,
        key: str,
        meta: Mapping[str, Any] | None = None,
        body: str = "",
        *,
        month: str | None = None,
    ) -> Document:
        """Write a new document; AlreadyExists if the key is taken."""
        check_key(kind_name, key)
        if kind(kind_name).nested or kind_name == "session":
            existing = self.locate(kind_name, key)
            if existing is not None:
                raise AlreadyExists(f"{existing} already has the id '{key}'; choose another id")
        moment = self.clock()
        now = iso(moment)
        if kind_name == "session" and month is None:
            month = moment.strftime("%Y-%m")
        path = default_path(self.root, kind_name, key, month)
        fields = kind(kind_name).fields
        names = [f.name for f in fields]
        initial: dict[str, Any] = {}
        if "id" in names:
            initial["id"] = key.rsplit("/", 1)[-1]
        initial.update({k: v for k, v in (meta or {}).items() if v is not None})
        if "created" in names:
            initial.setdefault("created", now)
        document = self._stamp(Document(kind_name, key, path, initial, body, fields), now)
        with self.lock(kind_name, key):
            atomic_write(path, document.render(), ABSENT)
        return self.read(kind_name, key, path)

    def update(
        self,
        kind_name: str,
        key: str,
        meta: Mapping[str, Any] | None = None,
        body: str | None = None,
        *,
        expected_revision: str | None = None,
        transform: Callable[[Document], Document] | None = None,
    ) -> Document:
        """Change a document. `expected_revision` is the content revision the caller read;
        Conflict if the text changed since. `transform` edits the freshly read document."""
        with self.lock(kind_name, key):
            current = self.get(kind_name, key)
            if expected_revision is not None and current.revision != expected_revision:
                raise Conflict(current.path, expected_revision, current.revision)
            changed = current.replace(meta, body)
            if transform is not None:
                changed = transform(changed)
            document = self._stamp(changed, iso(self.clock()))
            assert current.source is not None
            atomic_write(current.path, document.render(), current.source.file_hash)
        return self.read(kind_name, key, current.path)

    def delete(self, kind_name: str, key: str, *, expected_revision: str | None = None) -> Path:
        """Remove a document's file; Conflict if it changed since the caller read it."""
        with self.lock(kind_name, key):
            current = self.get(kind_name, key)
            if expected_revision is not None and current.revision != expected_revision:
                raise Conflict(current.path, expected_revision, current.revision)
            current.path.unlink()
        return current.path
