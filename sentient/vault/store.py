"""Vault: the folder of markdown files, kind by kind. List, get, create, update, delete.

Reading never writes. Writes are atomic and conditional: an update re-reads the file under a
lock, refuses if its content revision is not the one the caller expected, applies the change
on top of what is on disk now (so a frontmatter edit made meanwhile survives) and replaces
the file only if its bytes are still the ones just read.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple, Protocol

from sentient.errors import AlreadyExists, BadFile, BadText, Conflict, InvalidId, NotFound, TooLarge
from sentient.vault.atomic import ABSENT, atomic_write, sweep
from sentient.vault.changes import Change, shown_source, source_of
from sentient.vault.document import TMP_SUFFIX, Document, parse, read_file
from sentient.vault.kinds import check_key, classify, default_path, kind
from sentient.vault.sync import conflict_of

DEFAULT_MAX_BYTES = 1024 * 1024
# Sessions are the app's own transcripts and grow a turn at a time: they may be this many times
# limits.max_file_bytes (32 MiB by default), so a long chat goes on long after a note would stop.
SESSION_BYTES_FACTOR = 32
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


class Found(NamedTuple):
    """One document file found by walking the vault (not yet read).

    A named tuple holding the relative path as text, because a walk makes one per file and a
    no-change sync is little more than the walk: a frozen dataclass and a Path each cost more
    than the stat itself. `path` is built when asked for."""

    root: Path
    rel: str  # relative to the vault root, '/'-separated
    kind: str
    key: str
    mtime_ns: int
    size: int

    @property
    def path(self) -> Path:
        return self.root / self.rel


File = tuple[str, str, str, int, int]  # one document file of a folder: (name, kind, key, mtime_ns, size)


class Folder(NamedTuple):
    """One folder's document files, found by walking the vault."""

    rel: str  # relative to the vault root, '/'-separated
    files: list[File]  # (name, kind, key, mtime_ns, size)


# What a folder of the vault holds, decided once per folder from its place (see kinds.classify):
# (state, kind or key prefix). The .md files of a folder in state "files" are documents of that
# kind, keyed prefix + stem; a "task" folder holds task.md and notepad.md, keyed by the task id.
_Place = tuple[str, str]
_TOPS: dict[str, _Place] = {
    "memory": ("nested", "memory"),
    "skills": ("nested", "skill"),
    "pins": ("pins", ""),
    "sessions": ("sessions", ""),
    "tasks": ("tasks", ""),
    "people": ("people", ""),
    "personas": ("files", "persona"),
}
_UNREADABLE_FIX = "Make it a folder Sentient can read; until then what it holds is left out (not taken as empty)"
# the folders whose being unreadable is reported (Vault.folder_problems), and the kind each holds
_FOLDER_KINDS = {"memory": "memory", "pins": "note", "pins/notes": "note", "pins/plans": "plan", "skills": "skill",
                 "sessions": "session", "tasks": "task", "people": "people",
                 "personas": "persona"}
_REACH = {"pins": {"note", "plan"}, "tasks": {"task", "notepad", "run"}, "task": {"task", "notepad", "run"}}
_TASK_FILES = {"task.md": "task", "notepad.md": "notepad"}


def _subfolder(place: _Place, name: str) -> _Place | None:
    """The place of the subfolder `name` of a folder at `place`; None when it holds no documents."""
    state, arg = place
    if state == "nested":
        return place
    if state == "pins":
        return ("nested", "note") if name == "notes" else ("nested", "plan") if name == "plans" else None
    if state == "sessions":
        return ("files", "session")
    if state == "tasks":
        return ("task", name)
    if state == "task":
        return ("runs", f"{arg}/") if name == "runs" else None
    if state == "people":
        return ("people-files", f"{name}/")
    return None


def _place_kind(place: _Place) -> str:
    """The kind of document a folder at `place` holds (for a folder's own problem)."""
    state, arg = place
    return {"nested": arg, "files": arg, "runs": "run", "people": "people", "people-files": "people",
            "sessions": "session", "tasks": "task", "task": "task", "pins": "note"}[state]


def _reaches(place: _Place, kinds: set[str] | None) -> bool:
    """Whether documents of `kinds` may be found at or under `place`."""
    if kinds is None:
        return True
    state, arg = place
    if state in ("nested", "files"):
        return arg in kinds
    if state == "runs":
        return "run" in kinds
    if state in ("people", "people-files"):
        return "people" in kinds
    if state == "sessions":
        return "session" in kinds
    return not kinds.isdisjoint(_REACH[state])


