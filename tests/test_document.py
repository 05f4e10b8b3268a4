"""Documents: exact round trips, content revisions, titles, minimal edits, typed fields, ids."""

from __future__ import annotations

import difflib
import random
import re
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sentient.errors import BadFile, InvalidId
from sentient.vault.document import (
    Document,
    _fast_load,
    _load_yaml,
    _split,
    _split_lines,
    _TextLoader,
    check_id,
    content_revision,
    opens_frontmatter,
    parse,
)
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


# --- fast frontmatter reading: the same values as YAML ------------------------------------------
#
# _TextLoader (PyYAML's own parser, every scalar a string) is the reference. Two faster readers
# must agree with it: _fast_load (the app's own frontmatter shape, without YAML; None for
# anything else) and _load_yaml (libyaml's parser, PyYAML's where the two differ).


def _reference(front: str) -> tuple[str, Any]:
    try:
        return "ok", yaml.load(front, Loader=_TextLoader)
    except yaml.YAMLError as exc:
        return "error", str(exc)


def _combined(front: str) -> tuple[str, Any]:
    try:
        return "ok", _load_yaml(front)
    except yaml.YAMLError as exc:
        return "error", str(exc)


def _assert_readers_agree(front: str) -> bool:
    """Both fast readers match the reference on `front`; True when _fast_load took it."""
    expected = _reference(front)
    assert _combined(front) == expected, front
    fast = _fast_load(front)
    if fast is not None:
        assert expected == ("ok", fast), front
    return fast is not None


def _fronts_of(root: Path) -> list[str]:
    fronts = []
    for path in sorted(root.rglob("*.md")):
        try:
            split = _split(path.read_bytes().decode("utf-8").removeprefix("\ufeff"))
        except UnicodeDecodeError:
            continue
        if split is not None and split[0].strip():
            fronts.append(split[0])
    return fronts


def test_fast_readers_agree_with_yaml_on_every_fixture_file() -> None:
    fronts = [front for root in VAULT_ROOTS for front in _fronts_of(root)]
    taken = [_assert_readers_agree(front) for front in fronts]
    assert len(fronts) > 30 and sum(taken) > len(fronts) // 2  # most files are the app's own shape


def test_fast_reader_takes_what_the_app_writes() -> None:
    document = _memory("---\ntitle: x\n---\nbody\n").replace(
        {"title": "Anika's birthday: 14 March", "category": "family", "untrusted": True, "created": "2026-11-30",
         "threat": {"flagged": True, "patterns": ["override-instructions", "exfiltration"], "pattern_set": 3,
                    "allowed_revision": None}, "scope": "1.0", "source": "url:https://example.org/a?b=c#d"})
    front = document.render().split("---\n")[1]
    assert _fast_load(front) is not None
    assert _assert_readers_agree(front)
    assert _memory(document.render()).meta == document.meta


TRICKY_VALUES = [
    "", "a", "b c", "yes", "no", "on", "1.0", "007", "~", "null", "Null", "true", "2026-11-30", "2026-11-30T10:00:00Z",
    "sha256:3b1f", "url:https://x.org/a?b=c#d", "session:2026-11/k3f9a2", "a: b", "a:", "a::b", "a:b:", "a #c", "a#c",
    "C#", "'q'", "'it''s'", "'a' b", "''", "'", "'a:b'", "'a #b'", "'  padded  '", '"d"', '"a\\nb"', '"a"b"', '""', '"',
    '"\\t"', "[a, b]", "[]", "[ ]", "[a,b]", "[a, ]", "[a,,b]", "[,]", "[note:a, plan:b]", "[a:, b]", "[a:b:c]",
    "[a: b]", "[a?]", "[?a]", "[a #c]", "[a#c]", "['x']", '["x"]', "[[a]]", "[a]]", "[a", "[ ]x", "[a b, c  d]",
    "[ a , b ]", "[-a]", "[a-]", "[é]", "{a: b}", "{}", "&x a", "*x", "!!str a", "!!int 3", "!x a", "|", ">", "|-",
    ">+", "|2", "- a", "-a", "-", "--", "---", "...", "?", "? a", ":a", "%a", "@a", "`a", "=a", "<<", "é", "日本 x",
    "\U0001f600", "a,b", "a]", "a}", "x[y]", "a [b] {c}", "a  b", "a ,b", "a?b", "a\\", "\\", "~ x", "a ", " a", "\t",
    "a\tb", "\xa0", "a\xa0b", "\u2028", "\x85", "\ufeff", "\x7f", "\x07", "\u200b", "\ue000",
]
TRICKY_KEYS = ["id", "title", "a", "threat", "flagged", "k_1", "x-y", "pins", "yes", "_", "T", "2fa", "a b", "'q'",
               "-", "? k", "&a k", "a" * 201]
