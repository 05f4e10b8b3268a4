"""litellm, imported on first use, not when any module of this package is imported, and with
LITELLM_LOCAL_MODEL_COST_MAP defaulted to True so that importing it never fetches a price
list from the internet."""

from __future__ import annotations

import importlib
import os
from functools import cache
from types import ModuleType
from typing import Any


@cache
def _litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm: Any = importlib.import_module("litellm")
    litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on stdout
    return litellm


def _local_module() -> ModuleType:
    """sentient.llm.local, imported on first use (it imports litellm)."""
    _litellm()
    return importlib.import_module("sentient.llm.local")


@cache
def _provider_error() -> type[Exception]:
    """The base of every exception litellm raises for a failed call (it re-uses openai's)."""
    _litellm()
    base: type[Exception] = importlib.import_module("openai").OpenAIError
    return base
