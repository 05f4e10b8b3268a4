"""skill_save: keep a procedure that worked, as a markdown file in skills/."""

from __future__ import annotations

from sentient.agent.context import ToolContext
from sentient.agent.tools import ToolRefused, tool
from sentient.vault.document import slugify


@tool(risk="write")
def skill_save(ctx: ToolContext, name: str, steps: str) -> str:
    """Save a procedure you worked out, so it can be reused later.

    Args:
        name: a short name for the procedure.
        steps: the procedure, as markdown steps.
    """
    if not name.strip() or not steps.strip():
        raise ToolRefused("both name and steps are needed")
    if len(name.strip().splitlines()) > 1:
        raise ToolRefused("name must be one line; put the rest in steps")
    workspace = ctx.agent.workspace
    key = slugify(name, "skill")
    meta = {"title": name.strip(), "source": ctx.source, "untrusted": ctx.untrusted}
    if workspace.vault.locate("skill", key) is not None:
        document = workspace.vault.update("skill", key, meta, steps.strip() + "\n")
        verb = "Updated"
    else:
        document = workspace.vault.create("skill", key, meta, steps.strip() + "\n")
        verb = "Saved"
    workspace.index.update(document.path)
    return f"{verb} skill {key}."