LINE_STARTS = ["", " ", "  ", "   ", "\t", "# comment", "  # comment", "- ", "-", "---", "...", "%YAML 1.1", "? "]


def test_fast_readers_agree_with_yaml_on_tricky_lines() -> None:
    lines = [f"{key}: {value}" for key in TRICKY_KEYS for value in ("x", "[a, b]", "'q'", "")]
    for value in TRICKY_VALUES:
        lines += [f"title: {value}", f"title:  {value}", f"  flagged: {value}", f"title:{value}"]
    for line in lines:
        _assert_readers_agree(line + "\n")
        _assert_readers_agree(f"id: x\n{line}\ntitle: y\n")
        _assert_readers_agree(f"threat:\n{line}\n")


def test_fast_readers_agree_with_yaml_on_generated_frontmatter() -> None:
    rng = random.Random(2026)
    taken = 0
    for _ in range(3000):
        lines = []
        for _ in range(rng.randint(1, 6)):
            roll = rng.random()
            if roll < 0.1:
                lines.append(rng.choice(LINE_STARTS) + rng.choice(["", "x"]))
            elif roll < 0.3:
                value = " " + rng.choice(TRICKY_VALUES) if rng.random() < 0.9 else ""
                lines.append(f"  {rng.choice(TRICKY_KEYS[:7])}:{value}")
            elif roll < 0.35:
                lines.append(f"{rng.choice(LINE_STARTS)}{rng.choice(TRICKY_KEYS)}: {rng.choice(TRICKY_VALUES)}")
            else:
                value = rng.choice([" ", "  "]) + rng.choice(TRICKY_VALUES) if rng.random() < 0.85 else ""
                lines.append(f"{rng.choice(TRICKY_KEYS[:11])}:{value}")
        taken += _assert_readers_agree("\n".join(lines) + rng.choice(["\n", "", "\n\n"]))
    assert taken > 200  # the generator reaches the fast reader, not only YAML


YAML_PIECES = [
    "a", "key", ": ", ":", " ", "  ", "\n", "\n  ", "\n    ", "- ", "-", "[", "]", "{", "}", ",", "#", " #", "'", '"',
    "''", "\\", "\\n", "|", ">", "|-", ">+", "&x ", "*x", "!", "!!str ", "?", "? ", "%", "@", "`", "\t", "é", "日本",
    "\u2028", "\u2029", "\x85", "~", "null", "yes", "1.0", "2026-11-30", "---", "...", "\r\n", "\r", "\ufeff", "<<",
    "\xa0", "%YAML 1.1\n", "!x ", '"\\x41"', "'\n'", '"\n  "', "a" * 1100,
]


def test_libyaml_reader_agrees_with_pyyaml_on_random_text() -> None:
    rng = random.Random(7)
    for _ in range(4000):
        front = "".join(rng.choice(YAML_PIECES) for _ in range(rng.randint(1, 14)))
        assert _combined(front) == _reference(front), front


