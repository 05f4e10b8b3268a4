"""The git-native vault (docs/git.md): every change the app makes becomes a readable commit off
the request path, a person's hand edits stay theirs, the history of an entry, and sync between
two clones through a bare repository. Real git, real files, the scripted model."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from sentient.api.app import create_app
from sentient.config import load_settings
from sentient.workspace import open_workspace
from tests.agent_support import SCRIPTED, agent_on, configure, sentient
from tests.scripted import Scripted, call, text
from tests.test_api_server import Running, eventually, uvicorn_thread

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
GIT = shutil.which("git") or "git"  # the real one, whatever a test puts first on PATH

PERSON = {"GIT_AUTHOR_NAME": "Pat", "GIT_AUTHOR_EMAIL": "pat@example.org", "GIT_COMMITTER_NAME": "Pat",
          "GIT_COMMITTER_EMAIL": "pat@example.org"}


def git(vault: Path, *args: str) -> str:
    """Run git as the person does (their name, their own commits)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | PERSON
    return subprocess.run([GIT, "-C", str(vault), "-c", "init.defaultBranch=main", *args], env=env,
                          capture_output=True, text=True, check=True).stdout


def log(vault: Path, *args: str) -> list[str]:
    """The vault's commits, newest first, as 'author | subject'."""
    return git(vault, "log", "--format=%an | %s", *args).splitlines()


@pytest.fixture
def repo(make_vault: Callable[[str], Path]) -> Path:
    """The basic vault as a repository of its own, everything committed by the person."""
    vault = make_vault("basic")
    (vault / ".gitignore").write_text(".sentient/\n")
    git(vault, "init", "-q")
    git(vault, "add", "-A")
    git(vault, "commit", "-qm", "my vault")
    return vault


def test_a_remember_in_a_turn_is_one_commit_naming_what_and_why(repo: Path, scripted: Scripted) -> None:
    scripted.queue(call("memory_remember", title="Anika teaches maths", text="Anika teaches maths in Mysuru."),
                   text("Noted."))
    agent = agent_on(repo)
    result = agent.turn("Remember that Anika teaches maths")
    agent.close()
    agent.workspace.close()  # flushes what is pending
    session = result.session
    month = next((repo / "sessions").glob(f"*/{session}.md")).parent.name
    commits = log(repo)
    assert len(commits) == 2, commits  # the person's, and one of the app's for the whole turn
    author_line = git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>")
    assert author_line.strip() == "Sentient <sentient@localhost>|Sentient <sentient@localhost>"
    message = git(repo, "log", "-1", "--format=%B")
    assert f"- memory: remember anika-teaches-maths (session {month}/{session})" in message
    assert f"- session {month}/{session}: start" in message
    assert f"Sentient-Source: session {month}/{session}" in message
    assert git(repo, "status", "--porcelain") == ""


def test_one_write_is_a_commit_whose_subject_says_it(repo: Path) -> None:
    with open_workspace(load_settings(repo, {})) as workspace:
        from sentient.memory import create_entry
        create_entry(workspace, title="Filter coffee at seven", body="Every morning.", id="coffee-time")
    assert log(repo)[0] == "Sentient | memory: add coffee-time (user)"
    assert "Sentient-Source: user" in git(repo, "log", "-1", "--format=%B")


def test_a_burst_of_ten_writes_is_one_commit(repo: Path) -> None:
    from sentient.memory import create_entry
    with open_workspace(load_settings(repo, {})) as workspace:
        for n in range(10):
            create_entry(workspace, title=f"Fact {n}", body=f"Fact number {n}.", id=f"fact-{n}")
        assert workspace.committer is not None and workspace.committer.commits == 0  # nothing waited for git
    commits = log(repo)
    assert commits[0] == "Sentient | sentient: 10 memory entries" and len(commits) == 2
    assert git(repo, "show", "--format=", "--name-only", "HEAD").split() == [f"memory/fact-{n}.md" for n in range(10)]


def test_the_committer_commits_by_itself_after_a_quiet_moment(repo: Path) -> None:
    from sentient.memory import create_entry
    configure(repo, git={"commit_delay": 0.2})
    git(repo, "commit", "-qam", "delay")
    with open_workspace(load_settings(repo, {})) as workspace:
        create_entry(workspace, title="One", body="One.", id="one")
        create_entry(workspace, title="Two", body="Two.", id="two")
        eventually(lambda: len(log(repo)) == 3, "the burst committed", timeout=10)
        assert log(repo)[0] == "Sentient | sentient: 2 memory entries"


