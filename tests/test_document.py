"""Documents: exact round trips, content revisions, titles, minimal edits, typed fields, ids."""

from __future__ import annotations

import difflib
import re
from pathlib import Path, PurePosixPath

import pytest

from sentient.errors import BadFile, InvalidId
from sentient.vault.document import Document, check_id, content_revision, parse
from sentient.vault.kinds import KINDS, classify

TESTS = Path(__file__).resolve().parent
VAULTS = TESTS / "fixtures" / "vaults"
EXAMPLE_VAULT = TESTS.parent / "vault"
VAULT_ROOTS = [*(path for path in sorted(VAULTS.iterdir()) if path.is_dir()), EXAMPLE_VAULT]

# The files of the broken vault that are broken on purpose: they cannot be parsed.
UNPARSEABLE = {
    "broken/memory/bad-yaml.md",
    "broken/memory/unclosed-frontmatter.md",
    "broken/memory/latin1.md",
    "broken/memory/scan.md",
    "broken/memory/wrong-untrusted.md",
    "broken/memory/wrong-created.md",
    "broken/memory/wrong-title.md",
}

MEMORY_FIELDS = KINDS["memory"].fields


def _name(path: Path) -> str:
    root = next(root for root in VAULT_ROOTS if root in path.parents)
    return f"{root.name}/{path.relative_to(root).as_posix()}"


def _markdown_files() -> list[Path]:
    files = [path for root in VAULT_ROOTS for path in sorted(root.rglob("*.md"))]
    return [path for path in files if _name(path) not in UNPARSEABLE]


def _parse_file(path: Path) -> Document:
    root = next(root for root in VAULT_ROOTS if root in path.parents)
    found = classify(PurePosixPath(path.relative_to(root).as_posix()))
    kind_name, key = found if found is not None else ("memory", path.stem)
    fields = KINDS[kind_name].fields if found is not None else ()
    return parse(path.read_bytes().decode("utf-8"), kind=kind_name, key=key, path=path, fields=fields)


def _memory(text: str, key: str = "entry") -> Document:
    return parse(text, kind="memory", key=key, path=Path(f"memory/{key}.md"), fields=MEMORY_FIELDS)


def _changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.ndiff(before.splitlines(keepends=True), after.splitlines(keepends=True))
        if line.startswith(("- ", "+ "))
    ]


# --- round trips ----------------------------------------------------------------------------


def test_every_fixture_vault_has_files_to_check() -> None:
    names = {_name(path).split("/")[0] for path in _markdown_files()}
    assert names == {"basic", "hostile", "broken", "vault"}


@pytest.mark.parametrize("path", _markdown_files(), ids=_name)
def test_unchanged_file_renders_byte_for_byte(path: Path) -> None:
    text = path.read_bytes().decode("utf-8")
    assert _parse_file(path).render() == text


@pytest.mark.parametrize("path", _markdown_files(), ids=_name)
def test_replacing_a_value_with_itself_changes_nothing(path: Path) -> None:
    document = _parse_file(path)
    same = document.replace(dict(document.meta), document.body)
    assert same.render() == path.read_bytes().decode("utf-8")


def test_app_written_fixture_is_not_edited_outside() -> None:
    document = _parse_file(VAULTS / "basic/memory/family/anika-teacher.md")
    assert document.stored_revision == document.revision
    assert not document.edited_outside


def test_hand_made_fixture_counts_as_edited_outside() -> None:
    document = _parse_file(VAULTS / "basic/memory/family/parents-visit.md")
    assert document.stored_revision is None
    assert document.edited_outside


# --- revisions ------------------------------------------------------------------------------


def test_editing_the_body_changes_the_revision() -> None:
    document = _parse_file(VAULTS / "basic/memory/morning-runs.md")
    edited = _memory(document.render().replace("06:30", "06:00"), "morning-runs")
    assert edited.revision != document.revision
    assert document.replace(body=document.body + "Also on Thursdays.\n").revision != document.revision


