"""One error family. Every message names the file or field and says what to do."""

from __future__ import annotations

from pathlib import Path


class SentientError(Exception):
    """Base of every error the app raises on purpose; the API and CLI translate it once."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(SentientError):
    """sentient.yaml or an environment variable is wrong."""


class InvalidId(SentientError):
    """An id from a user or the model that cannot name a file."""


class NotFound(SentientError):
    status = 404


class AlreadyExists(SentientError):
    status = 409


class StaleRevision(SentientError):
    """The revision the caller looked at is no longer the file's; nothing was changed."""

    status = 412


class Unreadable(SentientError):
    """A whole source (the memory folder, say) cannot be read now: what it holds is unknown, not none."""

    status = 503


class TooLarge(SentientError):
    """A write that would make a file larger than the vault reads; nothing was written."""

    status = 413


class TooLong(SentientError):
    """A message longer than the model can read at once; nothing was kept."""

    status = 413


class BadText(SentientError):
    """Text a file of the vault cannot hold (the vault would refuse to read it); nothing was written."""


class BadFile(SentientError):
    """A file in the vault that cannot be read as what its folder says it is."""

    status = 422

    def __init__(self, path: Path, reason: str, fix: str) -> None:
        super().__init__(f"{path}: {reason}. {fix}")
        self.path = path
        self.reason = reason
        self.fix = fix


class Conflict(SentientError):
    """Someone else changed the file after we read it; their text is left as it is."""

    status = 409

    def __init__(self, path: Path, expected: str | None, found: str | None, kept: Path | None = None,
                 *, open_for_writing: bool = False) -> None:
        also = "" if kept is None else (
            f" Another save made meanwhile is kept beside it as {kept.name}: compare the two and keep what you want."
        )
        if open_for_writing:  # its bytes are as read, but another program may be writing it right now
            message = (f"{path} is open for writing in another program (an editor saving, a sync client, a log "
                       "that appends), so it was left as it is. Try again once that program has closed it.")
        else:
            message = (f"{path} was changed by someone else since it was read "
                       f"(expected revision {expected or 'none'}, found {found or 'no file'}); "
                       "their text was kept. Read it again and re-apply your change.")
        super().__init__(message + also)
        self.path = path
        self.expected = expected
        self.found = found
        self.kept = kept  # a second save that landed while the write put the first one back


class IndexUnavailable(SentientError):
    """The index under .sentient/ cannot be opened or used."""
