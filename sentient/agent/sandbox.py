"""execute_code: run a Python script in a separate process whose only way to tools is a
bridge back to this turn.

Where bubblewrap (`bwrap`) starts, the script runs in its sandbox: no network, its own /proc
(only its own processes), no files but the Python runtime, the system's /usr (read-only) and an
empty scratch folder, so neither the vault nor `.sentient/token`, and an environment of a few
variables of its own. Where no sandbox is available (`scripts.sandbox: none`, or `auto` without
a bwrap that starts) the script still runs, but the turn is marked untrusted before it starts:
the script could have read anything the user can, the web too, so outbound tools are held and
what the turn saves is stored untrusted, as after `web_fetch` (docs/security.md).

Either way: the time limit stops all its processes (their group, and with bwrap its whole PID
namespace), the memory limit holds for each process (RLIMIT_AS) and for all of them together
(their resident memory, looked at every WATCH_EVERY seconds), and no wait is without a timeout.

Inside the script, `tools.available` lists the tools it may call and
`tools.call(name, **args)` calls one (any parameter names: `name` is positional-only); the
bridge applies the turn's context, so a script in a turn without memory is told of no memory
tool and cannot call one by name.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import IO, Any

from sentient.agent.context import ToolContext
from sentient.agent.tools import ToolRefused, failure, refusal, tool

NOT_FOR_SCRIPTS = frozenset(
    {"execute_code", "delegate_task", "delegate_tasks", "delegate_background", "read_with_reader", "task_notepad"}
)
MB = 1024 * 1024
OUTPUT_LIMIT = 8000  # characters of output the model is shown
KEPT_OUTPUT = MB  # bytes of output read and kept; more is read and dropped
WATCH_EVERY = 0.2  # seconds between two looks at a running script's processes
DRAIN_WAIT = 2.0  # seconds to wait for the output and the bridge once the processes were stopped
PROBE_TIMEOUT = 15.0  # seconds bwrap may take to start a first, empty script
SCRATCH = "/tmp"  # where a sandboxed script finds its scratch folder
# Where bwrap is looked for: the system's folders, never a PATH the environment could change.
BWRAP_DIRS = "/usr/bin:/bin:/usr/local/bin"
# What a sandboxed script sees of the system besides Python's own folders, all read-only:
# programs and libraries, and what the dynamic linker reads.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache",
                "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")

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

    def call(self, name, /, **args):
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


def _serve_bridge(ctx: ToolContext, requests: IO[str], replies: IO[str], ended: threading.Event) -> None:
    """Answer the script's calls until the last process holding the bridge ends, then close it
    (here: closing a pipe another thread reads could wait for that read). A call that arrives
    once the script has ended (from a process it left behind) is refused."""
    with requests, replies:
        try:
            for line in requests:
                try:
                    request = json.loads(line)
                    if ended.is_set():
                        reply = {"error": "the script this call came from has ended"}
                    else:
                        reply = bridge_call(ctx, str(request.get("tool")), request.get("args", {}))
                except (ValueError, AttributeError):
                    reply = {"error": "malformed bridge request"}
                replies.write(json.dumps(reply, ensure_ascii=False) + "\n")
                replies.flush()
        except (OSError, ValueError):  # the script went away mid-call
            return


# --- the sandbox ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sandbox:
    """How scripts are confined here: by bwrap (its path), or not, and why not."""

    bwrap: str | None
    missing: str | None = None  # why scripts run without a sandbox


def sandbox_for(setting: str) -> Sandbox:
    """The sandbox `scripts.sandbox` asks for: `none`, `bwrap` (ToolRefused when it does not
    start) or `auto` (bwrap when it starts, else none)."""
    if setting == "none":
        return Sandbox(None, "scripts.sandbox is none")
    found = shutil.which("bwrap", path=BWRAP_DIRS)
    why = _bwrap_fails(found) if found else "bubblewrap (bwrap) is not installed"
    if why is None:
        return Sandbox(found)
    if setting == "bwrap":
        raise ToolRefused(f"scripts cannot run: scripts.sandbox is bwrap, but {why}. The person can install "
                          "bubblewrap (apt-get install bubblewrap) or set scripts.sandbox: auto in sentient.yaml "
                          "(scripts then run unsandboxed and mark their turn untrusted).")
    return Sandbox(None, why)


@functools.lru_cache(maxsize=4)
def _bwrap_fails(bwrap: str) -> str | None:
    """Why bwrap cannot start a sandbox here (no user namespaces, say), or None when it can:
    tried once per process with an empty script."""
    with tempfile.TemporaryDirectory(prefix="sentient-probe-") as workdir:
        command = [*bwrap_command(bwrap, workdir), sys.executable, "-I", "-c", "pass"]
        try:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT,
                                  env={"PATH": "/usr/bin:/bin"})
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap could not start a sandbox ({type(exc).__name__})"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        return f"bwrap could not start a sandbox ({said[-1] if said else f'exit code {done.returncode}'})"
    return None


def _python_paths() -> list[str]:
    """The folders of the running Python and its environment: its programs, its libraries,
    and a virtual environment's pyvenv.cfg (never a whole prefix: a vault may lie in it)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    return [os.path.join(prefix, part) for prefix in sorted(prefixes)
            for part in ("bin", "lib", "lib64", "pyvenv.cfg")]


