"""skill_save: keep a procedure that worked, as a markdown file in skills/."""

from __future__ import annotations

from sentient.agent.context import ToolContext
from sentient.agent.tools import ToolRefused, tool
from sentient.errors import Conflict
from sentient.tools.memory import agents_own
from sentient.vault.document import slugify


@tool(risk="write")
def skill_save(ctx: ToolContext, name: str, steps: str) -> str:
    """Save a procedure you worked out, so it can be reused later. Saving one of your own
    skills again under its name updates it; a skill the person wrote or edited is never changed.

    Args:
        name: a short name for the procedure.
        steps: the procedure, as markdown steps.
    """
    if not name.strip() or not steps.strip():
        raise ToolRefused("both name and steps are needed")
    if len(name.strip().splitlines()) > 1:
        raise ToolRefused("name must be one line; put the rest in steps")
    workspace = ctx.agent.workspace
    meta = {"title": name.strip(), "source": ctx.source, "untrusted": ctx.untrusted}
    body = steps.strip() + "\n"
    named = slugify(name, "skill")
    key, number = named, 1
    while workspace.vault.locate("skill", key) is not None:  # name, name-2, ...: the first free or its own
        indexed = workspace.index.get("skill", key)
        if indexed is not None and agents_own(workspace, indexed):
            update = {**meta, "untrusted": ctx.untrusted or indexed.untrusted}  # from outside: stays marked
            try:  # as it was when found to be its own: an edit since makes it the person's
                document = workspace.vault.update("skill", key, update, body, expected_revision=indexed.revision)
            except Conflict:
                pass
            else:
                verb = "Updated"
                break
        number += 1  # the person's (or edited by them, or withheld): never replaced by the model's text
        key = f"{named[:75]}-{number}"
    else:
        document = workspace.vault.create("skill", key, meta, body)
        verb = "Saved"
    workspace.index.update(document.path)
    said = f"{verb} skill {key}"
    taken = workspace.index.get("skill", named)
    if key != named and taken is not None and workspace.visible(taken):  # a withheld one is not named
        said += f", beside the skill {named}, which is left as it is"
    threat = document.meta.get("threat")
    if isinstance(threat, dict) and threat.get("flagged"):
        return (f"{said}, but it reads like instructions ({', '.join(threat.get('patterns', []))}), so it is "
                "flagged for the person to review and will not be shown to you.")
    return f"{said}."