def test_editing_the_title_changes_the_revision() -> None:
    document = _parse_file(VAULTS / "basic/memory/morning-runs.md")
    assert document.replace({"title": "Maya runs 10 km"}).revision != document.revision


def test_editing_only_a_frontmatter_field_keeps_the_revision() -> None:
    document = _parse_file(VAULTS / "basic/memory/morning-runs.md")
    text = document.render()
    edited = _memory(text.replace("category: health", "category: fitness"), "morning-runs")
    assert edited.meta["category"] == "fitness"
    assert edited.revision == document.revision
    assert document.replace({"untrusted": True, "scope": "ledger-app"}).revision == document.revision


def test_revision_is_a_hash_of_title_and_body() -> None:
    document = _memory("---\ntitle: Biscuit\n---\nA ginger cat.\n")
    assert document.revision == content_revision("Biscuit", "A ginger cat.\n")
    assert document.revision.startswith("sha256:")


# --- titles ---------------------------------------------------------------------------------


def test_title_comes_from_frontmatter() -> None:
    assert _memory("---\ntitle: '  Biscuit  '\n---\n# Heading\n").title == "Biscuit"


def test_title_falls_back_to_first_heading() -> None:
    assert _parse_file(VAULTS / "basic/memory/family/parents-visit.md").title == "Parents visit in December"


def test_title_falls_back_to_first_line_of_text() -> None:
    document = _memory("---\ncategory: home\n---\n\n\nRent is due on the 5th.\nSecond line.\n")
    assert document.title == "Rent is due on the 5th."


def test_blank_title_falls_back_to_the_body() -> None:
    assert _memory("---\ntitle: ''\n---\n## Biscuit\n").title == "Biscuit"


def test_empty_document_is_titled_by_its_id() -> None:
    assert _memory("", "empty-entry").title == "empty-entry"
    assert _memory("---\ncategory: x\n---\n", "no-body").title == "no-body"


# --- minimal edits ----------------------------------------------------------------------------


HAND_MADE = """\
---
# Written by hand in my editor.
source: "user"   # I typed this one
title: 'Maya likes filter coffee'
# the category is a free word
category: food
mood: happy
tags:
  - coffee
  - mornings
scope:
created: 2026-11-30
---
Maya drinks strong filter coffee.
"""


def test_changing_one_key_changes_only_its_line() -> None:
    path = VAULTS / "basic/memory/filter-coffee.md"
    text = path.read_text(encoding="utf-8")
    rendered = _parse_file(path).replace({"category": "drinks"}).render()
    assert _changed_lines(text, rendered) == ["- category: food   # free word\n", "+ category: drinks\n"]


def test_adding_a_key_appends_one_line_and_keeps_the_rest() -> None:
    path = VAULTS / "basic/memory/filter-coffee.md"
    text = path.read_text(encoding="utf-8")
    rendered = _parse_file(path).replace({"untrusted": True}).render()
    assert _changed_lines(text, rendered) == ["+ untrusted: true\n"]
    assert rendered.index("untrusted: true") > rendered.index("created: 2026-10-01")


def test_removing_a_key_removes_only_its_lines() -> None:
    rendered = _memory(HAND_MADE).replace({"tags": None}).render()
    assert _changed_lines(HAND_MADE, rendered) == ["- tags:\n", "-   - coffee\n", "-   - mornings\n"]


def test_comment_above_a_key_stays_when_the_key_before_it_changes() -> None:
    rendered = _memory(HAND_MADE).replace({"title": "Filter coffee"}).render()
    assert _changed_lines(HAND_MADE, rendered) == [
        "- title: 'Maya likes filter coffee'\n",
        "+ title: Filter coffee\n",
    ]
    assert "# the category is a free word\ncategory: food\n" in rendered


def test_empty_key_on_disk_keeps_its_line_when_another_key_changes() -> None:
    rendered = _memory(HAND_MADE).replace({"mood": "content"}).render()
    assert _changed_lines(HAND_MADE, rendered) == ["- mood: happy\n", "+ mood: content\n"]
    assert "\nscope:\n" in rendered


