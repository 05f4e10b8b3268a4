"""The vault: markdown files with YAML frontmatter, one folder per kind.

The names below are imported on first use, not with the package: a command that needs one
module of it (`sentient search` its kinds' names) does not pay for the store and its imports."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sentient.vault.document import Document, check_id, content_revision
    from sentient.vault.kinds import KINDS
    from sentient.vault.store import Listing, Problem, Vault

# The kinds' names, in KINDS' order (kinds.py checks they are its own): what `sentient search
# --kind` offers, known without importing the kinds and their frontmatter's parser.
KIND_NAMES = ("memory", "note", "plan", "skill", "session", "task", "notepad", "run", "people", "persona")

__all__ = ["KINDS", "KIND_NAMES", "Document", "Listing", "Problem", "Vault", "check_id", "content_revision"]
_HOME = {"Document": "document", "check_id": "document", "content_revision": "document", "KINDS": "kinds",
         "Listing": "store", "Problem": "store", "Vault": "store"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
