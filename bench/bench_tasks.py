"""Recurring tasks: `python bench/bench_tasks.py [--tasks 1000] [--runs 100] [--rounds 5] [--quick] [--write]`.

Three figures, each beside a floor measured in the same run:

1. **The scheduler's tick with 1,000 tasks** (target: p95 under 5 ms). A generated vault of task
   folders as the app writes them (cron lines, `every` intervals, a few `once`, a few without a
   schedule or paused, and run files for about half of them); a `Scheduler` on a fake clock with
   a recorder for its runner (so the tick alone is timed, not the starting of runs), `load()`
   once (the start-up), then one `tick()` per simulated second. Floor: the same ticks on a bare
   `heapq` of (due, seq, id) items, popping what is due and pushing its next due time (known
   beforehand), the clock read included: what any heap of due times must do. Also
   `refresh(task)`, what a watcher event on a task file costs.
2. **A recurring run's prompt with 100 earlier runs on disk** (target: under 5 ms warm):
   `continuity()` and the `task_run.md.j2` template, as the executor builds them. Floor: reading
   the same 3 run files and the notepad with `open().read()`.
3. **A chat's server overhead while a task runs beside it** (target: within 10% of none).
   A server process as `sentient serve` runs it (bench/bench_api.py's approach: chat's model the
   scripted one behind litellm, answering at once; the task's a model server of its own, reached
   over the network, so its runs run in processes of their own), `POST /api/chat` turns from one client
   with no task run going, then with one always going (started by `POST /api/tasks/{id}/run`,
   started again as soon as it ends; its model takes `--model-delay` s a call and calls
   `memory_recall` five times and `task_notepad` once before its answer), in alternating rounds.

Prints markdown tables; `--write` puts them under "## Tasks" in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(BENCH)]  # tests.scripted (the scripted model), gen_vault, bench_api
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before anything imports litellm

from bench_api import free_port, load, machine, quantile, served, vault_copy  # noqa: E402
from cronsim import CronSim  # noqa: E402
from gen_vault import Writer  # noqa: E402
from results import write_section  # noqa: E402

from sentient.agent.turn import open_agent  # noqa: E402
from sentient.config import load_settings  # noqa: E402
from sentient.prompts import Prompts  # noqa: E402
from sentient.tasks.continuity import continuity  # noqa: E402
from sentient.tasks.executor import begin_run  # noqa: E402
from sentient.tasks.runs import log_line, new_body, with_log  # noqa: E402
from sentient.tasks.scheduler import Scheduler  # noqa: E402
from sentient.tasks.spec import parse_schedule, task_body, task_spec  # noqa: E402
from sentient.vault.document import Document  # noqa: E402
from sentient.vault.kinds import kind  # noqa: E402
from sentient.workspace import Workspace, open_workspace  # noqa: E402

HEADING = "## Tasks"
ZONE = "Europe/Berlin"  # the vault's time zone: cron lines are read in it
START = datetime(2026, 12, 7, 7, 0, tzinfo=UTC)  # Monday 08:00 in Berlin: '0 9 * * 1' fires an hour in
TICK_TARGET = 0.005
PROMPT_TARGET = 0.005
BESIDE_TARGET = 1.10
TASK_MARK = "This is a run of the task"  # how the scripted model tells a task run's request from a chat's
RECALLS = 5  # memory_recall calls a task run makes before it saves its notepad and answers
QUERIES = ["garden plan", "tea market", "train station", "doctor appointment", "birthday dinner", "tax invoice"]
SCHEDULES: list[tuple[str, int]] = [  # (schedule, weight): what a person's tasks might say
    ("*/5 * * * *", 12), ("0 9 * * 1", 14), ("0 * * * *", 10), ("30 7 * * *", 10), ("0 18 * * 1-5", 6),
    ("every 30m", 14), ("every 6h", 10), ("every 1d", 6), ("once", 3), ("", 8), ("paused", 7),
]


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 0.01 else f"{seconds * 1000:.1f} ms"


def us(seconds: float) -> str:
    if seconds < 0.00001:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e6:.0f} µs" if seconds < 0.001 else ms(seconds)


def ratio(value: float, floor: float) -> str:
    return f"{value / floor:.1f}×" if floor > 0 else "–"


# --- writing a vault of tasks, as the app writes them -------------------------------------------


def write_document(root: Path, kind_name: str, key: str, path: Path, meta: dict[str, Any], body: str) -> Path:
    """One file rendered by `Document.render()` with its revision, as the app writes it."""
    document = Document(kind_name, key, path, meta, body, kind(kind_name).fields)
    if "revision" in {spec.name for spec in kind(kind_name).fields}:
        meta = {**meta, "revision": document.revision}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document.replace(meta).render(), encoding="utf-8")
    return path


def write_task(root: Path, key: str, title: str, schedule: str | None, created: datetime, *,
               enabled: bool = True, plan: str = "", goal: str = "") -> Path:
    meta: dict[str, Any] = {"id": key, "title": title}
    if schedule:
        meta["schedule"] = schedule
    meta.update(enabled=enabled, created=iso(created), updated=iso(created))
    body = task_body(goal or f"Keep up with {title.lower()}.", plan or "Look for what changed and report it.")
    return write_document(root, "task", key, root / "tasks" / key / "task.md", meta, body)


def write_run(root: Path, task: str, started: datetime, trigger: str, answer: str, *, failed: bool = False) -> str:
    """A run that ended: its log, final answer (none when it failed) and fields; returns its id."""
    run = "run-" + started.astimezone(UTC).strftime("%Y%m%d-%H%M%S")
    finished = started + timedelta(seconds=40)
    lines = [log_line(started, f"started ({trigger})"), log_line(started + timedelta(seconds=5),
                                                                  'tool memory_recall {"query": "garden plan"}')]
    meta: dict[str, Any]
    if failed:
        lines.append(log_line(finished, "failed: the model call timed out"))
        meta = {"status": "failed", "summary": "Failed: the model call timed out"}
        body = new_body(lines)
    else:
        lines.append(log_line(finished, "final answer recorded"))
        meta = {"status": "succeeded", "summary": answer.splitlines()[0][:160], "tools_used": ["memory_recall"]}
        body = with_log(new_body(lines), answer=answer)
    full = {"id": run, "task": task, **meta, "trigger": trigger, "started": iso(started), "finished": iso(finished),
            "untrusted": False}
    write_document(root, "run", f"{task}/{run}", root / "tasks" / task / "runs" / f"{run}.md", full, body)
    return run


def answer(writer: Writer) -> str:
    """What a run told the person: a line, then a few items (a few hundred characters)."""
    items = "\n".join(f"- {writer.sentence()}" for _ in range(writer.rng.randint(2, 4)))
    return f"{writer.rng.randint(1, 5)} new since the last run:\n{items}"


def last_slot(schedule: str, zone: ZoneInfo, before: datetime) -> datetime:
    """The last time a cron line names at or before `before`."""
    cron = parse_schedule(schedule).cron
    for window in (timedelta(hours=1), timedelta(days=1), timedelta(days=8)):
        found = None
        for moment in CronSim(cron, (before - window).astimezone(zone)):
            if moment > before:
                break
            found = moment.astimezone(UTC)
        if found is not None:
            return found
    raise ValueError(f"{schedule!r} names no time in the 8 days before {before}")


def vault_folder(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "sentient.yaml").write_text(f"# benchmark vault\ntimezone: {ZONE}\n")


@dataclass
class TaskVault:
    root: Path
    tasks: int
    run_files: int
    kinds: dict[str, int]
    with_runs: str  # a task with a few runs, its newest scheduled
    without_runs: str
    busy: str  # a task with 100 runs, none of them scheduled


def scheduler_vault(root: Path, count: int, seed: int = 7) -> TaskVault:
    """`count` task folders: all but one in SCHEDULES' mix, about half of those with 1-6 runs whose
    newest started at the schedule's last slot (as if Sentient ran until START); the last one a
    weekly task with 100 manual runs."""
    vault_folder(root)
    writer = Writer(seed)
    rng, zone = writer.rng, ZoneInfo(ZONE)
    names, weights = zip(*SCHEDULES, strict=True)
    kinds: dict[str, int] = {}
    run_files = 0
    with_runs = without_runs = ""
    for number in range(count - 1):
        key = f"task-{number:04d}"
        chosen = rng.choices(names, weights)[0]
        kinds[chosen or "none"] = kinds.get(chosen or "none", 0) + 1
        title = " ".join(writer.pick(rng.randint(2, 5))).capitalize()
        schedule: str | None = chosen or None
        created = START - timedelta(hours=rng.uniform(1, 48))
        newest: datetime | None = None
        if chosen == "paused":
            schedule = "0 9 * * *"
        elif chosen == "once":
            at = START + timedelta(hours=rng.choice([-30, -5, 1, 2, 4]))
            schedule = f"once {at.astimezone(zone):%Y-%m-%dT%H:%M}"
            newest = at if at < START else None
        elif chosen.startswith("every") and rng.random() < 0.5:
            newest = START - rng.uniform(0, 1) * parse_schedule(chosen).every
        elif chosen and not chosen.startswith("every") and rng.random() < 0.5:
            newest = last_slot(chosen, zone, START)
        if newest is not None:
            period = parse_schedule(schedule).every if schedule and schedule.startswith("every") else timedelta(1)
            earlier = [newest - period * step - timedelta(minutes=rng.randint(0, 30)) for step in range(1, 6)]
            manual = rng.random() < 0.05  # someone ran it by hand since its last scheduled run
            for moment in earlier[: 0 if chosen == "once" else rng.randint(0, 5)]:
                write_run(root, key, moment, rng.choice(["schedule", "schedule", "manual"]), answer(writer),
                          failed=rng.random() < 0.1)
                run_files += 1
            write_run(root, key, newest, "schedule", answer(writer))
            run_files += 1
            if manual:
                write_run(root, key, newest + timedelta(minutes=3), "manual", answer(writer))
                run_files += 1
            created = min(created, *earlier)
            with_runs = with_runs or key
        elif chosen and chosen not in ("paused", "once"):
            without_runs = without_runs or key
        write_task(root, key, title, schedule, created, enabled=chosen != "paused")
    busy = "task-busy"
    write_task(root, busy, "Ask about the garden", "0 9 * * 1", START - timedelta(days=200))
    for step in range(100):
        write_run(root, busy, START - timedelta(days=100) + timedelta(hours=7 * step), "manual", answer(writer))
    return TaskVault(root, count, run_files + 100, kinds, with_runs, without_runs, busy)


# --- 1. the scheduler ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Submitted:
    run: str


@dataclass
class Recorder:
    """The runner the scheduler starts runs with, reduced to noting them: the tick alone is timed."""

    submitted: list[tuple[str, str, str | None]] = field(default_factory=list)

    def submit(self, task: str, trigger: str = "manual", note: str | None = None) -> Submitted:
        self.submitted.append((task, trigger, note))
        return Submitted(f"run-{len(self.submitted)}")

    def running(self, task: str) -> str | None:
        return None


@dataclass
class Timings:
    values: list[float]

    def p(self, fraction: float) -> float:
        return quantile(self.values, fraction)


@dataclass
class SchedulerResult:
    vault: TaskVault
    ticks: int
    tick: Timings  # every tick after the first
    floor: Timings
    busy_tick: Timings  # the ticks that started runs
    busy_floor: Timings
    busy_runs: int  # runs those ticks started
    first: float
    first_floor: float
    first_started: int
    started: int
    loads: list[float]
    load_floor: list[float]
    scheduled: int  # tasks with a next due time after load
    refresh: dict[str, Timings]
    refresh_floor: Timings
    submits: Timings  # the real runner's submit (begin_run), for comparison


def bench_scheduler(vault: TaskVault, ticks: int, refreshes: int) -> SchedulerResult:
    workspace = open_workspace(load_settings(vault.root, {}))
    now = [START]

    def clock() -> datetime:
        return now[0]

    def start_up() -> tuple[Scheduler, Recorder, float]:
        recorder = Recorder()
        scheduler = Scheduler(workspace, recorder, clock=clock)
        began = time.perf_counter()
        scheduler.load()
        return scheduler, recorder, time.perf_counter() - began

    loads, load_floor = [], []
    for _ in range(3):  # start-ups, each a fresh scheduler, beside reading the files they need
        scheduler, recorder, took = start_up()
        loads.append(took)
        load_floor.append(read_task_files(vault.root))
    ids = sorted(path.name for path in (vault.root / "tasks").iterdir())
    heap: list[tuple[datetime, int, str]] = []
    seq = itertools.count()
    for task in ids:
        due = scheduler.next_due(task)
        if due is not None:
            heap.append((due, next(seq), task))
    heapq.heapify(heap)
    scheduled = len(heap)

    def floor_tick(nexts: dict[str, datetime | None]) -> int:
        moment = clock()
        popped = 0
        while heap and heap[0][0] <= moment:
            _, _, task = heapq.heappop(heap)
            popped += 1
            upcoming = nexts[task]
            if upcoming is not None:
                heapq.heappush(heap, (upcoming, next(seq), task))
        return popped

    times, floors, busy, busy_floors = [], [], [], []
    first = first_floor = 0.0
    first_started = busy_runs = 0
    for number in range(ticks):
        now[0] = START + timedelta(seconds=number)
        began = time.perf_counter()
        started = scheduler.tick()
        took = time.perf_counter() - began
        nexts = {entry.partition("/")[0]: scheduler.next_due(entry.partition("/")[0]) for entry in started}
        began = time.perf_counter()
        popped = floor_tick(nexts)
        floor_took = time.perf_counter() - began
        if popped != len(started):
            raise SystemExit(f"tick {number}: the scheduler started {len(started)} runs, the floor popped {popped}")
        if number == 0:
            first, first_floor, first_started = took, floor_took, len(started)
            continue
        times.append(took)
        floors.append(floor_took)
        if started:
            busy.append(took)
            busy_floors.append(floor_took)
            busy_runs += len(started)
    refresh: dict[str, Timings] = {}
    picks = {"with_runs": vault.with_runs, "without_runs": vault.without_runs, "busy": vault.busy}
    for label, task in picks.items():
        values = []
        for _ in range(refreshes):
            began = time.perf_counter()
            scheduler.refresh(task)
            values.append(time.perf_counter() - began)
        refresh[label] = Timings(values)
    refresh_floor = []
    for _ in range(refreshes):
        began = time.perf_counter()
        with open(vault.root / "tasks" / vault.with_runs / "task.md", encoding="utf-8") as handle:
            handle.read()
        refresh_floor.append(time.perf_counter() - began)
    submits = real_submits(workspace, ids[:refreshes], clock)  # last: they write run files
    workspace.close()
    return SchedulerResult(vault, ticks, Timings(times), Timings(floors), Timings(busy), Timings(busy_floors),
                           busy_runs, first, first_floor, first_started, len(recorder.submitted), loads, load_floor,
                           scheduled, refresh, Timings(refresh_floor), submits)


def real_submits(workspace: Workspace, tasks: list[str], clock: Callable[[], datetime]) -> Timings:
    """What the real runner's `submit` costs a run, which the recorder leaves out: `begin_run`
    (the task's run lock, its run file written `queued`), once for each of `tasks`."""
    agent = open_agent(workspace, {})
    values = []
    for task in tasks:
        began = time.perf_counter()
        started = begin_run(agent, task, "schedule")
        values.append(time.perf_counter() - began)
        started.lock.release()
    agent.close()
    return Timings(values)


def read_task_files(root: Path) -> float:
    """Seconds to read every task.md and its task's newest run file, plainly: the files a start-up
    must read at least (a task's anchor is its latest scheduled run)."""
    began = time.perf_counter()
    with os.scandir(root / "tasks") as tasks:
        for task in tasks:
            with open(os.path.join(task.path, "task.md"), encoding="utf-8") as handle:
                handle.read()
            try:
                with os.scandir(os.path.join(task.path, "runs")) as runs:
                    names = [entry.name for entry in runs]
            except FileNotFoundError:
                continue
            with open(os.path.join(task.path, "runs", max(names)), encoding="utf-8") as handle:
                handle.read()
    return time.perf_counter() - began


# --- 2. a recurring run's prompt ----------------------------------------------------------------


@dataclass
class PromptResult:
    runs: int
    failed: int
    total: Timings  # continuity() + render
    continuity: Timings
    render: Timings
    describe: Timings
    floor: Timings
    first: float
    prompt_chars: int


def bench_prompt(root: Path, runs: int, calls: int, seed: int = 11) -> PromptResult:
    """A recurring task with `runs` earlier runs (one in eight failed) and a notepad."""
    vault_folder(root)
    writer = Writer(seed)
    task = "morning-digest"
    write_task(root, task, "Morning digest", "0 7 * * *", START - timedelta(days=runs + 10),
               goal="Know each morning what changed in the garden, the house and the family's plans.",
               plan="1. Search memory for anything about the garden, the house or plans made this week.\n"
                    "2. Compare with what earlier runs reported.\n3. Report what is new, in a short list.")
    failed = 0
    for day in range(runs):
        broken = writer.rng.random() < 0.125
        failed += broken
        write_run(root, task, START - timedelta(days=runs - day), "schedule", answer(writer), failed=broken)
    notepad = "\n".join(f"- {writer.sentence()}"[:90] for _ in range(14))
    write_document(root, "notepad", task, root / "tasks" / task / "notepad.md",
                   {"task": task, "source": f"task:{task}", "untrusted": False, "updated": iso(START)}, notepad + "\n")
    workspace = open_workspace(load_settings(root, {}))
    prompts = Prompts(root)
    spec = task_spec(workspace.vault.get("task", task), workspace.settings)
    schedule = spec.describe()
    plan = spec.body.strip()

    def build() -> tuple[float, float, str, list[str]]:
        began = time.perf_counter()
        remembered = continuity(workspace, spec.id, spec.zone)
        middle = time.perf_counter()
        text = prompts.render("task_run.md.j2", title=spec.title, plan=plan, schedule=schedule,
                              continuity=remembered)
        ended = time.perf_counter()
        assert len(remembered.runs) == 3 and remembered.notepad, remembered
        return middle - began, ended - middle, text, [earlier.run for earlier in remembered.runs]

    began = time.perf_counter()
    _, _, text, used = build()  # the first: templates compiled, every file judged
    first = time.perf_counter() - began
    assert text.count("<earlier-run") == 3 and "<task-notepad>" in text, text
    files = [root / "tasks" / task / "runs" / f"{run}.md" for run in used] + [root / "tasks" / task / "notepad.md"]
    totals, parts, renders, describes, floors = [], [], [], [], []
    for _ in range(calls):
        took, rendered, _, _ = build()
        totals.append(took + rendered)
        parts.append(took)
        renders.append(rendered)
        began = time.perf_counter()
        spec.describe()
        describes.append(time.perf_counter() - began)
        began = time.perf_counter()
        for path in files:
            with open(path, encoding="utf-8") as handle:
                handle.read()
        floors.append(time.perf_counter() - began)
    workspace.close()
    return PromptResult(runs, failed, Timings(totals), Timings(parts), Timings(renders), Timings(describes),
                        Timings(floors), first, len(text))


# --- 3. a chat beside a task run: the server process --------------------------------------------


def paced_model(port: int, delay: float) -> None:
    """`--model`: an OpenAI-compatible model server on 127.0.0.1, a process of its own (as a real
    model is): a chat is answered at once (an echo); a task run's call waits `delay` s, as a real
    model would, then asks for memory_recall RECALLS times, task_notepad once, and answers."""
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    def reply(messages: list[dict[str, Any]], tools: bool) -> dict[str, Any]:
        system = messages[0].get("content") if messages else ""
        if isinstance(system, str) and TASK_MARK in system:
            time.sleep(delay)
            done = sum(1 for message in messages if message.get("role") == "tool")
            if done <= RECALLS and tools:
                name, arguments = (("memory_recall", {"query": QUERIES[done % len(QUERIES)], "limit": 3})
                                   if done < RECALLS else
                                   ("task_notepad", {"text": "- the garden plan\n- the tea market\n- the tax invoice"}))
                return {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call-{done}", "type": "function",
                     "function": {"name": name, "arguments": json.dumps(arguments)}}]}
            return {"role": "assistant",
                    "content": "Nothing new since the last run: the garden plan and the tea market are as before."}
        content = messages[-1].get("content") if messages else ""
        last = content if isinstance(content, str) else str(content[-1].get("text", "")) if content else ""
        return {"role": "assistant", "content": f"ok: {last[:80]}"}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            message = reply(body.get("messages") or [], bool(body.get("tools")))
            answer = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "paced",
                                 "choices": [{"index": 0, "message": message,
                                              "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def register_echo_model() -> None:
    """The scripted model (tests/scripted.py) as litellm's `scripted/` provider, in the server's
    process, answering a chat at once (an echo), so a turn's time is the server's own."""
    import litellm

    from tests.scripted import PROVIDER, Scripted, ScriptedReply, text

    class Echo(Scripted):
        def _next(self, model: str, messages: list[Any], optional_params: dict[str, Any], stream: bool,
                  api_base: str | None, api_key: str | None, timeout: Any) -> ScriptedReply:
            content = messages[-1].get("content") if messages else ""
            last = content if isinstance(content, str) else str(content[-1].get("text", "")) if content else ""
            return text(f"ok: {last[:80]}")

    litellm.custom_provider_map = [{"provider": PROVIDER, "custom_handler": Echo()}]


def serve(vault: Path, port: int, model_port: int) -> None:
    """`--serve`: what `sentient serve` runs (the watcher on). Chat's model is the echo in this
    process; the helper and extraction roles' are the paced model server, reached over the network
    as a provider's API is, and the task runs with the helper's, so its runs run in processes of
    their own. The
    scheduler does not start runs by itself (`schedule=False`): this benchmark starts them."""
    import uvicorn

    from sentient.api.app import create_app

    register_echo_model()
    settings = load_settings(vault, {"SENTIENT_MODEL": "scripted/test"})
    helper = {"model": "openai/paced", "api_base": f"http://127.0.0.1:{model_port}/v1", "api_key_env": "PACED_KEY"}
    settings = settings.model_copy(update={"models": settings.models.model_copy(update={  # every model a run
        "helper": settings.models.helper.model_copy(update=helper),  # may use (docs/tasks.md): apart
        "extraction": settings.models.extraction.model_copy(update=helper)})})
    app = create_app(settings, environ={"PACED_KEY": "sk-paced"}, schedule=False)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


@contextmanager
def server_process(vault: Path, delay: float) -> Iterator[tuple[str, str, int]]:
    """(base url, token, pid) of a server process on a free port of 127.0.0.1, beside its paced model
    server; both stopped on the way out."""
    model_port, port = free_port(), free_port()
    model = subprocess.Popen([sys.executable, __file__, "--model", str(model_port), str(delay)])
    try:
        command = [sys.executable, __file__, "--serve", str(vault), str(port), str(model_port)]
        with served(command, vault, port) as found:
            yield found
    finally:
        model.terminate()
        model.wait(60)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settled(pid: int, idle: float = 0.05, most: float = 600.0) -> None:
    """Wait until the process `pid` is idle (under `idle` of a core over a second): a server that
    has just started embeds its vault in the background (the copy's index holds no vectors)."""
    deadline = time.monotonic() + most
    while time.monotonic() < deadline:
        before = cpu_seconds(pid)
        time.sleep(1.0)
        if cpu_seconds(pid) - before < idle:
            return
    raise SystemExit(f"the server was still busy after {most:g} s")


def run_status(path: Path) -> str | None:
    """The `status:` of a run file as it is on disk (the app replaces it whole: never half written)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        if line.startswith("status: "):
            return line[8:].strip()
    return None


class RunDriver:
    """Keeps a run of one task going: `POST /api/tasks/{id}/run`, then waits for its end by reading
    the run file from disk every 20 ms (no request to the server), and starts the next at once.
    Notes each run's (start, end) in this process's perf_counter time."""

    def __init__(self, url: str, token: str, vault: Path, task: str) -> None:
        self.client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        self.runs_folder = vault / "tasks" / task / "runs"
        self.task = task
        self.spans: list[tuple[float, float, str]] = []  # (start, end, run id) of the runs that ended
        self.current: float | None = None  # when the run going now was asked for
        self.running = threading.Event()  # a run of ours is going now
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._drive, name="run-driver", daemon=True)
        self._thread.start()
        if not self.running.wait(30):
            raise SystemExit("no task run started within 30 s")

    def stop(self) -> None:
        """Start no more runs, and wait for the one going to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
            self._thread = None

    def _drive(self) -> None:
        while not self._stop.is_set():
            began = time.perf_counter()
            response = self.client.post(f"/api/tasks/{self.task}/run")
            if response.status_code == 409:  # the last run still holds its lock for a moment
                time.sleep(0.01)
                continue
            if response.status_code != 202:
                raise SystemExit(f"POST /api/tasks/{self.task}/run: {response.status_code} {response.text[:300]}")
            run = response.json()["run"]
            self.current = began
            path = self.runs_folder / f"{run}.md"
            while run_status(path) not in ("running", "succeeded", "failed", "cancelled"):
                time.sleep(0.005)
            self.running.set()
            while run_status(path) not in ("succeeded", "failed", "cancelled"):
                time.sleep(0.02)
            self.running.clear()
            self.spans.append((began, time.perf_counter(), run))
            self.current = None

    def busy(self, start: float, end: float) -> float:
        """The fraction of [start, end] during which one of our runs was going (asked for and not
        yet ended)."""
        spans = [(a, b) for a, b, _ in self.spans] + ([(self.current, end)] if self.current is not None else [])
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in spans) / (end - start)


@dataclass(frozen=True)
class Round:
    beside: bool  # a task run going
    latencies: list[float]
    wall: float
    cpu: float  # the server's CPU seconds during the round
    busy: float  # fraction of the round with a run going
    runs: int  # runs that ended during the round


@dataclass
class ChatResult:
    entries: int
    delay: float
    rounds: list[Round]
    runs: list[dict[str, Any]]  # GET /api/tasks/{id}/runs at the end
    run_log: list[str]  # the log of one run, as the API gives it
    health: list[float]


def bench_chat(entries: int, rounds: int, turns: int, delay: float, scratch: Path) -> ChatResult:
    vault = vault_copy(entries, scratch)
    results: list[Round] = []
    with server_process(vault, delay) as (url, token, pid):
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            made = client.post("/api/tasks", json={"title": "Garden digest", "schedule": "every 6h", "role": "helper",
                                                   "plan": "Search memory for the garden, the tea market and "
                                                           "the taxes; report what is new, in a short list."})
            if made.status_code != 201:
                raise SystemExit(f"POST /api/tasks: {made.status_code} {made.text[:300]}")
            task = made.json()["id"]
            load(url, token, "/api/chat", 1, 20, "warm")  # litellm imported, templates compiled
            settled(pid)  # serve's background embedding of the copied vault done: not in any round
            driver = RunDriver(url, token, vault, task)
            driver.start()  # one run first, so the task's first run is not in the figures
            driver.stop()
            for number in range(2 * rounds):
                beside = number % 2 == 1
                if beside:
                    driver.start()
                cpu_before, ended_before = cpu_seconds(pid), len(driver.spans)
                began = time.perf_counter()
                result = load(url, token, "/api/chat", 1, turns, f"r{number}")
                ended = time.perf_counter()
                cpu = cpu_seconds(pid) - cpu_before
                busy, runs_ended = driver.busy(began, ended), len(driver.spans) - ended_before
                if beside:
                    driver.stop()
                results.append(Round(beside, result.latencies, ended - began, cpu, busy, runs_ended))
                print(f"round {number + 1} ({'a run beside' if beside else 'no run'}): p50 "
                      f"{ms(result.percentile(0.5))}, p95 {ms(result.percentile(0.95))}, server CPU "
                      f"{cpu / (ended - began):.0%}, run going {busy:.0%}", flush=True)
            runs = client.get(f"/api/tasks/{task}/runs", params={"limit": 500}).json()
            one = client.get(f"/api/tasks/{task}/runs/{runs[0]['id']}").json()
            health = []
            for _ in range(100):
                began = time.perf_counter()
                client.get("/api/health")
                health.append(time.perf_counter() - began)
        driver.client.close()
    return ChatResult(entries, delay, results, runs, one["log"], health)


# --- the report ---------------------------------------------------------------------------------


def verdict(met: bool) -> str:
    return "**met**" if met else "**missed**"


def report(args: argparse.Namespace, sched: SchedulerResult, prompt: PromptResult, chat: ChatResult | None) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        HEADING, "",
        f"`python bench/bench_tasks.py {' '.join(args.argv)}`".replace(" `", "`") + f" on {when}; {machine()}. "
        f"Load average (1 min) {args.load_before:.2f} before, {os.getloadavg()[0]:.2f} after: the machine is shared "
        "with other work.", "",
        f"### Scheduler tick, {sched.vault.tasks:,} tasks", "",
        f"A generated vault of {sched.vault.tasks:,} task folders ({describe_kinds(sched.vault.kinds)}; one "
        f"weekly with 100 manual runs) and {sched.vault.run_files:,} run files; time zone {ZONE}. "
        f"{sched.scheduled:,} tasks have a next due time after `load()`. A `Scheduler` on a fake clock, one "
        f"`tick()` per simulated second for {sched.ticks:,} s from Monday 08:00, its runner a recorder (so the tick "
        f"alone is timed, not the starting of runs): it started {sched.started:,} runs, {sched.first_started:,} of "
        "them in the first tick (slots missed before the start). The floor: the same ticks on a bare `heapq` of "
        "(due, seq, id), the clock read, every due item popped and pushed again at its next due time, known "
        "beforehand (no schedule arithmetic, no plans); timed beside each tick.", "",
        "| what | calls | p50 | p95 | p99 | max | floor p50 / p95 | p95 ÷ floor p95 |",
        "|---|---|---|---|---|---|---|---|",
        timing_row("`tick()`, every tick after the first", sched.tick, sched.floor),
        timing_row(f"`tick()`, the {len(sched.busy_tick.values):,} ticks that started runs", sched.busy_tick,
                   sched.busy_floor),
        f"| first `tick()` after `load()` (starts {sched.first_started:,} runs) | 1 | {us(sched.first)} | | | | "
        f"{us(sched.first_floor)} | {ratio(sched.first, sched.first_floor)} |",
        f"| `load()` (start-up: every task.md, and run files back to the latest scheduled run) | "
        f"{len(sched.loads)} | {ms(statistics.median(sched.loads))} | | | {ms(max(sched.loads))} | "
        f"{ms(statistics.median(sched.load_floor))} (read each task.md and its newest run file) | "
        f"{ratio(statistics.median(sched.loads), statistics.median(sched.load_floor))} (medians) |",
        timing_row("`refresh(task)`, a task with a few runs, its newest scheduled", sched.refresh["with_runs"],
                   sched.refresh_floor, floor_note=" (read its task.md)"),
        timing_row("`refresh(task)`, a task without runs", sched.refresh["without_runs"], sched.refresh_floor,
                   floor_note=" (read its task.md)"),
        timing_row("`refresh(task)`, a task with 100 runs, none scheduled", sched.refresh["busy"],
                   sched.refresh_floor, floor_note=" (read its task.md)"),
        f"| for comparison, not in the ticks: the real runner's `submit` (`begin_run`: the run lock, the run file "
        f"written) | {len(sched.submits.values):,} | {us(sched.submits.p(0.5))} | {us(sched.submits.p(0.95))} | "
        f"{us(sched.submits.p(0.99))} | {us(max(sched.submits.values))} | | |",
        "",
        f"Target: tick p95 under {TICK_TARGET * 1000:g} ms with {sched.vault.tasks:,} tasks: "
        f"{verdict(sched.tick.p(0.95) < TICK_TARGET)} (p95 {us(sched.tick.p(0.95))}; the ticks that started runs "
        f"p95 {us(sched.busy_tick.p(0.95))}, max {us(max(sched.busy_tick.values))}). A tick that starts runs costs "
        f"about {us(sum(sched.busy_tick.values) / sched.busy_runs)} a run it starts "
        f"({sched.busy_runs:,} runs in {len(sched.busy_tick.values):,} ticks; floor "
        f"{us(sum(sched.busy_floor.values) / sched.busy_runs)} a run), the recorder's `submit` included.", "",
        f"### A recurring run's prompt, {prompt.runs} earlier runs on disk", "",
        f"A task with {prompt.runs} run files ({prompt.failed} failed, the rest succeeded, answers of a few hundred "
        f"characters) and a notepad of 14 lines. `continuity()` lists the runs folder, reads the newest runs back to "
        f"the 3rd that succeeded and the notepad, judging each; then `task_run.md.j2` is rendered with it (a prompt "
        f"of {prompt.prompt_chars:,} characters). Warm: {len(prompt.total.values)} builds after a first one "
        f"({ms(prompt.first)}: the template compiled, every file judged once). Floor: `open().read()` of the same "
        "3 run files and the notepad.", "",
        "| what | p50 | p95 | floor p50 / p95 | p50 ÷ floor p50 |",
        "|---|---|---|---|---|",
        prompt_row("`continuity()` + render", prompt.total, prompt.floor),
        prompt_row("… `continuity()` alone", prompt.continuity, prompt.floor),
        prompt_row("… rendering `task_run.md.j2` alone", prompt.render, None),
        prompt_row("`spec.describe()` (the schedule in words; the executor calls it too)", prompt.describe, None),
        "",
        f"Target: under {PROMPT_TARGET * 1000:g} ms warm: {verdict(prompt.total.p(0.95) < PROMPT_TARGET)} "
        f"(p95 {ms(prompt.total.p(0.95))}).",
    ]
    if chat is not None:
        lines += ["", *chat_section(args, chat)]
    lines += ["", NOTES.rstrip("\n")]
    return "\n".join(lines) + "\n"


