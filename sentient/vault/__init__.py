"""The vault: markdown files with YAML frontmatter, one folder per kind."""

from sentient.vault.document import Document, check_id, content_revision
from sentient.vault.kinds import KINDS
from sentient.vault.store import Listing, Problem, Vault

__all__ = ["KINDS", "Document", "Listing", "Problem", "Vault", "check_id", "content_revision"]