def test_a_runs_notepad_is_a_commit_naming_the_task_and_run(repo: Path) -> None:
    from sentient.tasks.notepad import keep_run_note, read_notepad
    with open_workspace(load_settings(repo, {})) as workspace:
        before = read_notepad(workspace, "weekly-digest")
        kept = keep_run_note(workspace, "weekly-digest", "Reported: the GST step.", before and before.revision,
                             untrusted=False, source="task:weekly-digest/r-0007")
        assert kept.saved
    assert log(repo)[0] == "Sentient | task weekly-digest: notepad after run r-0007"
    assert "Sentient-Source: task weekly-digest/r-0007" in git(repo, "log", "-1", "--format=%B")


def test_hand_edits_are_never_committed_by_the_app_and_never_overwritten(repo: Path) -> None:
    from sentient.memory import create_entry
    edited = repo / "memory" / "filter-coffee.md"
    edited.write_text(edited.read_text() + "\nAnd a second cup at four.\n")
    staged = repo / "memory" / "morning-runs.md"
    staged.write_text(staged.read_text() + "\nTen km on Sundays.\n")
    git(repo, "add", "memory/morning-runs.md")
    (repo / "scratch.md").write_text("a note of mine\n")
    with open_workspace(load_settings(repo, {})) as workspace:
        create_entry(workspace, title="Tea", body="Masala chai.", id="tea")
    assert git(repo, "show", "--format=", "--name-only", "HEAD").split() == ["memory/tea.md"]
    status = git(repo, "status", "--porcelain").splitlines()
    assert sorted(status) == [" M memory/filter-coffee.md", "?? scratch.md", "M  memory/morning-runs.md"]
    assert edited.read_text().endswith("And a second cup at four.\n")
    assert staged.read_text().endswith("Ten km on Sundays.\n")


def test_hand_edits_are_committed_with_the_apps_when_configured(repo: Path) -> None:
    from sentient.memory import create_entry
    configure(repo, git={"commit_manual_edits": True})
    edited = repo / "memory" / "filter-coffee.md"
    edited.write_text(edited.read_text() + "\nAnd a second cup at four.\n")
    with open_workspace(load_settings(repo, {})) as workspace:
        create_entry(workspace, title="Tea", body="Masala chai.", id="tea")
    assert sorted(git(repo, "show", "--format=", "--name-only", "HEAD").split()) == [
        "memory/filter-coffee.md", "memory/tea.md", "sentient.yaml"]
    assert "- changed by hand: memory/filter-coffee.md" in git(repo, "log", "-1", "--format=%B")
    assert git(repo, "status", "--porcelain") == ""


def test_the_persons_git_setup_cannot_break_or_redirect_a_commit(repo: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing hook, signing asked for, and GIT_* variables of the process around (a hook's
    GIT_DIR, say): the app's commit is made all the same, in the vault, as the app."""
    from sentient.memory import create_entry
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    git(repo, "config", "commit.gpgSign", "true")
    git(repo, "config", "gpg.program", "false")
    elsewhere = tmp_path / "elsewhere"
    git(tmp_path, "init", "-q", str(elsewhere))
    monkeypatch.setenv("GIT_DIR", str(elsewhere / ".git"))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Someone Else")
    with open_workspace(load_settings(repo, {})) as workspace:
        create_entry(workspace, title="Tea", body="Masala chai.", id="tea")
    monkeypatch.delenv("GIT_DIR")
    assert log(repo)[0] == "Sentient | memory: add tea (user)"
    assert git(elsewhere, "rev-list", "--all") == ""


def test_autocommit_off_commits_nothing(repo: Path) -> None:
    from sentient.memory import create_entry
    configure(repo, git={"autocommit": False})
    git(repo, "commit", "-qam", "off")
    with open_workspace(load_settings(repo, {})) as workspace:
        create_entry(workspace, title="Tea", body="Masala chai.", id="tea")
    assert len(log(repo)) == 2
    assert git(repo, "status", "--porcelain") == "?? memory/tea.md\n"


def test_a_vault_inside_another_repository_is_not_committed_to(tmp_path: Path,
                                                                make_vault: Callable[[str], Path]) -> None:
    from sentient.memory import create_entry
    vault = make_vault("basic")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "a project holding a vault")
    with open_workspace(load_settings(vault, {})) as workspace:
        create_entry(workspace, title="Tea", body="Masala chai.", id="tea")
        assert workspace.repo.git is None and "not a repository of its own" in str(workspace.repo.why_not)
    assert len(log(tmp_path)) == 1


