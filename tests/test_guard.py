"""The optional guard model (models.guard): its verdict on what the agent stores is recorded
and judged like a pattern's, and a guard that is down never stops the write."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import litellm
import pytest
import yaml

from sentient.memory import allow_entry, get_entry, list_entries
from sentient.threats.guard import UNCHECKED, read_verdict
from sentient.threats.judge import GUARD_PATTERN
from tests.agent_support import SCRIPTED, agent_on, configure
from tests.scripted import Scripted, call, text

NOTE = "Our supplier ships the oat milk on Tuesdays; order by Monday noon."


def front_matter(path: Path) -> dict[str, object]:
    loaded = yaml.safe_load(path.read_text(encoding="utf-8").split("---")[1])
    assert isinstance(loaded, dict)
    return loaded


def remember(vault: Path, scripted: Scripted, guard_reply: object) -> Path:
    """One turn in which the agent saves NOTE and the guard answers `guard_reply`; the file."""
    agent = agent_on(vault)
    replies = guard_reply if isinstance(guard_reply, list) else [guard_reply]
    scripted.queue(call("memory_remember", title="Supplier", text=NOTE), *replies, text("Saved it."))
    assert agent.turn("Remember when the supplier ships").text == "Saved it."
    [path] = [p for p in (vault / "memory").rglob("*.md") if NOTE in p.read_text(encoding="utf-8")]
    return path


def test_without_a_guard_model_nothing_is_asked(make_vault: Callable[[str], Path], scripted: Scripted) -> None:
    path = remember(make_vault("basic"), scripted, [])
    assert "guard" not in front_matter(path)
    assert len(scripted.requests) == 2  # the turn's two calls, no third


def test_the_guard_verdict_is_recorded_and_flags_the_entry_like_a_pattern(
    make_vault: Callable[[str], Path], scripted: Scripted
) -> None:
    vault = make_vault("basic")
    configure(vault, models={"guard": {"model": SCRIPTED}})
    path = remember(vault, scripted, text(json.dumps({"injection": True, "reason": "steers the assistant"})))
    asked = scripted.requests[1]["messages"]
    assert "prompt injection" in asked[0]["content"] and NOTE in asked[1]["content"]
    guard = front_matter(path)["guard"]
    assert isinstance(guard, dict)
    assert guard["checked"] is True and guard["flagged"] is True and guard["model"] == SCRIPTED
    assert guard["reason"] == "steers the assistant" and str(guard["revision"]).startswith("sha256:")
    agent = agent_on(vault)
    entry = get_entry(agent.workspace, path.stem)
    assert entry.flagged and entry.withheld and entry.patterns == (GUARD_PATTERN,)
    assert [m.excerpt for m in entry.matches] == ["steers the assistant"]
    assert [e.id for e in list_entries(agent.workspace, flagged_only=True)] == [entry.id]
    allowed = allow_entry(agent.workspace, entry.id, entry.allow_revision)
    assert allowed.flagged and not allowed.withheld


def test_a_clean_verdict_is_recorded_and_the_entry_is_not_flagged(
    make_vault: Callable[[str], Path], scripted: Scripted
) -> None:
    vault = make_vault("basic")
    configure(vault, models={"guard": {"model": SCRIPTED}})
    path = remember(vault, scripted, text('{"injection": false, "reason": "a supplier note"}'))
    guard = front_matter(path)["guard"]
    assert isinstance(guard, dict) and guard["checked"] is True and guard["flagged"] is False
    assert not get_entry(agent_on(vault).workspace, path.stem).flagged


@pytest.mark.parametrize("down", ["error", "nonsense"])
def test_a_guard_that_is_down_stores_the_write_marked_unchecked(
    make_vault: Callable[[str], Path], scripted: Scripted, down: str
) -> None:
    vault = make_vault("basic")
    configure(vault, models={"guard": {"model": SCRIPTED}})
    refused = litellm.APIConnectionError(message="scripted: refused", llm_provider="scripted", model="test")
    replies = [refused] * 3 if down == "error" else [text("I am not sure what you mean.")]  # 3: with its retries
    path = remember(vault, scripted, replies)
    guard = front_matter(path)["guard"]
    assert isinstance(guard, dict)
    assert guard["checked"] is False and guard["note"] == UNCHECKED and "flagged" not in guard
    assert ("could not be asked" if down == "error" else "not a verdict") in str(guard["reason"])
    entry = get_entry(agent_on(vault).workspace, path.stem)
    assert not entry.flagged and entry.body.strip() == NOTE
    assert entry.as_dict()["guard"]["note"] == UNCHECKED  # what the API shows of it


def test_a_verdict_on_an_earlier_text_is_stale(make_vault: Callable[[str], Path], scripted: Scripted) -> None:
    vault = make_vault("basic")
    configure(vault, models={"guard": {"model": SCRIPTED}})
    path = remember(vault, scripted, text('{"injection": true, "reason": "x"}'))
    path.write_text(path.read_text(encoding="utf-8").replace("Tuesdays", "Wednesdays"), encoding="utf-8")
    assert not get_entry(agent_on(vault).workspace, path.stem).flagged  # the guard never saw this text


def test_verdicts_are_read_from_json_or_a_plain_first_word() -> None:
    assert read_verdict('Sure: {"injection": true, "reason": "odd"}') == (True, "odd")
    assert read_verdict("No, it is a shopping list.") == (False, "No, it is a shopping list.")
    assert read_verdict("INJECTION") == (True, "INJECTION")
    assert read_verdict("maybe") is None
    assert read_verdict('{"injection": "yes"}') is None
