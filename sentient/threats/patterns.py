"""The pattern set: loading sentient/data/patterns.yaml (plus a vault's own patterns),
checking and compiling each pattern, and the keyword pre-check that decides which patterns are
worth running on a text.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sentient.errors import ConfigError
from sentient.threats.expressions import Searcher, fast_searcher, has_capitals, is_word_keyword
from sentient.threats.learned import DATA, DETECTOR_FILE
from sentient.threats.learned import digest as learned_digest
from sentient.threats.views import NORMALISER_VERSION, VIEWS, Normalised, is_word_char

if TYPE_CHECKING:
    from sentient.threats.gates import Gates
    from sentient.threats.learned import Detector
    from sentient.threats.prefilter import Prefilter

PATTERNS_FILE = DATA / "patterns.yaml"
# Up to this many characters a text is scanned in pure Python even with Hyperscan: its few
# calls cost more than the keyword pre-checks (measured with bench/bench_threats.py).
SHORT_TEXT = 512
KEYWORD_SAMPLES = 40  # texts made from each regex of a vault's own pattern to check its keywords

CLASSES = (
    "override",
    "identity",
    "fake-header",
    "exfiltration",
    "tool-coercion",
    "secrecy",
    "self-persistence",
    "credentials",
    "hidden",
)

_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_PATTERN_KEYS = {"id", "class", "description", "regex", "view", "keywords", "case_sensitive", "not_after"}

@dataclass(frozen=True)
class Pattern:
    """One compiled pattern. `keywords` is a tuple of groups: every group needs one word present."""

    id: str
    class_: str
    description: str
    regexes: tuple[re.Pattern[str], ...]
    view: str = "flat"
    keywords: tuple[tuple[str, ...], ...] = ()
    case_sensitive: bool = False
    not_after: tuple[str, ...] = ()
    origin: str = "patterns.yaml"
    searchers: tuple[Searcher, ...] = ()  # the regexes as scanned (see expressions.py)

    @cached_property
    def leads(self) -> frozenset[bytes]:
        """The lead words of all its searchers' needles."""
        return frozenset(needle.lead for searcher in self.searchers for needle in searcher.needles)

    @cached_property
    def needle_plan(self) -> dict[bytes, tuple[tuple[int, str, int], ...]]:
        """For each lead word, the needles with it: (number of the expression, needle, offset of
        the lead word in the needle)."""
        found: dict[bytes, list[tuple[int, str, int]]] = {}
        for number, searcher in enumerate(self.searchers):
            for needle in searcher.needles:
                found.setdefault(needle.lead, []).append((number, needle.text, needle.offset))
        return {lead: tuple(needles) for lead, needles in found.items()}

    def excluded_at(self, subject: str, start: int) -> bool:
        """True when a match at `start` follows one of the `not_after` words. "n't" ends a word
        ("don't", "can't"), so it needs no word boundary before it."""
        before = subject[max(0, start - 40) : start].lower().rstrip()
        return any(
            before.endswith(word)
            and (len(before) == len(word) or word.startswith(_CONTRACTED) or not is_word_char(before[-len(word) - 1]))
            for word in self.not_after
        )


_CONTRACTED = ("n't", "n’t")  # not_after words that end a word rather than stand alone


