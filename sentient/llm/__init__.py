"""Model calls: the only package that imports litellm.

`client` is the model client every caller uses; `local` is the embedded llama.cpp model and
the provider that lets small models call tools. Beside them: `lazy` imports litellm on first
use; `errors` holds the LLMError family and reads litellm's exceptions; `call` is one call's
endpoint, arguments and the error its failure becomes; `reply` and `stream` read what the
model said, whole or streamed.
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
