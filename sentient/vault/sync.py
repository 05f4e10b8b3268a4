"""`sentient sync`: fetch the vault's remote, merge it, push (docs/git.md).

Edits of different files, and of different lines of one file, merge as git merges them; the
frontmatter fields the app derives never conflict by themselves (sentient/vault/merge.py). A
file both sides changed in the same lines is never resolved by dropping a side: ours stays in
place, theirs is written beside it as `<name>.conflict-<host>-<time>.md`, and the merge is
finished with both committed. The entry is then withheld from the model (and the copy is no
entry of its own) until a person resolves it (`sentient resolve`).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import sentient
from sentient.errors import SentientError
from sentient.vault.changes import HOST_TRAILER

if TYPE_CHECKING:
    from sentient.vault.git import Git

# <name>.conflict-<host>-<yyyymmddThhmmssZ>[.<suffix>]
CONFLICT = re.compile(r"^(?P<stem>.+)\.conflict-(?P<host>[a-z0-9-]+)-(?P<time>\d{8}T\d{6}Z)(?P<suffix>\.[^./]+)?$")
_ATTRIBUTES = "*.md merge=sentient\n"


@dataclass(frozen=True)
class ConflictCopy:
    """A side of a conflicting edit kept beside the file (relative paths, '/'-separated)."""

    copy: str
    original: str
    host: str
    time: str

    def as_dict(self) -> dict[str, str]:
        return {"copy": self.copy, "original": self.original, "host": self.host, "time": self.time}


def conflict_of(rel: str) -> ConflictCopy | None:
    """The conflict copy `rel` is, or None when it is none."""
    path = PurePosixPath(rel)
    found = CONFLICT.fullmatch(path.name)
    if found is None:
        return None
    original = path.with_name(found["stem"] + (found["suffix"] or ""))
    return ConflictCopy(rel, original.as_posix(), found["host"], found["time"])


def conflict_name(rel: str, host: str, moment: datetime) -> str:
    """Where theirs of `rel` is kept: beside it, `<stem>.conflict-<host>-<time><suffix>`."""
    path = PurePosixPath(rel)
    stamp = moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return path.with_name(f"{path.stem}.conflict-{host}-{stamp}{path.suffix}").as_posix()


def conflicts(git: Git) -> list[ConflictCopy]:
    """The conflict copies in the vault's repository (a sync commits those it makes), by path."""
    listed = git.run("ls-files", "-z", "--", ":(glob)**/*.conflict-*").out.split("\0")
    found = [conflict_of(rel) for rel in listed if ".conflict-" in rel]
    return sorted({copy.copy: copy for copy in found if copy is not None}.values(), key=lambda copy: copy.copy)


@dataclass(frozen=True)
class Synced:
    """What a sync did."""

    remote: str
    branch: str
    merged: str  # "up to date", "fast-forward", "merged", "nothing to fetch"
    pushed: bool
    conflicts: list[ConflictCopy] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"remote": self.remote, "branch": self.branch, "merged": self.merged, "pushed": self.pushed,
                "conflicts": [copy.as_dict() for copy in self.conflicts]}


