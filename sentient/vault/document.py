"""Document: one markdown file with YAML frontmatter.

Parsing and rendering live here and nowhere else. The rules:

- Every scalar is read as a string (no YAML 1.1 surprises: `yes`, `1.0` and dates stay text)
  and then converted to the type its field declares; a value that does not fit is a BadFile.
- A document that was read and not changed renders to exactly the text it was read from.
  When fields change, only their lines change: untouched keys keep their original text,
  new keys are appended in the kind's fixed order.
- The content revision is a hash of what a model would read (title + body), computed on
  every read; it is not the file's own `revision:` field, which records the last write.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml

from sentient.errors import BadFile, InvalidId

ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,79}")
ID_RULE = "1-80 characters of a-z, 0-9 and '-', starting with a letter or digit (no '/', '..', spaces or capitals)"
TMP_SUFFIX = ".sentient-tmp"

FieldType = Literal["str", "datetime", "bool", "int", "list", "threat"]


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: FieldType


def check_id(value: str, what: str = "id") -> str:
    """Return `value` if it can name a file, else raise InvalidId saying what is allowed."""
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        shown = repr(value) if len(str(value)) <= 40 else repr(str(value)[:40] + "...")
        raise InvalidId(f"{what} {shown} is not allowed: use {ID_RULE}")
    return value


def slugify(text: str, fallback: str = "entry") -> str:
    """A valid id made from free text: 'Anika is a teacher!' -> 'anika-is-a-teacher'."""
    latin = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()  # 'über' -> 'uber'
    slug = re.sub(r"[^a-z0-9]+", "-", latin.lower()).strip("-")[:60].strip("-")
    return slug or fallback


def content_revision(title: str, body: str) -> str:
    """The revision of what a model reads: title and body."""
    digest = hashlib.sha256(f"{title}\n{body}".encode()).hexdigest()
    return f"sha256:{digest}"


def bytes_hash(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_temp_name(name: str) -> bool:
    """Hidden names and our temp files (see vault/atomic.py) are never documents."""
    return name.endswith(TMP_SUFFIX) or name.startswith(".")


# --- YAML: read every scalar as text; write dates plain --------------------------------


class _TextLoader(yaml.SafeLoader):
    """Resolves no implicit types: every plain scalar is a string. The reference: what the
    faster readers below must agree with."""


_TextLoader.yaml_implicit_resolvers = {}

_CSafeLoader: Any = getattr(yaml, "CSafeLoader", None)  # libyaml's parser, when PyYAML was built with it


class _CTextLoader(_CSafeLoader or yaml.SafeLoader):  # type: ignore[misc]
    """_TextLoader on libyaml's parser: ~9x faster. Type resolution is PyYAML's own Python code
    in both, so only parsing differs, and libyaml accepts a few inputs PyYAML refuses (see
    _load_yaml); the results of inputs both accept agree (tests/test_document.py fuzzes this)."""


_CTextLoader.yaml_implicit_resolvers = {}

# PyYAML refuses tabs in places libyaml allows them, a comment right after a block scalar's
# '|' or '>', and '?' inside a flow collection; it keeps a byte-order mark that libyaml drops.
# Text with any of these is parsed by PyYAML alone.
_PYYAML_ONLY = re.compile(r"[\t\ufeff|>]")


def _load_yaml(front: str) -> Any:
    """Frontmatter text as YAML, every scalar a string: exactly what _TextLoader returns or raises."""
    if _CSafeLoader is not None and not _PYYAML_ONLY.search(front) and not (
        "?" in front and ("[" in front or "{" in front)
    ):
        try:
            return yaml.load(front, Loader=_CTextLoader)
        except yaml.YAMLError:
            pass  # PyYAML decides: the same error and line as before, or a value libyaml refused
    return yaml.load(front, Loader=_TextLoader)


# The frontmatter the app writes is flat 'key: value' lines, '[a, b]' lists and the two-space
# indented 'threat:' block. _fast_load reads exactly that shape in a few microseconds and returns
# None for anything else (which YAML then reads). Every line it accepts is one YAML reads the same
# way; tests/test_document.py checks it against _TextLoader on every fixture, on tricky lines
# and on generated text.
_FAST_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_-]{0,199}):(?: +(.+))?")
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")
# 'key: text' whose text starts as a plain scalar may: the most common line, taken in one match.
_PLAIN_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]{0,199}): +([^ \-?:,\[\]{}#&*!|>'\"%@`].*)")


def _fast_scalar(text: str, flow: bool) -> str | None:
    """A plain or simply quoted scalar on one line, or None when it may be anything else."""
    first = text[0]
    if first == "'":
        inner = text[1:-1]
        if len(text) < 2 or text[-1] != "'" or "'" in inner.replace("''", ""):
            return None
        return inner.replace("''", "'")
    if first == '"':
        inner = text[1:-1]
        if len(text) < 2 or text[-1] != '"' or '"' in inner or "\\" in inner:
            return None
        return inner
    if first in _INDICATORS or ": " in text or " #" in text or text[-1] == ":":
        return None
    if flow and ("?" in text or "[" in text or "]" in text or "{" in text or "}" in text):
        return None
    return text


def _fast_value(text: str) -> str | list[str] | None:
    if text[0] != "[":
        return _fast_scalar(text, flow=False)
    if text[-1] != "]":
        return None
    inner = text[1:-1]
    if not inner.strip(" "):
        return []
    items: list[str] = []
    for part in inner.split(","):
        item = part.strip(" ")
        value = _fast_scalar(item, flow=True) if item and item[0] not in "'\"" else None
        if value is None:
            return None
        items.append(value)
    return items


def _fast_load(front: str) -> dict[str, Any] | None:
    """The app's own frontmatter shape, read without YAML; None for anything else."""
    if not front.replace("\n", "").isprintable():
        # str.isprintable refuses every character YAML does not print (control characters, the
        # byte-order mark, the line breaks \x85 \u2028 \u2029) and tabs: all left to YAML
        return None
    loaded: dict[str, Any] = {}
    open_key: str | None = None  # a 'key:' with no value, which indented lines may fill
    nested: dict[str, Any] | None = None
    for line in front.split("\n"):
        if not line:
            continue
        plain = _PLAIN_LINE.fullmatch(line)
        if plain is not None:
            text = plain[2]
            if ": " not in text and " #" not in text and text[-1] not in ": ":  # as _fast_scalar checks
                if plain[1] in loaded:
                    return None  # a repeated key: load_frontmatter reports it
                loaded[plain[1]] = text
                open_key = nested = None
                continue
        if line[-1] == " ":
            return None
        first = line[0]
        if first == "#":
            open_key = nested = None
            continue
        if first == " ":
            if open_key is None or line[1] != " " or line[2] in " #":
                return None
            match = _FAST_KEY.fullmatch(line, 2)
            if match is None or match[2] is None:
                return None
            value = _fast_value(match[2])
            if value is None:
                return None
            if nested is None:
                nested = loaded[open_key] = {}
            nested[match[1]] = value
            continue
        match = _FAST_KEY.fullmatch(line)
        if match is None or match[1] in loaded:
            return None
        open_key = nested = None
        if match[2] is None:
            loaded[match[1]] = ""
            open_key = match[1]
            continue
        value = _fast_value(match[2])
        if value is None:
            return None
        loaded[match[1]] = value
    return loaded or None


