"""The vault store: files per kind, conflicts, bad files, crash safety, and reads that never write."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

import sentient
from sentient.config import load_settings
from sentient.errors import (
    AlreadyExists,
    BadFile,
    BadText,
    Conflict,
    InvalidId,
    NotFound,
    SentientError,
    TooLarge,
)
from sentient.vault import Vault, transcript
from sentient.vault.document import TMP_SUFFIX, Document, parse
from sentient.vault.kinds import KINDS, classify

EXAMPLE_VAULT = Path(__file__).resolve().parents[1] / "vault"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def tick(self, minutes: int = 1) -> None:
        self.now += timedelta(minutes=minutes)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def vault(tmp_path: Path, clock: Clock) -> Vault:
    root = tmp_path / "vault"
    root.mkdir()
    return Vault(root, clock=clock)


def open_fixture(make_vault: Callable[[str], Path], name: str, clock: Clock | None = None) -> Vault:
    root = make_vault(name)
    limits = load_settings(root, {}).limits
    return Vault(root, max_file_bytes=limits.max_file_bytes, clock=clock or Clock())


# --- create / get / update / delete, kind by kind -------------------------------------------


@dataclass(frozen=True)
class Case:
    kind: str
    key: str
    meta: dict[str, Any]
    path: str
    month: str | None = None


CASES = [
    Case("memory", "anika-teacher", {"title": "Anika is a teacher", "category": "family", "scope": "global",
                                     "source": "user", "untrusted": False}, "memory/anika-teacher.md"),
    Case("note", "onboarding", {"title": "Onboarding notes", "scope": "ledger-app"}, "pins/notes/onboarding.md"),
    Case("plan", "launch", {"title": "Launch plan"}, "pins/plans/launch.md"),
    Case("skill", "weekly-review", {"title": "Weekly review", "category": "routine"}, "skills/weekly-review.md"),
    Case("session", "k3f9a2", {"title": "Design review", "channel": "chat", "incognito": False,
                               "pins": ["note:onboarding", "plan:launch"]},
         "sessions/2026-11/k3f9a2.md", month="2026-11"),
    Case("task", "weekly-digest", {"title": "Weekly digest", "schedule": "0 9 * * 1", "enabled": True},
         "tasks/weekly-digest/task.md"),
    Case("notepad", "weekly-digest", {"task": "weekly-digest", "untrusted": False}, "tasks/weekly-digest/notepad.md"),
    Case("run", "weekly-digest/run-1", {"task": "weekly-digest", "status": "succeeded", "trigger": "schedule",
                                        "started": "2026-11-30T09:00:00Z"}, "tasks/weekly-digest/runs/run-1.md"),
    Case("people", "maya/companion", {"user": "maya", "persona": "companion"}, "people/maya/companion.md"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.kind)
def test_create_writes_the_file_of_its_kind(vault: Vault, case: Case) -> None:
    document = vault.create(case.kind, case.key, case.meta, "First text.\n", month=case.month)
    assert document.path == vault.root / case.path
    text = document.path.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    assert text.endswith("---\n\nFirst text.\n")
    names = [spec.name for spec in KINDS[case.kind].fields]
    keys = [line.split(":")[0] for line in text.split("---\n")[1].splitlines()]
    assert keys == [name for name in names if name in keys], "keys are written in the kind's order"
    for name, value in case.meta.items():
        assert document.meta[name] == value
    if "revision" in names:
        assert document.meta["revision"] == document.revision
        assert not document.edited_outside
    if "created" in names:
        assert document.meta["created"] == "2026-11-30T10:00:00Z"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.kind)
def test_get_reads_what_create_wrote(vault: Vault, case: Case) -> None:
    created = vault.create(case.kind, case.key, case.meta, "First text.\n", month=case.month)
    got = vault.get(case.kind, case.key)
    assert (got.kind, got.key, got.path) == (case.kind, case.key, created.path)
    assert got.meta == created.meta
    assert got.body == "First text.\n"
    assert got.revision == created.revision


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.kind)
def test_update_changes_the_body_and_stamps_the_write(vault: Vault, clock: Clock, case: Case) -> None:
    created = vault.create(case.kind, case.key, case.meta, "First text.\n", month=case.month)
    clock.tick(5)
    updated = vault.update(case.kind, case.key, body="Second text.\n", expected_revision=created.revision)
    assert updated.path == created.path
    assert updated.body == "Second text.\n"
    assert updated.path.read_text(encoding="utf-8").endswith("\nSecond text.\n")
    assert updated.revision != created.revision
    names = {spec.name for spec in KINDS[case.kind].fields}
    if "updated" in names:
        assert updated.meta["updated"] == "2026-11-30T10:05:00Z"
    if "revision" in names:
        assert updated.meta["revision"] == updated.revision
    if "created" in names:
        assert updated.meta["created"] == "2026-11-30T10:00:00Z"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.kind)
def test_update_of_one_field_keeps_every_other_line(vault: Vault, case: Case) -> None:
    created = vault.create(case.kind, case.key, case.meta, "First text.\n", month=case.month)
    before = created.path.read_text(encoding="utf-8").splitlines()
    name, value, line = ("enabled", False, "enabled: false") if case.kind == "task" else ("untrusted", True,
                                                                                         "untrusted: true")
    after = vault.update(case.kind, case.key, {name: value}).path.read_text(encoding="utf-8").splitlines()
    assert [text for text in after if text not in before] == [line]
    old = [f"{name}: {str(case.meta[name]).lower()}"] if name in case.meta else []
    assert [text for text in before if text not in after] == old


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.kind)
def test_delete_removes_the_file(vault: Vault, case: Case) -> None:
    created = vault.create(case.kind, case.key, case.meta, "First text.\n", month=case.month)
    assert vault.delete(case.kind, case.key, expected_revision=created.revision) == created.path
    assert not created.path.exists()
    with pytest.raises(NotFound):
        vault.get(case.kind, case.key)


def test_missing_document_is_not_found(vault: Vault) -> None:
    with pytest.raises(NotFound, match="no memory 'nobody'"):
        vault.get("memory", "nobody")
    with pytest.raises(NotFound):
        vault.update("memory", "nobody", body="x")
    with pytest.raises(NotFound):
        vault.delete("memory", "nobody")


@pytest.mark.parametrize("key", ["../escape", "a/b", "Upper", ""])
def test_bad_ids_are_refused_before_any_file_is_touched(vault: Vault, key: str) -> None:
    with pytest.raises(InvalidId):
        vault.create("memory", key, {"title": "x"}, "x\n")
    with pytest.raises(InvalidId):
        vault.get("memory", key)
    assert list(vault.root.iterdir()) == []


def test_run_key_needs_both_parts(vault: Vault) -> None:
    with pytest.raises(InvalidId) as caught:
        vault.create("run", "run-1", {}, "x\n")
    assert str(caught.value) == "run key 'run-1' is not allowed: use <task id>/<run id>"
    with pytest.raises(InvalidId, match="user id '\\.\\.'"):
        vault.create("people", "../maya", {}, "x\n")


def test_entries_in_subfolders_are_found_by_id(make_vault: Callable[[str], Path]) -> None:
    vault = open_fixture(make_vault, "basic")
    document = vault.get("memory", "anika-teacher")
    assert document.path == vault.root / "memory/family/anika-teacher.md"
    updated = vault.update("memory", "anika-teacher", {"category": "sister"})
    assert updated.path == document.path
    assert not (vault.root / "memory/anika-teacher.md").exists()


# --- conflicts ---------------------------------------------------------------------------------


def test_stale_revision_is_a_conflict_and_the_editors_text_stays(vault: Vault, clock: Clock) -> None:
    read = vault.create("memory", "rent-due", {"title": "Rent"}, "Rent is due on the 5th.\n")
    editor_text = read.path.read_bytes().replace(b"the 5th", b"the 7th")
    read.path.write_bytes(editor_text)
    clock.tick()
    with pytest.raises(Conflict) as caught:
        vault.update("memory", "rent-due", body="Rent is due on the 1st.\n", expected_revision=read.revision)
    assert read.path.read_bytes() == editor_text
    assert caught.value.path == read.path
    assert caught.value.expected == read.revision
    assert f"{read.path} was changed by someone else since it was read" in str(caught.value)
    assert "their text was kept" in str(caught.value)


def test_stale_revision_refuses_a_delete(vault: Vault) -> None:
    read = vault.create("memory", "rent-due", {"title": "Rent"}, "Rent is due on the 5th.\n")
    read.path.write_text(read.path.read_text().replace("5th", "7th"))
    with pytest.raises(Conflict):
        vault.delete("memory", "rent-due", expected_revision=read.revision)
    assert "7th" in read.path.read_text()


def test_frontmatter_edit_made_between_read_and_update_survives(vault: Vault) -> None:
    read = vault.create("memory", "rent-due", {"title": "Rent", "category": "home"}, "Rent is due on the 5th.\n")
    edited = read.path.read_text(encoding="utf-8").replace("category: home\n", "category: money   # mine\n")
    read.path.write_text(edited, encoding="utf-8")
    updated = vault.update("memory", "rent-due", body="Rent is due on the 5th, by UPI.\n",
                           expected_revision=read.revision)
    text = updated.path.read_text(encoding="utf-8")
    assert "category: money   # mine\n" in text
    assert text.endswith("\nRent is due on the 5th, by UPI.\n")
    assert updated.meta["category"] == "money"


def test_transform_sees_the_file_as_it_is_on_disk_now(vault: Vault) -> None:
    read = vault.create("memory", "rent-due", {"title": "Rent"}, "Rent is due on the 5th.\n")
    read.path.write_text(read.path.read_text().replace("title: Rent\n", "title: Rent\nscope: home\n"))
    updated = vault.update("memory", "rent-due", transform=lambda doc: doc.replace(body=doc.body + "By UPI.\n"))
    assert updated.meta["scope"] == "home"
    assert updated.body == "Rent is due on the 5th.\nBy UPI.\n"


def test_hand_made_file_keeps_its_lines_when_the_app_updates_it(make_vault: Callable[[str], Path]) -> None:
    vault = open_fixture(make_vault, "basic")
    path = vault.root / "memory/filter-coffee.md"
    before = path.read_text(encoding="utf-8")
    vault.update("memory", "filter-coffee", {"category": "drinks"})
    after = path.read_text(encoding="utf-8")
    kept = [line for line in before.splitlines() if line in after.splitlines()]
    assert [line for line in before.splitlines() if line not in kept] == ["category: food   # free word"]
    assert "# I wrote this one myself." in after
    assert "title: \"Coffee: strong filter coffee, no sugar\"" in after
    assert "scope: 'global'" in after


def test_creating_an_existing_id_is_refused(vault: Vault) -> None:
    first = vault.create("memory", "rent-due", {"title": "Rent"}, "Mine.\n")
    with pytest.raises(AlreadyExists, match="already has the id 'rent-due'"):
        vault.create("memory", "rent-due", {"title": "Other"}, "Theirs.\n")
    assert first.path.read_text().endswith("\nMine.\n")


def test_creating_an_id_used_in_a_subfolder_is_refused(make_vault: Callable[[str], Path]) -> None:
    vault = open_fixture(make_vault, "basic")
    before = (vault.root / "memory/family/anika-teacher.md").read_bytes()
    with pytest.raises(AlreadyExists):
        vault.create("memory", "anika-teacher", {"title": "Duplicate"}, "x\n")
    assert not (vault.root / "memory/anika-teacher.md").exists()
    assert (vault.root / "memory/family/anika-teacher.md").read_bytes() == before


@pytest.mark.parametrize("case", [c for c in CASES if c.kind in ("task", "notepad", "run", "people")],
                         ids=lambda case: case.kind)
def test_creating_an_existing_file_of_a_fixed_path_is_refused(vault: Vault, case: Case) -> None:
    vault.create(case.kind, case.key, case.meta, "Mine.\n")
    with pytest.raises(AlreadyExists):
        vault.create(case.kind, case.key, case.meta, "Theirs.\n")
    assert (vault.root / case.path).read_text().endswith("\nMine.\n")


def test_session_id_is_unique_across_months(vault: Vault) -> None:
    vault.create("session", "k3f9a2", {"title": "October"}, "", month="2026-10")
    with pytest.raises(AlreadyExists):
        vault.create("session", "k3f9a2", {"title": "November"}, "", month="2026-11")


# --- the broken vault --------------------------------------------------------------------------


def test_broken_vault_loads_every_good_file(make_vault: Callable[[str], Path]) -> None:
    vault = open_fixture(make_vault, "broken")
    listing = vault.scan()
    loaded = sorted(doc.path.relative_to(vault.root).as_posix() for doc in listing.documents)
    assert loaded == [
        "memory/biscuit.md",
        "memory/maya-product-designer.md",
        "pins/notes/launch-checklist.md",
        "skills/weekly-review.md",
    ]


def test_broken_vault_reports_one_problem_per_bad_file(make_vault: Callable[[str], Path]) -> None:
    vault = open_fixture(make_vault, "broken")
    size = (vault.root / "memory/interview-log.md").stat().st_size
    twice = "the id 'standup' is used by 2 files (memory/personal/standup.md, memory/work/standup.md)"
    problems = {p.path.relative_to(vault.root).as_posix(): p for p in vault.scan().problems}
    assert {path: problem.reason for path, problem in problems.items()} == {
        "memory/bad-yaml.md": "frontmatter is not valid YAML at line 3",
        "memory/unclosed-frontmatter.md": "frontmatter opens with '---' but never closes",
        "memory/latin1.md": "is not UTF-8 (byte 5)",
        "memory/scan.md": "is a binary file, not markdown",
        "memory/wrong-untrusted.md": "field 'untrusted' must be true or false, not 'maybe'",
        "memory/wrong-created.md":
            "field 'created' must be an ISO date such as 2026-11-30T10:00:00Z, not 'last tuesday'",
        "memory/wrong-title.md": "field 'title' must be a single line of text, not ['a', 'b']",
        "memory/work/standup.md": twice,
        "memory/personal/standup.md": twice,
        "memory/interview-log.md": f"is {size:,} bytes, over the 4,096-byte limit",
        "memory/My Note.md": "the file name does not make a valid id (memory id 'My Note' is not allowed: use 1-80 "
        "characters of a-z, 0-9 and '-', starting with a letter or digit (no '/', '..', spaces or capitals))",
    }
    assert all(problem.kind == "memory" for problem in problems.values())
    assert all(problem.fix for problem in problems.values())
    assert problems["memory/interview-log.md"].fix.endswith("raise limits.max_file_bytes in sentient.yaml")
    assert str(problems["memory/latin1.md"]) == (
        f"{vault.root / 'memory/latin1.md'}: is not UTF-8 (byte 5). Re-save it as UTF-8 in your editor"
    )


def test_duplicate_id_is_never_silently_picked(make_vault: Callable[[str], Path]) -> None:
    vault = open_fixture(make_vault, "broken")
    with pytest.raises(BadFile, match=r"the id 'standup' is used by 2 files"):
        vault.get("memory", "standup")


def test_size_cap_comes_from_the_vault_settings(make_vault: Callable[[str], Path]) -> None:
    root = make_vault("broken")
    roomy = Vault(root)
    assert "memory/interview-log.md" in {doc.path.relative_to(root).as_posix() for doc in roomy.scan().documents}


def test_good_fixture_vaults_have_no_problems(make_vault: Callable[[str], Path]) -> None:
    for name in ("basic", "hostile"):
        listing = open_fixture(make_vault, name).scan()
        assert listing.problems == []
        assert {doc.kind for doc in listing.documents} >= {"memory", "task", "notepad", "people"}
    example = Vault(EXAMPLE_VAULT).scan()
    assert example.problems == []
    assert {doc.kind for doc in example.documents} == set(KINDS)


# --- crash safety ----------------------------------------------------------------------------


WRITER = """
import sys
from pathlib import Path
from sentient.vault import Vault

