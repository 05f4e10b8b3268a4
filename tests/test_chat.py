"""The terminal chat: a person types lines and slash commands."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import litellm
import pytest

from sentient.chat import readline, repl
from tests.agent_support import agent_on
from tests.scripted import Scripted, text


def feed(lines: list[str]) -> Callable[[str], str]:
    remaining: Iterator[str] = iter(lines)

    def read(prompt: str) -> str:
        try:
            return next(remaining)
        except StopIteration:
            raise EOFError from None

    return read


def test_a_chat_with_pins_incognito_and_new_sessions(make_vault: Callable[[str], Path], scripted: Scripted) -> None:
    vault = make_vault("basic")
    agent = agent_on(vault)
    shown: list[str] = []
    scripted.queue(text("Hello Maya."), text("Still here."), text("Shh."))
    lines = ["/pin note:ledger-onboarding-notes", "hi", "/pins", "/session", "more", "/incognito", "secret",
             "/pin memo:x", "/frobnicate", "/quit", "never read"]
    assert repl(agent, feed(lines), shown.append) == 0
    assert "sentient> Hello Maya." in shown and "sentient> Shh." in shown
    assert "pins: note:ledger-onboarding-notes" in shown
    assert any(line.startswith("error: pins: pin 'memo:x'") for line in shown)
    assert any(line.startswith("unknown command /frobnicate") for line in shown)
    assert "<session-knowledge>" in str(scripted.requests[0]["messages"])
    sessions = list((vault / "sessions").rglob("*.md"))
    assert len(sessions) == 2  # the fixture's and ours; the incognito one is not saved
    assert any("note:ledger-onboarding-notes" in p.read_text() for p in sessions)


def test_end_of_input_ends_the_chat(make_vault: Callable[[str], Path], scripted: Scripted) -> None:
    agent = agent_on(make_vault("basic"))
    assert repl(agent, feed([]), lambda line: None) == 0


def test_a_model_that_is_down_is_an_error_line_and_the_chat_goes_on(
    make_vault: Callable[[str], Path], scripted: Scripted
) -> None:
    agent = agent_on(make_vault("basic"))
    shown: list[str] = []
    scripted.fail(litellm.AuthenticationError(message="bad key", llm_provider="scripted", model="test"))
    scripted.queue(text("Back."))
    repl(agent, feed(["hi", "hi again"]), shown.append)
    assert any(line.startswith("error: the provider refused the key") for line in shown)
    assert "sentient> Back." in shown


def test_ctrl_c_during_an_answer_cancels_it_and_keeps_the_message(
    make_vault: Callable[[str], Path], scripted: Scripted
) -> None:
    vault = make_vault("basic")
    agent = agent_on(vault)
    shown: list[str] = []
    scripted.fail(KeyboardInterrupt())  # what Ctrl-C raises while the model answers (or starts)
    scripted.queue(text("Back."))
    assert repl(agent, feed(["tell me a long story", "a short one then"]), shown.append) == 0
    cancelled = [line for line in shown if line.startswith("(cancelled")]
    assert len(cancelled) == 1 and "your message is kept in session" in cancelled[0]
    assert "sentient> Back." in shown
    ours = [p for p in (vault / "sessions").rglob("*.md") if "tell me a long story" in p.read_text()]
    assert len(ours) == 1  # the cancelled message and the next one are in one session
    assert "a short one then" in ours[0].read_text()
    assert "tell me a long story" in str(scripted.requests[-1]["messages"])  # the model sees it next time


def test_ctrl_c_at_the_prompt_leaves_the_chat(make_vault: Callable[[str], Path], scripted: Scripted) -> None:
    agent = agent_on(make_vault("basic"))

    def interrupted(prompt: str) -> str:
        raise KeyboardInterrupt

    assert repl(agent, interrupted, lambda line: None) == 0


def test_a_pin_that_does_not_exist_is_refused_before_the_first_message(
    make_vault: Callable[[str], Path], scripted: Scripted
) -> None:
    vault = make_vault("basic")
    agent = agent_on(vault)
    shown: list[str] = []
    before = set((vault / "sessions").rglob("*.md"))
    scripted.queue(text("Hello."))
    lines = ["/pin note:nope", "/pin note:interview-script", "hi there", "/pins"]
    assert repl(agent, feed(lines), shown.append) == 0
    assert shown[1].startswith("error: pins: there is no note 'nope' to pin")
    assert shown[2:-1] == ["pins: note:interview-script", "sentient> Hello.", "pins: note:interview-script"]
    ours = set((vault / "sessions").rglob("*.md")) - before
    assert len(ours) == 1  # the first message made the session and is in it
    saved = ours.pop().read_text()
    assert "hi there" in saved and "note:interview-script" in saved and "nope" not in saved


@pytest.fixture
def history() -> Iterator[None]:
    """readline's history, empty for the test and emptied after it (it is the process's)."""
    if readline is None:
        pytest.skip("no readline on this platform")
    readline.clear_history()
    yield
    readline.clear_history()


def typed(lines: list[str]) -> Callable[[str], str]:
    """Lines typed at a terminal: input() on a terminal adds each non-empty line to readline's history."""
    read = feed(lines)

    def type_line(prompt: str) -> str:
        line = read(prompt)
        if line:
            readline.add_history(line)
        return line

    return type_line


def test_nothing_typed_in_an_incognito_chat_stays_in_the_history(
    make_vault: Callable[[str], Path], scripted: Scripted, history: None, tmp_path: Path
) -> None:
    vault = make_vault("basic")
    agent = agent_on(vault)
    scripted.queue(text("Hello."), text("Shh."), text("Shh."), text("Back."))
    lines = ["hi", "/pins", "/incognito", "PRIVATE my PIN is 4711", "/pin note:interview-script",
             "PRIVATE again", "/new", "back in the open"]
    assert repl(agent, typed(lines), lambda line: None) == 0
    kept = tmp_path / "chat_history"
    readline.write_history_file(kept)  # what `sentient chat` does as it ends
    assert kept.read_text().splitlines() == ["hi", "/pins", "back in the open"]
    assert not [p for p in vault.rglob("*") if p.is_file() and b"PRIVATE" in p.read_bytes()]