class _RepeatedKey(yaml.YAMLError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


_TAB_AFTER_KEY = re.compile(r"(?m)^([ ]*[^\s#'\"-][^:\n]*):\t+")  # 'key:<TAB>value', as editors write it


def load_frontmatter(front: str) -> Any:
    """Frontmatter text to Python values, every scalar a string; yaml.YAMLError when invalid,
    _RepeatedKey when a top-level key is there twice (YAML would silently keep the last)."""
    fast = _fast_load(front)  # never accepts a repeated key
    if fast is not None:
        return fast
    repeated = _repeated_key(front)
    if repeated is not None:
        raise _RepeatedKey(repeated)
    return _load_yaml(_TAB_AFTER_KEY.sub(r"\1: ", front) if "\t" in front else front)


def _repeated_key(front: str) -> str | None:
    seen: set[str] = set()
    for block_key in _top_level_keys(front):
        if block_key in seen:
            return block_key
        seen.add(block_key)
    return None


class _Dumper(yaml.SafeDumper):
    """Safe dumper that leaves ISO dates unquoted (we read them back as text anyway)."""


_Dumper.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeDumper.yaml_implicit_resolvers.items()
}


_CDumper: Any = None
if hasattr(yaml, "CSafeDumper"):  # libyaml's emitter: about three times faster than PyYAML's

    class _CDumper(yaml.CSafeDumper):  # type: ignore[no-redef]
        yaml_implicit_resolvers = _Dumper.yaml_implicit_resolvers