_first = itemgetter(0)


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
        self._temp_dir: Path | None = None
        # told of every write the app makes (the committer: sentient/vault/committer.py)
        self.on_change: Callable[[Change], None] | None = None
        # Opening the vault is a start: what writers killed mid-write left is cleared now, not
        # when this process first writes (a live writer's temp file is left alone; see sweep).
        sweep(self.state_dir / "tmp")
        # subfolders the last walk could not list, and links it did not follow: rel -> (kind, reason,
        # fix); see folder_problems
        self._unlisted: dict[str, tuple[str | None, str, str]] = {}

    @property
    def state_dir(self) -> Path:
        return self.root / ".sentient"

    @property
    def temp_dir(self) -> Path | None:
        """Where writes go before their rename (`.sentient/tmp/`), made on first use; None (a temp
        file beside each file) when it cannot be made. Out of the person's folders: an editor, a
        watcher or `git status` never sees a half-written temp file there."""
        if self._temp_dir is None:
            folder = self.state_dir / "tmp"
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError:
                return None
            self._temp_dir = folder
        return self._temp_dir

    # --- finding files --------------------------------------------------------------

    def walk(self, kinds: set[str] | None = None) -> Iterator[Found]:
        """Every document file in the vault, with its stat: each folder's files by name, then its
        subfolders by name (see walk_folders)."""
        root = self.root
        for folder in self.walk_folders(kinds):
            prefix = folder.rel + "/"
            for name, kind_name, key, mtime_ns, size in sorted(folder.files, key=_first):
                yield Found(root, prefix + name, kind_name, key, mtime_ns, size)

    def walk_folders(self, kinds: set[str] | None = None) -> Iterator[Folder]:
        """Every folder holding document files, with those files in the order the file system
        lists them (sorting costs more than the stat), and then its subfolders by name. One
        scandir pass per folder, each file's stat taken as it is listed (while its inode is hot).

        What a folder holds is decided once from its place (as kinds.classify decides it for one
        path): hidden names and temp files are skipped, and symlinked folders are not followed."""
        root = str(self.root)
        for top, place in sorted(_TOPS.items()):
            if _reaches(place, kinds) and not self._links_out(top, place, kinds):
                yield from self._walk_folder(os.path.join(root, top), top, place, kinds)

    def _links_out(self, top: str, place: _Place, kinds: set[str] | None) -> bool:
        """Whether a top folder (memory/, pins/...) is a link leading out of the vault (or into
        a hidden folder of it): then nothing in it is read, and it is recorded for
        folder_problems. A link to a folder inside the vault is followed, as the folder."""
        path = os.path.join(str(self.root), top)
        if not os.path.islink(path) or not os.path.exists(path):  # a link to nothing is folder_problems' to tell
            self._unlisted.pop(top, None)
            return False
        real = os.path.realpath(path)
        inside = real.startswith(f"{self.root}{os.sep}")
        if inside and not any(part.startswith(".") for part in real[len(str(self.root)) + 1:].split(os.sep)):
            self._unlisted.pop(top, None)
            return False
        where = "outside the vault" if not inside else "in a hidden folder of the vault"
        if kinds is None or _place_kind(place) in kinds:
            self._unlisted[top] = (_place_kind(place), f"is a link to {real}, {where}, which Sentient does not "
                                   "follow (nothing in it is read)",
                                   "Move the folder itself into the vault in place of the link, or remove the link")
        return True

    def _walk_folder(self, folder: str, rel: str, place: _Place, kinds: set[str] | None) -> Iterator[Folder]:
        for sub_rel, files in self._walk_streams(folder, rel, place, kinds):
            listed = list(files)
            if listed:
                yield Folder(sub_rel, listed)

    def walk_streams(self, kinds: set[str] | None = None) -> Iterator[tuple[str, Iterator[File]]]:
        """As walk_folders, but each folder's files as they are listed, never all held at once:
        (rel, its files) for every folder listed, in the order walk_folders gives them (a folder
        with no document files gives none). Each folder's files must be taken before the next
        folder is asked for (what is left of them is skipped)."""
        root = str(self.root)
        for top, place in sorted(_TOPS.items()):
            if _reaches(place, kinds):
                yield from self._walk_streams(os.path.join(root, top), top, place, kinds)

    def _walk_streams(self, folder: str, rel: str, place: _Place,
                      kinds: set[str] | None) -> Iterator[tuple[str, Iterator[File]]]:
        subfolders: list[tuple[str, str, _Place]] = []
        links: set[str] = set()  # links to folders (not followed) or to nothing, reported
        files = self._files(folder, rel, place, kinds, subfolders, links)
        yield rel, files
        for _ in files:  # what the caller left
            pass
        if rel in self._unlisted:
            return
        if self._unlisted and kinds is None:  # a subfolder unlisted before and gone now is no problem
            below = {f"{rel}/{name}" for name, _, _ in subfolders} | links
            for gone in [r for r in self._unlisted if r.rpartition("/")[0] == rel and r not in below]:
                self._unlisted.pop(gone, None)
        for name, path, sub in sorted(subfolders):
            yield from self._walk_streams(path, f"{rel}/{name}", sub, kinds)

    def _files(self, folder: str, rel: str, place: _Place, kinds: set[str] | None,
               subfolders: list[tuple[str, str, _Place]], links: set[str]) -> Iterator[File]:
        """The document files of one folder as scandir lists them, each stat taken as it is listed;
        its subfolders that may hold documents and its unfollowed links are added to the lists
        given. A folder that cannot be listed is recorded (see folder_problems) and gives none."""
        state, arg = place
        try:
            with os.scandir(folder) as scan:
                for entry in scan:
                    name = entry.name
                    if name[0] == "." or name.endswith(TMP_SUFFIX):
                        continue
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            sub = _subfolder(place, name)
                            if sub is not None and _reaches(sub, kinds):
                                subfolders.append((name, entry.path, sub))
                            continue
                        if entry.is_symlink() and (entry.is_dir() or not os.path.exists(entry.path)):
                            link = self._unfollowed_link(entry, f"{rel}/{name}", place, kinds)
                            if link is not None:
                                links.add(link)
                            continue
                        if not name.endswith(".md"):
                            if not entry.is_file(follow_symlinks=False) and not entry.is_symlink():
                                special = self._special(entry, f"{rel}/{name}", kinds)  # a pipe, a device
                                if special is not None:
                                    links.add(special)
                            continue
                        if state == "nested" or state == "files":
                            kind_name, key = arg, name[:-3]
                        elif state == "runs":
                            kind_name, key = "run", arg + name[:-3]
                        elif state == "people-files":
                            kind_name, key = "people", arg + name[:-3]
                        elif state == "task" and name in _TASK_FILES:
                            kind_name, key = _TASK_FILES[name], arg
                        else:
                            continue
                        if kinds is not None and kind_name not in kinds:
                            continue
                        # a plain file, a link to one, or a pipe or device (.md named): each is a
                        # document or a problem; Vault.read never reads a link out of the vault,
                        # and never opens a pipe or device
                        info = entry.stat()
                    except OSError:
                        continue
                    yield name, kind_name, key, info.st_mtime_ns, info.st_size
        except OSError as exc:
            if "/" in rel and os.path.lexists(folder):  # a top folder is folder_problems' to tell
                self._unlisted[rel] = (_place_kind(place), f"cannot be listed ({exc.strerror or exc})", _UNREADABLE_FIX)
            return
        self._unlisted.pop(rel, None)

    def _special(self, entry: os.DirEntry[str], rel: str, kinds: set[str] | None) -> str | None:
        """Record a named pipe, socket or device that is no document (not .md named), so that
        `doctor` names it; it is never opened. Returns its rel when recorded."""
        if kinds is not None:
            return None
        special = special_kind(entry.stat(follow_symlinks=False).st_mode)
        if special is None:
            return None
        self._unlisted[rel] = (None, f"is {special}, not a file: Sentient never opens it", SPECIAL_FIX)
        return rel

    def _unfollowed_link(self, entry: os.DirEntry[str], rel: str, place: _Place, kinds: set[str] | None) -> str | None:
        """Record a link the walk does not follow (to a folder: links inside the vault are never
        followed, so nothing loops or leaves the vault) or cannot (to nothing), so that it is
        reported, not silently skipped. Returns its rel when recorded."""
        kind_name = _place_kind(place)
        if kinds is not None and kind_name not in kinds:
            return None
        if entry.is_dir():
            sub = _subfolder(place, entry.name)
            if sub is None:
                return None
            reason = "is a link to a folder, which Sentient does not follow (so nothing in it is read)"
            fix = "Move the folder itself here (or link the whole vault instead)"
            real = os.path.realpath(entry.path)
            if not real.startswith(f"{self.root}{os.sep}"):
                reason = f"is a link to {real}, a folder outside the vault, which Sentient does not follow " \
                         "(nothing in it is read)"
                fix = "Move the folder itself into the vault in place of the link, or remove the link"
        elif entry.name.endswith(".md") or _subfolder(place, entry.name) is not None:
            target = "something"
            with suppress(OSError):
                target = os.readlink(entry.path)
            reason = f"is a link to {target}, which does not exist"
            fix = "Fix the link or remove it"
        else:
            return None
        self._unlisted[rel] = (kind_name, reason, fix)
        return rel

    def folder_problems(self, kinds: set[str] | None = None) -> list[Problem]:
        """The vault's document folders (memory/, pins/notes/, ...) that are there but cannot be
        listed: a file in a folder's place, a link to nothing, no permission. What they hold is
        unknown, which is not the same as nothing (a walk just finds no files there)."""
        problems: list[Problem] = []
        for rel, kind_name in _FOLDER_KINDS.items():
            if any(rel.startswith(f"{problem.path.name}/") for problem in problems):
                continue  # pins/notes when pins itself is the problem
            path = self.root / rel
            try:
                with os.scandir(path):
                    pass
            except FileNotFoundError:
                if not os.path.lexists(path):
                    continue  # not there at all: simply nothing yet
                reason = "is a link to something that does not exist"
                with suppress(OSError):
                    reason = f"is a link to {os.readlink(path)}, which does not exist"
            except NotADirectoryError:
                reason = "is a file where the folder should be"
            except OSError as exc:
                reason = f"cannot be listed ({exc.strerror})"
            else:
                continue
            problems.append(Problem(path, reason, _UNREADABLE_FIX, kind_name))
        for rel, (unlisted_kind, reason, fix) in sorted(self._unlisted.items()):
            problems.append(Problem(self.root / rel, reason, fix, unlisted_kind))
        return [problem for problem in problems if kinds is None or problem.kind in kinds
                or (problem.path.name == "pins" and not kinds.isdisjoint(_REACH["pins"]))]

    def rel_of(self, path: Path) -> str | None:
        """`path` relative to the vault root ('/'-separated), its folders' links resolved but not
        a link that the file itself is (a link in memory/ is that memory entry, wherever it
        leads: reading it is Vault.read's to refuse); None when it is not in the vault."""
        try:
            return (Path(os.path.realpath(path.parent)) / path.name).relative_to(self.root).as_posix()
        except ValueError:
            return None

    def classify_path(self, path: Path) -> tuple[str, str] | None:
        found = self.rel_of(path)
        if found is None:
            return None
        rel = PurePosixPath(found)
        if any(part in SKIPPED_DIRS for part in rel.parts):
            return None
        return classify(rel)

    def locate(self, kind_name: str, key: str) -> Path | None:
        """The file of (kind, key), or None. Raises BadFile when two files claim the key."""
        check_key(kind_name, key)
        spec = kind(kind_name)
        if not spec.nested and kind_name != "session":
            path = default_path(self.root, kind_name, key)
            return path if _a_file(path) else None
        base = self.root / spec.folder
        if kind_name == "session":  # one level of month folders: a stat each, not a glob
            name, where = f"{key}.md", str(base)
            matches = sorted(base / month / name for month in _subfolders(where)
                             if _a_file(Path(f"{where}/{month}/{name}")))
        else:
            matches = sorted(p for p in base.glob(f"**/{key}.md") if _a_file(p)) if base.is_dir() else []
        if len(matches) > 1:
            where = ", ".join(str(p.relative_to(self.root)) for p in matches)
            raise BadFile(matches[0], f"the id '{key}' is used by {len(matches)} files ({where})", "Rename all but one")
        return matches[0] if matches else None

    # --- reading ---------------------------------------------------------------------

    def read(self, found_kind: str, key: str, path: Path) -> Document:
        """Parse one file known to be of this kind and key; BadFile when it cannot be, and
        when it is no file of the vault's to read (see check_readable)."""
        self.check_readable(path)
        try:
            check_key(found_kind, key)
        except InvalidId as exc:
            copy = conflict_of(path.name)
            if copy is not None:
                original = path.with_name(copy.original)
                raise BadFile(path, f"is the other side of a conflicting edit of {original.name} from {copy.host}, "
                                    f"kept by `sentient sync`; both are withheld from the model until resolved",
                              f"Compare the two and keep what you want (then remove this copy), or run `sentient "
                              f"resolve {original.stem} --keep mine|theirs|both`") from None
            raise BadFile(path, f"the file name does not make a valid id ({exc.message})", "Rename the file") from None
        return read_file(path, kind=found_kind, key=key, fields=kind(found_kind).fields,
                         max_bytes=self.max_bytes(found_kind))

    def check_readable(self, path: Path) -> None:
        """BadFile unless `path` is a plain file inside the vault: a link (of the file or of a
        folder on the way) whose target is outside the vault, or in a hidden folder of it
        (.sentient/ holds the API token, .git/ the history), is never read, and neither is a
        named pipe, socket or device (opening a pipe waits for a writer: it would hang).

        Costs an lstat a folder below the root when nothing is a link (a few microseconds);
        the full resolution only for a path through a link. A missing file passes: reading it
        says so."""
        text, root = os.fspath(path), str(self.root)
        parts = text[len(root) + 1:].split(os.sep) if text.startswith(root + os.sep) else None
        if parts is None or any(part in ("", ".", "..") for part in parts):
            self._check_resolved(path, linked=True)
            return
        here = root
        for part in parts:
            here = f"{here}{os.sep}{part}"
            try:
                mode = os.lstat(here).st_mode
            except OSError:
                return
            if stat.S_ISLNK(mode):
                self._check_resolved(path, linked=here == text)
                return
        _check_plain(path, mode)

    def _check_writable_folder(self, path: Path) -> None:
        """BadFile, before anything is written, when the folder a new file goes to leads out of
        the vault through a link (memory/ linked to another disk): the vault's files stay in it."""
        real = os.path.realpath(path.parent)
        root = str(self.root)
        if real != root and not real.startswith(root + os.sep):
            folder = next((p for p in [path.parent, *path.parent.parents] if os.path.islink(p)), path.parent)
            raise BadFile(folder, f"is a link to {os.path.realpath(folder)}, outside the vault, so nothing is written "
                                  "in it (nothing was written)",
                          "Move the folder itself into the vault in place of the link, or remove the link")

    def _check_resolved(self, path: Path, *, linked: bool) -> None:
        """check_readable for a path through a link: where it leads, and what is there."""
        real = os.path.realpath(path)
        root = str(self.root)
        how = "is a link to" if linked and os.path.islink(path) else "is reached through a link, leading to"
        if not real.startswith(root + os.sep):
            raise BadFile(path, f"{how} {real}, outside the vault: Sentient does not read it (it is not indexed, "
                                "searched, served or shown to the model)",
                          "Put the file itself in the vault in place of the link, or remove the link")
        hidden = next((part for part in real[len(root) + 1:].split(os.sep) if part.startswith(".")), None)
        if hidden is not None:
            raise BadFile(path, f"{how} {real}, inside {hidden}/, which Sentient never reads as a document "
                                "(it holds Sentient's state or another tool's)",
                          "Remove the link")
        try:
            mode = os.stat(real).st_mode
        except OSError:
            return
        _check_plain(path, mode)

    def max_bytes(self, kind_name: str) -> int:
        """The largest file of this kind the vault reads (and so writes)."""
        return self.max_file_bytes * (SESSION_BYTES_FACTOR if kind_name == "session" else 1)

    def _fits(self, kind_name: str, path: Path, text: str) -> None:
        """TooLarge or BadText, before anything is written, for text the vault would then refuse
        to read."""
        if "\x00" in text:  # read_file takes a file holding one for a binary file
            raise BadText(f"{path}: the text holds a NUL character (U+0000), which would make the file read as "
                          "binary; nothing was written. Remove the NUL and send it again")
        size, limit = len(text.encode("utf-8", "surrogatepass")), self.max_bytes(kind_name)
        if size > limit:
            what = "the session" if kind_name == "session" else "the text"
            fix = ("start a new session" if kind_name == "session" else "shorten it or split it into several entries")
            raise TooLarge(f"{path}: {what} would be {size:,} bytes, over the {limit:,}-byte limit; nothing was "
                           f"written. {fix[0].upper()}{fix[1:]}, or raise limits.max_file_bytes in sentient.yaml")

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
                where = ", ".join(f.rel for f in founds)
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
        return Listing(documents, self.folder_problems(kinds) + problems)

    def documents(self, kind_name: str) -> list[Document]:
        return self.scan({kind_name}).documents

    # --- writing ---------------------------------------------------------------------

    @contextmanager
    def lock(self, kind_name: str, key: str) -> Iterator[None]:
        """Serialise the app's own writers of one document (threads and processes)."""
        path = os.path.join(self.state_dir, "locks", f"{kind_name}--{key.replace('/', '--')}.lock")
        try:  # opened as it is, not truncated: a lock file's content is never used, and this is every write
            handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
        finally:
            os.close(handle)  # closing releases the lock

    def _stamp(self, document: Document, now: str, *, touch: bool = True) -> Document:
        """Fill in what the app maintains on every write: updated (unless not `touch`), revision, threat."""
        names = {f.name for f in document.fields}
        updates: dict[str, Any] = {}
        if "updated" in names and touch:
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
        why: str | None = None,
        source: str | None = None,
    ) -> Document:
        """Write a new document; AlreadyExists if the key is taken. `why` and `source`: what the
        write does and who asked, when not the file's own `source:`, for its commit (see Change)."""
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
        self._check_writable_folder(path)
        fields = kind(kind_name).fields
        names = [f.name for f in fields]
        initial: dict[str, Any] = {}
        if "id" in names:
            initial["id"] = key.rsplit("/", 1)[-1]
        initial.update({k: v for k, v in (meta or {}).items() if v is not None})
        if "created" in names:
            initial.setdefault("created", now)
        document = Document(kind_name, key, path, initial, body, fields)
        _check_characters(document)
        document = self._stamp(document, now)
        text = document.render()
        self._fits(kind_name, path, text)
        with self.lock(kind_name, key):
            written = atomic_write(path, text, ABSENT, self.temp_dir)
        return self._changed("create", why, self._written(kind_name, key, path, text, written), source)

    def update(
        self,
        kind_name: str,
        key: str,
        meta: Mapping[str, Any] | None = None,
        body: str | None = None,
        *,
        expected_revision: str | None = None,
        transform: Callable[[Document], Document] | None = None,
        touch: bool = True,
        why: str | None = None,
        source: str | None = None,
        durable: bool = True,
    ) -> Document:
        """Change a document. `expected_revision` is the content revision the caller read;
        Conflict if the text changed since. `transform` edits the freshly read document.
        `touch=False` leaves `updated` as it is (a write that records, not a change). `why` and
        `source`: as for create. `durable=False`: a crash may lose this write (atomic_write)."""
        with self.lock(kind_name, key):
            current = self.get(kind_name, key)
            if expected_revision is not None and current.revision != expected_revision:
                raise Conflict(current.path, expected_revision, current.revision)
            changed = current.replace(meta, body)
            if transform is not None:
                changed = transform(changed)
            _check_characters(changed)
            document = self._stamp(changed, iso(self.clock()), touch=touch)
            assert current.source is not None
            text = document.render()
            self._fits(kind_name, current.path, text)
            written = atomic_write(current.path, text, current.source.file_hash, self.temp_dir, durable=durable)
        return self._changed("update", why, self._written(kind_name, key, current.path, text, written), source)

    def _written(self, kind_name: str, key: str, path: Path, text: str, file_hash: str) -> Document:
        """The document as just written (what a read of the file would give, without the read)."""
        return parse(text, kind=kind_name, key=key, path=path, fields=kind(kind_name).fields, file_hash=file_hash)

    def _changed(self, action: str, why: str | None, document: Document, source: str | None = None) -> Document:
        """Tell `on_change` of a write just made, and return it. `source`: where the write came
        from, when not the file's own `source:` (a delete's)."""
        if self.on_change is not None:
            rel = self.rel_of(document.path)
            if rel is not None:
                origin = shown_source(source) if source else source_of(document.kind, document.key, rel,
                                                                       {} if action == "delete" else document.meta)
                status = document.meta.get("status") if document.kind == "run" and action != "delete" else None
                self.on_change(Change(rel, document.kind, document.key, action, why or status, origin))
        return document

    def discard_copy(self, path: Path, *, why: str, source: str | None = None) -> None:
        """Remove a conflict copy `sentient sync` kept beside a file (once a person resolved it);
        SentientError for any other file."""
        rel = self.rel_of(path)
        copy = conflict_of(path.name)
        found = classify(PurePosixPath(rel).with_name(copy.original)) if rel and copy else None
        if rel is None or copy is None or found is None:
            raise BadFile(path, "is no conflict copy of a file of the vault", "Name a file `sentient doctor` lists "
                                                                               "as a conflict copy")
        path.unlink(missing_ok=True)
        if self.on_change is not None:
            self.on_change(Change(rel, found[0], found[1], "delete", why, shown_source(source) if source else None))

    def delete(self, kind_name: str, key: str, *, expected_revision: str | None = None, why: str | None = None,
               source: str | None = None) -> Path:
        """Remove a document's file; Conflict if it changed since the caller read it. `why` and
        `source`: what the removal is and who asked, for its commit (see Change)."""
        with self.lock(kind_name, key):
            current = self.get(kind_name, key)
            if expected_revision is not None and current.revision != expected_revision:
                raise Conflict(current.path, expected_revision, current.revision)
            current.path.unlink()
        self._changed("delete", why, current, source)
        return current.path


