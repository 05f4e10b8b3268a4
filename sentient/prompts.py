"""Prompt templates: Jinja files shipped inside the package (sentient/templates/, which the
repository's top-level templates/ points at), which a vault may override with files of the same
name in its own templates/ folder."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import jinja2

PACKAGE_TEMPLATES = Path(__file__).resolve().parent / "templates"  # package data: in every wheel


class Prompts:
    def __init__(self, vault_root: Path | None = None) -> None:
        folders = [PACKAGE_TEMPLATES]
        if vault_root is not None and (vault_root / "templates").is_dir():
            folders.insert(0, vault_root / "templates")
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader([str(f) for f in folders]),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
            autoescape=False,
        )

    def render(self, name: str, **values: Any) -> str:
        return self.env.get_template(name).render(**values).strip() + "\n"

    def revision(self, name: str) -> str:
        """A hash of the template's source, so a changed template counts as changed content."""
        source, _, _ = self.env.loader.get_source(self.env, name)  # type: ignore[union-attr]
        return "sha256:" + hashlib.sha256(source.encode()).hexdigest()
