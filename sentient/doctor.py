"""`sentient doctor`: what in the vault cannot be read, and why, and what to do."""

from __future__ import annotations

import os
import re
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from sentient.conflicts import git_state, open_conflicts
from sentient.errors import BadFile
from sentient.llm import LLM
from sentient.memory import EntryView, flagged_everywhere
from sentient.tasks.spec import task_spec
from sentient.tools import build_registry
from sentient.vault import Problem
from sentient.vault.atomic import RECOVERED_DIR
from sentient.vault.kinds import KINDS
from sentient.vault.store import SKIPPED_DIRS
from sentient.vault.sync import ConflictCopy, conflict_of
from sentient.workspace import Workspace

ROLES = ("chat", "helper", "extraction")


@dataclass(frozen=True)
class ModelCheck:
    roles: tuple[str, ...]
    model: str
    ok: bool
    message: str
    api_base: str | None = None
    api_key_env: str | None = None


@dataclass(frozen=True)
class Diagnosis:
    vault: str
    counts: dict[str, int]
    problems: list[Problem]
    flagged: list[EntryView] = field(default_factory=list)
    models: list[ModelCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    git: str = ""  # what becomes of the app's changes in git (conflicts.git_state)
    conflicts: list[ConflictCopy] = field(default_factory=list)  # kept by `sentient sync`, not yet resolved
    kept_aside: list[Path] = field(default_factory=list)  # saves of a person's a write kept apart (kept_aside())

    @property
    def healthy(self) -> bool:
        return (not self.problems and not self.conflicts and not self.kept_aside
                and all(check.ok for check in self.models))

    @property
    def withheld(self) -> list[EntryView]:
        """Flagged files kept from the model."""
        return [entry for entry in self.flagged if entry.withheld]

    @property
    def allowed(self) -> list[EntryView]:
        """Flagged files the person allowed at their current revision (the model sees them)."""
        return [entry for entry in self.flagged if entry.allowed]


def allow_command(entry: EntryView, *, memory: bool = True) -> str:
    """The command that allows this file's current revision. The `memory` command exists only
    where memory does, so without it the command turns memory on for that one run."""
    command = f"sentient memory allow {entry.ref}"
    return command if memory else f"SENTIENT_MEMORY=1 {command}"


def check_models(llm: LLM, timeout: float = 60.0) -> list[ModelCheck]:
    """Whether each configured model answers a one-token call. Roles are asked once per
    distinct effective setting (model, server and key variable): two roles naming one model
    with different servers or keys are asked apart."""
    by_setting: dict[tuple[str, str | None, str | None], list[str]] = {}
    for role in ROLES:
        config = llm.settings.role(role)
        by_setting.setdefault((llm.model_name(role), config.api_base, config.api_key_env), []).append(role)
    checks = []
    for (model, api_base, api_key_env), roles in by_setting.items():
        ok, message = llm.ping(roles[0], timeout)
        checks.append(ModelCheck(tuple(roles), model, ok, message, api_base, api_key_env))
    return checks


def task_problems(workspace: Workspace) -> list[Problem]:
    """Tasks whose file reads fine but cannot be run as written (a bad schedule, time zone, role,
    tool or pin): each with the fix. The scheduler leaves them out and runs the others."""
    tools = build_registry(workspace.settings).names()
    problems = []
    for document in workspace.vault.scan({"task"}).documents:
        try:
            task_spec(document, workspace.settings, tools)
        except BadFile as exc:
            problems.append(Problem(exc.path, exc.reason, exc.fix, "task"))
    return problems


def examine(workspace: Workspace, llm: LLM | None = None) -> Diagnosis:
    """Bring the index up to date and report what it holds, what it could not read, what is
    flagged, and (given a model client) whether each model answers."""
    index = workspace.index
    index.sync()
    counts = index.counts()
    return Diagnosis(
        vault=str(workspace.vault.root),
        counts={name: counts.get(name, 0) for name in KINDS},
        problems=[problem for problem in index.problems() if conflict_of(problem.path.name) is None]  # see conflicts
        + task_problems(workspace),
        flagged=flagged_everywhere(workspace),
        models=check_models(llm) if llm is not None else [],
        git=git_state(workspace),
        conflicts=open_conflicts(workspace),
        kept_aside=kept_aside(workspace.vault.root),
        notes=[off] if (off := workspace.semantic_problem()) is not None else [],
    )


# A save of a person's that met a write of Sentient's (vault/atomic.py): `<name>.conflict-<time>-<pid>-<n>`
_RACED = re.compile(r".+\.md\.conflict-\d{8}-\d{6}-\d+-\d+")


def kept_aside(root: Path) -> list[Path]:
    """Saves of a person's that a write of Sentient's kept apart rather than lose (docs/security.md):
    copies beside a file, made when an editor saved it while Sentient was writing it, and what
    `.sentient/recovered/` holds (a save a write killed mid-way had swapped out). Each waits for
    the person to compare it with the file and delete it."""
    found: list[Path] = []
    for folder, folders, files in os.walk(root):
        folders[:] = [name for name in folders if not (folder == str(root) and name in SKIPPED_DIRS)]
        found += [Path(folder) / name for name in files if ".md.conflict-" in name and _RACED.fullmatch(name)]
    with suppress(OSError):
        found += [path for path in (root / ".sentient" / RECOVERED_DIR).iterdir() if path.is_file()]
    return sorted(found)
