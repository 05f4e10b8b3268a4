"""Workspace: one vault opened with its settings, threat judge and index. Made at an entry
point (CLI command, server lifespan) and passed down; closed when that entry point ends."""

from __future__ import annotations

import glob
import logging
import os
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from sentient import embedding
from sentient.config import CONFIG_FILE, Settings, load_settings
from sentient.errors import IndexUnavailable, SentientError
from sentient.index import Index, IndexedDoc, Listed
from sentient.threats import Judgment, ThreatJudge, allowed_revision, judged_revision
from sentient.vault import KINDS, Document, Vault
from sentient.vault.changes import Change

if TYPE_CHECKING:
    from sentient.threats import PatternSet
    from sentient.vault.committer import Committer
    from sentient.vault.git import Git, RepoState

log = logging.getLogger(__name__)


@dataclass
class Workspace:
    settings: Settings
    vault: Vault
    judge: ThreatJudge
    watching: bool = False  # a watcher keeps the index current (serve); else turns sync first
    index_path: Path | None = None  # an index file of its own, not the vault's (see open_workspace)
    _index: Index | None = field(default=None, repr=False)
    _repo: RepoState | None = field(default=None, repr=False)
    _committer: Committer | None = field(default=None, repr=False)
    _conflicts: dict[str, tuple[tuple[int, int], frozenset[str]]] = field(default_factory=dict, repr=False)

    @property
    def index(self) -> Index:
        """The index, opened on first use (a command that never searches never creates it)."""
        if self._index is None:
            self._index = Index(self.vault, judge=self.judge, judge_version=lambda: self.judge_fingerprint,
                                judge_many=self.judge.threats, path=self.index_path,
                                embedder=embedding.embedder if self.settings.features.semantic else None)
        return self._index

    def semantic_problem(self, *, load: bool = True) -> str | None:
        """Why search does not rank by meaning too, and how to turn it on; None when it does.
        Turned off in the settings, or the model cannot load (embedding.problem)."""
        if not self.settings.features.semantic:
            return ("semantic search is off: features.semantic is false in sentient.yaml (or SENTIENT_SEMANTIC=0); "
                    "search ranks by words alone (BM25) and nothing is embedded. To turn it on, set it to true "
                    "or remove the line")
        return embedding.problem(load=load)

    @property
    def judge_fingerprint(self) -> str:
        """The fingerprint of the pattern set judging now (taken again first if it changed)."""
        return self.judge.fingerprint

    def judgment_of(self, item: IndexedDoc | Document) -> tuple[bool, tuple[str, ...], bool]:
        """(flagged, pattern ids, withheld) for an entry's text as it is now, with the current
        patterns; a cache lookup when the revision was judged before."""
        judgment, allowed = self.full_judgment(item)
        return judgment.flagged, judgment.patterns, judgment.withheld(allowed)

    def full_judgment(self, item: IndexedDoc | Document) -> tuple[Judgment, str | None]:
        """The judgment of an entry's text as it is now (with its findings: the patterns and
        the text they matched), and the revision the person allowed; a lookup when cached."""
        threat = item.meta.get("threat")
        allowed = threat.get("allowed_revision") if isinstance(threat, dict) else None
        if isinstance(item, Document):
            allowed = allowed_revision(item)
        fingerprint = self.judge_fingerprint  # first: the index's verdicts count only if made with this set
        revision = judged_revision(item)
        judgment = None
        if isinstance(item, IndexedDoc) and item.threat is None and self._judged_by_index(fingerprint):
            judgment = self.judge.clean(revision, fingerprint)  # the index judged this revision with this set
        if judgment is None:
            judgment = self.judge.judge(item, revision)
        return judgment, self.judge.allowance(item, allowed if isinstance(allowed, str) else None)

    def _judged_by_index(self, fingerprint: str) -> bool:
        """Whether the index's rows were judged with the set of this fingerprint (then a row with
        no `threat` is a revision it finds nothing in: a lookup, in any process)."""
        return self._index is not None and self._index.judge_version == fingerprint

    def withheld_row(self, row: Listed) -> bool:
        """judgment_of(...)[2] for a row of a listing (Index.newest) of memory: a lookup when
        cached; an entry in a sync conflict is withheld too."""
        self.judge.reload()
        judgment = self.judge.judge(row)
        withheld = judgment.withheld(self.judge.allowance(row, row.allowed_revision))
        return withheld or row.key in self.conflicted("memory")

    def conflicted(self, kind: str) -> frozenset[str]:
        """The keys of `kind` in a sync conflict (a copy of the other side kept beside the file):
        neither side reaches the model until a person resolves it (docs/git.md). Asked of the
        index again only when the rows of the kind's folder changed (a listing asks per entry)."""
        index = self.index
        stamp = index.version_of(KINDS[kind].folder.split("/")[0])
        known = self._conflicts.get(kind)
        if known is None or known[0] != stamp:
            known = self._conflicts[kind] = (stamp, frozenset(index.conflicted(kind)))
        return known[1]

    def visible(self, item: IndexedDoc | Document) -> bool:
        """May this entry's text reach a model? Re-judged on every read, never from a stale flag;
        never while it is in a sync conflict."""
        return not self.judgment_of(item)[2] and not self._in_conflict(item)

    def _in_conflict(self, item: IndexedDoc | Document) -> bool:
        return self.in_conflict(item.kind, item.key, item.path)

    def in_conflict(self, kind: str, key: str, path: Path) -> bool:
        """Whether the file of `kind` and `key` at `path` has a sync's conflict copy beside it."""
        if kind in ("task", "notepad"):  # a copy beside task.md or notepad.md is no file the index reads
            return _copy_beside(path)
        try:
            return key in self.conflicted(kind)
        except IndexUnavailable:  # no index to ask: the folder is
            return _copy_beside(path)

    def judge_text(self, text: str) -> bool:
        """True when the text reads like instructions (the current patterns match)."""
        return self.judge.judge(text).flagged

    @property
    def repo(self) -> RepoState:
        """The vault's own git repository, or why there is none (looked for once)."""
        if self._repo is None:
            from sentient.vault.git import Author, repository  # here: git (subprocess, socket) on first use

            self._repo = repository(self.vault.root, author=Author.parse(self.settings.git.author))
        return self._repo

    @property
    def git(self) -> Git | None:
        return self.repo.git

    @property
    def committer(self) -> Committer | None:
        """The background committer, once the app has written something (None: autocommit is off,
        or the vault is no repository of its own: see `repo`)."""
        return self._committer

    def autocommit(self) -> None:
        """Commit every write the app makes from now on, in the background (git.autocommit):
        the repository is looked for at the first write, not at start."""
        if self.settings.git.autocommit and self.vault.on_change is None:
            self.vault.on_change = self._first_change

    def _first_change(self, change: Change) -> None:
        if not os.path.lexists(self.vault.root / ".git"):  # no repository of its own: a stat, not a git command
            self.vault.on_change = None
            return
        if self._committer is None:
            from sentient.vault.committer import Committer

            self._committer = Committer(lambda: self.git, self.vault.state_dir, delay=self.settings.git.commit_delay,
                                        manual_edits=self.settings.git.commit_manual_edits)
        self.vault.on_change = self._committer.record
        self._committer.record(change)

    def flush_commits(self) -> None:
        """Commit the app's pending writes now (a command before it exits, a sync before it merges)."""
        if self._committer is not None:
            self._committer.flush()

    def close(self) -> None:
        if self._committer is not None:
            self._committer.close()
        if self._index is not None:
            self._index.close()
            self._index = None

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _copy_beside(path: Path) -> bool:
    """Whether a sync's conflict copy of this file lies beside it."""
    return any(path.parent.glob(f"{glob.escape(path.stem)}.conflict-*{path.suffix}"))


