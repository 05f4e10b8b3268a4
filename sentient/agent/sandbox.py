"""execute_code: run a Python script in a separate process whose only way to tools is a
bridge back to this turn.

The process gets an empty working folder, no inherited environment (so no API keys), a time
limit and a memory limit. That is isolation for mistakes, not a security boundary against
hostile code: a script can still read files the user can read.

Inside the script, `tools.available` lists the tools it may call and
`tools.call(name, **args)` calls one; the bridge applies the turn's context, so a script in
a turn without memory is told of no memory tool and cannot call one by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from typing import IO, Any

from sentient.agent.context import ToolContext
from sentient.agent.tools import ToolRefused, failure, refusal, tool

NOT_FOR_SCRIPTS = frozenset(
    {"execute_code", "delegate_task", "delegate_tasks", "delegate_background", "read_with_reader", "task_notepad"}
)
TIME_LIMIT = 20.0
MEMORY_LIMIT = 512 * 1024 * 1024
OUTPUT_LIMIT = 8000

_PRELUDE = r"""
import json, os, resource, sys

_memory, _cpu = (int(x) for x in os.environ.pop("SENTIENT_LIMITS").split(","))
resource.setrlimit(resource.RLIMIT_AS, (_memory, _memory))
resource.setrlimit(resource.RLIMIT_CPU, (_cpu, _cpu))

class _Tools:
    def __init__(self):
        self._requests = os.fdopen(int(os.environ["SENTIENT_BRIDGE_OUT"]), "w", buffering=1)
        self._replies = os.fdopen(int(os.environ["SENTIENT_BRIDGE_IN"]), "r")
        self.available = json.loads(os.environ["SENTIENT_TOOLS"])

    def call(self, name, **args):
        self._requests.write(json.dumps({"tool": name, "args": args}) + "\n")
        reply = json.loads(self._replies.readline() or '{"error": "the bridge closed"}')
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["result"]

tools = _Tools()
del _Tools
for _name in ("SENTIENT_BRIDGE_OUT", "SENTIENT_BRIDGE_IN", "SENTIENT_TOOLS"):
    os.environ.pop(_name, None)
with open(sys.argv[1], encoding="utf-8") as _f:
    _code = compile(_f.read(), "<script>", "exec")
exec(_code, {"tools": tools, "__name__": "__main__"})
"""


def script_tools(ctx: ToolContext) -> list[str]:
    """Tools a script of this turn is told about: what the turn is offered, minus agents."""
    return sorted(item.name for item in ctx.agent.registry.offered(ctx) if item.name not in NOT_FOR_SCRIPTS)


def bridge_call(ctx: ToolContext, name: str, args: Any) -> dict[str, Any]:
    """One call from a script, judged by the turn's context like any other call."""
    registered = ctx.agent.registry.get(name)
    why = refusal(ctx, name) if registered is not None else None
    if registered is None or name in NOT_FOR_SCRIPTS or why is not None:
        return {"error": why or f"{name} is not available to scripts"}
    if not isinstance(args, dict):
        return {"error": "arguments must be keyword arguments"}
    try:
        return {"result": registered.call(ctx, args)}
    except ToolRefused as exc:
        return {"error": str(exc)}
    except Exception as exc:
        return {"error": failure(ctx, exc)}


def _serve_bridge(ctx: ToolContext, requests: IO[str], replies: IO[str]) -> None:
    for line in requests:
        try:
            request = json.loads(line)
            reply = bridge_call(ctx, str(request.get("tool")), request.get("args", {}))
        except (ValueError, AttributeError):
            reply = {"error": "malformed bridge request"}
        try:
            replies.write(json.dumps(reply, ensure_ascii=False) + "\n")
            replies.flush()
        except (BrokenPipeError, ValueError):
            return


def run_script(ctx: ToolContext, code: str, *, time_limit: float = TIME_LIMIT, memory: int = MEMORY_LIMIT) -> str:
    """Run `code` in a child process; return what it printed, with a note on how it ended."""
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    with tempfile.TemporaryDirectory(prefix="sentient-script-") as workdir:
        script = os.path.join(workdir, "script.py")
        with open(script, "w", encoding="utf-8") as handle:
            handle.write(code)
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": workdir,
            "PYTHONDONTWRITEBYTECODE": "1",
            "SENTIENT_BRIDGE_OUT": str(from_child_w),
            "SENTIENT_BRIDGE_IN": str(to_child_r),
            "SENTIENT_TOOLS": json.dumps(script_tools(ctx)),
            "SENTIENT_LIMITS": f"{memory},{int(time_limit) + 1}",
        }
        process = subprocess.Popen(
            [sys.executable, "-I", "-c", _PRELUDE, script],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(from_child_w, to_child_r),
            start_new_session=True,
        )
        os.close(from_child_w)
        os.close(to_child_r)
        requests = os.fdopen(from_child_r, "r")
        replies = os.fdopen(to_child_w, "w")
        bridge = threading.Thread(target=_serve_bridge, args=(ctx, requests, replies), daemon=True)
        bridge.start()
        try:
            output, _ = process.communicate(timeout=time_limit)
            ending = f"exit code {process.returncode}" if process.returncode else "finished"
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            ending = f"stopped after the {time_limit:g} s time limit"
        finally:
            bridge.join(timeout=2)
            for stream in (requests, replies):
                try:
                    stream.close()
                except OSError:
                    pass
    text = output.decode("utf-8", errors="replace")
    if len(text) > OUTPUT_LIMIT:
        text = text[:OUTPUT_LIMIT] + f"\n... ({len(text) - OUTPUT_LIMIT} more characters cut)"
    return f"[script {ending}]\n{text}"


@tool(risk="write")
def execute_code(ctx: ToolContext, code: str) -> str:
    """Run a short Python script and return what it printed. Inside it, `tools.available`
    lists the tools it may use and `tools.call(name, **args)` calls one.

    Args:
        code: the Python source to run.
    """
    return run_script(ctx, code)
