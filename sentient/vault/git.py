"""The `git` command, run for the vault: with a timeout, no prompt, no hook, no editor, no
signing, and none of the caller's GIT_* variables, so that a person's git setup can neither
break the app's commits nor make one wait on a terminal.

Only a vault that is a repository of its own (its folder is the top of a work tree) is
committed to: a vault kept as a subfolder of another repository (a project's example vault, a
notes repository with other things in it) is left to the person.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sentient.errors import SentientError

LOCAL_TIMEOUT = 30.0  # seconds for a local command (status, add, commit, log, show)
NETWORK_TIMEOUT = 120.0  # seconds for fetch and push
LOCK_TRIES, LOCK_WAIT = 30, 0.1  # a command that found a lock of git's taken is run again, for up to 3 s
DEFAULT_AUTHOR = "Sentient <sentient@localhost>"

# Settings every command runs with, over the person's own: nothing asks, signs, or runs a hook.
_OPTIONS = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "commit.gpgSign=false",
    "-c", "tag.gpgSign=false",
    "-c", "core.editor=true",
    "-c", "sequence.editor=true",
    "-c", "core.autocrlf=false",
    "-c", "core.safecrlf=false",
    "-c", "core.quotePath=false",
    "-c", "advice.detachedHead=false",
    "-c", "color.ui=false",
    "-c", "pull.rebase=false",
    "-c", "merge.log=false",
    "-c", "log.showSignature=false",
)


class GitError(SentientError):
    """A git command failed or took too long; what it said is in the message."""

    status = 502


@dataclass(frozen=True)
class Author:
    name: str
    email: str

    @staticmethod
    def parse(text: str) -> Author:
        """'Name <email>' (as in a commit); ConfigError-like SentientError naming git.author."""
        name, _, rest = text.partition("<")
        email = rest.rstrip().removesuffix(">")
        if not name.strip() or not email or ">" in email or "<" in email:
            raise SentientError(f"git.author: {text!r} is not 'Name <email>'; write e.g. {DEFAULT_AUTHOR!r}")
        return Author(name.strip(), email.strip())

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


def clean_environ(environ: Mapping[str, str], author: Author | None = None) -> dict[str, str]:
    """The environment a git command runs in: the caller's without any GIT_* variable (a
    GIT_DIR or GIT_INDEX_FILE from a hook would point the command elsewhere), no prompt for a
    password, and `author` as both author and committer when given."""
    env = {key: value for key, value in environ.items() if not key.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_EDITOR="true", GIT_MERGE_AUTOEDIT="no", GIT_PAGER="cat",
               GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    if author is not None:
        env.update(GIT_AUTHOR_NAME=author.name, GIT_AUTHOR_EMAIL=author.email,
                   GIT_COMMITTER_NAME=author.name, GIT_COMMITTER_EMAIL=author.email)
    return env


@dataclass(frozen=True)
class Done:
    code: int
    out: str
    err: str
    raw: bytes = b""  # what it printed, as bytes (a file's content from `git show`)

    @property
    def ok(self) -> bool:
        return self.code == 0


class Git:
    """Runs git in one work tree. Cheap to make; holds nothing open."""

    def __init__(self, root: Path, *, author: Author | None = None, environ: Mapping[str, str] | None = None,
                 options: Sequence[str] = ()) -> None:
        self.root = root
        self.author = author or Author.parse(DEFAULT_AUTHOR)
        self._env = clean_environ(os.environ if environ is None else environ, self.author)
        self._options = tuple(options)

    def run(self, *args: str, timeout: float = LOCAL_TIMEOUT, check: bool = True, stdin: str | None = None,
            options: Sequence[str] = (), env: Mapping[str, str] | None = None) -> Done:
        """Run `git <args>` in the work tree; GitError when it fails (with `check`) or times out.
        `options`: more `-c name=value` for this command; `env`: more variables."""
        command = ["git", *_OPTIONS, *self._options, *options, *args]
        try:
            for _ in range(LOCK_TRIES):  # another git (a person's `git status`) holding a lock a moment: again
                done = subprocess.run(command, cwd=self.root, env={**self._env, **(env or {})}, capture_output=True,
                                      timeout=timeout,
                                      input=(stdin or "").encode("utf-8"), start_new_session=True, check=False)
                if done.returncode == 0 or b".lock': File exists" not in done.stderr:
                    break
                time.sleep(LOCK_WAIT)
        except subprocess.TimeoutExpired:
            raise GitError(f"{self.root}: `git {args[0]}` took more than {timeout:.0f} s and was stopped; check the "
                           "repository (a lock left by a crashed git, a remote that does not answer)") from None
        except OSError as exc:
            raise GitError(f"{self.root}: git could not be run ({exc.strerror or exc}); install git or set "
                           "git.autocommit: false in sentient.yaml") from None
        result = Done(done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"),
                      done.stdout)
        if check and not result.ok:
            said = (result.err.strip() or result.out.strip()).splitlines()
            raise GitError(f"{self.root}: `git {' '.join(args[:2])}` failed: {' / '.join(said[-3:]) or result.code}")
        return result

    def lines(self, *args: str, timeout: float = LOCAL_TIMEOUT) -> list[str]:
        return [line for line in self.run(*args, timeout=timeout).out.split("\n") if line]

    def head(self) -> str | None:
        """The commit checked out, or None in a repository with no commit yet."""
        done = self.run("rev-parse", "--verify", "-q", "HEAD", check=False)
        return done.out.strip() if done.ok else None

    def branch(self) -> str | None:
        """The branch checked out (also before its first commit); None when detached."""
        done = self.run("symbolic-ref", "-q", "--short", "HEAD", check=False)
        return done.out.strip() if done.ok else None

    def merging(self) -> bool:
        """A merge (or a rebase, a cherry-pick) is under way: a partial commit now would fail."""
        git_dir = Path(self.run("rev-parse", "--absolute-git-dir").out.strip())
        return any((git_dir / name).exists() for name in ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD",
                                                          "rebase-merge", "rebase-apply"))

    @contextmanager
    def lock(self, state_dir: Path) -> Iterator[None]:
        """Serialise the app's git commands on this vault across threads and processes (a
        task's run commits from its own process while serve commits and syncs)."""
        folder = state_dir / "locks"
        folder.mkdir(parents=True, exist_ok=True)
        handle = os.open(folder / "git.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
        finally:
            os.close(handle)


@dataclass(frozen=True)
class RepoState:
    """Whether the vault's changes can be committed, and if not, why (for doctor)."""

    git: Git | None
    why_not: str | None


def repository(root: Path, *, author: Author | None = None, environ: Mapping[str, str] | None = None) -> RepoState:
    """The vault's own repository, or why there is none to commit to."""
    if shutil.which("git") is None:
        return RepoState(None, "git is not installed, so changes are not committed")
    git = Git(root, author=author, environ=environ)
    try:
        done = git.run("rev-parse", "--show-toplevel", check=False)
    except GitError as exc:
        return RepoState(None, exc.message)
    if not done.ok:
        return RepoState(None, f"{root} is not a git repository, so changes are not committed (`git init` there "
                               "to have them committed)")
    top = Path(done.out.strip())
    if top.resolve() != root.resolve():
        return RepoState(None, f"the vault is a folder inside the git repository at {top}, not a repository of its "
                               "own, so Sentient commits nothing there (commit by hand, or make the vault a "
                               "repository of its own)")
    return RepoState(git, None)
