"""Settings: sentient.yaml in the vault, overridden by environment variables.

Loaded once at the entry point (`load_settings(vault, environ)`) and passed down; nothing
here reads the process environment by itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from sentient.errors import ConfigError
from sentient.sections import Field, Invalid, Problem, Section

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

CONFIG_FILE = "sentient.yaml"
LOCAL_MODEL = "local"  # `local` or `local:<path.gguf>`: the embedded llama.cpp model
CHARS_PER_TOKEN = 4  # about, in English: what a budget in tokens holds in characters


def zone_named(name: str) -> ZoneInfo:
    """The IANA time zone `name` (Europe/Berlin, UTC); ValueError saying what to write instead."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones  # here: most commands need none

    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError, OSError):
        known = {zone.lower(): zone for zone in available_timezones()}
        close = known.get(name.strip().lower())
        hint = f"did you mean {close}?" if close else "use an IANA name such as Europe/Berlin, America/New_York or UTC"
        raise ValueError(f"{name!r} is not a known time zone; {hint}") from None


def is_local(model: str) -> bool:
    return model == LOCAL_MODEL or model.startswith(LOCAL_MODEL + ":")


def _known_zone(name: str) -> None:
    zone_named(name)  # ValueError saying what to write instead


class ModelRole(Section):
    """One model role (chat, helper, extraction). Settings.role fills in what is left unset."""

    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    timeout: float | None = Field(default=None, gt=0)  # seconds per model call; llm.py has the default
    tools: Literal["full", "compact"] | None = None  # the tool profile; None: compact for `local`, else full


class Models(Section):
    chat: ModelRole = ModelRole()
    helper: ModelRole = ModelRole()
    extraction: ModelRole = ModelRole()
    guard: ModelRole = ModelRole()  # off unless it names a model: judges what the agent stores (docs/security.md)


class Features(Section):
    memory: bool = True
    semantic: bool = True  # false: search ranks by words alone; nothing is embedded, the model never loads


class Limits(Section):
    max_file_bytes: int = Field(default=1024 * 1024, gt=0)


class ChatSettings(Section):
    incognito_uses_memory: bool = False
    context_tokens: int = Field(default=6000, ge=200)  # a session's history budget; over it, compact
    keep_messages: int = Field(default=6, ge=2)  # recent messages kept verbatim by compaction
    knowledge_entries: int = Field(default=40, ge=0)  # memory entries listed in the knowledge block


class ApiSettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    allow_memory: bool = False


McpPolicy = Literal["read-write", "read-only", "off"]


class McpSettings(Section):
    """What each MCP client may do with the vault (docs/mcp.md), by the name it gives."""

    default: McpPolicy = "read-write"  # a client named in no entry of `clients`
    clients: dict[str, McpPolicy] = {}  # client name -> read-write, read-only or off


class UserSettings(Section):
    name: str | None = None  # how the agent addresses the person; never sent in a memory-off turn


class NotifySettings(Section):
    webhook_url: str | None = None  # where notify(text) posts JSON {"text": ...}


class TaskSettings(Section):
    """Tasks run by `serve` (docs/tasks.md)."""

    max_parallel: int = Field(default=1, ge=1, le=16)  # runs at once; more wait their turn
    timeout: float = Field(default=600.0, gt=0)  # seconds a run may take; over it, it fails


class FactSettings(Section):
    """Facts about a caller, kept per persona (docs/facts.md). Absent: none kept or told."""

    max_facts: int = Field(default=40, ge=1, le=500)  # facts in one caller's set for one persona
    max_chars: int = Field(default=200, ge=20, le=2000)  # characters of one fact's sentence
    every_n_turns: int = Field(default=4, ge=1, le=1000)  # a caller's turns between two extractions
    timeout: float = Field(default=120.0, gt=0)  # seconds an extraction may take; over it, its result is dropped
    read_chars: int = Field(default=12000, ge=500)  # characters of recent turns one extraction reads


class ThreatSettings(Section):
    patterns: list[dict[str, Any]] = []  # extra patterns of this vault (docs/security.md)
    file: str | None = None  # a YAML file of extra patterns, relative to the vault


class ScriptSettings(Section):
    """Scripts run by execute_code (docs/security.md)."""

    sandbox: Literal["auto", "bwrap", "none"] = "auto"  # auto: bubblewrap when it starts, else none
    time_limit: float = Field(default=20.0, gt=0, le=600)  # seconds a script may run
    memory_mb: int = Field(default=512, ge=64, le=65536)  # memory of all its processes together


