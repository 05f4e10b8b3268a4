"""ToolContext: what one turn decided, carried into everything the turn starts.

The memory decision is made once per turn by `memory_allowed` and copied, never re-derived,
into helpers (foreground, parallel, background), the reader and scripts.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sentient.config import Settings

if TYPE_CHECKING:
    from sentient.agent.turn import Agent

def memory_allowed(*, incognito: bool, channel: str, settings: Settings) -> bool:
    """May this turn use what Sentient knows? Decided once per turn; one line per rule."""
    if not settings.features.memory:
        return False
    if incognito and not settings.chat.incognito_uses_memory:
        return False
    if channel == "api" and not settings.api.allow_memory:
        return False
    return True


class Background:
    """Threads started by turns that outlive them (background helpers)."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self, thread: threading.Thread) -> None:
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def wait(self, timeout: float = 30.0) -> bool:
        """Wait for every background thread; True when all finished in time."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)
        return not any(t.is_alive() for t in threads)


@dataclass
class HeldCall:
    """An outbound call held for the person's approval (the turn read outside text)."""

    tool: str
    arguments: dict[str, Any]
    reason: str


@dataclass
class TurnState:
    """The mutable part of a turn, shared by the turn and everything it starts."""

    untrusted: bool = False
    untrusted_reasons: list[str] = field(default_factory=list)
    held: list[HeldCall] = field(default_factory=list)
    notepad: str | None = None  # a recurring run's new notepad, pending until its final answer is recorded
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def mark_untrusted(self, reason: str) -> None:
        with self.lock:
            self.untrusted = True
            if reason not in self.untrusted_reasons:
                self.untrusted_reasons.append(reason)

    def hold(self, call: HeldCall) -> None:
        with self.lock:
            self.held.append(call)


@dataclass(frozen=True)
class ToolContext:
    """The turn's decisions. Frozen: a helper gets a copy via `child()`, never a wider one."""

    agent: Agent
    memory_allowed: bool
    incognito: bool
    channel: str
    session: str | None = None  # session key, None for an incognito chat kept in memory
    session_month: str | None = None  # the yyyy-mm folder of a stored session's file
    run: str | None = None  # 'task/run' for a task run
    recurring: bool = False  # a run of a recurring task (may keep a notepad)
    asked: str | None = None  # the person's message of a chat turn (what compact.py lets a small model do); None: a run
    state: TurnState = field(default_factory=TurnState)
    allowed_tools: frozenset[str] | None = None  # a helper's ceiling: its parent's offer
    depth: int = 0

    @property
    def untrusted(self) -> bool:
        return self.state.untrusted

    @property
    def source(self) -> str:
        """Provenance for anything written in this turn."""
        if self.run:
            return f"task:{self.run}"
        if self.session:
            where = f"{self.session_month}/{self.session}" if self.session_month else self.session
            return f"session:{where}"  # session:<yyyy-mm>/<id>, as the file lies in sessions/
        return self.channel

    def child(self, offered: frozenset[str]) -> ToolContext:
        """The context of a helper started by this turn: same decisions, tools no wider
        than what this turn was offered."""
        ceiling = offered if self.allowed_tools is None else offered & self.allowed_tools
        return replace(self, allowed_tools=ceiling, depth=self.depth + 1)