def describe_kinds(kinds: dict[str, int]) -> str:
    said = {"none": "no schedule", "paused": "paused (`enabled: false`)", "once": "`once ...`"}
    return ", ".join(f"{count} {said.get(name, f'`{name}`')}" for name, count in
                     sorted(kinds.items(), key=lambda item: -item[1]))


def timing_row(label: str, values: Timings, floor: Timings, floor_note: str = "") -> str:
    if not values.values or not floor.values:  # a short run (--ticks 100) may start nothing
        return f"| {label} | 0 | | | | | | |"
    return (f"| {label} | {len(values.values):,} | {us(values.p(0.5))} | {us(values.p(0.95))} | "
            f"{us(values.p(0.99))} | {us(max(values.values))} | {us(floor.p(0.5))} / {us(floor.p(0.95))}"
            f"{floor_note} | {ratio(values.p(0.95), floor.p(0.95))} |")


def prompt_row(label: str, values: Timings, floor: Timings | None) -> str:
    floors = f"{us(floor.p(0.5))} / {us(floor.p(0.95))}" if floor is not None else ""
    return (f"| {label} | {us(values.p(0.5))} | {us(values.p(0.95))} | {floors} | "
            f"{ratio(values.p(0.5), floor.p(0.5)) if floor is not None else ''} |")


