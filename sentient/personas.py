"""Personas: `personas/<id>.md`, a name (frontmatter `name:`) and a system prompt (the body).

A chat names its persona (`character_id` on /api/chat, the `model` on /v1, `--persona` on the
CLI); its prompt follows Sentient's own in the turn's first system message. A persona's prompt
is judged like any entry on every read: one that reads like an injection is withheld (the turn
goes on without it, logged once per revision) until the person allows that revision
(`sentient memory allow persona:<id>`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sentient.errors import BadFile, NotFound
from sentient.vault.document import Document, check_id
from sentient.vault.kinds import one_line
from sentient.workspace import Workspace

log = logging.getLogger(__name__)
_WARNED: set[tuple[str, str]] = set()  # (persona, revision) withheld and already logged


class UnknownPersona(NotFound):
    """A chat named a persona the vault does not have."""


@dataclass(frozen=True)
class Persona:
    id: str
    name: str
    prompt: str
    path: str  # relative to the vault
    revision: str
    flagged: bool
    withheld: bool
    patterns: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {"id": self.id, "name": self.name, "path": self.path, "revision": self.revision,
                "flagged": self.flagged, "withheld": self.withheld, "patterns": list(self.patterns),
                "prompt": self.prompt}


def known_ids(workspace: Workspace) -> list[str]:
    """The ids of the vault's personas (files in personas/), sorted."""
    return sorted(found.key for found in workspace.vault.walk({"persona"}))


def list_personas(workspace: Workspace) -> list[Persona]:
    """Every persona that can be read, judged now; unreadable files are `sentient doctor`'s to tell."""
    return [_persona(workspace, doc) for doc in workspace.vault.documents("persona")]


def get_persona(workspace: Workspace, persona_id: str, what: str = "character_id") -> Persona:
    """The persona `persona_id`; UnknownPersona (404) naming the known ones when there is none."""
    check_id(persona_id, what)
    path = workspace.vault.locate("persona", persona_id)
    if path is None:
        known = known_ids(workspace)
        listed = ", ".join(known) if known else "none yet: add personas/<id>.md to the vault"
        raise UnknownPersona(f"{what}: there is no persona '{persona_id}' (no personas/{persona_id}.md); "
                             f"the known personas are: {listed}")
    return _persona(workspace, workspace.vault.read("persona", persona_id, path))


def prompt_of(workspace: Workspace, persona_id: str) -> str | None:
    """The persona's system prompt as the turn sends it, or None: withheld (logged once per
    revision), gone or unreadable since the session began (logged), or empty."""
    try:
        persona = get_persona(workspace, persona_id)
    except (NotFound, BadFile) as exc:
        log.warning("persona %s left out of this turn: %s", persona_id, exc.message)
        return None
    if persona.withheld:
        if (persona.id, persona.revision) not in _WARNED:
            _WARNED.add((persona.id, persona.revision))
            log.warning("persona %s is withheld (its prompt reads like an injection: %s); turns with it go on "
                        "without its prompt until you allow it: sentient memory allow persona:%s",
                        persona.id, ", ".join(persona.patterns), persona.id)
        return None
    return persona.prompt or None


def _persona(workspace: Workspace, doc: Document) -> Persona:
    flagged, patterns, withheld = workspace.judgment_of(doc)
    name = doc.meta.get("name")
    return Persona(
        id=doc.key,
        name=one_line(name) if isinstance(name, str) and name.strip() else doc.key,
        prompt=doc.body.strip(),
        path=doc.path.relative_to(workspace.vault.root).as_posix(),
        revision=doc.revision,
        flagged=flagged,
        withheld=withheld,
        patterns=patterns,
    )