def load_patterns(settings: Settings) -> PatternSet:
    """The packaged pattern set plus the vault's own (sentient.yaml `threats:`), compiled once and
    kept in `.sentient/` for the next process (threats/compiled.py)."""
    from sentient.threats.compiled import load_compiled

    return load_compiled(settings.threats.patterns or None, _patterns_file(settings), settings.state_dir)


def cached_pattern_name(settings: Settings) -> tuple[int, str] | None:
    """(version, fingerprint) of the set load_patterns() gives, when its cache holds that very set:
    read from the cache file's head, nothing loaded (threats/compiled.py)."""
    from sentient.threats.compiled import cached_name

    return cached_name(settings.threats.patterns or None, _patterns_file(settings), settings.state_dir)


def _patterns_file(settings: Settings) -> Path | None:
    return settings.vault / settings.threats.file if settings.threats.file else None


class VaultPatterns:
    """The vault's pattern set as its files have it now: given to a ThreatJudge as its
    `source`, so that a running server judges with a pattern the person just added to
    sentient.yaml (or to the file its `threats: file:` names), without a restart.

    Called, it looks at those files (their size and time of change) and gives the set loaded
    again when they changed, else None. A change that does not load (a broken pattern, a
    file that is not YAML) keeps the set in use and is logged once, with the reason; the
    files are loaded again at their next change."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._seen = self._state(settings)
        # Why the files as they are now do not load (then the set before judges): sentient.yaml,
        # or the patterns it has (kept while sentient.yaml alone is broken and mended).
        self._config_error: str | None = None
        self._patterns_error: str | None = None

    def __call__(self) -> PatternSet | None:
        state = self._state(self._settings)
        if state == self._seen:
            return None
        seen, self._seen = self._seen, state
        try:
            settings = load_settings(self._settings.vault, {})  # threats: comes from the file alone
        except SentientError as error:
            log.warning("%s changed but does not load, so the threat patterns before are kept: %s", CONFIG_FILE, error)
            self._config_error = (f"{CONFIG_FILE} does not load, so the threat patterns before it changed judge: "
                                  f"{error.message}")
            return None
        self._config_error = None
        before, self._settings = self._settings.threats, settings
        if settings.threats == before and state[1] == seen[1]:
            return None  # another setting changed: the patterns are as they were (no second of compiling)
        if settings.threats.file != before.file:  # watch the file it names now, loaded or not
            self._seen = self._state(settings)
        try:
            patterns = load_patterns(settings)
        except SentientError as error:
            log.warning("the threat patterns changed but do not load, so the ones before are kept: %s", error)
            self._patterns_error = f"the vault's threat patterns do not load, so the ones before judge: {error.message}"
            return None
        log.info("threat patterns loaded again (%s)", patterns.label)
        self._patterns_error = None
        return patterns

    @property
    def error(self) -> str | None:
        return self._config_error or self._patterns_error

    @staticmethod
    def _state(settings: Settings) -> tuple[tuple[int, int] | None, ...]:
        return tuple(_stat(path) for path in (settings.vault / CONFIG_FILE, _patterns_file(settings)))


def _stat(path: Path | None) -> tuple[int, int] | None:
    if path is None:
        return None
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size


def with_current_patterns(settings: Settings) -> Settings:
    """`settings` with the threat patterns as the vault's files have them now, which is what a
    running server judges with (VaultPatterns): for a process it starts with the settings it
    read at its own start. When the files do not load, the patterns given stay."""
    try:
        threats = load_settings(settings.vault, {}).threats
    except SentientError as error:
        log.warning("%s does not load, so the threat patterns %s started with judge: %s", CONFIG_FILE, "serve",
                    error)
        return settings
    return settings.model_copy(update={"threats": threats})


def open_workspace(settings: Settings, patterns: PatternSet | None = None, index_path: Path | None = None) -> Workspace:
    """The vault with its index and judge. `patterns`: the set to judge with, already loaded
    (the vault's; or doctor's shipped set when the vault's do not load). `index_path`: an index
    file of its own (doctor's then: the vault's index holds the verdicts of the vault's set,
    which a server may be judging with, and must not be given another set's)."""
    named = None if patterns is not None else cached_pattern_name(settings)
    if patterns is None and named is None:  # not cached: loaded now (a set that fails to load says so here)
        patterns = load_patterns(settings)
    judge = ThreatJudge(patterns or partial(load_patterns, settings), named=named, source=VaultPatterns(settings))
    vault = Vault(settings.vault, max_file_bytes=settings.limits.max_file_bytes, judge=judge)
    workspace = Workspace(settings, vault, judge, index_path=index_path)
    workspace.autocommit()
    return workspace