root, counter = Path(sys.argv[1]), Path(sys.argv[2])
vault = Vault(root)
keys = sys.argv[3:]
n = 0
while True:
    n += 1
    for key in keys:
        vault.update("memory", key, {"category": f"round-{n}"}, body=f"round {n}\\n" + "padding line\\n" * (n % 50))
    counter.write_text(str(n))
"""


def expected_body(body: str) -> bool:
    first, _, rest = body.partition("\n")
    if first == "First text.":
        return rest == ""
    n = int(first.removeprefix("round "))
    return rest == "padding line\n" * (n % 50)


def test_killed_writer_leaves_whole_files(vault: Vault, tmp_path: Path) -> None:
    keys = ["alpha", "beta", "gamma"]
    for key in keys:
        vault.create("memory", key, {"title": key.title()}, "First text.\n")
    counter = tmp_path / "rounds"
    repo = Path(sentient.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(vault.root), str(counter), *keys], env=env)
    try:
        deadline = time.monotonic() + 20
        while int((counter.read_text() if counter.exists() else "") or 0) < 15:
            assert writer.poll() is None, "the writer stopped by itself"
            assert time.monotonic() < deadline, "the writer made no progress"
            time.sleep(0.005)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    # What a crash between creating the temp file and renaming it leaves behind.
    (vault.root / "memory" / f".alpha.md.x1y2z3{TMP_SUFFIX}").write_text("---\ntitle: half wri")
    for key in keys:
        document = vault.get("memory", key)
        assert expected_body(document.body)
        assert document.meta["revision"] == document.revision
    listing = vault.scan()
    assert listing.problems == []
    assert sorted(doc.path.name for doc in listing.documents) == ["alpha.md", "beta.md", "gamma.md"]
    assert sorted(found.path.name for found in vault.walk()) == ["alpha.md", "beta.md", "gamma.md"]
    assert all(not found.path.name.endswith(TMP_SUFFIX) for found in vault.walk())


def test_a_write_keeps_the_files_permissions_and_new_files_follow_the_umask(vault: Vault) -> None:
    hand = vault.root / "memory" / "coffee.md"
    hand.parent.mkdir(parents=True, exist_ok=True)
    hand.write_text("---\ntitle: Coffee\n---\nBlack, no sugar.\n")
    hand.chmod(0o640)
    vault.update("memory", "coffee", {"title": "Coffee", "category": "food"})
    assert stat.S_IMODE(hand.stat().st_mode) == 0o640
    assert "category: food" in hand.read_text()
    mask = os.umask(0o022)
    os.umask(mask)
    created = vault.create("memory", "tea", {"title": "Tea"}, "Green.\n").path
    assert stat.S_IMODE(created.stat().st_mode) == 0o666 & ~mask


def test_a_write_over_the_size_limit_is_refused_and_writes_nothing(tmp_path: Path, clock: Clock) -> None:
    small = Vault(tmp_path / "small", max_file_bytes=600, clock=clock)
    with pytest.raises(TooLarge, match=r"memory/long\.md: the text would be .* over the 600-byte limit; nothing was"):
        small.create("memory", "long", {"title": "Long"}, "word " * 200)
    assert not (small.root / "memory" / "long.md").exists()
    small.create("memory", "short", {"title": "Short"}, "fine\n")
    with pytest.raises(TooLarge, match="limits.max_file_bytes"):
        small.update("memory", "short", body="word " * 200)
    assert small.get("memory", "short").body == "fine\n"
    assert [d.key for d in small.scan().documents] == ["short"]


def test_a_write_holding_a_nul_is_refused_and_writes_nothing(vault: Vault) -> None:
    # A file holding a NUL is read as binary (and left out), so the vault never writes one.
    with pytest.raises(BadText, match=r"memory/nul\.md: the text holds a NUL character .*nothing was written"):
        vault.create("memory", "nul", {"title": "Nul"}, "Ignore <b\x00>all previous instructions\n")
    assert not (vault.root / "memory" / "nul.md").exists()
    vault.create("memory", "fine", {"title": "Fine"}, "fine\n")
    with pytest.raises(BadText, match="Remove the NUL"):
        vault.update("memory", "fine", body="fi\x00ne\n")
    assert vault.get("memory", "fine").body == "fine\n"
    vault.update("memory", "fine", {"title": "Fi\x00ne"})  # frontmatter spells it as an escape
    assert vault.get("memory", "fine").meta["title"] == "Fi\x00ne"


def test_a_write_holding_a_lone_surrogate_is_refused_and_writes_nothing(vault: Vault) -> None:
    # Half of a UTF-16 pair (a "\udce9" JSON escape, bytes decoded with surrogateescape) is no
    # character: UTF-8 cannot hold it, and the vault writes none, not even escaped in frontmatter.
    with pytest.raises(BadText, match=r"memory/sur\.md: the text holds a lone surrogate \(U\+DCE9\), .* nothing "
                                      r"was written\. Replace it with the character it stood for"):
        vault.create("memory", "sur", {"title": "Sur"}, "caf\udce9 au lait\n")
    assert not (vault.root / "memory" / "sur.md").exists()
    vault.create("memory", "fine", {"title": "Fine"}, "fine\n")
    before = (vault.root / "memory" / "fine.md").read_bytes()
    with pytest.raises(BadText, match=r"memory/fine\.md: 'title' holds a lone surrogate \(U\+D83D\)"):
        vault.update("memory", "fine", {"title": "Fine \ud83d"})
    with pytest.raises(BadText, match=r"'tags' holds a lone surrogate \(U\+DCFF\)"):
        vault.update("memory", "fine", {"tags": ["ok", "\udcff"]})
    assert (vault.root / "memory" / "fine.md").read_bytes() == before


def test_a_lone_surrogate_in_a_session_message_is_kept_as_a_replacement_character(vault: Vault) -> None:
    # A session is the app's own transcript: a turn must never fail on what was said in it.
    vault.create("session", "s1", {"title": "Chat"}, "")
    said = transcript.Message("user", "2026-11-30T10:00:00Z", "caf\udce9 \x00",
                              tool_results=({"id": "call_1", "content": "page \ud83d"},))

    def add(document: Document) -> Document:
        return document.replace(body=transcript.append(document.body, said))

    vault.update("session", "s1", transform=add)
    (kept,) = transcript.parse(vault.get("session", "s1").body).messages
    assert kept.text == "caf\ufffd \ufffd"
    assert kept.tool_results == ({"id": "call_1", "content": "page \ufffd"},)


def test_sessions_may_grow_past_the_file_limit_that_notes_have(tmp_path: Path, clock: Clock) -> None:
    small = Vault(tmp_path / "small", max_file_bytes=600, clock=clock)
    session = small.create("session", "s1", {"title": "Chat"}, "")
    long = "## user · 2026-11-30T10:00:00Z\n\n" + "word " * 300 + "\n"
    small.update("session", "s1", body=session.body + long)  # 1.5 KB: over 600 bytes, under 32 x 600
    assert small.get("session", "s1").body.endswith("word \n")
    with pytest.raises(TooLarge, match="Start a new session"):
        small.update("session", "s1", body=long * 13)


def test_a_crlf_file_stays_crlf_after_an_app_write(vault: Vault) -> None:
    hand = vault.root / "memory" / "crlf.md"
    hand.parent.mkdir(parents=True, exist_ok=True)
    hand.write_bytes(b"---\r\ntitle: CRLF fm\r\n---\r\nline one\r\nline two\r\n")
    vault.update("memory", "crlf", {"category": "y"})
    data = hand.read_bytes()
    assert data.startswith(b"---\r\ntitle: CRLF fm\r\n") and b"category: y\r\n" in data
    assert data.endswith(b"\r\n---\r\nline one\r\nline two\r\n")
    assert b"\n" not in data.replace(b"\r\n", b"")
    written = vault.update("memory", "crlf", body="line one\nline three\n")
    assert hand.read_bytes().endswith(b"---\r\nline one\r\nline three\r\n")
    reread = vault.get("memory", "crlf")
    assert written.revision == reread.revision == reread.stored_revision  # not 'edited outside' by its own write
    assert b"\n" not in hand.read_bytes().replace(b"\r\n", b"")
    lf = vault.create("memory", "lf", {"title": "LF"}, "x\n").path
    vault.update("memory", "lf", {"category": "y"})
    assert b"\r" not in lf.read_bytes()


HOLDER = """
import os, sys
from pathlib import Path
from sentient.vault.atomic import SWAP_MARK, _temp_file
from sentient.vault.document import TMP_SUFFIX, bytes_hash
target, temp_dir, writing, expected, held, swapped = sys.argv[1:7]
fd, name = _temp_file(Path(target), Path(temp_dir), bytes_hash(writing.encode()), bytes_hash(expected.encode()))
os.write(fd, held.encode())
os.close(fd)
if swapped == "swapped":
    os.rename(name, name.removesuffix(TMP_SUFFIX) + SWAP_MARK + TMP_SUFFIX)
    name = name.removesuffix(TMP_SUFFIX) + SWAP_MARK + TMP_SUFFIX
