"""The compact tool profile (agent/compact.py): small models get the same capabilities in fewer,
merged tools, within 400 prompt tokens before the person's message, and the turn's memory
decision applies to them exactly as to the full set."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import litellm
import pytest

from sentient.agent.tools import MEMORY_TOOLS
from sentient.config import Settings, load_settings
from sentient.errors import ConfigError
from tests.agent_support import agent_on, configure
from tests.scripted import Scripted, call, text

FACT = "Mysuru"  # only memory/ of the basic vault holds it
MOST_TOKENS = 400  # the system prompt and the tools, before the person's message
COMPACT = {"chat": {"tools": "compact"}, "helper": {"tools": "compact"}}


@pytest.fixture
def basic(make_vault: Callable[[str], Path]) -> Path:
    vault = make_vault("basic")
    configure(vault, user={"name": "Maya Rao"})
    return vault


def before_the_message(request: dict[str, object]) -> int:
    """Tokens of a request's system messages and tool schemas (litellm's count)."""
    messages = [m for m in request["messages"] if m["role"] == "system"]  # type: ignore[index, union-attr]
    return int(litellm.token_counter(model="gpt-4o", messages=messages, tools=request["tool_schemas"] or None))


def test_local_is_compact_and_a_role_may_ask_for_it(basic: Path) -> None:
    assert Settings(model="local").tool_profile("chat") == "compact"
    assert Settings(model="openai/gpt-4o-mini").tool_profile("chat") == "full"
    configure(basic, models={"chat": {"tools": "compact"}, "helper": {"model": "local", "tools": "full"}})
    settings = load_settings(basic, {})
    assert settings.tool_profile("chat") == "compact" and settings.tool_profile("helper") == "full"
    configure(basic, models={"chat": {"tools": "small"}})
    with pytest.raises(ConfigError, match=r"models\.chat\.tools: Input should be 'full' or 'compact'"):
        load_settings(basic, {})


def test_a_memory_turn_offers_fewer_tools_within_400_tokens_and_the_full_set_stays(
    basic: Path, scripted: Scripted
) -> None:
    agent = agent_on(basic)
    scripted.queue(text("Hello."))
    agent.turn("Tell me a joke.")  # a message no entry matches: the prompt holds no entries of the vault
    full = scripted.requests[-1]
    configure(basic, models=COMPACT)
    agent = agent_on(basic)
    scripted.queue(text("Hello."))
    result = agent.turn("Tell me a joke.")
    small = scripted.requests[-1]
    assert set(full["tools"]) >= MEMORY_TOOLS and len(full["tools"]) == 16  # capable models: the full set
    assert small["tools"] == ["memory", "work"]  # nothing asked to be saved, fetched or sent: no web, no writes
    assert result.offered == small["tools"]
    assert actions(small, "memory") == ["recall", "versions", "from_source", "about_person", "past_chats",
                                        "chats_since"]
    assert actions(small, "work") == ["ask", "background", "parallel"]
    assert before_the_message(full) > 2 * MOST_TOKENS
    assert before_the_message(small) <= MOST_TOKENS, small["messages"]
    scripted.queue(text("Done."))
    agent.turn("Remember this, forget the old one, remind me, save it as a skill, run a script on "
               "https://example.com")
    asked = scripted.requests[-1]
    assert asked["tools"] == ["memory", "web", "work"]
    assert actions(asked, "memory") == ["recall", "remember", "forget", "versions", "from_source", "about_person",
                                        "past_chats", "chats_since"]
    assert actions(asked, "web") == ["fetch", "read", "notify"]
    assert actions(asked, "work") == ["ask", "background", "parallel", "python", "save_skill"]
    assert before_the_message(asked) <= MOST_TOKENS, asked["messages"]


def actions(request: dict[str, Any], tool: str) -> list[str]:
    """The actions a merged tool offered in a request."""
    schema = next(s for s in request["tool_schemas"] if s["function"]["name"] == tool)["function"]
    found: list[str] = schema["parameters"]["properties"]["action"]["enum"]
    return found


def test_a_small_model_saves_runs_and_sends_nothing_the_person_did_not_ask_for(
    basic: Path, scripted: Scripted
) -> None:
    """Asked "what can you do?", the embedded model saved its own words as a skill and ran them."""
    configure(basic, models=COMPACT)
    agent = agent_on(basic)
    before = {p: p.read_bytes() for p in basic.rglob("*.md") if "sessions" not in p.parts}
    scripted.queue(call("work", action="save_skill", text="helpers\nscripts, skills"),
                   call("work", action="python", text="print(1)"),
                   call("memory", action="remember", text="The weather today is very hot."),
                   call("web", action="notify", text="hello"), text("I can chat and remember things."))
    result = agent.turn("What can you do?")
    assert [c.ok for c in result.calls] == [False] * 4
    assert result.calls[0].result == ("Error: work: the person did not ask to save_skill (they would say something "
                                      "like 'save this as a skill'), so it was not done; answer them instead")
    assert "did not ask to remember" in result.calls[2].result
    assert {p: p.read_bytes() for p in basic.rglob("*.md") if "sessions" not in p.parts} == before
    scripted.queue(call("memory", action="remember", text="Biscuit's vet visit is in April."), text("Noted."))
    agreed = agent.turn("Please remember that Biscuit's vet visit is in April.")
    assert [c.ok for c in agreed.calls] == [True]
    assert any("vet visit is in April" in p.read_text() for p in (basic / "memory").rglob("*.md"))


def test_a_task_run_keeps_every_action_of_the_compact_profile(basic: Path) -> None:
    from sentient.agent.compact import compact

    agent = agent_on(basic)
    tools = list(agent.registry)
    run = agent.context(incognito=False, channel="task", session=None, run="brief/run-1")
    chat = agent.context(incognito=False, channel="chat", session=None, asked="hello")
    offered = {tool.name: tool for tool in compact(tools, ctx=run)}
    assert "remember" in offered["memory"].parameters["properties"]["action"]["enum"]
    assert "python" in offered["work"].parameters["properties"]["action"]["enum"]
    said = {tool.name: tool for tool in compact(tools, ctx=chat)}
    assert "remember" not in said["memory"].parameters["properties"]["action"]["enum"] and "web" not in said


def test_a_merged_call_runs_the_full_tool(basic: Path, scripted: Scripted) -> None:
    configure(basic, models=COMPACT)
    agent = agent_on(basic)
    scripted.queue(call("memory", action="recall", text="Anika teacher"),
                   call("memory", action="remember", text="Anika's school reopens on 2 January."),
                   text("She teaches in Mysuru."))
    result = agent.turn("Where does Anika teach? Note that her school reopens on 2 January.")
    assert [(c.name, c.ok) for c in result.calls] == [("memory", True), ("memory", True)]
    assert FACT in result.calls[0].result
    saved = [p for p in (basic / "memory").rglob("*.md") if "reopens on 2 January" in p.read_text()]
    assert len(saved) == 1 and "title: Anika's school reopens on 2 January." in saved[0].read_text()


def test_a_memory_off_turn_offers_no_memory_tool_and_says_to_say_i_dont_know(
    basic: Path, scripted: Scripted
) -> None:
    configure(basic, models=COMPACT)
    agent = agent_on(basic)
    scripted.queue(call("memory", action="recall", text="Anika"),  # asked for all the same
                   call("work", action="ask", text="find out where Anika teaches"),
                   call("memory", action="recall", text="Anika"),  # the helper tries too
                   text("nothing"), text("I don't know."))
    result = agent.turn("Who is Anika?", channel="api")
    assert not result.memory_allowed
    for offer in scripted.offered_tools:  # the turn's and its helper's
        assert "memory" not in offer and MEMORY_TOOLS.isdisjoint(offer)
    assert result.calls[0].result == "Error: there is no tool named memory here."
    assert FACT not in "\n".join(str(r["messages"]) for r in scripted.requests)
    system = scripted.requests[0]["messages"][0]["content"]
    assert "Nothing is remembered here" in system and 'say "I don\'t know" rather than guess' in system


def test_an_action_the_turn_may_not_take_is_refused_as_the_full_tool_is(basic: Path, scripted: Scripted) -> None:
    configure(basic, models=COMPACT, chat={"incognito_uses_memory": True})
    agent = agent_on(basic)
    session = agent.new_session(incognito=True)
    scripted.queue(call("memory", action="remember", text="Anika likes chess."), text("Not saved."))
    result = agent.turn("Remember that Anika likes chess.", session=session, incognito=True)
    memory = next(s for s in scripted.requests[0]["tool_schemas"] if s["function"]["name"] == "memory")["function"]
    assert "remember" not in memory["parameters"]["properties"]["action"]["enum"]
    assert "recall" in memory["parameters"]["properties"]["action"]["enum"]  # memory is allowed, saving is not
    assert result.calls[0].result == ("Error: memory_remember isn't available here: an incognito chat never saves, "
                                      "changes or forgets anything.")
    assert not any("chess" in p.read_text() for p in (basic / "memory").rglob("*.md"))


def test_a_tool_forced_by_name_is_offered_as_itself_unless_the_turn_refuses_it(
    basic: Path, scripted: Scripted
) -> None:
    configure(basic, models=COMPACT)
    agent = agent_on(basic)
    forced = {"type": "function", "function": {"name": "memory_recall"}}
    scripted.queue(call("memory_recall", query="Anika"), text("Mysuru."), text("I don't know."))
    result = agent.turn("Where does Anika teach?", tool_choice=forced)
    assert scripted.offered_tools[0] == ["memory", "work", "memory_recall"]
    memory = scripted.requests[0]["tool_schemas"][0]["function"]
    assert "recall" not in memory["parameters"]["properties"]["action"]["enum"]  # not twice
    assert result.calls[0].name == "memory_recall" and FACT in result.calls[0].result
    agent.turn("Where does Anika teach?", channel="api", tool_choice=forced)
    assert MEMORY_TOOLS.isdisjoint(scripted.offered_tools[-1]) and "memory" not in scripted.offered_tools[-1]
