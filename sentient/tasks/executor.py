"""Running a task once: its run file, its prompt, the tool loop, and what it leaves behind.

`begin_run` takes the task's run lock (one run of a task at a time, across processes) and
writes the run file (`queued`), so the run has its id at once; `execute` then runs it:

- the system prompt carries the task: its plan, and for a recurring task what the last runs
  told the person and the notepad (continuity.py), with the rule to report only what is new;
  the kickoff message repeats the rule, with the session knowledge block as its first part;
- the loop runs with the task's model role and tools (`task_notepad` too when it repeats);
  every call is added to the run's log as it happens, so `sentient task run --wait` can follow;
- the run is cancelled (a request seen before each step) or fails (an error, or
  tasks.timeout passed) without touching the notepad; a run that finishes records its final
  answer and summary first, and only then writes the note it saved, over the revision it read;
- a task with `notify: true` sends its final answer through the notify tool's webhook.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sentient.agent.loop import Message, run_loop
from sentient.agent.tools import RECURRING_ONLY_TOOLS
from sentient.agent.turn import Agent
from sentient.errors import SentientError
from sentient.knowledge import Knowledge, shortened
from sentient.tasks.continuity import Continuity, continuity
from sentient.tasks.forks import Forked
from sentient.tasks.notepad import Kept, keep_run_note
from sentient.tasks.runs import (
    SUMMARY_CHARS,
    AlreadyRunning,
    RunLock,
    cancel_requested,
    forget_cancel,
    going_run,
    log_line,
    mark_dead,
    new_body,
    summary_of,
    write_run,
)
from sentient.tasks.spec import TaskSpec, task_spec
from sentient.tools.web import NotSent, send_notification
from sentient.vault.document import Document
from sentient.vault.store import iso

log = logging.getLogger(__name__)
NUDGE = ("You said you would do that, but you made no tool call. Make the call now{what}; then reply with your "
         "final answer again, in full.")


class Stopped(Exception):
    """The run ends here: cancelled by the person, or out of time."""

    def __init__(self, status: str, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.why = why


@dataclass(frozen=True)
class RunResult:
    task: str
    run: str
    status: str
    answer: str
    knowledge_signature: str | None


@dataclass
class Started:
    """A run that has its file and holds its task's lock, waiting to be executed."""

    task: str
    run: str
    trigger: str
    lock: RunLock
    note: str | None = None  # for its log: why it runs now (a slot missed while Sentient was not running)
    cancel: threading.Event = field(default_factory=threading.Event)
    stopping: str | None = None  # why it is cancelled when not by the person ("Sentient stopped")
    process: subprocess.Popen[bytes] | Forked | None = None  # running in a process of its own (child.py)

    @property
    def key(self) -> str:
        return f"{self.task}/{self.run}"


def new_run_id(agent: Agent, task: str) -> str:
    base = "run-" + agent.clock().strftime("%Y%m%d-%H%M%S")
    candidate, n = base, 1
    while agent.workspace.vault.locate("run", f"{task}/{candidate}") is not None:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def begin_run(agent: Agent, task: str, trigger: str = "manual", note: str | None = None) -> Started:
    """Take the task's run lock and write its run file (`queued`). AlreadyRunning when a run of
    the task holds the lock (here or in another process); NotFound for no such task."""
    vault = agent.workspace.vault
    vault.get("task", task)
    lock = RunLock(vault, task)
    if not lock.acquire():
        going = going_run(vault, task)
        raise AlreadyRunning(f"task '{task}' is running already{f' (run {going})' if going else ''}; wait for it to "
                             "end, or cancel it")
    try:
        mark_dead(vault, task, agent.clock)
        run = new_run_id(agent, task)
        vault.create("run", f"{task}/{run}", {"task": task, "status": "queued", "trigger": trigger}, new_body([]))
    except BaseException:
        lock.release()
        raise
    return Started(task, run, trigger, lock, note)


def run_task(agent: Agent, task: str, *, trigger: str = "manual") -> RunResult:
    """Run `task` now, in this thread, and record the run; a failure is recorded as a failed run."""
    return execute(agent, begin_run(agent, task, trigger))