print(name, flush=True)
sys.stdin.read()  # a write in progress, until told to end (or killed)
"""


def writer_holding(vault: Vault, held: str, swapped: str = "") -> tuple[subprocess.Popen[str], Path]:
    """A writer of memory/alpha.md (from 'old text' to 'new text') in another process, stopped
    with its temp file holding `held` (swapped: after swapping it with the file)."""
    repo = Path(sentient.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    temp_dir = vault.temp_dir
    assert temp_dir is not None
    args = [str(vault.root / "memory" / "alpha.md"), str(temp_dir), "new text", "old text", held, swapped]
    writer = subprocess.Popen([sys.executable, "-c", HOLDER, *args], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert writer.stdout is not None
    return writer, Path(writer.stdout.readline().strip())


def killed(writer: subprocess.Popen[str]) -> None:
    writer.send_signal(signal.SIGKILL)
    writer.communicate()  # waits, and closes its pipes


def test_temp_files_of_killed_writers_are_swept_at_the_next_start_and_a_live_writers_are_not(
        vault: Vault, caplog: pytest.LogCaptureFixture) -> None:
    (vault.root / "memory").mkdir()
    live, live_file = writer_holding(vault, "new te")
    torn, torn_file = writer_holding(vault, "new te")  # killed mid-write
    whole, whole_file = writer_holding(vault, "new text", "swapped")  # killed before its swap
    base, base_file = writer_holding(vault, "old text", "swapped")  # after: the old file it had read
    save, save_file = writer_holding(vault, "the person's save", "swapped")  # after, and the file was not what it read
    for writer in (torn, whole, base, save):
        killed(writer)
    try:
        Vault(vault.root)  # the next start: serve, index, any command
        assert live_file.exists()  # a write in progress in another process
        assert not torn_file.exists() and not whole_file.exists() and not base_file.exists()
        assert not save_file.exists()
        (recovered,) = (vault.root / ".sentient" / "recovered").iterdir()
        assert recovered.name.startswith("alpha.md.") and recovered.read_text() == "the person's save"
        assert str(recovered) in caplog.text
    finally:
        killed(live)
    Vault(vault.root)
    assert not live_file.exists()
    assert list((vault.root / ".sentient" / "tmp").iterdir()) == []


def test_temp_files_named_by_an_earlier_version_are_swept_an_hour_later(tmp_path: Path) -> None:
    tmp = tmp_path / "vault" / ".sentient" / "tmp"
    tmp.mkdir(parents=True)
    old, young, other = tmp / f".a.md.x{TMP_SUFFIX}", tmp / f".b.md.y{TMP_SUFFIX}", tmp / "notes.txt"
    for path in (old, young, other):
        path.write_text("torn")
    hours_ago = time.time() - 2 * 3600
    os.utime(old, (hours_ago, hours_ago))
    os.utime(other, (hours_ago, hours_ago))
    Vault(tmp_path / "vault")
    assert sorted(p.name for p in tmp.iterdir()) == sorted([young.name, other.name])


def test_leftover_temp_file_is_not_a_document(vault: Vault) -> None:
    vault.create("memory", "alpha", {"title": "Alpha"}, "x\n")
    leftover = vault.root / "memory" / f"alpha.md{TMP_SUFFIX}"
    leftover.write_text("torn")
    (vault.root / "memory" / f".alpha.md.abc{TMP_SUFFIX}").write_text("torn")
    assert [found.path.name for found in vault.walk()] == ["alpha.md"]
    assert vault.scan().problems == []
    assert vault.get("memory", "alpha").body == "x\n"


# --- reading never writes ---------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file and folder under root: its content hash (files) and mtime."""
    state: dict[str, tuple[str, int]] = {}
    for path in sorted(root.rglob("*")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
        state[path.relative_to(root).as_posix()] = (digest, path.stat().st_mtime_ns)
    return state


def read_everything(vault: Vault) -> int:
    reads = 0
    listing = vault.scan()
    for document in listing.documents:
        vault.get(document.kind, document.key)
        vault.locate(document.kind, document.key)
        reads += 1
    for found in vault.walk():
        vault.classify_path(found.path)
        try:
            vault.read(found.kind, found.key, found.path)
        except BadFile:
            pass
    for kind_name in KINDS:
        vault.documents(kind_name)
    for problem in listing.problems:
        assert problem.kind is not None
        with pytest.raises(SentientError):
            vault.get(problem.kind, problem.path.stem)
    return reads


@pytest.mark.parametrize("name", ["basic", "hostile", "broken"])
def test_reading_a_fixture_vault_changes_nothing(make_vault: Callable[[str], Path], name: str) -> None:
    root = make_vault(name)
    before = snapshot(root)
    vault = Vault(root, max_file_bytes=load_settings(root, {}).limits.max_file_bytes)
    assert read_everything(vault) > 0
    assert snapshot(root) == before
    assert not (root / ".sentient").exists()


def test_reading_the_example_vault_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    shutil.copytree(EXAMPLE_VAULT, root, ignore=shutil.ignore_patterns(".sentient"))
    before = snapshot(root)
    assert read_everything(Vault(root)) > 0
    assert snapshot(root) == before
    assert not (root / ".sentient").exists()


def test_document_read_from_disk_renders_its_exact_bytes(make_vault: Callable[[str], Path]) -> None:
    vault = open_fixture(make_vault, "basic")
    for document in vault.scan().documents:
        assert document.render().encode("utf-8") == document.path.read_bytes()
        reparsed = parse(document.render(), kind=document.kind, key=document.key, path=document.path,
                         fields=KINDS[document.kind].fields)
        assert reparsed.meta == document.meta


def test_basic_vault_keeps_the_sisters_town_in_memory_only(make_vault: Callable[[str], Path]) -> None:
    root = make_vault("basic")
    texts = {path.relative_to(root).as_posix(): path.read_text(encoding="utf-8")
             for path in root.rglob("*") if path.is_file()}
    holders = sorted(path for path, text in texts.items() if "Anika" in text or "Mysuru" in text)
    assert holders == ["memory/family/anika-birthday.md", "memory/family/anika-teacher.md"]


# --- walking the vault --------------------------------------------------------------------------


MESSY_FILES = [
    "memory/top.md", "memory/a/b/c/deep.md", "memory/a/b/c/notes.txt", "memory/My Note.md", "memory/dots.in.name.md",
    "memory/UPPER.MD", "memory/.hidden.md", "memory/.hidden-folder/inside.md", "memory/a/.x.md.abc.sentient-tmp",
    "memory/a/left.md.sentient-tmp", "memory/a.md/inside.md", "memory/ .md", "memory/x.md.", "pins/loose.md",
    "pins/notes/n.md", "pins/notes/sub/n2.md", "pins/plans/p.md", "pins/other/o.md", "pins/other/notes/o2.md",
    "skills/s.md", "skills/group/s2.md", "sessions/loose.md", "sessions/2026-11/k3f9a2.md",
    "sessions/2026-11/deep/x.md", "sessions/not-a-month/s.md", "tasks/loose.md", "tasks/t1/task.md",
    "tasks/t1/notepad.md", "tasks/t1/other.md", "tasks/t1/runs/r1.md", "tasks/t1/runs/deeper/r2.md",
    "tasks/t1/extra/task.md", "tasks/runs/task.md", "tasks/t2/runs.md", "people/loose.md", "people/maya/friend.md",
    "people/maya/deeper/x.md", "personas/ada.md", "personas/sub/x.md",
    "elsewhere/x.md", "x.md", ".sentient/index.md", ".git/memory.md", "memory/.git/y.md",
    "memory/.sentient/z.md",
]


def _expected_documents(root: Path) -> set[tuple[str, str, str]]:
    """(rel, kind, key) of every file classify() calls a document; symlinked folders not followed."""
    expected = set()
    for folder, dirs, names in os.walk(root):
        dirs[:] = [name for name in dirs if name not in (".sentient", ".git")]
        for name in names:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            found = classify(PurePosixPath(rel))
            if found is not None and path.is_file():
                expected.add((rel, *found))
    return expected


def test_walk_finds_exactly_what_classify_calls_documents(vault: Vault, tmp_path: Path) -> None:
    for rel in MESSY_FILES:
        path = vault.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("---\ntitle: x\n---\nbody\n")
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "linked.md").write_text("x")
    (outside / "file.md").write_text("x")
    (vault.root / "memory" / "linked-folder").symlink_to(outside / "sub", target_is_directory=True)
    (vault.root / "memory" / "linked-file.md").symlink_to(outside / "file.md")
    (vault.root / "memory" / "dangling.md").symlink_to(outside / "missing.md")
    found = {(f.rel, f.kind, f.key) for f in vault.walk()}
    assert found == _expected_documents(vault.root)
    assert {kind for _, kind, _ in found} == set(KINDS)
    assert ("memory/linked-file.md", "memory", "linked-file") in found
    assert not any("linked-folder" in rel for rel, _, _ in found)
    for kinds in ({"memory"}, {"run"}, {"task", "people"}, {"note", "session"}, set()):
        assert {(f.rel, f.kind, f.key) for f in vault.walk(kinds)} == {f for f in found if f[1] in kinds}
    for item in vault.walk():
        assert item.path == vault.root / item.rel
        assert (item.mtime_ns, item.size) == (item.path.stat().st_mtime_ns, item.path.stat().st_size)