def test_setting_an_empty_key_fills_its_line_in_place() -> None:
    rendered = _memory(HAND_MADE).replace({"scope": "global"}).render()
    assert _changed_lines(HAND_MADE, rendered) == ["- scope:\n", "+ scope: global\n"]


def test_new_body_keeps_every_frontmatter_line() -> None:
    rendered = _memory(HAND_MADE).replace(body="Maya drinks filter coffee, no sugar.\n").render()
    assert _changed_lines(HAND_MADE, rendered) == [
        "- Maya drinks strong filter coffee.\n",
        "+ Maya drinks filter coffee, no sugar.\n",
    ]


def test_file_without_frontmatter_gets_one_only_when_a_field_is_set() -> None:
    path = VAULTS / "basic/memory/family/parents-visit.md"
    text = path.read_text(encoding="utf-8")
    document = _parse_file(path)
    assert document.replace(body=document.body).render() == text
    rendered = document.replace({"category": "family"}).render()
    assert rendered == "---\ncategory: family\n---\n\n" + text


def test_multi_line_text_is_written_on_one_line_and_reads_back() -> None:
    rendered = _memory("---\ntitle: x\n---\nbody\n").replace({"source": "user\nsecond line"}).render()
    assert 'source: "user\\nsecond line"\n' in rendered
    assert _memory(rendered).meta["source"] == "user\nsecond line"


# --- types ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "field", "expected"),
    [
        ("title: yes", "title", "yes"),
        ("title: no", "title", "no"),
        ("title: 1.0", "title", "1.0"),
        ("title: 007", "title", "007"),
        ("created: 2026-11-30", "created", "2026-11-30"),
        ("created: 2026-11-30T10:00:00Z", "created", "2026-11-30T10:00:00Z"),
        ("category: null-hypothesis", "category", "null-hypothesis"),
        ("mood: on", "mood", "on"),
    ],
)
def test_yaml_1_1_look_alikes_read_back_as_text(line: str, field: str, expected: str) -> None:
    document = _memory(f"---\n{line}\n---\nbody\n")
    assert document.meta[field] == expected
    assert isinstance(document.meta[field], str)


@pytest.mark.parametrize(("line", "expected"), [("untrusted: true", True), ("untrusted: no", False)])
def test_booleans_read_as_booleans(line: str, expected: bool) -> None:
    assert _memory(f"---\n{line}\n---\n").meta["untrusted"] is expected


def test_empty_known_field_reads_as_absent() -> None:
    document = _memory("---\ncategory:\nscope: ~\n---\nbody\n")
    assert "category" not in document.meta
    assert "scope" not in document.meta


def test_threat_mapping_reads_as_typed_values() -> None:
    text = (
        "---\ntitle: x\nthreat:\n  flagged: true\n  patterns: [override-instructions]\n"
        "  pattern_set: 3\n  allowed_revision: null\n---\nbody\n"
    )
    document = _memory(text)
    assert document.meta["threat"] == {"flagged": True, "patterns": ["override-instructions"], "pattern_set": 3,
                                       "allowed_revision": None}
    assert document.render() == text


@pytest.mark.parametrize(
    ("kind_name", "line", "field", "expected"),
    [
        ("memory", "untrusted: maybe", "untrusted", "true or false"),
        ("memory", "created: last tuesday", "created", "an ISO date"),
        ("memory", "title: [a, b]", "title", "a single line of text"),
        ("memory", "title: {text: x}", "title", "a single line of text"),
        ("memory", "threat: yes", "threat", "a mapping"),
        ("memory", "threat: {flagged: true, colour: red}", "threat", "unknown: colour"),
        ("session", "pins: note:a", "pins", "a list such as [a, b]"),
        ("session", "pins: [[a]]", "pins", "a list such as [a, b]"),
        ("task", "enabled: sometimes", "enabled", "true or false"),
        ("people", "updated: soon", "updated", "an ISO date"),
    ],
)
def test_wrong_type_is_a_bad_file_naming_the_field(kind_name: str, line: str, field: str, expected: str) -> None:
    path = Path(f"{kind_name}/entry.md")
    with pytest.raises(BadFile) as caught:
        parse(f"---\n{line}\n---\nbody\n", kind=kind_name, key="entry", path=path, fields=KINDS[kind_name].fields)
    assert caught.value.path == path
    assert caught.value.reason.startswith(f"field '{field}' must be ")
    assert expected in caught.value.reason
    assert caught.value.fix == f"Fix the '{field}:' line in the frontmatter"


