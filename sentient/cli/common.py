"""What the command groups share: counting what a vault holds, a progress bar, and the argparse
types and checks of what a person types or pipes in."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TextIO

from sentient.errors import SentientError

KIND_LABELS = {
    "memory": ("memory entry", "memory entries"),
    "note": ("pinned note", "pinned notes"),
    "plan": ("plan", "plans"),
    "skill": ("skill", "skills"),
    "session": ("session", "sessions"),
    "task": ("task", "tasks"),
    "notepad": ("notepad", "notepads"),
    "run": ("task run", "task runs"),
    "people": ("fact set", "fact sets"),
    "persona": ("persona", "personas"),
}


def plural(count: int, kind: str) -> str:
    one, many = KIND_LABELS.get(kind, (kind, kind + "s"))
    return f"{count} {one if count == 1 else many}"


class Progress:
    """A one-line progress bar on stderr, drawn only for a terminal and only for long work: how far,
    how fast, and about how long is left (at the pace so far)."""

    STEP = 200  # items between two drawings

    def __init__(self, label: str, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.drawn = False
        self.clock = clock
        self.started = clock()
        self.shown = 0  # done at the last drawing
        self.width = 0  # of the last line drawn

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < 500 or (done - self.shown < self.STEP and done != total):
            return
        self.shown = done
        filled = 30 * done // max(total, 1)
        bar = "#" * filled + "." * (30 - filled)
        line = f"{self.label} [{bar}] {done}/{total}"
        elapsed = self.clock() - self.started
        if done and elapsed > 0:
            rate = done / elapsed
            line += f", {rate:.0f}/s" + (f", {_duration((total - done) / rate)} left" if done < total else "")
        print(f"\r{line.ljust(self.width)}", end="", file=self.stream, flush=True)
        self.width = len(line)
        self.drawn = True

    def finish(self) -> None:
        if self.drawn:
            print(file=self.stream)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def count_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from low to high."""

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give one from {low} to {high}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range; give a number from {low} to {high}")
        return value

    return count


def entry_text(text: str) -> str:
    """An argparse type: an entry's text, which must say something (like its title)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty; write what the entry says, or - to read it from stdin")
    return text


def utf8_argument(text: str, name: str) -> str:
    """The argument as given, or a SentientError naming it when it was not UTF-8: Python hands
    over the bytes of an argument that are not UTF-8 as lone surrogates (surrogateescape), which
    no file of the vault can hold and no search can match."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        at = len(text[: exc.start].encode("utf-8"))
        raise SentientError(f"{name} is not UTF-8 (byte {at}); type it again in UTF-8, or set the terminal's "
                            "encoding and the locale to UTF-8 (LANG=C.UTF-8, say)") from None
    return text


def read_stdin() -> str:
    """All of stdin, which must be UTF-8 (a byte-order mark is dropped); a SentientError saying
    where it is not."""
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SentientError(f"stdin is not UTF-8 (byte {exc.start}); convert it first, e.g. "
                            "`iconv -f latin1 -t utf-8 FILE | sentient memory add TITLE -`") from None
