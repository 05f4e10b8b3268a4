"""Settings: sentient.yaml in the vault, overridden by environment variables.

Loaded once at the entry point (`load_settings(vault, environ)`) and passed down; nothing
here reads the process environment by itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sentient.errors import ConfigError

CONFIG_FILE = "sentient.yaml"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelRole(_Section):
    """One model role (chat, helper, extraction). Unset fields fall back to `model:`."""

    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    timeout: float | None = Field(default=None, gt=0)  # seconds per model call; llm.py has the default


class Models(_Section):
    chat: ModelRole = ModelRole()
    helper: ModelRole = ModelRole()
    extraction: ModelRole = ModelRole()


class Features(_Section):
    memory: bool = True


class Limits(_Section):
    max_file_bytes: int = Field(default=1024 * 1024, gt=0)


class ChatSettings(_Section):
    incognito_uses_memory: bool = False
    context_tokens: int = Field(default=6000, ge=200)  # a session's history budget; over it, compact
    keep_messages: int = Field(default=6, ge=2)  # recent messages kept verbatim by compaction
    knowledge_entries: int = Field(default=40, ge=0)  # memory entries listed in the knowledge block


class ApiSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    allow_memory: bool = False


class UserSettings(_Section):
    name: str | None = None  # how the agent addresses the person; never sent in a memory-off turn


class NotifySettings(_Section):
    webhook_url: str | None = None  # where notify(text) posts JSON {"text": ...}


class ThreatSettings(_Section):
    patterns: list[dict[str, Any]] = []  # extra patterns of this vault (docs/security.md)
    file: str | None = None  # a YAML file of extra patterns, relative to the vault


class LocalSettings(_Section):
    """The embedded model (`model: local` or `local:/path/to/x.gguf`)."""

    threads: int = Field(default=1, ge=1, le=64)
    context: int = Field(default=4096, ge=512)
    max_tokens: int = Field(default=256, ge=16)  # longest answer
    tool_routing: bool = True  # let small models call tools by constrained choice


class Settings(_Section):
    """Everything configurable. `vault` is filled in by load_settings."""

    vault: Path = Path(".")
    model: str = "local"
    models: Models = Models()
    features: Features = Features()
    limits: Limits = Limits()
    chat: ChatSettings = ChatSettings()
    api: ApiSettings = ApiSettings()
    user: UserSettings = UserSettings()
    notify: NotifySettings = NotifySettings()
    threats: ThreatSettings = ThreatSettings()
    local: LocalSettings = LocalSettings()

    @property
    def state_dir(self) -> Path:
        """Derived, git-ignored state: index, locks, caches."""
        return self.vault / ".sentient"

    def role(self, name: str) -> ModelRole:
        """The model settings of one role, with the defaults filled in."""
        role: ModelRole = getattr(self.models, name)
        return role.model_copy(update={"model": role.model or self.model})


def _env_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ConfigError(f"environment variable {name}={value!r} is not a switch; use 1 or 0")


def find_vault(start: Path) -> Path:
    """The vault holding `start`: the nearest folder with a sentient.yaml, else `start`."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
    return start


def load_settings(vault: Path | None, environ: Mapping[str, str]) -> Settings:
    """Read sentient.yaml of the vault (from the argument, SENTIENT_VAULT, or the current
    folder) and apply environment overrides."""
    if vault is None:
        vault = Path(environ["SENTIENT_VAULT"]) if environ.get("SENTIENT_VAULT") else None
    root = find_vault(Path.cwd()) if vault is None else vault.resolve()
    if not root.is_dir():
        raise ConfigError(f"{root}: no such vault folder; create one with `sentient init {root}`")
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
    if environ.get("SENTIENT_MODEL"):
        raw["model"] = environ["SENTIENT_MODEL"]
    if environ.get("SENTIENT_HELPER_MODEL"):
        models = dict(raw.get("models") or {})
        models["helper"] = {**dict(models.get("helper") or {}), "model": environ["SENTIENT_HELPER_MODEL"]}
        raw["models"] = models
    if "SENTIENT_MEMORY" in environ:
        features = dict(raw.get("features") or {})
        features["memory"] = _env_bool("SENTIENT_MEMORY", environ["SENTIENT_MEMORY"])
        raw["features"] = features
    try:
        return Settings(vault=root, **raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"{config_path}: {problems}. See docs/configuration.md") from exc
