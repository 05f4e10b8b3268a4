"""GET /api/health: is the server up, and what does this process have."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from sentient.api.deps import AgentDep, WorkspaceDep
from sentient.conflicts import as_dict, git_state, open_conflicts

router = APIRouter(tags=["health"])


@router.get("/api/health")
def health(request: Request, workspace: WorkspaceDep, agent: AgentDep) -> dict[str, Any]:
    """Status, the vault, whether memory exists in this process, the watcher, the model, each
    task's next due time (`tasks`: soonest first; `problem` when its file cannot be run), and
    whether facts are kept (`facts.busy`: callers with an extraction queued or running), the
    vault's git state with its unresolved sync conflicts (`git.conflicts`), and how search ranks
    (`search.problem`: why not by meaning too, and what to install)."""
    watcher = request.app.state.watcher
    problems = workspace.index.problems()
    semantic = workspace.index.semantic_model() is not None
    return {
        "status": "ok",
        "vault": str(workspace.vault.root),
        "memory": "present" if workspace.settings.features.memory else "absent",
        "watcher": watcher.mode if watcher is not None else "off",
        "model": agent.llm.model_name("chat"),
        "unreadable_files": len(problems),
        "pattern_set": workspace.judge.current().label,
        "pattern_problem": workspace.judge.problem,
        "tasks": request.app.state.scheduler.overview(),
        # facts about callers (docs/facts.md): kept at all, and how many callers' extractions are under way
        "facts": {"on": agent.facts is not None, "busy": agent.facts.busy() if agent.facts is not None else 0},
        # the vault's git repository (docs/git.md): what becomes of the app's changes, and the
        # conflicting edits a sync kept both ways, withheld from the model until resolved
        "git": {"state": git_state(workspace), "conflicts": [as_dict(copy) for copy in open_conflicts(workspace)]},
        # how search ranks: by words and meaning (hybrid), or by words alone, and then why
        # and how many documents are not embedded yet (found by their words alone until they are)
        "search": {"modes": ["bm25", "vector", "hybrid"] if semantic else ["bm25"],
                   "default": "hybrid" if semantic else "bm25", "problem": workspace.semantic_problem(),
                   "waiting": workspace.index.waiting() if semantic else 0},
    }
