"""The embedded model's own process: llama.cpp (xllamacpp) serving one GGUF file on 127.0.0.1.

local.py starts it as `python -m sentient.llm.embedded '{"path": ..., "threads": ..., "context": ...}'`
and reads one JSON line from it: `{"address": "http://127.0.0.1:PORT"}` once the model is
loaded, or `{"error": "..."}`. It then serves until its stdin closes (the parent stopped it, or
the parent ended, however it ended), and exits at once.

Why a process of its own: xllamacpp loads the model while holding the GIL, so in-process a
Ctrl-C could not cancel a turn that waits for the model to start; and its shutdown hangs for
good when it comes right after the start. A process of its own can be waited for while
Ctrl-C works, and is ended by the OS with nothing to hang on. It imports nothing but xllamacpp.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
from typing import Any


def report(message: dict[str, str]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve(config: dict[str, Any]) -> int:
    try:
        runtime = importlib.import_module("xllamacpp")
    except ImportError:
        report({"error": "the embedded model runtime (xllamacpp) is not installed"})
        return 1
    params = runtime.CommonParams()
    params.model.path = str(config["path"])
    params.cpuparams.n_threads = int(config["threads"])
    params.cpuparams_batch.n_threads = int(config["threads"])
    params.n_ctx = int(config["context"])
    params.n_parallel = 1
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    params.verbosity = -1
    try:
        server = runtime.Server(params)
    except Exception as exc:
        report({"error": str(exc) or type(exc).__name__})
        return 1
    address = str(server.listening_address).rstrip("/")
    report({"address": address if address.startswith("http") else f"http://{address}"})
    while sys.stdin.buffer.read(4096):  # until the parent closes it (or ends)
        pass
    return 0


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the chat: it cancels a turn, not the model
    code = serve(json.loads(sys.argv[1]))
    os._exit(code)  # no teardown of llama.cpp: the OS frees the model and the port


if __name__ == "__main__":
    main()