def _check_characters(document: Document) -> None:
    """BadText, before anything is written, for a lone surrogate (half of a UTF-16 pair, from a
    broken \\u escape or bytes decoded with surrogateescape) in the text or a frontmatter field:
    it is no character, UTF-8 has no bytes for it, and the vault never writes one (not even
    escaped in the frontmatter, where every reader would then have to cope with it)."""
    named = [("the text", document.body), *((f"'{name}'", value) for name, value in document.meta.items())]
    while named:
        field, value = named.pop()
        if isinstance(value, Mapping):
            named += [(field, item) for item in value.values()]
        elif isinstance(value, list | tuple):
            named += [(field, item) for item in value]
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise BadText(
                    f"{document.path}: {field} holds a lone surrogate (U+{ord(value[exc.start]):04X}), half of a "
                    "UTF-16 pair, which is no character and cannot be written as UTF-8; nothing was written. "
                    "Replace it with the character it stood for (or remove it) and send it again"
                ) from None


def _a_file(path: Path) -> bool:
    """A file there (a pipe or device too, which Vault.read then refuses by name without
    opening it), not a folder or a link to nothing."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


_SPECIAL = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"))
SPECIAL_FIX = "Remove it, or move it out of the vault's folders (a note is a plain file)"


def special_kind(mode: int) -> str | None:
    """What a file of this mode is when it is no plain file or folder (a pipe, a device...)."""
    return next((name for test, name in _SPECIAL if test(mode)), None)


def _check_plain(path: Path, mode: int) -> None:
    """BadFile for a named pipe, socket or device: never opened (a pipe would wait for a writer)."""
    special = special_kind(mode)
    if special is not None:
        raise BadFile(path, f"is {special}, not a file: Sentient never opens it", SPECIAL_FIX)


_SUBFOLDERS: dict[str, tuple[int, list[str]]] = {}  # folder -> (its mtime_ns, its subfolders then)


def _subfolders(folder: str) -> list[str]:
    """The names of a folder's subfolders (none when it is missing). Kept until the folder's
    mtime changes, which it does whenever an entry is added to it, removed or renamed; not
    trusted while that mtime is under two seconds old (a file system with coarse times could
    show the same one before and after a change)."""
    try:
        stamp = os.stat(folder).st_mtime_ns
        known = _SUBFOLDERS.get(folder)
        if known is not None and known[0] == stamp and time.time_ns() - stamp > 2_000_000_000:
            return known[1]
        with os.scandir(folder) as entries:
            names = [entry.name for entry in entries if entry.is_dir() and entry.name not in SKIPPED_DIRS]
    except (FileNotFoundError, NotADirectoryError):
        return []
    if len(_SUBFOLDERS) > 64:
        _SUBFOLDERS.clear()
    _SUBFOLDERS[folder] = (stamp, names)
    return names