def test_walk_lists_each_folders_files_by_name_then_its_subfolders(vault: Vault) -> None:
    for rel in ["memory/b.md", "memory/a/z.md", "memory/c.md", "memory/a/b/y.md", "memory/a.md", "memory/b/x.md"]:
        (vault.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault.root / rel).write_text("x")
    assert [f.rel for f in vault.walk()] == ["memory/a.md", "memory/b.md", "memory/c.md", "memory/a/z.md",
                                             "memory/a/b/y.md", "memory/b/x.md"]
    assert [folder.rel for folder in vault.walk_folders()] == ["memory", "memory/a", "memory/a/b", "memory/b"]


def test_writing_where_a_file_sits_in_the_folders_place_is_a_clear_error(vault: Vault) -> None:
    (vault.root / "memory").write_text("not a folder")
    with pytest.raises(BadFile, match="memory: is a file where a folder should be"):
        vault.create("memory", "alpha", {"title": "Alpha"}, "x\n")
    assert (vault.root / "memory").read_text() == "not a folder"


def test_a_write_the_file_system_refuses_is_a_clear_error_naming_the_place(
        vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    (vault.root / "memory").symlink_to(vault.root / "unmounted" / "memory")
    with pytest.raises(BadFile, match=r"memory: is a link to .*unmounted/memory, which does not exist"):
        vault.create("memory", "alpha", {"title": "Alpha"}, "x\n")
    (vault.root / "memory").unlink()
    vault.create("memory", "alpha", {"title": "Alpha"}, "x\n")

    def full_disk(fd: int) -> None:  # where a full disk shows: the data cannot be flushed
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(BadFile, match=r"alpha\.md: cannot be written \(No space left on device\); nothing was"):
        vault.update("memory", "alpha", body="y\n")
    monkeypatch.undo()
    assert vault.get("memory", "alpha").body == "x\n"
    assert list((vault.root / ".sentient" / "tmp").iterdir()) == []  # the temp file went too


@pytest.mark.parametrize(("text", "kept"), [
    ("--- \ntitle: Loose fences\n---  \nbody\n", ("--- \n", "---  \n")),
    ("\ufeff---\ntitle: With a BOM\n---\nbody\n", ("\ufeff---\n",)),
    ("---\ntitle: Mixed\r\n---\r\nbody\n", ("---\r\nbody\n",)),
    ("---\ntitle: Ends with dots\n...\nbody\n", ("\n...\nbody\n",)),
])
def test_an_app_write_keeps_the_fences_and_mark_the_person_wrote(
        vault: Vault, text: str, kept: tuple[str, ...]) -> None:
    path = vault.root / "memory" / "hand.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    document = vault.get("memory", "hand")
    assert document.title != "---" and document.body == "body\n"
    vault.update("memory", "hand", {"category": "kept"})
    written = path.read_bytes().decode()
    assert written.count("title:") == 1 and "category: kept" in written  # one frontmatter block, edited
    for piece in kept:
        assert piece in written


def test_a_repeated_key_is_reported_not_half_deleted(vault: Vault) -> None:
    path = vault.root / "memory" / "twice.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\ntitle: one\ntitle: two\n---\nbody\n")
    problems = {p.path.name: p for p in vault.scan().problems}
    assert problems["twice.md"].reason == "the frontmatter key 'title' is there twice"
    assert path.read_text() == "---\ntitle: one\ntitle: two\n---\nbody\n"