def bwrap_command(bwrap: str, workdir: str) -> list[str]:
    """The bwrap command (up to its `--`) that runs a script with no network, its own PIDs, no
    capabilities, and nothing of the files but the system's programs and libraries, Python's
    own folders (all read-only) and `workdir` as its /tmp (SCRATCH), its only writable place:
    the root and /dev are read-only, so it cannot fill memory with files."""
    command = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
               "--proc", "/proc", "--dev", "/dev", "--bind", workdir, SCRATCH]
    seen: set[str] = set()
    for path in (*SYSTEM_PATHS, *_python_paths()):
        if path in seen or any(path.startswith(done + "/") for done in seen) or not os.path.lexists(path):
            continue
        seen.add(path)
        if os.path.islink(path):
            command += ["--symlink", os.readlink(path), path]
        else:
            command += ["--ro-bind", path, path]
    return [*command, "--remount-ro", "/", "--remount-ro", "/dev", "--chdir", SCRATCH, "--"]


# --- the script's processes -------------------------------------------------------------


def _processes() -> dict[int, tuple[int, int]]:
    """{pid: (parent pid, resident bytes)} of every process this one can see."""
    found: dict[int, tuple[int, int]] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue  # gone since the listing
        fields = stat[stat.rfind(b")") + 2 :].split()  # after the name, which may hold spaces
        found[int(entry)] = (int(fields[1]), int(fields[21]) * page)
    return found


def _tree(root: int) -> dict[int, int]:
    """{pid: resident bytes} of `root` and every process below it."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    tree: dict[int, int] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in tree:
            tree[pid] = table[pid][1]
            todo.extend(children.get(pid, ()))
    return tree


def kill_tree(pid: int, *, below: bool = True) -> None:
    """Kill the process `pid`, its process group, and with `below` every process below it. Those
    are found before anything is killed (a process whose parent dies is handed to another parent
    and is no longer below it), and stopped first, so none can start another meanwhile. With
    bwrap, killing bwrap ends its PID namespace and all in it."""
    tree = list(_tree(pid)) if below else []
    for _ in range(2 if below else 0):  # stopped: they cannot start more; look again for any just started
        for member in tree:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(member, signal.SIGSTOP)
        tree = list(dict.fromkeys([*tree, *_tree(pid)]))
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # its own group: started with start_new_session
    for member in tree:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(member, signal.SIGKILL)


def _stop(process: subprocess.Popen[bytes], *, below: bool) -> None:
    """Kill the script's processes (kill_tree), only while the script is not yet reaped: its pid
    is still its own."""
    kill_tree(process.pid, below=below)


def _supervise(process: subprocess.Popen[bytes], time_limit: float, memory: int) -> str:
    """Wait for the script, stopping it at its time limit or when its processes together hold
    more than `memory` bytes; how it ended. Whatever it started dies with it."""
    deadline = time.monotonic() + time_limit
    while True:
        left = deadline - time.monotonic()
        try:
            code = process.wait(timeout=max(0.0, min(WATCH_EVERY, left)))
        except subprocess.TimeoutExpired:
            held = sum(_tree(process.pid).values())
            if held > memory:
                ending = f"stopped: its processes held more than the {memory // MB} MB memory limit together"
            elif left <= 0:
                ending = f"stopped after the {time_limit:g} s time limit"
            else:
                continue
            _stop(process, below=True)
            try:
                process.wait(timeout=DRAIN_WAIT)
            except subprocess.TimeoutExpired:
                ending += " (a process of it did not end)"
            return ending
        _stop(process, below=False)  # what it left behind in its group ends with it
        return f"exit code {code}" if code else "finished"


class _Output(threading.Thread):
    """Reads what the script prints, keeping the first KEPT_OUTPUT bytes."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.kept = bytearray()
        self.dropped = 0
        self.lock = threading.Lock()

    def run(self) -> None:
        """Read to the end (when the last process holding the output ends), then close it."""
        with self.stream:
            while chunk := os.read(self.stream.fileno(), 65536):
                with self.lock:
                    room = KEPT_OUTPUT - len(self.kept)
                    self.kept += chunk[:room]
                    self.dropped += max(0, len(chunk) - room)

    def text(self) -> str:
        with self.lock:
            text = self.kept.decode("utf-8", errors="replace")
            dropped = self.dropped
        if len(text) > OUTPUT_LIMIT or dropped:
            more = f"{len(text) - OUTPUT_LIMIT:,} more characters" + (f" and {dropped:,} bytes" if dropped else "")
            text = text[:OUTPUT_LIMIT] + f"\n... ({more} cut)"
        return text


