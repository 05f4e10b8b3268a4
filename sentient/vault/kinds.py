"""The kinds of file a vault holds: where each lives, and the fields its frontmatter has.

Field order here is the order the app writes keys in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sentient.errors import InvalidId, SentientError
from sentient.vault import KIND_NAMES
from sentient.vault.document import FieldSpec, check_id, is_temp_name


def _fields(*pairs: str) -> tuple[FieldSpec, ...]:
    return tuple(FieldSpec(*pair.split(":")) for pair in pairs)  # type: ignore[arg-type]


_ENTRY_FIELDS = _fields(
    "id:str",
    "title:str",
    "category:str",
    "scope:str",
    "source:str",
    "untrusted:bool",
    "created:datetime",
    "updated:datetime",
    "revision:str",
    "threat:threat",
)


@dataclass(frozen=True)
class Kind:
    name: str
    folder: str  # relative to the vault root
    fields: tuple[FieldSpec, ...]
    nested: bool = False  # subfolders of any depth, id unique across them
    key_parts: int = 1  # 2 for 'task/run' and 'user/persona'
    description: str = ""


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind("memory", "memory", _ENTRY_FIELDS, nested=True, description="memory entries"),
        Kind("note", "pins/notes", _ENTRY_FIELDS, nested=True, description="pinnable notes"),
        Kind("plan", "pins/plans", _ENTRY_FIELDS, nested=True, description="pinnable plans"),
        Kind("skill", "skills", _ENTRY_FIELDS, nested=True, description="saved procedures"),
        Kind(
            "session",
            "sessions",
            _fields(
                "id:str",
                "title:str",
                "scope:str",
                "channel:str",
                "incognito:bool",
                "user:str",
                "persona:str",
                "facts_read:int",
                "pins:list",
                "knowledge_delivered:str",
                "untrusted:bool",
                "created:datetime",
                "updated:datetime",
            ),
            description="chat sessions",
        ),
        Kind(
            "task",
            "tasks",
            _fields(
                "id:str",
                "title:str",
                "schedule:str",
                "timezone:str",
                "enabled:bool",
                "scope:str",
                "role:str",
                "tools:list",
                "pins:list",
                "notify:bool",
                "created:datetime",
                "updated:datetime",
                "revision:str",
            ),
            description="tasks",
        ),
        Kind(
            "notepad",
            "tasks",
            _fields("task:str", "source:str", "untrusted:bool", "updated:datetime", "revision:str", "threat:threat"),
            description="task notepads",
        ),
        Kind(
            "run",
            "tasks",
            _fields(
                "id:str",
                "task:str",
                "status:str",
                "trigger:str",
                "started:datetime",
                "finished:datetime",
                "untrusted:bool",
                "summary:str",
                "tools_used:list",
                "revision:str",
                "threat:threat",
            ),
            key_parts=2,
            description="task runs",
        ),
        Kind(
            "people",
            "people",
            _fields(
                "user:str",
                "persona:str",
                "updated:datetime",
                "revision:str",
                "turns_seen:int",
                "untrusted:bool",
                "threat:threat",
            ),
            key_parts=2,
            description="facts about callers",
        ),
        Kind(
            "persona",
            "personas",
            _fields("id:str", "name:str", "created:datetime", "updated:datetime", "revision:str", "threat:threat"),
            description="personas",
        ),
    )
}
if tuple(KINDS) != KIND_NAMES:  # the names a command offers before it imports this
    raise RuntimeError(f"sentient.vault.KIND_NAMES {KIND_NAMES} are not the kinds {tuple(KINDS)}")


TITLE_RULE = "must be a single line (put the rest in the body)"


def check_title(title: str, what: str = "title") -> str:
    """A title as written by the app, the API, the CLI or a tool: stripped, never empty, one
    line. Raises SentientError naming the field."""
    stripped = title.strip()
    if not stripped:
        raise SentientError(f"{what}: must not be empty")
    if len(stripped.splitlines()) > 1:
        raise SentientError(f"{what}: {TITLE_RULE}")
    return stripped


def one_line(title: str) -> str:
    """A title as shown (to the model, in a listing): a hand-made file's multi-line title
    with its line breaks folded to single spaces."""
    if title.isprintable():  # no line break of any kind (\n, \r, \u2028, ...)
        return title
    return " ".join(part.strip() for part in title.splitlines() if part.strip())


def kind(name: str) -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown kind {name!r}; one of {', '.join(KINDS)}") from None


def check_key(kind_name: str, key: str) -> str:
    """Validate a key: an id, or 'a/b' for the two-part kinds. Raises InvalidId."""
    spec = kind(kind_name)
    parts = key.split("/") if spec.key_parts > 1 else [key]
    names = {"run": ("task id", "run id"), "people": ("user id", "persona id")}.get(kind_name)
    if len(parts) != spec.key_parts:
        shape = "/".join(f"<{name}>" for name in names) if names else "an id"
        raise InvalidId(f"{kind_name} key {key!r} is not allowed: use {shape}")
    for index, part in enumerate(parts):
        check_id(part, names[index] if names else f"{kind_name} id")
    return key


def default_path(root: Path, kind_name: str, key: str, month: str | None = None) -> Path:
    """Where a new document of this kind and key is written."""
    check_key(kind_name, key)
    spec = kind(kind_name)
    if kind_name == "session":
        if month is None:
            raise ValueError("a session path needs its month (yyyy-mm)")
        return root / "sessions" / month / f"{key}.md"
    if kind_name == "task":
        return root / "tasks" / key / "task.md"
    if kind_name == "notepad":
        return root / "tasks" / key / "notepad.md"
    if kind_name == "run":
        task, run = key.split("/")
        return root / "tasks" / task / "runs" / f"{run}.md"
    if kind_name == "people":
        user, persona = key.split("/")
        return root / "people" / user / f"{persona}.md"
    return root / spec.folder / f"{key}.md"


def classify(rel: PurePosixPath) -> tuple[str, str] | None:
    """(kind, key) for a path relative to the vault root, or None when it is not a document.

    Hidden names and our temp files are never documents. The key may be an invalid id
    (a hand-made 'My Note.md'); callers validate it and report the file.
    """
    parts = rel.parts
    if not parts or any(is_temp_name(part) for part in parts) or rel.suffix != ".md":
        return None
    stem = rel.stem
    top = parts[0]
    if top in ("memory", "skills") and len(parts) >= 2:
        return ("memory" if top == "memory" else "skill"), stem
    if top == "pins" and len(parts) >= 3 and parts[1] in ("notes", "plans"):
        return ("note" if parts[1] == "notes" else "plan"), stem
    if top == "sessions" and len(parts) == 3:
        return "session", stem
    if top == "tasks" and len(parts) == 3 and parts[2] in ("task.md", "notepad.md"):
        return ("task" if parts[2] == "task.md" else "notepad"), parts[1]
    if top == "tasks" and len(parts) == 4 and parts[2] == "runs":
        return "run", f"{parts[1]}/{stem}"
    if top == "people" and len(parts) == 3:
        return "people", f"{parts[1]}/{stem}"
    if top == "personas" and len(parts) == 2:
        return "persona", stem
    return None