@dataclass(frozen=True)
class PatternSet:
    """A compiled, versioned set of patterns.

    `version` is the base file's version: it is what a flagged file records in
    `threat.pattern_set`. `fingerprint` changes whenever any pattern (base or the vault's own)
    or the normalisation changes; caches are keyed on it. `use_hyperscan`: scan with Hyperscan
    as the prefilter when the package is installed (the findings are the same either way).
    """

    version: int
    patterns: tuple[Pattern, ...]
    fingerprint: str
    extra_count: int = 0
    use_hyperscan: bool = True
    learned: str = ""  # the learned detector's detector.json (learned.py), "" for the patterns alone

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (for scan helpers, parallel.py) without what is made on first use (Hyperscan's
        databases cannot be pickled; a helper makes or loads its own)."""
        return {field.name: getattr(self, field.name) for field in fields(self)}

    @property
    def label(self) -> str:
        """'3' for the shipped set, '3+ab12cd34' when the vault adds patterns."""
        if not self.extra_count:
            return str(self.version)
        return f"{self.version}+{self.fingerprint.rsplit(':', 1)[-1][:8]}"

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(pattern.id for pattern in self.patterns)

    @cached_property
    def _gates(self) -> Gates:
        from sentient.threats.gates import Gates  # on first use: a set read back from its cache may judge nothing

        return Gates(self.patterns)

    @cached_property
    def prefilter(self) -> Prefilter | None:
        """Hyperscan's databases for the set (compiled on first use), or None for pure Python."""
        from sentient.threats.prefilter import load as load_prefilter  # Hyperscan, on first use

        return load_prefilter(self.patterns) if self.use_hyperscan else None

    @cached_property
    def detector(self) -> Detector | None:
        """The learned second stage (loaded on first use), or None when the set has none."""
        from sentient.threats.learned import Detector  # numpy, on first use

        return Detector.load(Path(self.learned)) if self.learned else None

    @cached_property
    def vocabulary(self) -> frozenset[bytes]:
        """Every word the set looks up in a text: its word keywords and its needles' lead words."""
        words = {k.encode() for p in self.patterns for group in p.keywords for k in group if is_word_keyword(k)}
        return frozenset(words | {lead for pattern in self.patterns for lead in pattern.leads})

    def normalise(self, text: str) -> Normalised:
        """The text's views, keeping of its words only those the set looks up. Its word sets are
        made ahead (`indexed`) for a scan without Hyperscan: in pure Python, or of a text so
        short that the keyword pre-checks cost less than Hyperscan's calls."""
        return Normalised(text, self.vocabulary, indexed=len(text) <= SHORT_TEXT or self.prefilter is None)

    def candidates(self, text: Normalised) -> list[int]:
        """Numbers of the patterns worth running on this text, in set order: those whose every
        keyword group has a word or fragment in the text (see gates.py). Raw-view patterns run
        only on a text with invisible characters."""
        return self._gates.candidates(text)

    @classmethod
    def load(
        cls,
        extra: Sequence[Mapping[str, Any]] | None = None,
        extra_file: Path | None = None,
        *,
        base: Path = PATTERNS_FILE,
        use_hyperscan: bool = True,
        learned: Path | None = DETECTOR_FILE,
    ) -> PatternSet:
        """The shipped set plus a vault's own patterns.

        `extra` is sentient.yaml's `threats: patterns:` list; `extra_file` a YAML file with a
        list of patterns (or `patterns:` holding one). Raises ConfigError naming the pattern
        and the field that is wrong. `use_hyperscan=False` scans in pure Python even when
        Hyperscan is installed. `learned` is the learned detector that judges what the patterns
        pass (None: the patterns alone); its files' digest is part of the fingerprint, so a new
        model judges everything again.
        """
        data = _read_yaml(base)
        if not isinstance(data, dict) or not isinstance(data.get("patterns"), list):
            raise ConfigError(f"{base}: expected 'version:' and a 'patterns:' list. Restore the file from the package")
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ConfigError(f"{base}: 'version' must be a whole number of 1 or more, not {version!r}")
        raw: list[tuple[str, Any]] = [(f"{base.name} patterns[{n}]", item) for n, item in enumerate(data["patterns"])]
        base_count = len(raw)
        if extra:
            raw += [(f"sentient.yaml threats.patterns[{n}]", item) for n, item in enumerate(extra)]
        if extra_file is not None:
            loaded = _read_yaml(extra_file)
            items = loaded.get("patterns") if isinstance(loaded, dict) else loaded
            if loaded is None:
                raise ConfigError(f"{extra_file}: the file is empty; add a list of patterns (see docs/security.md)")
            if not isinstance(items, list):
                raise ConfigError(
                    f"{extra_file}: expected a list of patterns (or 'patterns:' holding one). "
                    "See docs/security.md for the format"
                )
            raw += [(f"{extra_file} patterns[{n}]", item) for n, item in enumerate(items)]
        patterns: list[Pattern] = []
        seen: dict[str, str] = {}
        for where, item in raw:
            pattern = _compile(where, item)
            if pattern.id in seen:
                raise ConfigError(
                    f"{where}: the id '{pattern.id}' is already used by {seen[pattern.id]}; choose another id"
                )
            seen[pattern.id] = where
            patterns.append(pattern)
        canonical = json.dumps(
            {
                "normaliser": NORMALISER_VERSION,
                # What a judgment of a document covers (judge.py): 2 since ids are judged too. A
                # verdict made before (the index's, say) is not taken for one made now.
                "judged": 2,
                "version": version,
                "learned": learned_digest(learned) if learned is not None else None,
                "patterns": [
                    [p.id, p.class_, p.description, p.view, p.case_sensitive, [r.pattern for r in p.regexes],
                     p.keywords, p.not_after]
                    for p in patterns
                ],
            },
            sort_keys=True,
        )
        digest = hashlib.sha256(canonical.encode()).hexdigest()[:16]
        loaded = cls(version, tuple(patterns), f"{version}:{digest}", len(patterns) - base_count, use_hyperscan,
                     str(learned) if learned is not None else "")
        for number in range(base_count, len(patterns)):  # the shipped set's are checked by its tests
            loaded._check_keywords(number)
        return loaded

    def _check_keywords(self, number: int) -> None:
        """ConfigError when a text made from the pattern's own regex (samples.py), which the
        regex matches, lacks its keywords: the pattern would never run on such a text."""
        from sentient.threats.samples import in_context, samples

        pattern = self.patterns[number]
        if not pattern.keywords:
            return
        for regex in pattern.regexes:
            for text in (variant for sample in samples(regex, KEYWORD_SAMPLES) for variant in in_context(sample)):
                views = self.normalise(text)
                if regex.search(views.subject(pattern.view, pattern.case_sensitive)) is None:
                    continue  # a lookaround, an anchor or the normalisation made it no match
                if (pattern.view != "raw" or views.hidden) and number not in self.candidates(views):
                    groups = [list(group) for group in pattern.keywords]
                    raise ConfigError(
                        f"{pattern.origin} (id '{pattern.id}'): its regex matches {text!r}, which does not "
                        f"have its 'keywords' {groups} (a keyword of letters, digits and _ as a whole word), so "
                        "the pattern would never run on such a text. Give each group a word that every match "
                        "holds (with \\b around the regex's words if they must be whole), or leave 'keywords' out"
                    )