class _Run:
    """One run being executed: its context, its log as it grows, and the checks between steps."""

    def __init__(self, agent: Agent, started: Started, spec: TaskSpec) -> None:
        self.agent = agent
        self.started = started
        self.spec = spec
        self.vault = agent.workspace.vault
        self.deadline = time.monotonic() + agent.settings.tasks.timeout
        allowed = None
        if spec.tools is not None:
            allowed = frozenset(spec.tools) | (RECURRING_ONLY_TOOLS if spec.recurring else frozenset())
        self.ctx = agent.context(incognito=False, channel="task", session=None, run=started.key,
                                 recurring=spec.recurring, allowed_tools=allowed)
        self.calls: dict[str, tuple[str, Any]] = {}  # tool call id -> (name, arguments)
        self.signature: str | None = None  # of the knowledge block it was given

    def note(self, *texts: str, meta: dict[str, Any] | None = None, answer: str | None = None,
             kept: str | None = None, step: bool = False) -> Document:
        """Add lines to the run's log (and set frontmatter fields, its answer, the note it could not
        keep), in one write. A `step` of a going run (a tool called, the nudge) is not made durable:
        a crash may lose it, and the run cut off by it is marked failed at the next start anyway; its
        fsyncs made a chat's own durable writes wait, a step at a time (bench/bench_tasks.py)."""
        now = self.agent.clock()
        return write_run(self.vault, self.started.key, *(log_line(now, text) for text in texts), meta=meta,
                         answer=answer, note=kept, durable=not step)

    def check(self) -> None:
        """Stop here when the person asked to cancel, or the run is out of time."""
        if self.started.cancel.is_set() or cancel_requested(self.vault, self.started.task, self.started.run):
            raise Stopped("cancelled", f"cancelled: {self.started.stopping or 'by the person'}")
        if time.monotonic() > self.deadline:
            limit = self.agent.settings.tasks.timeout
            raise Stopped("failed", f"failed: it timed out, running longer than tasks.timeout ({limit:g} s)")

    def on_message(self, message: Message) -> None:
        """The loop's hook: log each tool call as its result comes in, then check."""
        if message["role"] == "assistant":
            for call in message.get("tool_calls") or ():
                self.calls[call["id"]] = (call["function"]["name"], call["function"]["arguments"])
        elif message["role"] == "tool":
            name, arguments = self.calls.get(message.get("tool_call_id") or "", (message.get("name") or "?", ""))
            shown = "" if name in RECURRING_ONLY_TOOLS else _arguments(arguments)
            failed = str(message.get("content", "")).startswith("Error:")
            self.note(f"tool {name}{shown}{' (error)' if failed else ''}", step=True)
        self.check()

    def nudge(self, text: str) -> str | None:
        """What to tell a model that announced an action in an answer without calling a tool."""
        if not announces(text, noted=self.ctx.state.notepad is not None):
            return None
        what = " (to keep the list: task_notepad(text=...))" if self.spec.recurring and self.ctx.state.notepad is None \
            else ""
        self.note("the model said it would act but made no call: told once to make it", step=True)
        return NUDGE.format(what=what)


_ANNOUNCER = (r"(?:i'll|i will|let me|let's|let us|i'm going to|i am going to|i shall|i need to|i'm now|i am now|"
              r"now i'll)")
_ACTION = (r"(?:sav|note\b|record|updat|writ|stor|fetch|search|call|look(?:ing)? up|read|add|append|check the "
           r"(?:page|site|inbox|notepad))")
_ANNOUNCES = re.compile(rf"(?:^|\b){_ANNOUNCER}\s+(?:now\s+|also\s+|just\s+)?{_ACTION}")
# "Saving the list now...", "I'm noting it in the notepad": a gerund that starts the sentence, about the list or now
_DOING = re.compile(r"^(?:i'm\s+|i am\s+)?(?:now\s+)?(?:saving|noting|recording|updating|writing|storing|fetching|"
                    r"searching|calling|reading|adding)\b(?=.*\b(?:now|list|notepad|note|it|that|this)\b)")
_SAVING = re.compile(r"\b(?:sav|note\b|record|updat|writ|stor|add|append)")


