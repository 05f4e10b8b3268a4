"""The `sentient` command as a person uses it: init, index, search, doctor."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sentient.cli import main
from tests.scripted import Scripted

GIT = shutil.which("git")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".sentient" not in p.parts and ".git" not in p.parts
    }


def test_init_makes_a_vault_that_index_and_doctor_accept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "notes"
    code, out, _ = run(capsys, "init", str(target))
    assert code == 0
    assert "created the vault" in out
    assert (target / "sentient.yaml").read_text().startswith("# sentient.yaml")
    assert (target / ".gitignore").read_text().splitlines()[::2] == [".sentient/", "*.sentient-tmp"]
    for folder in ("memory", "pins/notes", "pins/plans", "skills", "sessions", "tasks", "people"):
        assert (target / folder).is_dir()
    if GIT:
        assert (target / ".git").is_dir()
    assert run(capsys, "--vault", str(target), "index")[0] == 0
    code, out, _ = run(capsys, "--vault", str(target), "doctor", "--no-models")
    assert code == 0, out
    assert "every file reads fine" in out


def test_init_refuses_an_existing_vault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "v"
    assert run(capsys, "init", str(target))[0] == 0
    (target / "sentient.yaml").write_text("model: mine\n")
    code, _, err = run(capsys, "init", str(target))
    assert code == 2
    assert "already a vault" in err
    assert (target / "sentient.yaml").read_text() == "model: mine\n"


def test_init_refuses_a_folder_with_vault_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "mine.md").write_text("keep me\n")
    code, _, err = run(capsys, "init", str(tmp_path))
    assert code == 2
    assert "already holds memory" in err
    assert (tmp_path / "memory" / "mine.md").read_text() == "keep me\n"


def test_index_prints_what_the_vault_holds(
    make_vault: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    vault = make_vault("basic")
    code, out, _ = run(capsys, "--vault", str(vault), "index")
    assert code == 0
    assert "memory entries" in out
    assert "indexed in" in out
    code, out, _ = run(capsys, "--vault", str(vault), "index", "--rebuild")
    assert code == 0
    assert " 0 unchanged" in out


def test_search_prints_ranked_hits_and_json(
    make_vault: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    vault = make_vault("basic")
    code, out, _ = run(capsys, "--vault", str(vault), "search", "Anika")
    assert code == 0
    assert out.startswith(" 1. [memory]")
    code, out, _ = run(capsys, "--vault", str(vault), "search", "Anika", "--json", "--kind", "memory", "--limit", "2")
    hits = json.loads(out)
    assert 1 <= len(hits) <= 2
    assert set(hits[0]) == {"kind", "id", "path", "title", "snippet", "score"}
    assert all(hit["kind"] == "memory" for hit in hits)


def test_search_with_no_match_says_so(make_vault: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    vault = make_vault("basic")
    assert run(capsys, "--vault", str(vault), "search", "zzzqqqxxy")[1] == "no matches\n"


def test_doctor_names_each_bad_file_and_exits_nonzero(
    make_vault: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    vault = make_vault("broken")
    code, out, _ = run(capsys, "--vault", str(vault), "doctor", "--no-models")
    assert code == 1
    assert "could not be read" in out
    for reason in ("not valid YAML", "not UTF-8", "binary", "must be", "is used by 2 files", "limit", "valid id",
                   "never closes"):
        assert reason in out, reason
    assert "memory entries" in out  # the good files still load


def test_doctor_on_a_missing_vault_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--vault", str(tmp_path / "nope"), "doctor")
    assert code == 2
    assert "no such vault folder" in err
    assert "sentient init" in err


def test_bad_config_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sentient.yaml").write_text("limits:\n  max_file_bytes: lots\n")
    code, _, err = run(capsys, "--vault", str(tmp_path), "doctor")
    assert code == 2
    assert "limits.max_file_bytes" in err


@pytest.mark.skipif(GIT is None, reason="git is not installed")
def test_index_search_doctor_leave_git_status_clean(
    make_vault: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    vault = make_vault("basic")
    (vault / ".gitignore").write_text(".sentient/\n")
    git = ["git", "-C", str(vault), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "fixture"], check=True)
    before = snapshot(vault)
    run(capsys, "--vault", str(vault), "index")
    run(capsys, "--vault", str(vault), "index", "--rebuild")
    run(capsys, "--vault", str(vault), "search", "Anika")
    run(capsys, "--vault", str(vault), "doctor", "--no-models")
    status = subprocess.run([*git, "status", "--porcelain", "--ignored=no"], capture_output=True, text=True, check=True)
    assert status.stdout == ""
    assert snapshot(vault) == before


def test_console_script_runs_as_a_process(make_vault: Callable[[str], Path]) -> None:
    vault = make_vault("basic")
    result = subprocess.run(
        [sys.executable, "-m", "sentient.cli", "--vault", str(vault), "index"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "memory entries" in result.stdout


def test_doctor_says_whether_each_model_answers(
    make_vault: Callable[[str], Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    scripted: Scripted,
) -> None:
    vault = make_vault("basic")
    monkeypatch.setenv("SENTIENT_MODEL", "scripted/test")
    code, out, _ = run(capsys, "--vault", str(vault), "doctor")
    assert code == 0, out
    assert "model scripted/test (chat, helper, extraction) answers" in out
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (vault / "sentient.yaml").write_text(
        f"model: scripted/test\nmodels:\n  helper:\n    model: openai/nobody\n    api_base: http://127.0.0.1:{port}/v1\n"
    )
    monkeypatch.delenv("SENTIENT_MODEL")
    code, out, _ = run(capsys, "--vault", str(vault), "doctor")
    assert code == 1
    assert "model openai/nobody (helper) does NOT answer" in out
    assert "sentient.yaml" in out