_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader when libyaml is there


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror}). Check the path under 'threats: file:'") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 (byte {exc.start}). Re-save it as UTF-8 in your editor") from None
    try:
        return yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{line}. Fix the file") from None


def _words(name: str, field: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(w, str) and w for w in value):
        raise ConfigError(f"{name}: '{field}' must be a list of words, not {value!r}")
    return tuple(value)


def _compile(where: str, item: Any) -> Pattern:
    """One pattern from its YAML mapping, or a ConfigError saying which field to fix."""
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: a pattern must be a mapping with id, class, description and regex")
    pattern_id = item.get("id")
    if not isinstance(pattern_id, str) or not _ID.fullmatch(pattern_id):
        raise ConfigError(
            f"{where}: 'id' must be kebab-case text such as 'override-my-phrase', not {pattern_id!r}. Add or fix the id"
        )
    name = f"{where} (id '{pattern_id}')"
    unknown = sorted(set(item) - _PATTERN_KEYS)
    if unknown:
        raise ConfigError(f"{name}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_PATTERN_KEYS))}")
    class_ = item.get("class")
    if class_ is None:
        raise ConfigError(f"{name}: 'class' is missing; add one of {', '.join(CLASSES)}")
    if class_ not in CLASSES:
        raise ConfigError(f"{name}: 'class' must be one of {', '.join(CLASSES)}, not {class_!r}")
    description = item.get("description")
    if description is not None and not isinstance(description, str):
        raise ConfigError(f"{name}: 'description' must be one line of text, not {description!r}")
    if description is None or not description.strip():
        raise ConfigError(f"{name}: 'description' is missing; add one line saying what the pattern catches")
    view = item.get("view", "flat")
    if view not in VIEWS:
        raise ConfigError(f"{name}: 'view' must be one of {', '.join(VIEWS)}, not {view!r}")
    case_sensitive = item.get("case_sensitive", False)
    if not isinstance(case_sensitive, bool):
        raise ConfigError(f"{name}: 'case_sensitive' must be true or false, not {case_sensitive!r}")
    keywords = _keywords(name, item.get("keywords"), case_sensitive)
    not_after = _words(name, "not_after", item["not_after"]) if "not_after" in item else ()
    regexes = _regexes(name, item.get("regex"), view, case_sensitive)
    return Pattern(
        pattern_id,
        class_,
        description.strip(),
        regexes,
        view,
        keywords,
        case_sensitive,
        not_after,
        where,
        tuple(fast_searcher(regex, view, case_sensitive) for regex in regexes),
    )


def _keywords(name: str, value: Any, case_sensitive: bool) -> tuple[tuple[str, ...], ...]:
    if value is None:
        return ()
    if isinstance(value, list) and value and all(isinstance(group, list) for group in value):
        keywords = tuple(_words(name, "keywords", group) for group in value)
    else:
        keywords = (_words(name, "keywords", value),)
    if not case_sensitive and any(word != word.lower() for group in keywords for word in group):
        raise ConfigError(
            f"{name}: 'keywords' must be lower case (the text is lower-cased before they are "
            "looked up), or set 'case_sensitive: true'"
        )
    return keywords


def _regexes(name: str, sources: Any, view: str, case_sensitive: bool) -> tuple[re.Pattern[str], ...]:
    if sources is None:
        raise ConfigError(f"{name}: 'regex' is missing; add the regular expression (or a list of them) to look for")
    if isinstance(sources, str):
        sources = [sources]
    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) and s for s in sources):
        raise ConfigError(f"{name}: 'regex' must be a regular expression or a list of them")
    regexes: list[re.Pattern[str]] = []
    for number, source in enumerate(sources):
        which = "'regex'" if len(sources) == 1 else f"'regex' item {number}"
        if not case_sensitive and "(?-i" in source:
            raise ConfigError(
                f"{name}: {which} turns case-sensitivity on for a part; set 'case_sensitive: true' "
                "on the pattern and mark the case-insensitive parts with (?i:...)"
            )
        # Case-insensitive patterns match the lower-cased text; an expression written in lower
        # case is compiled as it is (much faster), one with capitals gets IGNORECASE.
        flags = re.MULTILINE if view == "lines" else 0
        if not case_sensitive and has_capitals(source):
            flags |= re.IGNORECASE
        try:
            regex = re.compile(source, flags)
        except re.error as exc:
            raise ConfigError(f"{name}: {which} does not compile ({exc}): '{source}'. Fix the expression") from None
        if regex.search("") is not None:
            raise ConfigError(
                f"{name}: {which} '{source}' matches empty text, so it would flag everything. Fix the expression"
            )
        regexes.append(regex)
    return tuple(regexes)