def _plain_ascii(value: Any) -> bool:
    """Printable ASCII text, numbers, booleans, None, or lists of them: what libyaml writes exactly
    as PyYAML does (checked on 150,000 random values; they differ on emoji and some controls)."""
    if isinstance(value, str):
        return value.isascii() and value.isprintable()
    if isinstance(value, list):
        return all(_plain_ascii(item) for item in value)
    return value is None or isinstance(value, int | float)


def _inline(value: Any) -> str:
    """One value as YAML on a single line: plain or quoted scalar, or a [flow, list]."""
    if isinstance(value, str) and ("\n" in value or "\r" in value):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar
    dumper = _CDumper if _CDumper is not None and _plain_ascii(value) else _Dumper
    text = yaml.dump(value, Dumper=dumper, default_flow_style=True, allow_unicode=True, width=1_000_000)
    return text.removesuffix("\n...\n").rstrip("\n")


def _trailing_comments(block: str) -> str:
    """The comment and blank lines that end a key's block (they introduce the next key)."""
    lines = block.splitlines(keepends=True)
    start = len(lines)
    while start > 1 and (not lines[start - 1].strip() or lines[start - 1].startswith("#")):
        start -= 1
    return "".join(lines[start:])


def _dump_key(key: str, value: Any) -> str:
    if isinstance(value, dict):
        return f"{key}:\n" + "".join(f"  {name}: {_inline(item)}\n" for name, item in value.items())
    return f"{key}: {_inline(value)}\n"


_NULLS = {"", "~", "null", "Null", "NULL"}
_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}


_SPECS: dict[int, tuple[Sequence[FieldSpec], dict[str, FieldSpec]]] = {}


def _specs(fields: Sequence[FieldSpec]) -> dict[str, FieldSpec]:
    """Name -> spec, kept per fields object (the kinds' tuples): parse is called once per file."""
    kept = _SPECS.get(id(fields))
    if kept is not None and kept[0] is fields:
        return kept[1]
    specs = {spec.name: spec for spec in fields}
    if len(_SPECS) < 64:
        _SPECS[id(fields)] = (fields, specs)  # holding `fields` keeps its id from being reused
    return specs


def _convert(path: Path, spec: FieldSpec, raw: Any) -> Any:
    """Turn the text-only YAML value of one field into the type the format says."""

    def bad(expected: str) -> BadFile:
        return BadFile(
            path,
            f"field '{spec.name}' must be {expected}, not {raw!r}",
            f"Fix the '{spec.name}:' line in the frontmatter",
        )

    if isinstance(raw, str) and raw in _NULLS and spec.type != "list":
        return None
    if spec.type in ("str", "datetime"):
        if not isinstance(raw, str):
            raise bad("a single line of text")
        if spec.type == "datetime":
            try:
                datetime.fromisoformat(raw)
            except ValueError:
                raise bad("an ISO date such as 2026-11-30T10:00:00Z") from None
        return raw
    if spec.type == "bool":
        if isinstance(raw, str) and raw.lower() in _TRUE | _FALSE:
            return raw.lower() in _TRUE
        raise bad("true or false")
    if spec.type == "int":
        if isinstance(raw, str) and re.fullmatch(r"-?\d+", raw):
            return int(raw)
        raise bad("a whole number")
    if spec.type == "list":
        if raw is None or (isinstance(raw, str) and raw in _NULLS):
            return []
        if isinstance(raw, list) and all(isinstance(item, str) for item in raw):
            return list(raw)
        raise bad("a list such as [a, b]")
    if spec.type == "threat":
        if not isinstance(raw, dict):
            raise bad("a mapping with flagged, patterns, pattern_set")
        threat_fields = (
            FieldSpec("flagged", "bool"),
            FieldSpec("patterns", "list"),
            FieldSpec("pattern_set", "int"),
            FieldSpec("allowed_revision", "str"),
        )
        known = {f.name for f in threat_fields}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise bad(f"a mapping of {', '.join(sorted(known))} (unknown: {', '.join(unknown)})")
        return {f.name: _convert(path, f, raw[f.name]) for f in threat_fields if f.name in raw}
    raise AssertionError(spec.type)


