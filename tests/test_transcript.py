"""Session transcripts: exact round trips, fenced code, tool blocks, appends that touch nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sentient.vault import Vault
from sentient.vault.transcript import Message, append, parse

TESTS = Path(__file__).resolve().parent
SESSION_FILES = sorted((TESTS / "fixtures" / "vaults").glob("*/sessions/*/*.md")) + sorted(
    (TESTS.parent / "vault").glob("sessions/*/*.md")
)


def fixed_clock() -> datetime:
    return datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def session_body(path: Path) -> str:
    root = path.parents[2]
    return Vault(root).get("session", path.stem).body


def test_there_are_fixture_sessions() -> None:
    assert len(SESSION_FILES) >= 3


@pytest.mark.parametrize("path", SESSION_FILES, ids=lambda path: f"{path.parents[2].name}/{path.stem}")
def test_fixture_session_round_trips_exactly(path: Path) -> None:
    body = session_body(path)
    transcript = parse(body)
    assert transcript.messages
    assert transcript.render() == body


def test_messages_keep_role_time_and_text() -> None:
    transcript = parse(session_body(TESTS / "fixtures/vaults/basic/sessions/2026-11/k3f9a2.md"))
    assert [(m.role, m.time) for m in transcript.messages] == [
        ("user", "2026-11-02T09:15:00Z"),
        ("assistant", "2026-11-02T09:15:04Z"),
        ("tool", "2026-11-02T09:15:04Z"),
        ("assistant", "2026-11-02T09:15:07Z"),
    ]
    assert transcript.messages[0].text == "When is the Ledger design review this week?"
    assert transcript.messages[3].text == (
        "It is on Friday at 15:00 in the Koramangala studio. Send the Figma link by Thursday evening\n"
        "so the engineers can read it first."
    )
    assert transcript.preamble == ""


def test_tool_calls_and_results_come_from_tagged_json_blocks() -> None:
    transcript = parse(session_body(TESTS / "fixtures/vaults/basic/sessions/2026-11/k3f9a2.md"))
    call, result = transcript.messages[1], transcript.messages[2]
    assert call.tool_calls == ({"id": "call_1", "name": "memory_recall", "arguments": {"query": "design review"}},)
    assert call.text == "Let me check what I have saved about design reviews."
    assert call.tool_results == ()
    assert result.tool_results == (
        {"id": "call_1", "name": "memory_recall",
         "content": "ledger-design-reviews: Ledger design reviews are on Fridays at 15:00"},
    )
    assert result.text == ""


def test_heading_inside_a_code_block_is_content() -> None:
    body = (
        "## user · 2026-11-30T10:00:00Z\n\nHow do I write a transcript by hand?\n\n"
        "## assistant · 2026-11-30T10:00:05Z\n\nLike this:\n\n"
        "```markdown\n## user · 2026-11-30T09:00:00Z\n\nHello\n```\n\n"
        "~~~\n## assistant · 2026-11-30T09:00:01Z\n~~~\n\n"
        "````\n```\n## tool · 2026-11-30T09:00:02Z\n```\n````\n"
    )
    transcript = parse(body)
    assert [m.role for m in transcript.messages] == ["user", "assistant"]
    answer = transcript.messages[1].text
    assert "## user · 2026-11-30T09:00:00Z" in answer
    assert "## assistant · 2026-11-30T09:00:01Z" in answer
    assert "## tool · 2026-11-30T09:00:02Z" in answer
    assert transcript.render() == body


def test_other_headings_stay_inside_their_message() -> None:
    body = "## assistant · 2026-11-30T10:00:05Z\n\n## Steps\n\n1. Book the tickets.\n"
    transcript = parse(body)
    assert len(transcript.messages) == 1
    assert transcript.messages[0].text == "## Steps\n\n1. Book the tickets."


def test_text_before_the_first_message_is_the_preamble() -> None:
    body = "Summary of the earlier part.\n\n## user · 2026-11-30T10:00:00Z\n\nHi\n"
    transcript = parse(body)
    assert transcript.preamble == "Summary of the earlier part.\n\n"
    assert transcript.render() == body


def test_untagged_or_broken_json_blocks_stay_text() -> None:
    body = (
        "## assistant · 2026-11-30T10:00:05Z\n\n"
        '```json\n{"id": "call_1", "name": "memory_recall"}\n```\n\n'
        "```json tool-call\n{not json\n```\n"
    )
    message = parse(body).messages[0]
    assert message.tool_calls == ()
    assert '```json\n{"id": "call_1", "name": "memory_recall"}\n```' in message.text
    assert "{not json" in message.text
    assert parse(body).render() == body


def test_rendered_message_parses_back_to_itself() -> None:
    message = Message(
        "assistant",
        "2026-11-30T10:00:05Z",
        "Checking.",
        tool_calls=({"id": "c1", "name": "web_fetch", "arguments": {"url": "https://example.org/a```b"}},),
        tool_results=({"id": "c0", "name": "memory_recall", "content": "Biscuit: a ginger cat"},),
    )
    parsed = parse(message.render()).messages[0]
    assert parsed == message
    assert "````json tool-call\n" in message.render()


def test_append_leaves_earlier_text_byte_identical() -> None:
    body = session_body(TESTS / "fixtures/vaults/basic/sessions/2026-11/k3f9a2.md")
    message = Message("user", "2026-11-30T10:00:00Z", "Thanks! Remind me on Thursday.")
    longer = append(body, message)
    assert longer.startswith(body)
    assert longer[len(body):] == "\n## user · 2026-11-30T10:00:00Z\n\nThanks! Remind me on Thursday.\n"
    transcript = parse(longer)
    assert transcript.messages[-1] == message
    assert transcript.messages[:-1] == parse(body).messages
    assert transcript.render() == longer


def test_append_separates_a_body_without_final_newline() -> None:
    longer = append("## user · 2026-11-30T10:00:00Z\n\nHi", Message("assistant", "2026-11-30T10:00:01Z", "Hello"))
    assert longer == "## user · 2026-11-30T10:00:00Z\n\nHi\n\n## assistant · 2026-11-30T10:00:01Z\n\nHello\n"
    assert [m.text for m in parse(longer).messages] == ["Hi", "Hello"]


def test_append_to_an_empty_session() -> None:
    message = Message("user", "2026-11-30T10:00:00Z", "First message")
    assert append("", message) == message.render()


def test_appending_to_a_session_file_keeps_every_earlier_line(make_vault: Callable[[str], Path]) -> None:
    vault = Vault(make_vault("basic"), clock=fixed_clock)
    session = vault.get("session", "k3f9a2")
    before = session.path.read_text(encoding="utf-8")
    tool_turn = Message(
        "assistant",
        "2026-11-30T10:00:00Z",
        tool_calls=({"id": "call_2", "name": "memory_recall", "arguments": {"query": "Thursday"}},),
    )
    updated = vault.update("session", "k3f9a2", body=append(session.body, tool_turn),
                           expected_revision=session.revision)
    after = updated.path.read_text(encoding="utf-8")
    assert after.endswith(session.body + "\n" + tool_turn.render())
    lines_before, lines_after = before.splitlines(), after.splitlines()
    assert [line for line in lines_before if line not in lines_after] == ["updated: 2026-11-02T09:15:07Z"]
    assert parse(updated.body).messages[-1].tool_calls == tool_turn.tool_calls
