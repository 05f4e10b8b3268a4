"""The errors of model calls, and how litellm's exceptions read: what is worth retrying,
what means nothing listens, and the provider's own words without litellm's prefixes."""

from __future__ import annotations

import re

from sentient.errors import SentientError
from sentient.llm.lazy import _litellm

SET_MODEL = "set model: in sentient.yaml"

_ERROR_PREFIX = re.compile(r"^(litellm\.)?\w*(Error|Exception)(:| -)\s*")


class LLMError(SentientError):
    """A model call failed. The message names the model and says what to do."""

    status = 502


class LLMUnavailable(LLMError):
    """No model answers: unreachable, unknown, refused the key, or too slow."""

    status = 503


class ContextTooLong(LLMError):
    """The messages do not fit the model's context window (the person is told what to change)."""


def _is_transient(exc: BaseException) -> bool:
    litellm = _litellm()
    if isinstance(exc, litellm.NotFoundError | litellm.BadRequestError | litellm.AuthenticationError):
        return False
    transient = (
        litellm.RateLimitError,
        litellm.APIConnectionError,  # includes litellm.Timeout
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
    )
    if isinstance(exc, transient):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and status >= 500


def _unreachable(exc: BaseException) -> bool:
    """Whether the error (or any error behind it) says nothing listens where we called."""
    litellm = _litellm()
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError):  # connection refused, no route, name not resolved
            return True
        if isinstance(current, litellm.APIConnectionError) and not isinstance(current, litellm.Timeout):
            return True
        current = current.__cause__ or current.__context__
    return "connection error" in str(exc).lower()


def _short(exc: BaseException) -> str:
    """The provider's own words, without litellm's prefixes and tracebacks, on one line."""
    lines = str(getattr(exc, "message", "") or exc).strip().splitlines()
    line = lines[0] if lines else ""
    while True:  # "litellm.NotFoundError: OpenAIException - The model ..." -> "The model ..."
        shorter = _ERROR_PREFIX.sub("", line, count=1)
        if shorter == line:
            break
        line = shorter
    return line[:300] or type(exc).__name__
