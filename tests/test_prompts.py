"""Prompt templates: shipped inside the package, read from the repository's templates/, and
overridden one by one by a vault's own templates/ folder."""

from __future__ import annotations

from pathlib import Path

import sentient
from sentient.prompts import PACKAGE_TEMPLATES, Prompts

ROOT = Path(__file__).resolve().parents[1]


def test_the_templates_live_in_the_package_and_the_top_level_folder_shows_them() -> None:
    assert PACKAGE_TEMPLATES == Path(sentient.__file__).resolve().parent / "templates"
    shipped = sorted(path.name for path in PACKAGE_TEMPLATES.glob("*.j2"))
    assert "system.md.j2" in shipped
    assert sorted(path.name for path in (ROOT / "templates").glob("*.j2")) == shipped
    assert (ROOT / "templates").resolve() == PACKAGE_TEMPLATES


def test_a_vault_template_overrides_that_one_only(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "helper.md.j2").write_text("Mine: {{ goal }}\n")
    prompts = Prompts(tmp_path)
    assert prompts.render("helper.md.j2", goal="find it", memory_allowed=True, user_name=None) == "Mine: find it\n"
    shipped = Prompts().render("reader.md.j2", tool="web_fetch", question="what?", output="text")
    assert prompts.render("reader.md.j2", tool="web_fetch", question="what?", output="text") == shipped
    assert prompts.revision("helper.md.j2") != Prompts().revision("helper.md.j2")