# --- serving --------------------------------------------------------------------------------


@pytest.fixture
def serve(scripted: Scripted) -> Iterator[Callable[..., Running]]:
    """serve(vault, watch=False) -> a Running server on 127.0.0.1, stopped after the test."""
    with ExitStack() as stack:

        def start(vault: Path, *, watch: bool = False) -> Running:
            app = create_app(load_settings(vault, {"SENTIENT_MODEL": SCRIPTED}), environ={}, watch=watch,
                             schedule=False)
            return Running(app, stack.enter_context(uvicorn_thread(app)), vault)

        yield start


def gated_git(folder: Path, gate: Path) -> str:
    """A folder holding a `git` that waits while the file `gate` exists (at most a minute), then
    runs the real one: PATH with it first."""
    folder.mkdir()
    wrapper = folder / "git"
    wrapper.write_text(f"#!/bin/sh\nn=0\nwhile [ -e '{gate}' ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done\n"
                       f"exec '{GIT}' \"$@\"\n")
    wrapper.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def test_a_chat_does_not_wait_for_its_commit(repo: Path, serve: Callable[..., Running], scripted: Scripted,
                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Git is held up (every git command waits at a gate) while the chat runs: the answer comes
    all the same, and the commit after the gate opens."""
    configure(repo, git={"commit_delay": 0.1})
    git(repo, "commit", "-qam", "quick commits")
    gate = tmp_path / "gate"
    gate.touch()
    monkeypatch.setenv("PATH", gated_git(tmp_path / "gated", gate))
    server = serve(repo)
    scripted.queue(call("memory_remember", title="Anika teaches maths", text="Anika teaches maths in Mysuru."),
                   text("Noted."))
    with server.http() as http:
        answer = http.post("/api/chat", json={"message": "Remember that Anika teaches maths"}, timeout=15)
    assert answer.status_code == 200 and answer.json()["reply"] == "Noted."
    assert len(log(repo)) == 2  # the turn is done, its commit still waits for git
    gate.unlink()
    eventually(lambda: git(repo, "status", "--porcelain") == "", "the turn's commits", timeout=30)
    committed = git(repo, "log", "--format=", "--name-only", "HEAD~1..HEAD" if len(log(repo)) == 3 else "HEAD~2..HEAD")
    assert "memory/anika-teaches-maths.md" in committed.split() and "sessions/" in committed
    assert all(line.startswith("Sentient | ") for line in log(repo)[:-2])


def test_serving_and_chatting_without_memory_writes_commits_only_the_session(
        repo: Path, serve: Callable[..., Running], scripted: Scripted) -> None:
    server = serve(repo, watch=True)
    scripted.queue(text("Hello."))
    with server.http() as http:
        answer = http.post("/api/chat", json={"message": "hi"})
        assert answer.status_code == 200
        assert http.get("/api/health").status_code == 200
        session = answer.json()["session_id"]
    server.app.state.workspace.flush_commits()
    changed = git(repo, "show", "--format=", "--name-only", "HEAD").split()
    assert len(changed) == 1 and changed[0].startswith("sessions/") and changed[0].endswith(f"/{session}.md")
    assert log(repo)[0].startswith("Sentient | session ") and len(log(repo)) == 2
    assert git(repo, "status", "--porcelain") == ""


# --- history --------------------------------------------------------------------------------


def test_history_lists_each_revision_shows_each_body_and_revert_restores_one(
        repo: Path, capsys: pytest.CaptureFixture[str], serve: Callable[..., Running]) -> None:
    vault = ["--vault", str(repo)]
    assert sentient(capsys, *vault, "memory", "add", "Tea", "Masala chai.", "--id", "tea")[0] == 0
    with open_workspace(load_settings(repo, {})) as workspace:
        from sentient.memory import edit_entry
        edit_entry(workspace, "tea", expected_revision=None, body="Masala chai, no sugar.")
    path = repo / "memory" / "tea.md"
    path.write_text(path.read_text().replace("no sugar", "one sugar"))  # by hand, committed by the person
    git(repo, "commit", "-qam", "tea: one sugar after all")
    code, out, _ = sentient(capsys, *vault, "memory", "history", "tea")
    lines = out.splitlines()
    assert code == 0 and lines[-1].startswith("3 revisions of memory tea")
    assert "person (Pat)" in lines[0] and lines[0].endswith("tea: one sugar after all")
    assert "app" in lines[1] and lines[1].endswith("memory: update tea (user)")
    assert lines[2].endswith("memory: add tea (user)")
    revs = [line.split()[0] for line in lines[:3]]
    bodies = []
    for rev in revs:
        code, out, _ = sentient(capsys, *vault, "memory", "history", "tea", "--show", rev)
        bodies.append(out.rstrip().splitlines()[-1])
    assert bodies == ["Masala chai, one sugar.", "Masala chai, no sugar.", "Masala chai."]

    server = serve(repo)
    with server.http() as http:
        listed = http.get("/api/memory/tea/history").json()["revisions"]
        assert [(r["by"], r["subject"]) for r in listed] == [("person", "tea: one sugar after all"),
                                                             ("app", "memory: update tea (user)"),
                                                             ("app", "memory: add tea (user)")]
        oldest = http.get(f"/api/memory/tea/history/{listed[2]['short']}").json()
        assert oldest["body"] == "Masala chai.\n" and oldest["title"] == "Tea" and oldest["by"] == "app"
        stale = http.post("/api/memory/tea/revert", json={"revision": listed[2]["commit"],
                                                          "expected_revision": "sha256:" + "0" * 64})
        assert stale.status_code == 412 and "one sugar" in path.read_text()
        unknown = http.get("/api/memory/tea/history/0000000")
        assert unknown.status_code == 404 and "is not one of its revisions" in unknown.text
        current = http.get("/api/memory/tea").json()["revision"]
        restored = http.post("/api/memory/tea/revert", json={"revision": listed[2]["commit"],
                                                             "expected_revision": current})
        assert restored.status_code == 200 and restored.json()["body"] == "Masala chai.\n"
        server.app.state.workspace.flush_commits()
    assert path.read_text().endswith("\nMasala chai.\n")
    assert log(repo)[0] == f"Sentient | memory: revert to {listed[2]['short']} tea (user)"
    assert git(repo, "status", "--porcelain") == ""


def test_a_forgotten_entry_keeps_its_history_and_can_be_brought_back(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vault = ["--vault", str(repo)]
    assert sentient(capsys, *vault, "memory", "forget", "anika-teacher")[0] == 0
    code, out, _ = sentient(capsys, *vault, "memory", "history", "anika-teacher")
    first, second = out.splitlines()[:2]
    assert "memory: forget anika-teacher (user)" in first and second.endswith("my vault")
    code, out, err = sentient(capsys, *vault, "memory", "revert", "anika-teacher", first.split()[0])
    assert code == 2 and "nothing to restore (the entry was forgotten in that commit)" in err
    assert sentient(capsys, *vault, "memory", "revert", "anika-teacher", second.split()[0])[0] == 0
    assert "Mysuru" in (repo / "memory" / "anika-teacher.md").read_text()


# --- sync between two clones ------------------------------------------------------------------


@pytest.fixture
def clones(repo: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The vault pushed to a bare repository in tmp_path, and a second clone of it: two machines."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "-u", "origin", "main")
    other = tmp_path / "desktop"
    git(tmp_path, "clone", "-q", str(bare), str(other))
    return repo, other


def edit(vault: Path, key: str, **change: str) -> None:
    """Change an entry through the app (an API edit, say), committed when the workspace closes."""
    from sentient.memory import edit_entry
    with open_workspace(load_settings(vault, {})) as workspace:
        body = change.pop("body", None)
        edit_entry(workspace, key, expected_revision=None, body=body, meta=change)


def test_edits_of_different_entries_and_lines_merge_cleanly(clones: tuple[Path, Path],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    laptop, desktop = clones
    edit(laptop, "filter-coffee", body="Strong filter coffee, no sugar.\nTwo cups before noon.")
    edit(desktop, "morning-runs", body="Runs 5 km before work.")
    # the same entry on both: its text on one, its category on the other (both rewrite `updated:`)
    edit(laptop, "anika-teacher", body="Anika teaches mathematics in Mysuru.")
    edit(desktop, "anika-teacher", category="sister")
    assert sentient(capsys, "--vault", str(laptop), "sync")[0] == 0
    code, out, _ = sentient(capsys, "--vault", str(desktop), "sync")
    assert code == 0 and "merged, pushed" in out
    assert sentient(capsys, "--vault", str(laptop), "sync")[0] == 0
    for vault in (laptop, desktop):
        assert not list(vault.rglob("*.conflict-*"))
        anika = (vault / "memory" / "family" / "anika-teacher.md").read_text()
        assert "category: sister" in anika and "Anika teaches mathematics in Mysuru." in anika
        assert "Two cups before noon." in (vault / "memory" / "filter-coffee.md").read_text()
        assert "Runs 5 km before work." in (vault / "memory" / "morning-runs.md").read_text()
        assert git(vault, "status", "--porcelain") == ""
    assert (laptop / "memory" / "family" / "anika-teacher.md").read_text() == \
        (desktop / "memory" / "family" / "anika-teacher.md").read_text()
    with open_workspace(load_settings(desktop, {})) as workspace:  # its revision is its text's: no "edited outside"
        assert not workspace.vault.get("memory", "anika-teacher").edited_outside


def test_a_conflicting_edit_keeps_both_reports_it_and_withholds_the_entry(
        clones: tuple[Path, Path], capsys: pytest.CaptureFixture[str], scripted: Scripted) -> None:
    laptop, desktop = clones
    edit(laptop, "anika-teacher", body="Anika teaches quasar physics now (laptop).")
    edit(desktop, "anika-teacher", body="Anika moved to Zanzibar (desktop).")
    assert sentient(capsys, "--vault", str(laptop), "sync")[0] == 0
    code, out, _ = sentient(capsys, "--vault", str(desktop), "sync")
    assert code == 1 and "sentient resolve anika-teacher --keep mine|theirs|both" in out
    entry = desktop / "memory" / "family" / "anika-teacher.md"
    copies = list(entry.parent.glob("anika-teacher.conflict-*.md"))
    assert len(copies) == 1 and "(desktop)" in entry.read_text() and "(laptop)" in copies[0].read_text()
    assert git(desktop, "status", "--porcelain") == ""  # the merge is finished, both sides committed
    assert sentient(capsys, "--vault", str(laptop), "sync")[0] == 0  # the laptop gets the conflict too
    assert "(laptop)" in (laptop / "memory" / "family" / copies[0].name).read_text()

    code, out, _ = sentient(capsys, "--vault", str(desktop), "doctor", "--no-models")
    assert code == 1 and "1 conflicting edit kept both ways" in out
    assert "memory/family/anika-teacher.md: theirs (" in out and copies[0].name in out
    assert "could not be read" not in out  # the copy is a conflict, not a broken file

    scripted.queue(call("memory_recall", query="Anika"), text("I don't know."))
    agent = agent_on(desktop)
    agent.turn("Where does Anika teach?")
    agent.close()
    agent.workspace.close()
    told = scripted.all_prompt_text()
    assert "Zanzibar" not in told and "quasar" not in told and "anika-teacher" not in told
    assert "Anika's birthday" not in told or "anika-birthday" in told  # other entries are still told

    code, out, _ = sentient(capsys, "--vault", str(desktop), "resolve", "anika-teacher", "--keep", "both")
    assert code == 0 and not copies[0].exists()
    assert "(desktop)" in entry.read_text()
    kept = [path for path in (desktop / "memory").rglob("*.md") if "(laptop)" in path.read_text()]
    assert len(kept) == 1 and kept[0] != entry
    assert git(desktop, "status", "--porcelain") == ""
    assert log(desktop)[0].startswith("Sentient | sentient: 2 memory entries")
    code, out, _ = sentient(capsys, "--vault", str(desktop), "doctor", "--no-models")
    assert "conflicting edit" not in out


def test_a_sync_blocked_by_uncommitted_hand_edits_changes_nothing_and_says_so(
        clones: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    laptop, desktop = clones
    edit(laptop, "filter-coffee", body="Coffee at seven (laptop).")
    assert sentient(capsys, "--vault", str(laptop), "sync")[0] == 0
    mine = desktop / "memory" / "filter-coffee.md"
    mine.write_text(mine.read_text() + "\nMy own note, not committed.\n")
    head = git(desktop, "rev-parse", "HEAD")
    code, _, err = sentient(capsys, "--vault", str(desktop), "sync")
    assert code == 2 and "memory/filter-coffee.md" in err and "nothing was changed" in err
    assert mine.read_text().endswith("My own note, not committed.\n")
    assert git(desktop, "rev-parse", "HEAD") == head
    assert git(desktop, "status", "--porcelain") == " M memory/filter-coffee.md\n"


def test_sync_through_the_api_reports_conflicts_in_health(clones: tuple[Path, Path],
                                                          serve: Callable[..., Running]) -> None:
    laptop, desktop = clones
    edit(laptop, "morning-runs", body="Runs 10 km (laptop).")
    edit(laptop, "filter-coffee", body="Coffee at seven (laptop).")
    git(laptop, "push", "-q")
    edit(desktop, "morning-runs", body="Runs 3 km (desktop).")
    server = serve(desktop)
    with server.http() as http:
        assert http.get("/api/health").json()["git"]["conflicts"] == []
        synced = http.post("/api/sync").json()
        assert synced["merged"] == "merged" and synced["pushed"] is True
        assert [(c["original"], c["ref"]) for c in synced["conflicts"]] == [("memory/morning-runs.md", "morning-runs")]
        health = http.get("/api/health").json()["git"]
        assert health["conflicts"] == synced["conflicts"]
        assert health["state"] == "every change the app makes is committed, as Sentient <sentient@localhost>"
    assert "(laptop)" in (desktop / "memory" / "filter-coffee.md").read_text()
    assert git(laptop, "ls-remote", "origin", "main").split()[0] == git(desktop, "rev-parse", "HEAD").strip()


def test_serve_syncs_every_sync_minutes(clones: tuple[Path, Path], serve: Callable[..., Running]) -> None:
    laptop, desktop = clones
    configure(desktop, git={"sync_minutes": 0.005})  # every 0.3 s
    git(desktop, "commit", "-qam", "sync often")
    edit(laptop, "morning-runs", body="Runs 10 km (laptop).")
    git(laptop, "push", "-q")
    serve(desktop)
    eventually(lambda: "(laptop)" in (desktop / "memory" / "morning-runs.md").read_text(), "the laptop's edit pulled",
               timeout=20)
    eventually(lambda: "sync often" in git(laptop, "fetch", "-q", "origin") + git(laptop, "log", "origin/main"),
               "the desktop's commit pushed", timeout=20)


@pytest.mark.parametrize(("setting", "value", "said"), [
    ("author", "nobody", "git.author: 'nobody' is not 'Name <email>'"),
    ("remote", "--upload-pack=evil", "git.remote: '--upload-pack=evil' is not a remote's name"),
])
def test_a_bad_git_setting_is_refused_naming_it(repo: Path, setting: str, value: str, said: str) -> None:
    from sentient.errors import ConfigError
    configure(repo, git={setting: value})
    with pytest.raises(ConfigError) as raised:
        load_settings(repo, {})
    assert said in raised.value.message


def test_a_notepad_with_a_conflict_copy_beside_it_is_not_told(repo: Path) -> None:
    """A run's notepad kept both ways by a sync reaches no run's prompt until resolved (the copy
    is beside notepad.md, where the index reads nothing)."""
    from sentient.tasks.notepad import read_notepad
    copy = repo / "tasks" / "weekly-digest" / "notepad.conflict-laptop-20261207T101500Z.md"
    with open_workspace(load_settings(repo, {})) as workspace:
        notepad = read_notepad(workspace, "weekly-digest")
        assert notepad is not None and workspace.visible(notepad)
        copy.write_text((repo / "tasks" / "weekly-digest" / "notepad.md").read_text())
        assert not workspace.visible(notepad)
        copy.unlink()
        assert workspace.visible(notepad)


def test_a_commit_waits_out_a_lock_another_git_holds_a_moment(repo: Path) -> None:
    """A person's `git status` takes the index's lock for a moment: a commit of the app's that
    meets it then tries again rather than failing until its next retry (30 s later)."""
    import threading

    from sentient.vault.git import Git

    (repo / "memory" / "held.md").write_text("---\ntitle: Held\n---\nA lock in the way.\n")
    lock = repo / ".git" / "index.lock"
    lock.write_text("")
    threading.Timer(0.5, lock.unlink).start()
    started = time.monotonic()
    Git(repo).run("add", "--", "memory/held.md")
    assert 0.4 < time.monotonic() - started < 5
    assert "memory/held.md" in git(repo, "diff", "--cached", "--name-only")