# --- Source: what was read, kept so an unchanged document renders identically ----------


@dataclass(frozen=True)
class Source:
    text: str  # the whole file as read
    file_hash: str  # sha256 of its bytes; what a conditional write compares
    has_frontmatter: bool
    front: str  # the frontmatter text between the '---' lines
    meta: Mapping[str, Any]  # the converted values as read
    separator: str  # text between the closing '---' line and the body
    body: str
    opening: str = "---\n"  # the fence lines exactly as written ('--- \r\n', '...\n')
    closing: str = "---\n"
    bom: bool = False  # the file starts with a byte-order mark (kept on write)

    @cached_property
    def _layout(self) -> tuple[str, dict[str, str]]:
        return _blocks(self.front)  # only a write needs it: worked out on the first render

    @property
    def preamble(self) -> str:
        """Comments before the first key."""
        return self._layout[0]

    @property
    def blocks(self) -> Mapping[str, str]:
        """Key -> its original frontmatter lines."""
        return self._layout[1]


_CLOSING = re.compile(r"\n(?:---|\.\.\.)(?:\n|\Z)")
_LOOSE_FENCE = re.compile(r"\n(?:---|\.\.\.)[ \t]+(?:\n|\Z)")  # a fence with trailing blanks: line by line
_OTHER_BREAKS = re.compile("[\r\v\f\x1c-\x1e\x85\u2028\u2029]")  # what str.splitlines breaks at besides \n


def opens_frontmatter(text: str) -> bool:
    """Whether the first line is a '---' fence (trailing spaces or tabs allowed, as YAML tools do)."""
    return text.startswith("---") and text.split("\n", 1)[0].rstrip("\r").rstrip(" \t") == "---"


def _split(text: str) -> tuple[str, str, str] | None:
    """(frontmatter, separator, body) when the text opens with a '---' line."""
    if not text.startswith("---\n"):
        return _split_lines(text) if opens_frontmatter(text) else None
    close = _CLOSING.search(text, 3)
    if close is None or _OTHER_BREAKS.search(text, 0, close.end()) or _LOOSE_FENCE.search(text, 3, close.end()):
        return _split_lines(text)
    rest = text[close.end() :]
    separator = "\n" if rest.startswith("\n") else "\r\n" if rest.startswith("\r\n") else ""
    return text[4 : close.start() + 1], separator, rest[len(separator) :]


def _split_lines(text: str) -> tuple[str, str, str] | None:
    """_split for text with other line breaks than \\n: line by line, as str.splitlines sees them."""
    lines = text.splitlines(keepends=True)
    for index in range(1, len(lines)):
        if lines[index].rstrip("\r\n").rstrip(" \t") in ("---", "..."):
            front = "".join(lines[1:index])
            rest = "".join(lines[index + 1 :])
            separator = ""
            while rest.startswith(("\n", "\r\n")) and not separator:
                separator = "\n" if rest.startswith("\n") else "\r\n"
                rest = rest[len(separator) :]
            return front, separator, rest
    return None


def _line_key(line: str) -> str | None:
    """The top-level key a frontmatter line starts, if it starts one."""
    if not line[:1] or line[0].isspace() or line[0] in "#-" or ":" not in line:
        return None
    return line.split(":", 1)[0].strip().strip("'\"")


def _top_level_keys(front: str) -> list[str]:
    return [key for key in map(_line_key, front.splitlines()) if key is not None]