class LocalSettings(Section):
    """The embedded model (`model: local` or `local:/path/to/x.gguf`)."""

    threads: int = Field(default=1, ge=1, le=64)
    context: int = Field(default=4096, ge=512)
    max_tokens: int = Field(default=256, ge=16)  # longest answer
    tool_routing: bool = True  # let small models call tools by constrained choice


def _name_and_email(author: str) -> None:
    name, bracket, rest = author.partition("<")
    if not name.strip() or not bracket or not rest.endswith(">") or len(rest) < 2 or "<" in rest[:-1]:
        raise ValueError(f"{author!r} is not 'Name <email>'; write e.g. 'Sentient <sentient@localhost>'")


def _remote_name(remote: str) -> None:
    if not remote.strip() or remote.startswith("-") or any(ch.isspace() for ch in remote):
        raise ValueError(f"{remote!r} is not a remote's name (such as origin)")


class GitSettings(Section):
    """The vault's git repository (docs/git.md)."""

    autocommit: bool = True  # commit every change the app makes, when the vault is a repository of its own
    commit_manual_edits: bool = False  # commit the person's own changes with the app's
    commit_delay: float = Field(default=2.0, ge=0.05, le=60)  # seconds of quiet that end a burst of writes
    author: str = Field(default="Sentient <sentient@localhost>", check=_name_and_email)  # the app's commits' author
    remote: str = Field(default="origin", check=_remote_name)  # what `sentient sync` pulls from and pushes to
    sync_minutes: float = Field(default=0, ge=0)  # serve syncs every this many minutes; 0: only when asked