@pytest.mark.parametrize(
    ("front", "expected"),
    [
        ("title: [a:, b]\n", {"title": [{"a": ""}, "b"]}),  # libyaml refuses this; PyYAML reads it
        ("title: [a?]\n", None),  # PyYAML refuses '?' in a flow scalar; libyaml reads it
        ("title: a\t\n", None),  # a tab after a value: PyYAML refuses it
        ("title: |#\n  x\n", None),
        ("title: \ufeffx\n", {"title": "\ufeffx"}),  # libyaml drops a byte-order mark PyYAML keeps
    ],
)
def test_where_libyaml_and_pyyaml_differ_pyyaml_decides(front: str, expected: Any) -> None:
    result = _combined(front)
    assert result == _reference(front)
    assert result == (("error", result[1]) if expected is None else ("ok", expected))


def test_invalid_yaml_the_fast_reader_refuses_keeps_its_line() -> None:
    with pytest.raises(BadFile) as caught:
        _memory("---\nid: x\ntitle: a: b\n---\nbody\n")
    assert caught.value.reason == "frontmatter is not valid YAML at line 3"
    with pytest.raises(BadFile) as caught:
        _memory("---\nid: x\ntitle: ok\n\ttabbed: y\n---\nbody\n")
    assert caught.value.reason == "frontmatter is not valid YAML at line 4"


def test_printable_characters_are_all_plain_yaml() -> None:
    """_fast_load leaves to YAML any text with a character str.isprintable() refuses: so no
    character it accepts may be one YAML forbids, or one YAML reads as a line break."""
    allowed = [(0x20, 0x7E), (0xA0, 0xD7FF), (0xE000, 0xFFFD), (0x10000, 0x10FFFF)]
    breaks_or_marks = {0x85, 0x2028, 0x2029, 0xFEFF}
    for code in range(sys.maxunicode + 1):
        if chr(code).isprintable():
            assert any(low <= code <= high for low, high in allowed) and code not in breaks_or_marks, hex(code)


SPLIT_CASES = [
    "---\ntitle: x\n---\nbody\n", "---\ntitle: x\n---\n\nbody\n", "---\ntitle: x\n---\n\n\nbody", "---\n---\n",
    "---\ntitle: x\n...\nbody", "---\ntitle: x\n---", "---\ntitle: x\n--- \nbody\n---\nmore", "---\ntitle: x\n",
    "---\r\ntitle: x\r\n---\r\n\r\nbody\r\n", "---\ntitle: x\r\n---\r\nbody", "---\ntitle: x\u2028---\nbody",
    "---\ntitle: x\x85---\nbody", "---\ntitle: x\n---\u2028body", "---\ntitle: x\n----\n---\nbody", "---x\n---\n",
    "---\n\n---\n\n", "---\ntitle: x\n---\r\n\nbody", "---\ntitle: x\n...\n\nbody\n---\n", "no frontmatter\n",
]


@pytest.mark.parametrize("text", SPLIT_CASES)
def test_split_agrees_with_reading_line_by_line(text: str) -> None:
    expected = _split_lines(text) if opens_frontmatter(text) else None
    assert _split(text) == expected


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126)),
                 st.lists(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126)), max_size=4),
                 st.integers(), st.floats(allow_nan=False), st.booleans(), st.none()))
def test_the_fast_yaml_writer_writes_what_pyyaml_writes(value: object) -> None:
    from sentient.vault import document

    plain = yaml.dump(value, Dumper=document._Dumper, default_flow_style=True, allow_unicode=True, width=1_000_000)
    assert document._inline(value) == plain.removesuffix("\n...\n").rstrip("\n")


def test_an_id_made_from_a_title_keeps_accented_letters_as_plain_ones() -> None:
    from sentient.vault.document import slugify

    assert slugify("Chai ☕ über") == "chai-uber"
    assert slugify("Éé ü!!") == "ee-u"
    assert slugify("नमस्ते", "memory") == "memory"  # nothing Latin: the fallback