def _blocks(front: str) -> tuple[str, dict[str, str]]:
    """Split frontmatter text into one text block per top-level key."""
    preamble: list[str] = []
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in front.splitlines(keepends=True):
        key = _line_key(line)
        if key is not None:
            current = blocks.setdefault(key, [])
            current.clear()
            current.append(line)
        elif current is None:
            preamble.append(line)
        else:
            current.append(line)
    return "".join(preamble), {key: "".join(lines) for key, lines in blocks.items()}


@dataclass(frozen=True)
class Document:
    """A parsed file: typed frontmatter, markdown body, and where it came from."""

    kind: str
    key: str  # the id (or 'task/run', 'user/persona' for nested kinds)
    path: Path
    meta: Mapping[str, Any]
    body: str
    fields: Sequence[FieldSpec] = ()
    source: Source | None = field(default=None, compare=False, repr=False)

    @property
    def id(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @cached_property
    def title(self) -> str:
        """The frontmatter title, else the first heading or line of the body, else the id."""
        title = self.meta.get("title")
        if isinstance(title, str) and title.strip():
            return title.strip()
        for line in self.body.splitlines():
            stripped = line.strip()
            if stripped:
                return stripped.lstrip("#").strip()[:120] or self.id
        return self.id

    @cached_property
    def revision(self) -> str:
        return content_revision(self.title, self.body)

    @property
    def stored_revision(self) -> str | None:
        value = self.meta.get("revision")
        return value if isinstance(value, str) else None

    @property
    def edited_outside(self) -> bool:
        """True when the text changed since the app last wrote (or recorded) it."""
        return self.stored_revision != self.revision

    def replace(self, meta: Mapping[str, Any] | None = None, body: str | None = None) -> Document:
        """A copy with some frontmatter keys set (None removes a key) and/or a new body."""
        merged = dict(self.meta)
        for key, value in (meta or {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return Document(
            kind=self.kind,
            key=self.key,
            path=self.path,
            meta=merged,
            body=self.body if body is None else self._line_breaks(body),
            fields=self.fields,
            source=self.source,
        )

    def _line_breaks(self, body: str) -> str:
        """A new body with the file's line breaks: CRLF in a file whose every line ends so (the
        revision is then computed from the text that will be on disk, see render)."""
        src = self.source
        return _BARE_LF.sub("\r\n", body) if src is not None and _crlf_only(src.text) else body

    def render(self) -> str:
        """The file text. Unchanged parts keep their original bytes, and a file whose every line
        ends in CRLF keeps ending them so (new lines are written with CRLF too, never mixed)."""
        text = self._render()
        src = self.source
        if src is not None and text is not src.text and _crlf_only(src.text):
            text = _BARE_LF.sub("\r\n", text)
        return "\ufeff" + text if src is not None and src.bom else text

    def _render(self) -> str:
        src = self.source
        if src is not None and dict(self.meta) == dict(src.meta) and self.body == src.body:
            return src.text
        if not self.meta and (src is None or not src.has_frontmatter):
            return self.body
        known_order = [f.name for f in self.fields]
        if src is not None and src.has_frontmatter:
            # Every key of the file in its order, even those not in meta: a known field left
            # empty on disk ('scope:') was read as absent and keeps its line unless set now.
            order = list(src.blocks)
        else:
            order = []
        order += [k for k in known_order if k in self.meta and k not in order]
        order += [k for k in self.meta if k not in order]
        lines = [src.preamble if src is not None else ""]
        for key in order:
            block = src.blocks.get(key, "") if src is not None else ""
            if block and not block.endswith("\n"):
                block += "\n"
            if key not in self.meta:
                empty_on_disk = src is not None and key not in src.meta and key in known_order
                # A removed key takes its own lines with it, not the comments that follow it
                # (they belong to the next key).
                lines.append(block if empty_on_disk else _trailing_comments(block))
            elif block and src is not None and key in src.meta and src.meta[key] == self.meta[key]:
                lines.append(block)
            else:
                lines.append(_dump_key(key, self.meta[key]) + _trailing_comments(block))
        separator, opening, closing = "\n", "---\n", "---\n"
        if src is not None and src.has_frontmatter:
            separator, opening, closing = src.separator, src.opening, src.closing
        closing = closing if closing.endswith("\n") else closing + "\n"  # a fence that ended the file
        return opening + "".join(lines) + closing + separator + self.body


_BARE_LF = re.compile("(?<!\r)\n")


def _crlf_only(text: str) -> bool:
    """Whether every line break of `text` is CRLF (a file saved by a Windows editor)."""
    crlf = text.count("\r\n")
    return crlf > 0 and text.count("\n") == crlf


def parse(
    text: str,
    *,
    kind: str,
    key: str,
    path: Path,
    fields: Sequence[FieldSpec],
    file_hash: str = "",
) -> Document:
    """Parse file text into a Document, or raise BadFile naming the problem and the fix."""
    bom = text.startswith("\ufeff")
    if bom:
        text = text[1:]
    split = _split(text)
    if split is None:
        if opens_frontmatter(text):
            raise BadFile(path, "frontmatter opens with '---' but never closes", "Add a closing '---' line")
        meta: dict[str, Any] = {}
        source = Source(text, file_hash, False, "", {}, "", text, bom=bom)
        return Document(kind, key, path, meta, text, fields, source)
    front, separator, body = split
    opening = text[: text.index("\n") + 1]
    closing = text[len(opening) + len(front) : len(text) - len(body) - len(separator)]
    try:
        loaded = load_frontmatter(front) if front.strip() else {}
    except _RepeatedKey as exc:
        raise BadFile(path, f"the frontmatter key '{exc.key}' is there twice",
                      "Keep one of them (a write would keep only the last)") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 2}" if where is not None else ""
        raise BadFile(path, f"frontmatter is not valid YAML{line}", "Fix the YAML between the '---' lines") from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise BadFile(path, "frontmatter must be 'key: value' lines", "Fix the YAML between the '---' lines")
    specs = _specs(fields)
    meta = {}
    for raw_key, raw_value in loaded.items():
        name = str(raw_key)
        spec = specs.get(name)
        if spec is None:
            meta[name] = raw_value
        elif spec.type == "str" and type(raw_value) is str and raw_value not in _NULLS:
            meta[name] = raw_value  # the common case of _convert, without the call
        else:
            value = _convert(path, spec, raw_value)
            if value is not None:
                meta[name] = value
    source = Source(text, file_hash, True, front, dict(meta), separator, body, opening, closing, bom)
    return Document(kind, key, path, meta, body, fields, source)


def read_file(path: Path, *, kind: str, key: str, fields: Sequence[FieldSpec], max_bytes: int) -> Document:
    """Read and parse one file; BadFile for anything that is not a readable document."""
    try:
        # never blocks: a named pipe opened without O_NONBLOCK waits for a writer (the caller
        # refuses pipes and devices before; this holds if one replaced the file since)
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC), "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            if not stat.S_ISREG(info.st_mode):
                raise BadFile(path, "is not a plain file (a named pipe, socket or device): Sentient never reads it",
                              "Remove it, or move it out of the vault's folders (a note is a plain file)")
            size = info.st_size
            if size > max_bytes:
                raise BadFile(
                    path,
                    f"is {size:,} bytes, over the {max_bytes:,}-byte limit",
                    "Split it into smaller files or raise limits.max_file_bytes in sentient.yaml",
                )
            data = handle.read()
    except OSError as exc:
        raise BadFile(path, f"cannot be read ({exc.strerror})", "Check the file's permissions") from None
    if b"\x00" in data:
        for mark, encoding in _WIDE_MARKS:  # a note saved as "Unicode" (Windows Notepad): text, but not UTF-8
            if data.startswith(mark):
                raise BadFile(path, f"is {encoding} text, not UTF-8", "Re-save it as UTF-8 in your editor")
        raise BadFile(path, "is a binary file, not markdown", "Move it out of the vault's document folders")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadFile(
            path,
            f"is not UTF-8 (byte {exc.start})",
            "Re-save it as UTF-8 in your editor",
        ) from None
    return parse(text, kind=kind, key=key, path=path, fields=fields, file_hash=bytes_hash(data))


# Byte-order marks of the encodings whose text holds NUL bytes (UTF-32's first: its little-endian
# one begins with UTF-16's).
_WIDE_MARKS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
               (b"\xfe\xff", "UTF-16"))
