"""Session knowledge: what a session must be told (its pinned notes and plans, and the index
of what the agent has remembered), and a signature of it.

The signature covers every delivered item's id and content revision (and what is shown of it
besides, such as a category, or how much of a long pin), the memory index's count, and the
template's own revision, so editing a pinned note or renaming its title re-sends the block,
and nothing else does.

Nothing here may fail a send: `build` raises nothing; a source that cannot be read is left
out and the rest is still delivered. It is never presented as empty: the block says that it
could not be read (memory as a whole, or one pinned note), and points the person to doctor.
Pins too long for the session's budget together are cut (`fitted`), saying so in the block and
to the person (`problems`), rather than overflow the model's context on every send.

Remembered text is quoted data: every title, one-liner and body is passed through `quoted`
(and titles through `one_line`), so no text written to the vault can close the block's tags
or open its own; the template writes only quoted values inside them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from sentient.errors import NotFound, SentientError
from sentient.prompts import Prompts
from sentient.threats.normalisation import UNHIDABLE
from sentient.vault import Vault
from sentient.vault.document import Document
from sentient.vault.kinds import KINDS, check_key, one_line
from sentient.workspace import Workspace

TEMPLATE = "session_knowledge.md.j2"
# What the block's values go through before the template sees them (see `quoted`): counted in
# the signature with the template's own revision, so a change here re-sends every block once.
QUOTING = "quoting:3"
# The pins and the memory index of a block hold at most Settings.knowledge_chars: the pins up
# to this share of it, the index the rest (its newest entries first, as many as fit).
PIN_SHARE = 0.75
LINE_CHARS = 100  # of an index entry's first line ...
TITLE_CHARS = 120  # ... and of its title and category (a hand-written title has no limit)
PIN_KINDS = {"note": "note", "plan": "plan"}

# A '<' (or a look-alike) that could start a tag: a letter, '!' or '?' right after it (invisible
# characters aside: every one the threat scan removes), or a '/' after it past any spaces.
# 'a < b' and '<3' stay as written.
_INVISIBLE = UNHIDABLE.pattern[1:-1]  # the class's contents
_TAG_START = re.compile(rf"[<\uff1c\ufe64\u2039\u2329\u3008\u27e8\u02c2]"
                        rf"(?=[{_INVISIBLE}]*(?:[!?]|[^\W\d_])|[\s{_INVISIBLE}]*/)")


def quoted(text: str) -> str:
    """Remembered text as data inside a wrapper such as <pinned-note>: each '<' that could
    open or close a tag is written '&lt;', so the text can neither end the wrapper nor open a
    tag of its own. Everything else is left as written; a model reads '&lt;/b>' as '</b>'."""
    return _TAG_START.sub("&lt;", text)


def quoted_line(text: str) -> str:
    """A title or other one-line value: line breaks folded to spaces, then quoted."""
    return quoted(one_line(text))


def quoted_attribute(text: str) -> str:
    """A value inside an attribute's double quotes (title="..."): a quoted line without '"'."""
    return quoted_line(text).replace('"', "&quot;")

log = logging.getLogger(__name__)


class QuotedText:
    """Remembered text with a title and a body, as the model is shown them: quoted."""

    title: str
    body: str

    @property
    def shown_title(self) -> str:
        """One line, quoted for an attribute (title="...")."""
        return quoted_attribute(self.title)

    @property
    def shown_body(self) -> str:
        return quoted(self.body.strip())


@dataclass(frozen=True)
class Pin(QuotedText):
    kind: str
    id: str
    title: str
    body: str
    revision: str
    shown_chars: int | None = None  # its quoted body is cut to this many characters (None: shown whole)
    untrusted: bool = False  # written from outside content

    @property
    def shown_title(self) -> str:
        """One line, cut at TITLE_CHARS as an index entry's, quoted for an attribute."""
        return quoted_attribute(shortened(one_line(self.title), TITLE_CHARS))

    @cached_property
    def quoted_body(self) -> str:
        return quoted(self.body.strip())

    @property
    def size(self) -> int:
        """The characters of its quoted body (see `quoted`)."""
        return len(self.quoted_body)

    @cached_property
    def shown(self) -> tuple[str, int]:
        """Its quoted body as the block shows it, and how many characters of the body that is."""
        if self.shown_chars is None or self.size <= self.shown_chars:
            return self.quoted_body, len(self.body.strip())
        return quoted_cut(self.body.strip(), self.shown_chars)

    @property
    def cut(self) -> bool:
        return self.shown[1] < len(self.body.strip())

    @property
    def shown_body(self) -> str:
        text, kept = self.shown
        if not self.cut:
            return text
        return (f"{text}\n... (cut here: the other {len(self.body.strip()) - kept:,} characters of this {self.kind} do "
                "not fit this session, so you have not seen them)")


