"""Building agents on fixture vaults for tests: real vault, real index, scripted model."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sentient.agent.turn import Agent, open_agent
from sentient.config import load_settings
from sentient.workspace import open_workspace

SCRIPTED = "scripted/test"


def configure(vault: Path, **sections: Any) -> None:
    """Merge settings into the vault's sentient.yaml (a test's own configuration)."""
    path = vault / "sentient.yaml"
    current = yaml.safe_load(path.read_text()) if path.exists() else {}
    current = current or {}
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(current.get(key), dict):
            current[key] = {**current[key], **value}
        else:
            current[key] = value
    path.write_text(yaml.safe_dump(current, sort_keys=False))


def agent_on(vault: Path, environ: Mapping[str, str] | None = None) -> Agent:
    settings = load_settings(vault, {"SENTIENT_MODEL": SCRIPTED, **(environ or {})})
    return open_agent(open_workspace(settings), {})