class Settings(Section):
    """Everything configurable. `vault` is filled in by load_settings."""

    vault: Path = Path(".")
    model: str = "local"
    timezone: str | None = Field(default=None, check=_known_zone)  # an IANA name (Europe/Berlin) for task
    # schedules; None: the machine's
    models: Models = Models()
    features: Features = Features()
    limits: Limits = Limits()
    chat: ChatSettings = ChatSettings()
    api: ApiSettings = ApiSettings()
    mcp: McpSettings = McpSettings()
    user: UserSettings = UserSettings()
    notify: NotifySettings = NotifySettings()
    tasks: TaskSettings = TaskSettings()
    facts: FactSettings | None = None  # None (no `facts:` section): no facts kept or told
    threats: ThreatSettings = ThreatSettings()
    scripts: ScriptSettings = ScriptSettings()
    local: LocalSettings = LocalSettings()
    git: GitSettings = GitSettings()
    _model_from: dict[str, str] = Field(default_factory=dict, init=False)  # role or "model" -> the variable that set it

    @property
    def state_dir(self) -> Path:
        """Derived, git-ignored state: index, locks, caches."""
        return self.vault / ".sentient"

    # What a send may carry. A chat message's send holds the history (compacted to stay within
    # the budget), the knowledge block (at most half the budget), the turn's tool results (a
    # quarter each, half together) and the answer: with the embedded model's budget at half its
    # window, and its one tool call a message, that fits the window.
    @property
    def context_budget(self) -> int:
        """The tokens of a session's history (with the system prompt and the message) before it
        is compacted: chat.context_tokens, but at most half the window of the embedded model
        when chat runs on it (local.context)."""
        if is_local(self.role("chat").model or ""):
            return min(self.chat.context_tokens, self.local.context // 2)
        return self.chat.context_tokens

    @property
    def knowledge_chars(self) -> int:
        """The most characters of the knowledge block's pins and memory index: half the budget."""
        return self.context_budget * CHARS_PER_TOKEN // 2

    @property
    def result_chars(self) -> int:
        """The most characters of one tool result the model is given: a quarter of the budget."""
        return self.context_budget * CHARS_PER_TOKEN // 4

    @property
    def reading_chars(self) -> int:
        """The most characters of text a call of its own reads (the reader's tool output, the
        messages a summary is made of): the whole budget."""
        return self.context_budget * CHARS_PER_TOKEN

    def role(self, name: str) -> ModelRole:
        """The effective model settings of one role. Chat's are its own, its model defaulting
        to `model:`. A helper or extraction role that names a model of its own uses only its own
        settings (chat's server and key belong to chat's model); one that names none uses all
        of chat's, with any field it does set (a timeout, say) in place of chat's."""
        role: ModelRole = getattr(self.models, name)
        if self.role_source(name) != name:  # names no model: chat's settings, with its own fields over them
            return self.role("chat").model_copy(update=role.model_dump(exclude_none=True))
        return role.model_copy(update={"model": role.model or self.model})

    def tool_profile(self, name: str) -> str:
        """The tools a role's model is offered: `compact` (fewer, merged tools: agent/compact.py)
        when the role says so or runs the embedded model, else `full`."""
        role = self.role(name)
        return role.tools or ("compact" if is_local(role.model or self.model) else "full")

    def role_source(self, name: str) -> str:
        """The section of models: a role's model comes from: its own, or chat's when it names
        none (the top-level `model:` when chat names none either is still "chat")."""
        role: ModelRole = getattr(self.models, name)
        return name if name == "chat" or role.model else "chat"

    def role_setting(self, name: str, key: str) -> str:
        """Where a role's effective `key` (api_key_env, api_base, ...) is set: models.<role>.<key>,
        or models.chat.<key> when the role takes it from chat."""
        own = getattr(getattr(self.models, name), key)
        return f"models.{name if own is not None else self.role_source(name)}.{key}"

    def handed_down(self) -> dict[str, Any]:
        """These settings as JSON, for a process of Sentient's own (a task run's); `handed_over`
        makes them again there, with where each model came from."""
        return {"settings": self.model_dump(mode="json"), "model_from": dict(self._model_from)}

    @classmethod
    def handed_over(cls, carried: Mapping[str, Any]) -> Settings:
        settings = cls.model_validate(carried["settings"])
        object.__setattr__(settings, "_model_from", dict(carried.get("model_from") or {}))
        return settings

    def model_fix(self, name: str) -> str:
        """How to change the model of a role, naming where it came from: "set model: in
        sentient.yaml", or the environment variable that set it (which overrides the file)."""
        name = self.role_source(name)
        role: ModelRole = getattr(self.models, name)
        variable = self._model_from.get(name)
        if variable:
            return f"change {variable} (it overrides models.{name}.model in {CONFIG_FILE})"
        if role.model:
            return f"set models.{name}.model in {CONFIG_FILE}"
        variable = self._model_from.get("model")
        if variable:
            return f"change {variable} (it overrides model: in {CONFIG_FILE})"
        return f"set model: in {CONFIG_FILE}"


def _env_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ConfigError(f"environment variable {name}={value!r} is not a switch; use 1 or 0")


class NoVaultHere(ConfigError):
    """Neither --vault nor SENTIENT_VAULT names a vault, and no folder from here upwards is one."""


def find_vault(start: Path) -> Path | None:
    """The vault holding `start`: the nearest folder upwards with a sentient.yaml, or None."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
    return None


def vault_root(vault: Path | None, environ: Mapping[str, str], cwd: Path | None = None) -> Path:
    """The vault to work on: `vault` (--vault) if given, else SENTIENT_VAULT, else the nearest
    folder upwards from the current one that has a sentient.yaml. A folder without a
    sentient.yaml is not a vault: ConfigError, saying how to make one."""
    if vault is None and environ.get("SENTIENT_VAULT"):
        vault = Path(environ["SENTIENT_VAULT"]).expanduser()
    if vault is None:
        here = (cwd or Path.cwd()).resolve()
        found = find_vault(here)
        if found is None:
            raise NoVaultHere(f"{here} is not a Sentient vault (no {CONFIG_FILE}); run `sentient init {here}`")
        return found
    root = vault.resolve()
    if root.is_file():
        holder = find_vault(root.parent)
        hint = f"the vault holding it is {holder}: use --vault {holder}" if holder else \
            f"name the folder that holds {CONFIG_FILE}"
        raise ConfigError(f"{root} is a file, not a vault folder; {hint}")
    if not root.exists():
        raise ConfigError(f"{root}: no such vault folder; create one with `sentient init {root}`")
    if not (root / CONFIG_FILE).is_file():
        holder = find_vault(root.parent)
        if holder is not None:
            raise ConfigError(f"{root} is not a Sentient vault (no {CONFIG_FILE}); it is a folder inside the vault "
                              f"{holder}: use --vault {holder}")
        raise ConfigError(f"{root} is not a Sentient vault (no {CONFIG_FILE}); run `sentient init {root}`")
    return root


def load_settings(vault: Path | None, environ: Mapping[str, str]) -> Settings:
    """Read sentient.yaml of the vault (from the argument, SENTIENT_VAULT, or the nearest
    folder upwards with one; see vault_root) and apply environment overrides."""
    root = vault_root(vault, environ)
    raw: dict[str, Any] = {}
    config_path = root / CONFIG_FILE
    if config_path.is_file():
        try:
            loaded = yaml.safe_load(config_path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{config_path}: not valid YAML ({exc}); fix the file") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{config_path}: must be a mapping of settings, not {type(loaded).__name__}")
        raw = dict(loaded or {})
    raw.pop("vault", None)
    if "facts" in raw and raw["facts"] is None:  # a bare `facts:` switches facts on, with the defaults
        raw["facts"] = {}
    if environ.get("SENTIENT_MODEL"):  # every role's model, but a role with a variable of its own set
        raw["model"] = environ["SENTIENT_MODEL"]
        models = dict(raw.get("models") or {})
        for role in ("chat", "helper", "extraction"):
            section = models.get(role)
            if isinstance(section, dict) and section.get("model") and not (
                    role == "helper" and environ.get("SENTIENT_HELPER_MODEL")):
                models[role] = {**section, "model": environ["SENTIENT_MODEL"]}
        if models:
            raw["models"] = models
    if environ.get("SENTIENT_HELPER_MODEL"):
        models = dict(raw.get("models") or {})
        models["helper"] = {**dict(models.get("helper") or {}), "model": environ["SENTIENT_HELPER_MODEL"]}
        raw["models"] = models
    for variable, feature in (("SENTIENT_MEMORY", "memory"), ("SENTIENT_SEMANTIC", "semantic")):
        if variable in environ:
            features = dict(raw.get("features") or {})
            features[feature] = _env_bool(variable, environ[variable])
            raw["features"] = features
    try:
        settings = Settings(vault=root, **raw)
    except Invalid as exc:
        problems = "; ".join(_problem(problem) for problem in exc.problems)
        see = "" if problems.endswith("?") or "docs/configuration.md" in problems else ". See docs/configuration.md"
        raise ConfigError(f"{config_path}: {problems}{see}") from exc
    object.__setattr__(settings, "_model_from", _model_origins(environ))
    return settings


def _section_at(loc: tuple[str | int, ...]) -> type[Section] | None:
    """The settings section a path of keys leads to (Settings for the top level)."""
    section: type[Section] = Settings
    for part in loc:
        kind = section.setting_types().get(str(part))
        inner = [arg for arg in getattr(kind, "__args__", ()) if arg is not type(None)]  # facts: X | None
        kind = inner[0] if len(inner) == 1 else kind
        if not (isinstance(kind, type) and issubclass(kind, Section)):
            return None
        section = kind
    return section


def _problem(problem: Problem) -> str:
    """One refused value as a person reads it: unknown keys get the nearest known one."""
    loc = problem.loc
    dotted = ".".join(str(p) for p in loc)
    if problem.type != "extra_forbidden":
        return f"{dotted}: {problem.msg}"
    name = str(loc[-1])
    if name in ("api_key", "key", "apikey", "token", "password", "secret"):
        role = ".".join(str(p) for p in loc[:-1]) if loc[:1] == ("models",) and len(loc) > 2 else "models.chat"
        return (f"{dotted}: a key is never written in {CONFIG_FILE} (it would end up in git); put it in an "
                f"environment variable and name that variable with {role}.api_key_env, e.g. "
                f"`api_key_env: OPENAI_API_KEY`")
    section = _section_at(loc[:-1])
    known = [n for n in (section.setting_types() if section is not None else {}) if n != "vault"]
    import difflib

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    prefix = "".join(f"{p}." for p in loc[:-1])
    hint = f"did you mean '{prefix}{close[0]}'?" if close else "the settings are listed in docs/configuration.md"
    return f"unknown setting '{dotted}' in {CONFIG_FILE}; {hint}"


def _model_origins(environ: Mapping[str, str]) -> dict[str, str]:
    """Which environment variable set the model of a role, where one did."""
    origins: dict[str, str] = {}
    if environ.get("SENTIENT_MODEL"):
        origins["model"] = "SENTIENT_MODEL"
    if environ.get("SENTIENT_HELPER_MODEL"):
        origins["helper"] = "SENTIENT_HELPER_MODEL"
    return origins
