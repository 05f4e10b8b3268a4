"""Running a task once: a server-built prompt (the plan, with the session knowledge block as
its synthetic first part), the tool loop, and a run file with its log and final answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sentient.agent.loop import Message, run_loop
from sentient.agent.turn import Agent
from sentient.vault.store import iso

FINAL_HEADING = "## Final answer"


@dataclass(frozen=True)
class RunResult:
    task: str
    run: str
    status: str
    answer: str
    knowledge_signature: str | None


def new_run_id(agent: Agent, task: str) -> str:
    base = "run-" + agent.clock().strftime("%Y%m%d-%H%M%S")
    candidate, n = base, 1
    while agent.workspace.vault.locate("run", f"{task}/{candidate}") is not None:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def run_task(agent: Agent, task: str, *, trigger: str = "manual") -> RunResult:
    """Run `task` now and record the run; a failure is recorded as a failed run."""
    vault = agent.workspace.vault
    spec = vault.get("task", task)
    run = new_run_id(agent, task)
    key = f"{task}/{run}"
    started = iso(agent.clock())
    vault.create("run", key, {"task": task, "status": "running", "trigger": trigger, "started": started})
    ctx = agent.context(incognito=False, channel="task", session=None, run=key)
    pins = [str(p) for p in spec.meta.get("pins") or []]
    scope = spec.meta.get("scope") if isinstance(spec.meta.get("scope"), str) else None
    knowledge = agent.knowledge.build(pins=pins, scope=scope, memory_allowed=ctx.memory_allowed)
    plan = spec.body.strip()
    most = agent.workspace.settings.knowledge_chars  # a plan as long as a session's pins and index may be
    cut = f"\n... (the other {len(plan) - most:,} characters of the plan do not fit, so you have not seen them)"
    prompt = (f"Task: {spec.title}\n\n{plan[:most] + cut if len(plan) > most else plan}\n\n"
              "Carry out the plan now and end with your final answer.")
    content: Any = prompt
    if knowledge is not None:
        content = [{"type": "text", "text": knowledge.text}, {"type": "text", "text": prompt}]
    messages: list[Message] = [
        {"role": "system", "content": agent.system_prompt(ctx, prompt)},
        {"role": "user", "content": content},
    ]
    log = [f"- {started[11:19]} started ({trigger})"]
    if len(plan) > most:
        log.append(f"- the plan was cut to its first {most:,} of {len(plan):,} characters (chat.context_tokens sets "
                   "what fits): shorten task.md")
    status, answer = "failed", ""
    try:
        result = run_loop(agent.llm, "chat", messages, agent.registry.offered(ctx), ctx)
        for call in result.calls:
            log.append(f"- tool {call.name}{'' if call.ok else ' (error)'}")
        status, answer = "succeeded", result.text
    except Exception as exc:  # the run's failure is recorded in its file, not raised at the scheduler
        log.append(f"- failed: {exc}")
    finished = iso(agent.clock())
    log.append(f"- {finished[11:19]} {status}")
    body = "## Log\n\n" + "\n".join(log) + "\n"
    if answer:
        body += f"\n{FINAL_HEADING}\n\n{answer.strip()}\n"
    meta = {"status": status, "finished": finished, "untrusted": ctx.untrusted}
    vault.update("run", key, meta, body)
    return RunResult(task, run, status, answer, knowledge.signature if knowledge else None)
