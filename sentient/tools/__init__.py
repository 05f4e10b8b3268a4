"""The built-in tools, one module per family, and the registry a process uses."""

from __future__ import annotations

from sentient.agent.helpers import HELPER_TOOL_SET
from sentient.agent.sandbox import execute_code
from sentient.agent.tools import MEMORY_FEATURE_TOOLS, Tool, ToolRegistry
from sentient.config import Settings
from sentient.tools.history import HISTORY_TOOL_SET
from sentient.tools.memory import MEMORY_TOOL_SET
from sentient.tools.notepad import NOTEPAD_TOOL_SET
from sentient.tools.skills import skill_save
from sentient.tools.web import WEB_TOOL_SET

ALL_TOOLS: tuple[Tool, ...] = (
    *MEMORY_TOOL_SET,
    *HISTORY_TOOL_SET,
    skill_save,
    *WEB_TOOL_SET,
    *HELPER_TOOL_SET,
    execute_code,
    *NOTEPAD_TOOL_SET,
)


def build_registry(settings: Settings) -> ToolRegistry:
    """Every tool this process has. With memory absent (features.memory: false), memory
    tools do not exist here at all."""
    present = [t for t in ALL_TOOLS if settings.features.memory or t.name not in MEMORY_FEATURE_TOOLS]
    return ToolRegistry(present)