def chat_section(args: argparse.Namespace, chat: ChatResult) -> list[str]:
    alone = [r for r in chat.rounds if not r.beside]
    beside = [r for r in chat.rounds if r.beside]

    def median(rounds: list[Round], fraction: float) -> float:
        return statistics.median(quantile(r.latencies, fraction) for r in rounds)

    p50_ratio = median(beside, 0.5) / median(alone, 0.5)
    p95_ratio = median(beside, 0.95) / median(alone, 0.95)
    ended = [run for run in chat.runs if run["status"] in ("succeeded", "failed", "cancelled")]
    succeeded = sum(run["status"] == "succeeded" for run in ended)
    tools = sum(1 for line in chat.run_log if " tool " in line)
    lines = [
        "### A chat beside a task run", "",
        f"A server process as `sentient serve` runs it (uvicorn, the watcher on) over a {chat.entries:,}-entry vault "
        "(bench/bench_api.py's); chat's model is the scripted one in the server's process, answering at once, so a "
        "turn's time is the server's own; the task's (its `role: helper`, and the extraction role's) is a model server "
        "of its own on 127.0.0.1, reached over the network as a provider's API is, so each run runs in a process of "
        "its own, as `serve` runs any run whose models are not the embedded one: forked by the fork server "
        "(sentient/tasks/forks.py), which imported the model client once. "
        f"One client, `POST /api/chat`, {len(chat.rounds[0].latencies)} turns a round (conversations of 10 messages), "
        f"rounds alternating: no run going, then a run of a recurring task always going (`POST "
        f"/api/tasks/{{id}}/run`, started again as soon as the last one ended: the driver reads the run file's "
        f"status from disk, no request). Each run: {RECALLS} `memory_recall` calls, `task_notepad`, the final answer; "
        f"its model waits {chat.delay:g} s a call (a real model takes one to several seconds: the shorter the wait, "
        "the more often a run's steps come). "
        f"{len(ended)} runs ended, {succeeded} succeeded; the last one's log had {tools} tool lines.", "",
        "| round | a run going | turns | p50 | p95 | max | server CPU (of one core) | runs ended |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for number, r in enumerate(chat.rounds, 1):
        lines.append(f"| {number} | {f'yes ({r.busy:.0%} of the round)' if r.beside else 'no'} | "
                     f"{len(r.latencies)} | {ms(quantile(r.latencies, 0.5))} | {ms(quantile(r.latencies, 0.95))} | "
                     f"{ms(max(r.latencies))} | {r.cpu / r.wall:.0%} | {r.runs if r.beside else ''} |")
    met = p50_ratio <= BESIDE_TARGET and p95_ratio <= BESIDE_TARGET
    lines += [
        "",
        "| condition | rounds | p50 (median of rounds) | p95 (median of rounds) |",
        "|---|---|---|---|",
        f"| no run going | {len(alone)} | {ms(median(alone, 0.5))} | {ms(median(alone, 0.95))} |",
        f"| a run going beside | {len(beside)} | {ms(median(beside, 0.5))} | {ms(median(beside, 0.95))} |",
        f"| ratio | | {p50_ratio:.2f}× | {p95_ratio:.2f}× |",
        "",
        f"Target: a chat's p50 and p95 with a run beside within 10% of none: {verdict(met)} "
        f"(p50 {p50_ratio:.2f}×, p95 {p95_ratio:.2f}×). Floor on this machine: `GET /api/health` p50 "
        f"{ms(quantile(chat.health, 0.5))}, p95 {ms(quantile(chat.health, 0.95))}.",
    ]
    return lines


NOTES = """Notes (2026-12-04, on sentient/tasks/ as it stood that evening; the chat note of 2026-12-07):

- **A tick that starts nothing** reads the clock and looks at the top of the heap: about a
  microsecond, 3-4× the bare heap. **A tick that starts runs** costs about 45 µs more a run:
  `Schedule.next_after` builds a `CronSim` (parsing the line again) for each next time, and the new
  plan is pushed. On the hour the `*/5` and hourly tasks (about 200 of the 1,000) come due in the
  same second, hence the maxima of several ms; p95 stays at microseconds because nearly every
  second starts nothing. The first tick after `load()` starts, once each, every task whose slot
  passed while Sentient was not running (here the tasks created in the last two days without a run).
- **The real runner's `submit`** (`begin_run`, the row for comparison) costs 1-3 ms a run: the
  run lock and a run file written with fsync, under the scheduler's lock. A tick that starts 200
  runs with it holds that lock for about half a second, and the runs then wait their turn
  (`tasks.max_parallel`, 1 by default).
- **`refresh(task)`** is what the watcher calls for a changed task.md: the file read and checked,
  its next time computed (~0.25 ms). `Scheduler._plan` also reads the task's run files back to its
  latest scheduled run (`_latest_scheduled`, at most 50) every time, even when the schedule did not
  change and the plan keeps its anchor: a task run by hand many times since its last scheduled run
  costs 50 files parsed (~5 ms, the last refresh row).
- **`load()`** parses every task.md and each task's run files back to its latest scheduled run
  (`Vault.read`: frontmatter, typed fields), checks each cron line (`parse_schedule` runs CronSim
  once) and computes each next time: ~0.25 ms a task, once at start and on a folder event.
- **The prompt:** `continuity()` lists the 100 run names, reads the newest runs back to the third
  that succeeded (a failed one between is read and passed over) and the notepad, each parsed and
  judged (a cache lookup when warm): about 10× reading the same files plainly, under 1 ms.
- **A chat beside a run:** on 2026-12-04 the tail moved (p95 1.30×) because a run's steps were
  Python work under the same GIL as the chat turn. Since 2026-12-07 a run whose models are all
  reached over the network runs in a process of its own at nice +10. Found on 2026-12-07 17:00 UTC:
  from 08:14 that day (d194605) until then, a run stayed in serve whenever *any* role's model lived
  in serve, chat's included, and this bench's chat model does: every figure measured here in
  between (1.21-1.53×, and 0.99× at 1 s a model call) was of runs on serve's own thread. Now a run
  goes apart by its own task's role and the helper and extraction roles it may ask (this bench puts
  both on the paced model server), and is forked by a fork server that imported the model client
  once (litellm: 1.5-3 s of CPU and ~2,700 modules a fresh interpreter paid every run). Measured on
  a quiet machine, 17:05-17:30 UTC, 0.2 s a model call, about 3 runs ended a round, p95 ratios:
  1.28-1.32× in three runs; the same with the run's process at nice 19 1.35×; with the
  step lines of the run file written without fsync 1.30×; with the whole vault on tmpfs (no
  fsync costs at all) 1.12×. p50 stays within 1.04×. A profile of serve during the rounds with a
  run beside shows no new work of its own beyond the watcher's look at the run's writes (about 2%
  of a core); serve itself takes 1.2 cores for the chats alone (a turn embeds its query and the
  session's new messages), so with the bench's client the two cores are nearly full before the run
  adds its own. `strace` of both during a round with a run beside (17:49 UTC): the runs' processes
  made 18 fsyncs in 8 s (6 a run), serve 540 (its own chat writes), so the journal is not the
  run's doing: on tmpfs every fsync, serve's own too, costs nothing, which steadies the tail of
  both conditions. What was left was the cores: the run's own CPU (its steps, the model client's
  handling, its searches' query embedding) beside a server and a client that nearly filled two.
  Since 19:30 UTC the same day serve embeds documents (each turn's new messages, the run's file)
  by the int8 encoder (sentient/quantized.py), about a third of the CPU of the float32 pass:
  serve's CPU for the chats went from 1.2 cores to 1.0, and the run beside no longer costs the
  chat its tail. Side by side in one hour (19:33-19:50 UTC, `--rounds 4`, then the table above
  with 6): the code just before it 1.43× (p50 1.14×), with it 1.04× and 1.00×. The rounds'
  p95 drifted down through the run as the machine quietened, which alternating the conditions
  evens out; adjacent pairs of rounds (no run, then a run) in the table above range 0.90-1.15×.
- **Noise:** the machine is shared; a round's p95 moves by 2-3 ms between rounds of one condition
  (the round table), which is why the conditions alternate and the verdict takes medians.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=1000, help="tasks in the scheduler's vault")
    parser.add_argument("--ticks", type=int, default=6 * 3600, help="scheduler ticks, one a simulated second")
    parser.add_argument("--refreshes", type=int, default=200, help="refresh(task) calls per kind of task")
    parser.add_argument("--runs", type=int, default=100, help="earlier runs of the task whose prompt is built")
    parser.add_argument("--calls", type=int, default=200, help="warm prompt builds")
    parser.add_argument("--entries", type=int, default=10_000, help="memory entries in the server's vault")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each chat condition, alternating")
    parser.add_argument("--turns", type=int, default=200, help="chat turns a round")
    parser.add_argument("--model-delay", type=float, default=0.2, help="seconds a task run's model call takes")
    parser.add_argument("--no-chat", action="store_true", help="leave out the chat beside a run (no server)")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--write", action="store_true", help=f"write the tables under '{HEADING}' in RESULTS.md")
    parser.add_argument("--results", type=Path, default=BENCH / "RESULTS.md")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    if args.quick:
        args.ticks, args.refreshes, args.calls = 600, 20, 20
        args.entries, args.rounds, args.turns = 500, 1, 20
    args.load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-tasks-") as scratch:
        folder = Path(scratch)
        began = time.perf_counter()
        vault = scheduler_vault(folder / "tasks-vault", args.tasks)
        print(f"scheduler vault: {vault.tasks:,} tasks, {vault.run_files:,} run files "
              f"({time.perf_counter() - began:.1f} s)", flush=True)
        sched = bench_scheduler(vault, args.ticks, args.refreshes)
        print(f"tick p50 {us(sched.tick.p(0.5))}, p95 {us(sched.tick.p(0.95))}, max {us(max(sched.tick.values))}; "
              f"floor p95 {us(sched.floor.p(0.95))}", flush=True)
        prompt = bench_prompt(folder / "prompt-vault", args.runs, args.calls)
        print(f"prompt p50 {ms(prompt.total.p(0.5))}, p95 {ms(prompt.total.p(0.95))}; floor p50 "
              f"{us(prompt.floor.p(0.5))}", flush=True)
        chat = None if args.no_chat else bench_chat(args.entries, args.rounds, args.turns, args.model_delay,
                                                    folder / "server")
    text = report(args, sched, prompt, chat)
    print(text)
    if args.write:
        write_section(text, args.results)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) == 4 and sys.argv[1] == "--model":
        paced_model(int(sys.argv[2]), float(sys.argv[3]))
    else:
        sys.exit(main())
