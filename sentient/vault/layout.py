"""A new vault: the folders, a commented sentient.yaml, a README and a .gitignore."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path

from sentient.config import CONFIG_FILE, find_vault
from sentient.errors import AlreadyExists, SentientError
from sentient.vault.git import Git

FOLDERS = ("memory", "pins/notes", "pins/plans", "skills", "sessions", "tasks", "people", "personas")
GITIGNORE = ".sentient/\n# what a write killed before its rename can leave beside a file\n*.sentient-tmp\n"


def _data(name: str) -> str:
    return resources.files("sentient").joinpath("data", name).read_text(encoding="utf-8")


def _inside_git_repo(path: Path) -> bool:
    if shutil.which("git") is None:
        return False
    result = subprocess.run(
        ["git", "rev-parse", "--is-inside-work-tree"],
        cwd=path,
        capture_output=True,
        text=True,
        check=False,
    )
    return result.returncode == 0 and result.stdout.strip() == "true"


def init_vault(path: Path) -> list[str]:
    """Create a vault at `path` and return what was done, one line per step.

    Refuses a folder that is already a vault or is not empty of vault folders, so an
    existing vault is never touched.
    """
    path = path.resolve()
    outer = find_vault(path.parent)
    if outer is not None:
        raise AlreadyExists(
            f"{path} is inside the vault {outer}; a vault cannot hold another one (its files would be read "
            f"as the outer vault's). Choose a folder outside {outer}; nothing was changed"
        )
    if (path / CONFIG_FILE).exists():
        raise AlreadyExists(f"{path} is already a vault (it has sentient.yaml); nothing was changed")
    if path.exists() and not path.is_dir():
        raise SentientError(f"{path} is a file, not a folder; choose another path")
    taken = [name for name in (*FOLDERS, "README.md", ".gitignore") if (path / name).exists()]
    if taken:
        raise AlreadyExists(
            f"{path} already holds {', '.join(taken)}; `sentient init` only makes new vaults. "
            "Add a sentient.yaml by hand to use this folder as it is"
        )
    steps = []
    try:
        path.mkdir(parents=True, exist_ok=True)
        for folder in FOLDERS:
            (path / folder).mkdir(parents=True, exist_ok=True)
            (path / folder / ".gitkeep").touch()
        (path / "README.md").write_text(_data("vault-README.md"), encoding="utf-8")
        (path / ".gitignore").write_text(GITIGNORE, encoding="utf-8")
        (path / "sentient.yaml").write_text(_data("sentient.yaml.template"), encoding="utf-8")  # last: now a vault
    except OSError as exc:
        where = "" if exc.filename in (None, str(path)) else f"{exc.filename}: "
        raise SentientError(f"cannot make a vault at {path}: {where}{exc.strerror or exc}; "
                            "choose a folder you can write to") from None
    steps.append(f"created the vault at {path}")
    if shutil.which("git") is None:
        steps.append("git is not installed: the vault is not under version control")
    elif _inside_git_repo(path):
        steps.append("the folder is inside a git repository already: no new repository made")
    else:
        subprocess.run(["git", "init", "-q"], cwd=path, check=True)
        git = Git(path)
        git.run("add", "-A")
        git.run("commit", "-q", "-m", "sentient: a new vault")
        steps.append("made it a git repository (git init) with the new vault as its first commit; .sentient/ is "
                     "ignored, and Sentient commits each change it makes (git.autocommit)")
    return steps
