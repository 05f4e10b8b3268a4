"""The example vault as a fresh clone has it: `sentient doctor` finds nothing to report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sentient.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "vault"


def test_doctor_reports_no_problem_on_the_example_vault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vault = tmp_path / "vault"
    shutil.copytree(EXAMPLE, vault, ignore=shutil.ignore_patterns(".sentient"))
    code = main(["--vault", str(vault), "doctor", "--no-models"])
    out = capsys.readouterr()
    assert code == 0, out
    assert out.out.splitlines()[1:] == [f"git: not committing: {vault} is not a git repository, so changes are not "
                                        "committed (`git init` there to have them committed)",
                                        "every file reads fine"], out.out
    assert out.err == ""