def announces(text: str, *, noted: bool = False) -> bool:
    """Does an answer end by announcing an action it is about to take ("I'll save the list now",
    "Let me note that", "Saving the list now...") without a question to the person? Only its last
    two sentences count; "let me know" is not an action. `noted`: the run already saved its note
    (then announcing that it saves one is no call left undone)."""
    tail = " ".join(text.strip().split())[-240:].lower().replace("\u2019", "'")
    if not tail or tail.endswith("?"):
        return False
    sentences = [s.strip(" -*•") for s in re.split(r"[.!\n]+", tail) if s.strip(" -*•")][-2:]
    for sentence in sentences:
        found = _ANNOUNCES.search(sentence) or _DOING.search(sentence)
        if found is None or "let me know" in sentence:
            continue
        if noted and _SAVING.search(sentence[found.start():]):
            continue
        return True
    return False


def _arguments(raw: Any) -> str:
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return ""
    if not value:
        return ""
    text = json.dumps(value, ensure_ascii=False)
    return " " + (text if len(text) <= 200 else text[:199] + "…")


def execute(agent: Agent, started: Started) -> RunResult:
    """Run a begun run to its end and record it (see the module's doc). Never raises for the
    run's own failure: that is recorded in the run file."""
    vault = agent.workspace.vault
    try:
        try:
            spec = task_spec(vault.get("task", started.task), agent.settings, agent.registry.names())
        except SentientError as exc:
            now = agent.clock()
            write_run(vault, started.key, log_line(now, f"failed: {exc.message}"),
                      meta={"status": "failed", "started": iso(now), "finished": iso(now),
                            "summary": shortened(f"Failed: {exc.message}", SUMMARY_CHARS)})
            return RunResult(started.task, started.run, "failed", "", None)
        run = _Run(agent, started, spec)
        try:
            return _execute(run)
        except Stopped as stop:
            return _ended(run, stop.status, stop.why)
        except Exception as exc:  # the run's failure is recorded in its file, not raised at the scheduler
            log.warning("task %s run %s failed: %s", started.task, started.run, exc)
            return _ended(run, "failed", f"failed: {exc}")
    finally:
        started.lock.release()
        forget_cancel(vault, started.task, started.run)


def _prompt(run: _Run, remembered: Continuity | None) -> tuple[list[Message], Knowledge | None]:
    """The run's messages: the system prompt with the task (its plan; what earlier runs told the
    person and the notepad, for a recurring task) and the kickoff with the knowledge block."""
    agent, spec, ctx = run.agent, run.spec, run.ctx
    most = agent.settings.knowledge_chars  # a plan as long as a session's pins and index may be
    body = spec.body.strip()
    plan = body
    if len(body) > most:
        plan = body[:most] + (f"\n... (the other {len(body) - most:,} characters of the plan do not fit, so you "
                              "have not seen them)")
        run.note(f"the plan was cut to its first {most:,} of {len(body):,} characters (chat.context_tokens sets "
                 "what fits): shorten task.md")
    knowledge = agent.knowledge.build(pins=list(spec.pins), scope=spec.scope, memory_allowed=ctx.memory_allowed)
    if knowledge is not None and knowledge.outside:
        ctx.state.mark_untrusted(f"the pinned {', '.join(knowledge.outside)}, written from outside content")
    schedule = spec.describe() if spec.schedule is not None else ""
    task_part = agent.prompts.render("task_run.md.j2", title=spec.title, plan=plan, schedule=schedule,
                                     continuity=remembered)
    kickoff = agent.prompts.render("task_kickoff.md.j2", title=spec.title, continuity=remembered)
    content: Any = kickoff
    if knowledge is not None:
        content = [{"type": "text", "text": knowledge.text}, {"type": "text", "text": kickoff}]
    return [
        {"role": "system", "content": agent.system_prompt(ctx, body, role=spec.role) + "\n" + task_part},
        {"role": "user", "content": content},
    ], knowledge


