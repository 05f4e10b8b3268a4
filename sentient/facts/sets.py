"""A caller's fact set for one persona, `people/<user>/<persona>.md`, as it is read and told.

Read on the turn path: one stat, and a read only when the file changed (cached by its
mtime, size and inode, and by the threat patterns judging now). Each fact line is judged on
its own, and the lines the model would be told are judged together too: a flagged line (or
all of them, when only their sum reads like instructions) is withheld from the model and
shown to the person, unless the person allowed the file's revision. Lines that are not facts
are the person's own and are never told.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from sentient.errors import BadFile, SentientError
from sentient.knowledge import quoted_line
from sentient.prompts import Prompts
from sentient.vault import transcript
from sentient.vault.document import Document
from sentient.vault.kinds import check_key, default_path, one_line
from sentient.vault.people import FACT_LINE, Fact
from sentient.workspace import Workspace

TEMPLATE = "facts.md.j2"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShownFact:
    category: str
    sentence: str
    withheld: bool = False
    patterns: tuple[str, ...] = ()

    @property
    def fact(self) -> Fact:
        return Fact(self.category, self.sentence)

    @property
    def shown_category(self) -> str:
        return quoted_line(self.category)

    @property
    def shown_sentence(self) -> str:
        return quoted_line(self.sentence)

    @property
    def shown_json(self) -> str:
        """The fact as the extraction's reply writes one: {"category": ..., "text": ...}, with
        every '<' written \\u003c, so the text can neither end the wrapper nor open a tag, and a
        model that copies it gives back exactly the fact (where '&lt;' would come back as such)."""
        fact = json.dumps({"category": one_line(self.category), "text": one_line(self.sentence)}, ensure_ascii=False)
        return fact.replace("<", "\\u003c")

    def as_dict(self) -> dict[str, Any]:
        return {"category": self.category, "text": self.sentence, "withheld": self.withheld,
                "patterns": list(self.patterns)}


@dataclass(frozen=True)
class Told:
    """The facts message of a turn, and whether the set was written from outside content."""

    text: str
    untrusted: bool


def persons_messages(messages: tuple[transcript.Message, ...]) -> int:
    """How many messages of the person a transcript holds (what `facts_read` counts)."""
    return sum(1 for m in messages if m.role == "user" and m.text.strip())


@dataclass(frozen=True)
class FactSet:
    user: str
    persona: str
    path: str  # relative to the vault
    exists: bool
    facts: tuple[ShownFact, ...] = ()
    revision: str | None = None  # the file's content revision as read (None: no file)
    turns_seen: int = 0
    updated: str | None = None
    document: Document | None = None

    @property
    def untrusted(self) -> bool:
        return self.document is not None and self.document.meta.get("untrusted") is True

    @property
    def visible(self) -> list[ShownFact]:
        return [fact for fact in self.facts if not fact.withheld]

    @property
    def withheld(self) -> list[ShownFact]:
        return [fact for fact in self.facts if fact.withheld]

    def as_dict(self) -> dict[str, Any]:
        return {"user": self.user, "persona": self.persona, "path": self.path, "revision": self.revision,
                "updated": self.updated, "turns_seen": self.turns_seen,
                "facts": [fact.as_dict() for fact in self.facts],
                "withheld": len(self.withheld)}


def read_set(workspace: Workspace, user: str, persona: str) -> FactSet:
    """The set as it is on disk now, judged; an empty set when there is no file. BadFile when
    the file cannot be read (bad YAML, not UTF-8, too large, a wrong field type)."""
    key = check_key("people", f"{user}/{persona}")
    path = default_path(workspace.vault.root, "people", key)
    rel = path.relative_to(workspace.vault.root).as_posix()
    if not path.is_file():
        return FactSet(user, persona, rel, exists=False)
    document = workspace.vault.read("people", key, path)
    turns = document.meta.get("turns_seen")
    updated = document.meta.get("updated")
    return FactSet(user, persona, rel, True, judged_facts(workspace, document), document.revision,
                   turns if isinstance(turns, int) else 0, updated if isinstance(updated, str) else None, document)


def judged_facts(workspace: Workspace, document: Document) -> tuple[ShownFact, ...]:
    """The document's facts, each judged now (see the module's docstring)."""
    facts = [Fact(m.group("category").strip(), m.group("sentence"))
             for m in map(FACT_LINE.match, document.body.splitlines()) if m]
    judge = workspace.judge
    flagged, _, withheld = workspace.judgment_of(document)
    if flagged and not withheld:  # the person allowed this revision of the file
        return tuple(ShownFact(f.category, f.sentence) for f in facts)
    shown = []
    for fact in facts:
        judgment = judge.judge(fact.render())
        shown.append(ShownFact(fact.category, fact.sentence, judgment.flagged, judgment.patterns))
    together = "\n".join(f.fact.render() for f in shown if not f.withheld)
    if together and len(shown) > 1:
        judgment = judge.judge(together)
        if judgment.flagged:  # no line alone, but what the model would read together
            return tuple(ShownFact(f.category, f.sentence, True, f.patterns or judgment.patterns) for f in shown)
    return tuple(shown)


def render_told(prompts: Prompts, facts: list[ShownFact]) -> str | None:
    """The system message a turn gets: what you already know about this person (None: nothing)."""
    if not facts:
        return None
    return prompts.render(TEMPLATE, facts=facts)


class FactReader:
    """The turn path's read of a set: one stat, a read and judgment only when the file or the
    patterns changed. Never raises: a set that cannot be read is left out of the turn, and the
    failure is logged once per state of the file."""

    def __init__(self, workspace: Workspace, prompts: Prompts) -> None:
        self.workspace = workspace
        self.prompts = prompts
        self._cache: dict[str, tuple[tuple[Any, ...], Told | None]] = {}
        self._logged: set[tuple[Any, ...]] = set()
        self._lock = threading.Lock()

    def told(self, user: str, persona: str) -> Told | None:
        """The facts message for (user, persona), or None (no file, no visible fact, unreadable)."""
        key = f"{user}/{persona}"
        state: tuple[Any, ...] | None = None
        try:
            path = default_path(self.workspace.vault.root, "people", check_key("people", key))
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                return None
            held = self.workspace.in_conflict("people", key, path)  # a sync kept both sides: neither is told
            state = (stat.st_mtime_ns, stat.st_size, stat.st_ino, self.workspace.judge_fingerprint, held)
            with self._lock:
                cached = self._cache.get(key)
            if cached is not None and cached[0] == state:
                return cached[1]
            message = None
            if not held:
                facts = read_set(self.workspace, user, persona)
                text = render_told(self.prompts, facts.visible)
                message = Told(text, facts.untrusted) if text is not None else None
        except (SentientError, OSError) as exc:
            self._log_once(key, state, exc)
            return None
        with self._lock:
            if len(self._cache) > 1024:
                self._cache.clear()
            self._cache[key] = (state, message)
        return message

    def _log_once(self, key: str, state: tuple[Any, ...] | None, exc: BaseException) -> None:
        reason = exc.message if isinstance(exc, SentientError) else str(exc)
        mark = (key, state, reason)
        with self._lock:
            if mark in self._logged:
                return
            if len(self._logged) > 1024:
                self._logged.clear()
            self._logged.add(mark)
        where = exc.path if isinstance(exc, BadFile) else f"people/{key}.md"
        log.warning("facts about %s left out of the turn (the turn goes on without them): %s: %s",
                    key, where, reason)