def test_invalid_yaml_is_a_bad_file_with_its_line() -> None:
    with pytest.raises(BadFile) as caught:
        _memory("---\ntitle: [unfinished\ncategory: work\n---\nbody\n")
    assert caught.value.reason == "frontmatter is not valid YAML at line 3"


def test_unclosed_frontmatter_is_a_bad_file() -> None:
    with pytest.raises(BadFile) as caught:
        _memory("---\ntitle: Standup\n\nno closing line\n")
    assert caught.value.reason == "frontmatter opens with '---' but never closes"
    assert caught.value.fix == "Add a closing '---' line"


def test_frontmatter_that_is_not_a_mapping_is_a_bad_file() -> None:
    with pytest.raises(BadFile) as caught:
        _memory("---\n- just\n- a list\n---\nbody\n")
    assert caught.value.reason == "frontmatter must be 'key: value' lines"


# --- ids --------------------------------------------------------------------------------------


RULE = "use 1-80 characters of a-z, 0-9 and '-', starting with a letter or digit (no '/', '..', spaces or capitals)"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("../x", "'../x'"),
        ("a/b", "'a/b'"),
        ("", "''"),
        ("a" * 200, "'" + "a" * 40 + "...'"),
        ("Upper", "'Upper'"),
        ("-x", "'-x'"),
        ("my note", "'my note'"),
        ("a" * 81, "'" + "a" * 40 + "...'"),
    ],
)
def test_bad_id_is_refused_with_the_rule(value: str, shown: str) -> None:
    with pytest.raises(InvalidId) as caught:
        check_id(value)
    assert str(caught.value) == f"id {shown} is not allowed: {RULE}"


def test_refusal_names_what_the_id_was_for() -> None:
    with pytest.raises(InvalidId, match=r"^memory id '\.\./\.\./etc' is not allowed"):
        check_id("../../etc", "memory id")


@pytest.mark.parametrize("value", ["a", "0", "anika-teacher", "2026-11", "run-20261102-0900", "a" * 80])
def test_good_id_is_returned(value: str) -> None:
    assert check_id(value) == value


# --- docs/vault-format.md -----------------------------------------------------------------------


VAULT_FORMAT = TESTS.parent / "docs" / "vault-format.md"
DOC_EXAMPLE = re.compile(r"^From `(?P<path>[^`]+)`:\n\n```[a-z]*\n(?P<text>.*?)^```\n", re.MULTILINE | re.DOTALL)


def test_vault_format_examples_are_the_fixture_files() -> None:
    examples = list(DOC_EXAMPLE.finditer(VAULT_FORMAT.read_text(encoding="utf-8")))
    assert len(examples) >= 8
    for example in examples:
        text = (TESTS.parent / example["path"]).read_text(encoding="utf-8")
        assert text.startswith(example["text"]), f"docs/vault-format.md no longer matches {example['path']}"


@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_vault_format_documents_every_field(kind_name: str) -> None:
    doc = VAULT_FORMAT.read_text(encoding="utf-8")
    for spec in KINDS[kind_name].fields:
        assert f"| `{spec.name}` |" in doc, f"{kind_name}.{spec.name} is not in docs/vault-format.md"
    for name in ("flagged", "patterns", "pattern_set", "allowed_revision"):
        assert f"| `{name}` |" in doc