def merge_options(state_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The `-c` options and environment that give this git command the frontmatter merge driver
    for *.md (without writing anything into the repository's own configuration)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    attributes = state_dir / "git-attributes"
    if not attributes.exists() or attributes.read_text() != _ATTRIBUTES:
        attributes.write_text(_ATTRIBUTES)
    driver = f"{shlex.quote(sys.executable)} -m sentient.vault.merge %O %A %B %P"
    package = str(Path(sentient.__file__).resolve().parent.parent)
    python_path = os.pathsep.join(filter(None, (package, os.environ.get("PYTHONPATH"))))
    return (["-c", f"core.attributesFile={attributes}", "-c", "merge.sentient.name=Sentient frontmatter",
             "-c", f"merge.sentient.driver={driver}"], {"PYTHONPATH": python_path})


def sync(git: Git, state_dir: Path, remote: str, host: str, *, clock: datetime | None = None) -> Synced:
    """Fetch `remote`, merge its branch of the same name into the one checked out, push.
    GitError (nothing changed) when there is no such remote, a merge is under way, or the
    person's uncommitted edits are in the way of the merge."""
    from sentient.vault.git import NETWORK_TIMEOUT, GitError  # here: the index, which names conflicts, runs no git

    with git.lock(state_dir):
        branch = git.branch()
        if branch is None:
            raise GitError(f"{git.root}: no branch is checked out (a detached HEAD), so there is nothing to sync; "
                           "check out a branch (git switch main)")
        if remote not in git.lines("remote"):
            raise SentientError(f"git.remote: the vault's repository has no remote '{remote}'; add one (git remote "
                                f"add {remote} URL) or name another in sentient.yaml")
        if git.merging():
            raise GitError(f"{git.root}: a merge is under way; finish it (git merge --continue) or abort it first")
        git.run("fetch", "--quiet", remote, timeout=NETWORK_TIMEOUT)
        upstream = f"refs/remotes/{remote}/{branch}"
        theirs = git.run("rev-parse", "--verify", "-q", upstream, check=False).out.strip()
        copies: list[ConflictCopy] = []
        merged = "nothing to fetch"
        if theirs:
            merged, copies = _merge(git, state_dir, upstream, theirs, remote, host, clock or datetime.now(UTC))
        head = git.head()
        pushed = False
        if head is not None and head != theirs:
            git.run("push", "--quiet", remote, f"HEAD:refs/heads/{branch}", timeout=NETWORK_TIMEOUT)
            pushed = True
        return Synced(remote, branch, merged, pushed, copies)


def _merge(git: Git, state_dir: Path, upstream: str, theirs: str, remote: str, host: str,
           moment: datetime) -> tuple[str, list[ConflictCopy]]:
    from sentient.vault.git import GitError

    before = git.head()
    if before == theirs or (before and git.run("merge-base", "--is-ancestor", theirs, "HEAD", check=False).ok):
        return "up to date", []
    options, env = merge_options(state_dir)
    done = git.run("merge", "--no-edit", "--quiet", upstream, check=False, options=options, env=env)
    if done.ok:
        return ("fast-forward" if before is None or git.run("rev-parse", "HEAD^2", check=False).code != 0
                else "merged"), []
    unmerged = sorted(set(git.run("diff", "--name-only", "--diff-filter=U", "-z").out.split("\0")) - {""})
    if not unmerged:  # refused before it began: the person's edits are in the way; nothing was changed
        said = (done.err.strip() or done.out.strip()).splitlines()
        raise GitError(f"{git.root}: the merge of {upstream.removeprefix('refs/remotes/')} was refused, nothing was "
                       f"changed: {' / '.join(said[-4:])}. Commit or put aside your own edits of those files, then "
                       "sync again")
    copies = [_keep_both(git, rel, _host_of(git, rel) or remote, moment) for rel in unmerged]
    lines = "\n".join(f"- {copy.original}: theirs kept as {PurePosixPath(copy.copy).name}" for copy in copies)
    message = (f"sync: merge {upstream.removeprefix('refs/remotes/')}, {len(copies)} conflicting "
               f"file{'s' if len(copies) != 1 else ''} kept both ways\n\n{lines}\n\n{HOST_TRAILER}: {host}\n")
    git.run("commit", "-q", "--no-verify", "-F", "-", stdin=message)
    return "merged", copies


def _host_of(git: Git, rel: str) -> str | None:
    """The machine the other side's last change of `rel` came from (its commit's trailer)."""
    done = git.run("log", "-1", f"--format=%(trailers:key={HOST_TRAILER},valueonly)", "MERGE_HEAD", "--", rel,
                   check=False)
    name = done.out.strip().splitlines()[0] if done.ok and done.out.strip() else ""
    cleaned = "".join(ch if ch.isascii() and (ch.isalnum() or ch == "-") else "-" for ch in name.lower()).strip("-")
    return cleaned[:40] or None


def _stage(git: Git, number: int, rel: str) -> bytes | None:
    done = git.run("show", f":{number}:{rel}", check=False)
    return done.raw if done.ok else None


def _keep_both(git: Git, rel: str, host: str, moment: datetime) -> ConflictCopy:
    """Ours in place (or absent, when ours removed it), theirs beside it; both staged."""
    ours, theirs = _stage(git, 2, rel), _stage(git, 3, rel)
    copy = conflict_name(rel, host, moment)
    path = git.root / rel
    if theirs is not None:
        (git.root / copy).write_bytes(theirs)
        git.run("add", "--", copy)
    if ours is not None:
        path.write_bytes(ours)
        git.run("add", "--", rel)
    else:
        path.unlink(missing_ok=True)
        git.run("rm", "-q", "--cached", "--ignore-unmatch", "--", rel)
    found = conflict_of(copy)
    assert found is not None
    return found
