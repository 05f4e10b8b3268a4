"""Model calls: the only package that imports litellm.

`client` is the model client every caller uses; `local` is the embedded llama.cpp model and
the provider that lets small models call tools.
"""

from sentient.llm.client import (
    LLM,
    ContextTooLong,
    Endpoint,
    LLMError,
    LLMUnavailable,
    Reply,
    Resolver,
    ToolCall,
    is_local,
    parse_tool_call,
)

__all__ = [
    "LLM",
    "ContextTooLong",
    "Endpoint",
    "LLMError",
    "LLMUnavailable",
    "Reply",
    "Resolver",
    "ToolCall",
    "is_local",
    "parse_tool_call",
]