def test_a_tab_after_a_key_reads_as_a_space(vault: Vault) -> None:
    path = vault.root / "memory" / "tabbed.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\ntitle: Tabbed\ncategory:\tmisc\n---\nbody\n")
    assert vault.get("memory", "tabbed").meta["category"] == "misc"
    vault.update("memory", "tabbed", {"scope": "global"})
    assert "category:\tmisc\n" in path.read_text()  # the person's line is kept as written


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_note_saved_as_utf16_or_utf32_is_named_so_with_the_fix(
    make_vault: Callable[[str], Path], encoding: str
) -> None:
    vault = open_fixture(make_vault, "basic")
    (vault.root / "memory/notepad.md").write_bytes("---\ntitle: From Notepad\n---\n\nhello\n".encode(encoding))
    problems = {p.path.relative_to(vault.root).as_posix(): p for p in vault.scan().problems}
    assert problems["memory/notepad.md"].reason == f"is {encoding.upper()} text, not UTF-8"
    assert problems["memory/notepad.md"].fix == "Re-save it as UTF-8 in your editor"


# --- links out of the vault, pipes and devices ----------------------------------------------


def test_a_link_out_of_the_vault_is_never_read_however_it_is_reached(vault: Vault, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nthe outside text\n")
    vault.create("memory", "kept", {"title": "Kept"}, "inside\n")
    (vault.root / "memory" / "secret.md").symlink_to(outside / "secret.md")
    (vault.root / "memory" / "alias.md").symlink_to(vault.root / "memory" / "kept.md")
    (vault.root / "memory" / "sub").symlink_to(outside)  # a folder link: glob may find files through it
    with pytest.raises(BadFile, match="is a link to .*outside the vault: Sentient does not read it"):
        vault.get("memory", "secret")
    assert vault.get("memory", "alias").body == "inside\n"  # a link inside the vault reads as its file
    listing = vault.scan({"memory"})
    assert sorted(d.key for d in listing.documents) == ["alias", "kept"]
    assert sorted(p.path.name for p in listing.problems) == ["secret.md", "sub"]
    assert all("outside text" not in str(p) for p in listing.problems)
    with pytest.raises(BadFile, match="is reached through a link, leading to .*outside the vault"):
        vault.read("memory", "secret", vault.root / "memory" / "sub" / "secret.md")
    with pytest.raises(BadFile, match="outside the vault"):
        vault.read("memory", "secret", vault.root / "memory" / ".." / ".." / "outside" / "secret.md")


def test_a_link_into_the_state_folder_is_never_read(vault: Vault) -> None:
    (vault.state_dir).mkdir(exist_ok=True)
    (vault.state_dir / "token").write_text("the-api-token\n")
    (vault.root / "memory").mkdir(exist_ok=True)
    (vault.root / "memory" / "token.md").symlink_to(Path("..") / ".sentient" / "token")
    with pytest.raises(BadFile, match=r"inside \.sentient/, which Sentient never reads as a document"):
        vault.get("memory", "token")


def test_a_top_folder_linked_out_of_the_vault_is_not_walked_nor_written(vault: Vault, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "far.md").write_text("# Far\n\nfar away\n")
    (vault.root / "memory").symlink_to(elsewhere)
    listing = vault.scan()
    assert "far" not in {d.key for d in listing.documents}
    (problem,) = [p for p in listing.problems if p.kind == "memory"]
    assert problem.path == vault.root / "memory"
    assert problem.reason == f"is a link to {elsewhere}, outside the vault, which Sentient does not follow " \
                             "(nothing in it is read)"
    with pytest.raises(BadFile, match="outside the vault"):
        vault.get("memory", "far")
    with pytest.raises(BadFile, match="is a link to .*outside the vault, so nothing is written in it"):
        vault.create("memory", "new", {"title": "New"}, "text\n")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["far.md"]
    (vault.root / "memory").unlink()
    (vault.root / "notes-elsewhere").mkdir()
    (vault.root / "notes-elsewhere" / "near.md").write_text("# Near\n\nclose by\n")
    (vault.root / "memory").symlink_to(vault.root / "notes-elsewhere")  # inside the vault: followed
    assert [d.key for d in vault.scan({"memory"}).documents] == ["near"]
    assert vault.scan({"memory"}).problems == []


def test_a_named_pipe_is_named_and_never_opened(vault: Vault) -> None:
    """Opening a pipe for reading waits for a writer: had the vault opened one, this would hang."""
    vault.create("memory", "kept", {"title": "Kept"}, "inside\n")
    os.mkfifo(vault.root / "memory" / "pipe.md")
    os.mkfifo(vault.root / "memory" / "pipe")
    (vault.root / "memory" / "to-pipe.md").symlink_to("pipe")
    listing = vault.scan()
    assert [d.key for d in listing.documents if d.kind == "memory"] == ["kept"]
    reasons = {p.path.name: p.reason for p in listing.problems}
    assert reasons == {name: "is a named pipe (FIFO), not a file: Sentient never opens it"
                       for name in ("pipe.md", "pipe", "to-pipe.md")}
    with pytest.raises(BadFile, match=r"is a named pipe \(FIFO\), not a file"):
        vault.get("memory", "pipe")


def test_a_socket_or_device_is_named_and_never_opened(vault: Vault, tmp_path: Path) -> None:
    import socket

    (vault.root / "memory").mkdir(exist_ok=True)
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(vault.root / "memory" / "sock.md"))
    except OSError as exc:  # a path too long for a socket address
        pytest.skip(f"no socket here: {exc}")
    expected = {"sock.md": "is a socket, not a file: Sentient never opens it"}
    try:
        os.mknod(vault.root / "memory" / "null.md", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # as /dev/null
        expected["null.md"] = "is a character device, not a file: Sentient never opens it"
    except PermissionError:  # only root makes device files
        pass
    with listener:
        listing = vault.scan({"memory"})
        assert listing.documents == []
        assert {p.path.name: p.reason for p in listing.problems} == expected