def _execute(run: _Run) -> RunResult:
    agent, spec, ctx, started = run.agent, run.spec, run.ctx, run.started
    remembered = continuity(agent.workspace, spec.id, spec.zone) if spec.recurring else None
    first = [remembered.log_line, *remembered.notes] if remembered is not None else [f"started ({started.trigger})"]
    first += [started.note] if started.note else []
    run.note(*first, meta={"status": "running", "started": iso(agent.clock())})
    if remembered is not None and remembered.outside:
        ctx.state.mark_untrusted(", ".join(remembered.outside))
    messages, knowledge = _prompt(run, remembered)
    run.signature = knowledge.signature if knowledge is not None else None
    run.check()
    result = run_loop(agent.llm, spec.role, messages, agent.registry.offered(ctx), ctx,
                      on_message=run.on_message, nudge=run.nudge)
    answer = result.text.strip()
    used = list(dict.fromkeys(call.name for call in result.calls if call.name not in RECURRING_ONLY_TOOLS))
    held = [f"held: {h.tool} was not run ({h.reason}); outbound calls wait for the person" for h in ctx.state.held]
    meta = {"status": "succeeded", "finished": iso(agent.clock()), "untrusted": ctx.untrusted,
            "summary": summary_of(answer), "tools_used": used}
    run.note(*held, "final answer recorded", meta=meta, answer=answer)  # the answer first: then the note
    pending = ctx.state.notepad
    if pending is not None and remembered is not None and not answer:  # nothing told: nothing to note as told
        run.note("notepad not saved: the run gave no final answer, so the person was told nothing; its note is "
                 "kept below", kept=pending)
    elif pending is not None and remembered is not None:
        _keep_note(run, pending, remembered)
    if spec.notify:
        _notify(run, answer)
    return RunResult(started.task, started.run, "succeeded", answer, run.signature)


def _keep_note(run: _Run, text: str, remembered: Continuity) -> None:
    if remembered.notepad_problem is not None:
        kept = Kept(False, "the notepad could not be read when this run began, so it is not written over")
    elif remembered.notepad_withheld:
        kept = Kept(False, "the notepad is withheld (it reads like instructions), so a run does not write over it "
                           "before the person has looked at it")
    else:
        kept = keep_run_note(run.agent.workspace, run.spec.id, text, remembered.notepad_revision,
                             untrusted=run.ctx.untrusted, source=run.ctx.source)
    if kept.saved:
        run.note("notepad saved")
        return
    run.note(f"notepad not saved: {kept.why}; this run's note is kept below", kept=text)


def _notify(run: _Run, answer: str) -> None:
    """Send the final answer to the person's webhook. A flagged answer is not sent (it is withheld);
    nor is the answer of a run that read outside content: that is an outbound send in an
    untrusted context, so the webhook is told only that the run ended and where to read it."""
    document = run.vault.get("run", run.started.key)
    if not run.agent.workspace.visible(document):
        run.note("not sent to the webhook: the run reads like instructions, so it is withheld (`sentient doctor`)")
        return
    text = answer or str(document.meta.get("summary", ""))
    if run.ctx.untrusted:
        text = (f"The task \"{run.spec.title}\" finished. This run read outside content, so its answer is not sent "
                f"here: read it with `sentient task runs {run.spec.id} {run.started.run}`.")
    payload = {"text": text, "source": run.ctx.source, "task": run.spec.id, "run": run.started.run,
               "title": run.spec.title, "untrusted": run.ctx.untrusted}
    try:
        send_notification(run.agent.settings, payload)
    except NotSent as exc:
        run.note(f"not sent to the webhook: {exc}")
        return
    run.note("the webhook was told the run ended (its answer is held: the run read outside content)"
             if run.ctx.untrusted else "sent to the webhook (notify: true)")


def _ended(run: _Run, status: str, why: str) -> RunResult:
    """Record a run that did not finish (`why`: 'failed: ...', 'cancelled: ...'): the notepad is
    left as it was (a note it saved is kept in the run file), and its summary says why."""
    pending = run.ctx.state.notepad
    lines = [why] + (["notepad not saved: the run did not finish; its note is kept below"] if pending else [])
    said = why.split(": ", 1)[-1]  # 'by the person', 'Sentient stopped ...', 'it timed out ...'
    summary = f"{status.capitalize()} {said}." if said.startswith("by ") else f"{status.capitalize()}: {said}"
    meta = {"status": status, "finished": iso(run.agent.clock()), "untrusted": run.ctx.untrusted,
            "summary": shortened(summary, SUMMARY_CHARS)}
    run.note(*lines, meta=meta, kept=pending)
    return RunResult(run.started.task, run.started.run, status, "", run.signature)
