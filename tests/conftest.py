"""Shared fixtures: real fixture vaults copied into a temporary folder."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# the `scripted` model and the shipped embedding `model` fixtures; litellm is imported after the line above
pytest_plugins = ["tests.scripted", "tests.semantic_support"]

FIXTURES = Path(__file__).parent / "fixtures"
VAULTS = FIXTURES / "vaults"


@pytest.fixture
def make_vault(tmp_path: Path) -> Callable[[str], Path]:
    """Copy tests/fixtures/vaults/<name> into tmp_path and return its path."""

    def make(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(VAULTS / name, target)
        return target

    return make


@pytest.fixture
def unlistable(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], None]:
    """unlistable(folder): listing it fails as for a folder this user may not read (Permission
    denied). Faked, since root reads every folder; monkeypatch.undo() makes it listable again."""
    real_scandir = os.scandir

    def make(folder: Path) -> None:
        def refusing(path: Any = ".") -> Any:
            if os.fspath(path) == str(folder):
                raise PermissionError(13, "Permission denied")
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", refusing)

    return make