def quoted_cut(text: str, most: int) -> tuple[str, int]:
    """The longest start of `text` whose quoted form (see `quoted`) holds at most `most`
    characters: that form, and how many characters of `text` it shows. Quoting the start
    (not cutting the quoted text) never leaves half a '&lt;'."""
    most = max(0, most)
    kept = min(len(text), most)
    shown = quoted(text[:kept])
    while len(shown) > most:  # a '<' quoted as '&lt;' takes four: drop at least a quarter of the excess
        kept -= -(-(len(shown) - most) // 4)
        shown = quoted(text[:kept])
    return shown, kept


def fitted(pins: Sequence[Pin], most: int) -> list[Pin]:
    """The pins with their quoted bodies cut so that together they hold at most `most`
    characters: taken shortest first, each is shown whole when it fits an equal share of what
    is left, so short pins leave their room to long ones."""
    left, count = most, len(pins)
    limits: dict[int, int] = {}
    for number in sorted(range(len(pins)), key=lambda n: pins[n].size):
        share = left // count
        size = pins[number].size
        if size > share:
            limits[number] = share
        left -= min(size, share)
        count -= 1
    return [replace(pin, shown_chars=limits[n]) if n in limits else pin for n, pin in enumerate(pins)]


@dataclass(frozen=True)
class Unread:
    """A pin left out because its file could not be read (`missing`: there is no such file)."""

    kind: str
    id: str
    missing: bool


@dataclass(frozen=True)
class IndexEntry:
    id: str
    title: str
    category: str | None
    line: str
    revision: str
    untrusted: bool = False  # written from outside content

    @property
    def shown_title(self) -> str:
        return quoted_line(shortened(one_line(self.title), TITLE_CHARS))

    @property
    def shown_category(self) -> str:
        return quoted_line(shortened(one_line(self.category or ""), TITLE_CHARS))

    @property
    def shown_line(self) -> str:
        return quoted(self.line)

    @cached_property
    def shown_size(self) -> int:
        """About the characters of its line in the block: "- title [category]: line (id: x)"."""
        if self.untrusted:  # its text is left out: see the template
            return len(self.id) + 100
        category = len(self.shown_category) + 3 if self.category else 0
        return len(self.shown_title) + category + len(self.shown_line) + len(self.id) + 12


@dataclass(frozen=True)
class MemoryIndex:
    entries: tuple[IndexEntry, ...]
    total: int
    withheld: int = 0  # entries in scope left out because they read like instructions

    @property
    def more(self) -> int:
        return self.total - len(self.entries)

    def within(self, room: int) -> MemoryIndex:
        """The index with as many of its entries (newest first) as fit in `room` characters, and
        always one: an index of none says nothing is remembered."""
        used = count = 0
        for entry in self.entries:
            used += entry.shown_size
            if used > room and count:
                break
            count += 1
        return self if count == len(self.entries) else replace(self, entries=self.entries[:count])


@dataclass(frozen=True)
class MemoryTools:
    """How the block names the tools that read memory, as its reader has them: the agent reads an
    entry with memory_recall(id=...), an MCP client with memory_read(id)."""

    read: str = "memory_recall"  # the tool that reads one entry
    read_call: str = "memory_recall(id=...)"
    search_call: str = "memory_recall(query=...)"


AGENT_TOOLS = MemoryTools()


@dataclass(frozen=True)
class Knowledge:
    text: str
    signature: str
    pins: tuple[Pin, ...]
    memory: MemoryIndex | None  # None: left out (memory off, absent, or failed to load)
    problems: tuple[str, ...] = ()  # what was left out and why
    unread: tuple[Unread, ...] = ()  # pins that could not be read (the block says so)
    memory_unreadable: bool = False  # memory failed to load (the block says so)
    memory_partial: tuple[str, ...] = ()  # memory subfolders that could not be listed (the block says so)
    outside: tuple[str, ...] = ()  # the pins in the block written from outside content ("note <id>")


def parse_pin(ref: str) -> tuple[str, str]:
    """'note:<id>' or 'plan:<id>' -> (kind, id); ValueError otherwise."""
    kind, _, key = ref.partition(":")
    if kind not in PIN_KINDS or not key:
        raise ValueError(f"pin {ref!r} must be note:<id> or plan:<id>")
    check_key(kind, key)
    return kind, key


def require_pins(vault: Vault, refs: Sequence[str], pinned: Sequence[str] = ()) -> list[str]:
    """Pins about to be set on a session, each naming a note or plan that exists; NotFound
    names the first that does not. Those already `pinned` may stay though their file is gone
    (so a session can still change its other pins, and unpin them)."""
    for ref in refs:
        if ref in pinned:
            continue
        try:
            kind, key = parse_pin(ref)
            found = vault.locate(kind, key)
        except ValueError as exc:
            raise SentientError(f"pins: {exc}") from None
        except OSError as exc:
            raise SentientError(f"pins: {ref} could not be looked up ({exc.strerror}); see `sentient doctor`") from None
        if found is None:
            folder = KINDS[kind].folder
            unreadable = vault.folder_problems({kind})
            if unreadable:
                raise SentientError(f"pins: {ref} cannot be looked for: {unreadable[0]}; see `sentient doctor`")
            raise NotFound(f"pins: there is no {kind} '{key}' to pin (no {key}.md in {folder}/ or its subfolders); "
                           f"pin an existing {kind} or create it first")
    return list(refs)


def first_line(body: str, title: str = "") -> str:
    """The first line of the body that says something beyond the title."""
    for line in body.splitlines():
        stripped = line.strip().lstrip("#").strip()
        if stripped and stripped != title:
            return shortened(stripped, LINE_CHARS)
    return ""


def shortened(text: str, most: int) -> str:
    """The text, or its start and '…' in `most` characters."""
    return text if len(text) <= most else text[: most - 1] + "…"


class KnowledgeBuilder:
    """Builds blocks; keeps the memory index of each scope until the index changes."""

    def __init__(self, workspace: Workspace, prompts: Prompts) -> None:
        self.workspace = workspace
        self.prompts = prompts
        self._cache: dict[tuple[Any, ...], MemoryIndex] = {}
        self._paths: dict[tuple[str, str], Path] = {}
        self._docs: dict[Path, tuple[tuple[int, int], Document]] = {}
        self._lock = threading.Lock()

    def unreadable_kinds(self) -> frozenset[str]:
        """The kinds (memory, note, plan) whose whole folder cannot be listed now (a file in its
        place, a link to nothing, no permission): the problems the vault reports, and doctor
        shows, whose path is the folder itself. A few directory opens, so looked at every time."""
        vault = self.workspace.vault
        folders = {vault.root / KINDS[name].folder: {name} for name in ("memory", *PIN_KINDS)}
        folders[vault.root / "pins"] = set(PIN_KINDS)
        problems = vault.folder_problems({"memory", *PIN_KINDS})
        return frozenset(name for problem in problems for name in folders.get(problem.path, ()))

    def memory_index(self, scope: str | None) -> MemoryIndex:
        """Unflagged memory entries in the global scope and the session's scope, newest first."""
        index = self.workspace.index
        key = (index.version_of("memory"), scope, self.workspace.judge_fingerprint)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        withheld = self.workspace.withheld_row
        scopes = ["global", scope] if scope else ["global"]
        shown = self.workspace.settings.chat.knowledge_entries
        if index.judge_version == key[2]:
            # The index judged every row with the set judging now: only a row it flagged can be
            # withheld, so the newest few are read, not every entry (a vault of a million).
            hidden = {row.key for row in index.newest("memory", scopes, flagged=True) if withheld(row)}
            hidden |= self.workspace.conflicted("memory")  # in a sync conflict: neither side is told
            rows = [row for row in index.newest("memory", scopes, limit=shown + len(hidden)) if row.key not in hidden]
            total = index.count("memory", scopes) - len(hidden)
            left = len(hidden)
        else:
            every = index.newest("memory", scopes)
            rows = [row for row in every if not withheld(row)]
            total, left = len(rows), len(every) - len(rows)
        entries = tuple(IndexEntry(row.key, row.title, row.category, first_line(row.body, row.title), row.revision,
                                   row.untrusted) for row in rows[:shown])
        built = MemoryIndex(entries, total, left)
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

    def pins(self, refs: Sequence[str]) -> tuple[list[Pin], list[Unread], list[str]]:
        """The session's pins, read from their files (not the index, so they arrive even when
        the memory store or the index cannot be read), the pins that could not be read, and
        what was left out and why."""
        pins: list[Pin] = []
        unread: list[Unread] = []
        problems: list[str] = []
        for ref in refs:
            try:
                kind, key = parse_pin(ref)
            except Exception as exc:
                problems.append(f"{ref}: {exc}")
                continue
            try:
                doc = self._read_pin(kind, key)
            except Exception as exc:
                problems.append(f"{ref}: {exc}")
                unread.append(Unread(kind, key, isinstance(exc, NotFound) and not self._folder_failed(kind)))
                continue
            if self.workspace.in_conflict(kind, key, doc.path):
                problems.append(f"{ref}: withheld, edited on two machines: a sync kept both sides (sentient doctor)")
            elif not self.workspace.visible(doc):
                problems.append(f"{ref}: withheld, it reads like instructions")
            else:
                outside = doc.meta.get("untrusted") is True
                pins.append(Pin(kind, key, doc.title, doc.body, doc.revision, untrusted=outside))
        most = int(self.workspace.settings.knowledge_chars * PIN_SHARE)
        pins = fitted(pins, most)
        problems += [f"{pin.kind}:{pin.id}: only its first {pin.shown[1]:,} of {len(pin.body.strip()):,} characters "
                     f"are shown (a session's pins share {most:,} characters; see chat.context_tokens in "
                     "docs/configuration.md); shorten it or split it" for pin in pins if pin.cut]
        return pins, unread, problems

    def pin_problems(self, refs: Sequence[str]) -> list[str]:
        """What of these pins a session is not shown, and why (cut to fit, withheld, unreadable):
        for the person, when they pin."""
        return self.pins(refs)[2]

    def _folder_failed(self, kind: str) -> bool:
        try:
            return kind in self.unreadable_kinds()
        except Exception:  # not even that could be looked at: say it failed, not that it is gone
            return True

    def build(self, *, pins: Sequence[str], scope: str | None, memory_allowed: bool,
              tools: MemoryTools = AGENT_TOOLS) -> Knowledge | None:
        """The block for a session, or None when there is nothing to tell or it failed. `tools`:
        how its reader reads memory (the agent's tools unless said)."""
        try:
            return self._build(pins, scope, memory_allowed, tools)
        except Exception:
            log.exception("session knowledge could not be built; sending without it")
            return None

    def _build(self, refs: Sequence[str], scope: str | None, memory_allowed: bool,
               tools: MemoryTools) -> Knowledge | None:
        pins, unread, problems = self.pins(refs)
        memory: MemoryIndex | None = None
        memory_unreadable = False
        partial: tuple[str, ...] = ()
        if memory_allowed:
            try:
                if "memory" in self.unreadable_kinds():  # its entries are unknown, not none
                    problems.append(f"memory index: the folder {self.workspace.vault.root / 'memory'} cannot be "
                                    "listed; see `sentient doctor`")
                    memory_unreadable = True
                else:
                    shown = sum(len(pin.shown[0]) for pin in pins)
                    memory = self.memory_index(scope).within(self.workspace.settings.knowledge_chars - shown)
                    partial = self.unlisted_memory_folders()
            except Exception as exc:  # a failed store is left out, never shown as empty
                log.warning("memory index left out of session knowledge: %s", exc)
                problems.append(f"memory index: {exc}")
                memory_unreadable = True
        if not pins and not unread and memory is None and not memory_unreadable:
            return None
        problems += [f"memory index: the folder {folder} cannot be listed; see `sentient doctor`" for folder in partial]
        text = self.prompts.render(TEMPLATE, pins=pins, unread=unread, memory=memory,
                                   memory_unreadable=memory_unreadable, memory_partial=partial, tools=tools)
        signature = signature_of(f"{self.prompts.revision(TEMPLATE)}+{QUOTING}", pins, memory,
                                 unread=unread, memory_unreadable=memory_unreadable, memory_partial=partial)
        # A pin from outside content is in the block whole; an entry of the index is not (the
        # template leaves its text out, so that one such entry does not mark every turn).
        outside = [f"{pin.kind} {pin.id}" for pin in pins if pin.untrusted]
        return Knowledge(text, signature, tuple(pins), memory, tuple(problems), tuple(unread), memory_unreadable,
                         partial, tuple(outside))

    def unlisted_memory_folders(self) -> tuple[str, ...]:
        """Folders inside memory/ that the last look at the vault could not list (their entries
        are missing from the index, not forgotten)."""
        vault = self.workspace.vault
        top = vault.root / KINDS["memory"].folder
        return tuple(problem.path.relative_to(vault.root).as_posix()
                     for problem in vault.folder_problems({"memory"}) if problem.path != top)


def signature_of(
    template_revision: str,
    pins: Sequence[Pin],
    memory: MemoryIndex | None,
    *,
    unread: Sequence[Unread] = (),
    memory_unreadable: bool = False,
    memory_partial: Sequence[str] = (),
) -> str:
    payload: dict[str, Any] = {
        "template": template_revision,
        "pins": [[p.kind, p.id, p.revision, *([p.shown_chars] if p.cut else [])] for p in pins],
        "memory": None
        if memory is None
        else [memory.total, [[e.id, e.revision, e.category] for e in memory.entries]],
    }
    if unread:
        payload["unread"] = [[u.kind, u.id, u.missing] for u in unread]
    if memory_unreadable:
        payload["memory_unreadable"] = True
    if memory_partial:
        payload["memory_partial"] = list(memory_partial)
    digest = hashlib.sha256(json.dumps(payload, separators=(",", ":")).encode()).hexdigest()
    return f"sha256:{digest}"