def run_script(ctx: ToolContext, code: str, *, time_limit: float | None = None, memory: int | None = None) -> str:
    """Run `code` in a child process (sandboxed where scripts.sandbox allows); return what it
    printed, with a note on how it ended. Limits default to the scripts: settings."""
    limits = ctx.agent.settings.scripts
    time_limit = limits.time_limit if time_limit is None else time_limit
    memory = limits.memory_mb * MB if memory is None else memory
    sandbox = sandbox_for(limits.sandbox)
    note = ""
    if sandbox.bwrap is None:  # before it runs: its bridge calls are judged untrusted too
        ctx.state.mark_untrusted(f"the output of a script run without a sandbox ({sandbox.missing})")
        note = (f"; it ran without a sandbox ({sandbox.missing}), so this turn is now untrusted: "
                "outbound tools wait for the person")
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    with tempfile.TemporaryDirectory(prefix="sentient-script-", ignore_cleanup_errors=True) as workdir:
        with open(os.path.join(workdir, "script.py"), "w", encoding="utf-8") as handle:
            handle.write(code)
        home = SCRATCH if sandbox.bwrap is not None else workdir  # where the script sees it
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": home,
            "SENTIENT_BRIDGE_OUT": str(from_child_w),
            "SENTIENT_BRIDGE_IN": str(to_child_r),
            "SENTIENT_TOOLS": json.dumps(script_tools(ctx)),
            "SENTIENT_LIMITS": f"{memory},{int(time_limit) + 1}",
        }
        command = [sys.executable, "-I", "-c", _PRELUDE, os.path.join(home, "script.py")]
        if sandbox.bwrap is not None:
            command = [*bwrap_command(sandbox.bwrap, workdir), *command]
        try:
            process = subprocess.Popen(
                command,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(from_child_w, to_child_r),
                start_new_session=True,
            )
        except OSError:
            os.close(from_child_r)
            os.close(to_child_w)
            raise
        finally:
            os.close(from_child_w)
            os.close(to_child_r)
        assert process.stdout is not None  # closed by _Output once read to the end
        requests = os.fdopen(from_child_r, "r")
        replies = os.fdopen(to_child_w, "w")
        ended = threading.Event()
        bridge = threading.Thread(target=_serve_bridge, args=(ctx, requests, replies, ended), daemon=True)
        bridge.start()
        output = _Output(process.stdout)
        output.start()
        try:
            ending = _supervise(process, time_limit, memory)
        finally:
            ended.set()
            output.join(DRAIN_WAIT)
            bridge.join(DRAIN_WAIT)
        text = output.text()
        if output.is_alive():  # something outside its group still holds its output
            text += "\n... (its output was still open after it ended; what came later is not shown)"
    return f"[script {ending}{note}]\n{text}"


@tool(risk="write")
def execute_code(ctx: ToolContext, code: str) -> str:
    """Run a short Python script and return what it printed. Inside it, `tools.available`
    lists the tools it may use and `tools.call(name, **args)` calls one. Reach memory and the
    web through tools: the script itself may have no network and no files but its scratch folder.

    Args:
        code: the Python source to run.
    """
    return run_script(ctx, code)
