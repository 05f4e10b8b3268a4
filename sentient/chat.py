"""The terminal chat: a loop of reading a line and answering it, with a few slash commands.

    /new                 start a new session
    /incognito           start a new incognito session (nothing saved; memory per settings)
    /pin note:ID         pin a note or plan to this session (plan:ID)
    /unpin note:ID       unpin it
    /pins                show this session's pins
    /session             show the session id and its file
    /quit                leave (Ctrl-D works too, and Ctrl-C at the prompt)

Ctrl-C while the agent answers cancels that answer; your message stays in the session.
Nothing typed in an incognito chat (nor the /incognito line) stays in the line-editing history.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

try:
    import readline
except ImportError:  # not on every platform; then input() keeps no history either
    readline = None  # type: ignore[assignment]

from sentient.agent.turn import Agent, check_pins
from sentient.errors import SentientError
from sentient.knowledge import require_pins

HELP = __doc__.split("\n\n", 1)[1].strip() if __doc__ else ""


@dataclass
class ChatState:
    session: str | None = None
    incognito: bool = False
    pins: list[str] = field(default_factory=list)
    user: str | None = None  # the caller and persona every session of this chat is started with
    persona: str | None = None


def handle_command(agent: Agent, state: ChatState, line: str) -> str | None:
    """Run a slash command; the text to show, or None to quit."""
    command, _, argument = line.strip().partition(" ")
    argument = argument.strip()
    if command in ("/quit", "/exit"):
        return None
    if command == "/new":
        state.session, state.incognito, state.pins = None, False, []
        return "new session"
    if command == "/incognito":
        state.session, state.incognito, state.pins = None, True, []
        return "new incognito session: nothing from it is saved"
    if command in ("/pin", "/unpin"):
        if not argument:
            return f"usage: {command} note:ID or plan:ID"
        wanted = [p for p in state.pins if p != argument] + ([argument] if command == "/pin" else [])
        pins = check_pins(wanted)
        if state.session is not None:
            pins = agent.set_pins(state.session, pins)
        else:  # no session yet: checked now as set_pins would, not when the first message makes the session
            pins = require_pins(agent.workspace.vault, pins, state.pins)
        state.pins = pins
        return "\n".join([f"pins: {', '.join(pins) or 'none'}", *(f"  note: {problem}"
                                                                 for problem in agent.knowledge.pin_problems(pins))])
    if command == "/pins":
        return f"pins: {', '.join(state.pins) or 'none'}"
    if command == "/session":
        if state.session is None:
            return "no session yet: say something first"
        if agent.is_incognito(state.session):
            return f"{state.session} (incognito, not saved)"
        path = agent.workspace.vault.locate("session", state.session)
        return f"{state.session} ({path})"
    if command == "/help":
        return HELP
    return f"unknown command {command}; /help lists them"


def history_length() -> int:
    """How many lines readline's history holds (input() adds each line typed on a terminal)."""
    return readline.get_current_history_length() if readline is not None else 0


def forget_history_since(length: int) -> None:
    """Drop the lines added to readline's history since it held `length`, so that they are
    neither recalled nor written to the history file when the chat ends."""
    if readline is None:
        return
    for index in range(readline.get_current_history_length() - 1, length - 1, -1):
        readline.remove_history_item(index)


def is_private(state: ChatState, line: str) -> bool:
    """A line typed in an incognito chat, or the /incognito that starts one."""
    return state.incognito or line.strip().partition(" ")[0] == "/incognito"


def repl(agent: Agent, read: Callable[[str], str], write: Callable[[str], None], *, user: str | None = None,
         persona: str | None = None) -> int:
    """Chat until /quit, end of input (Ctrl-D) or Ctrl-C at the prompt. Errors are shown and
    the chat goes on; Ctrl-C during an answer cancels it (the message stays in the session).
    Lines typed in an incognito chat are taken out of the line-editing history as they come."""
    with_whom = f", {user or 'someone'} talking to {persona}" if persona else (f", as {user}" if user else "")
    write(f"Sentient chat on {agent.workspace.vault.root} (model {agent.llm.model_name('chat')}{with_whom}). "
          "/help for commands.")
    state = ChatState(user=user, persona=persona)
    while True:
        known = history_length()
        try:
            line = read("you> " if not state.incognito else "you (incognito)> ")
        except (EOFError, KeyboardInterrupt):
            write("")
            return 0
        if is_private(state, line):
            forget_history_since(known)
        if not line.strip():
            continue
        try:
            if line.startswith("/"):
                shown = handle_command(agent, state, line)
                if shown is None:
                    return 0
                write(shown)
                continue
            if state.session is None:  # made first, so that a cancelled or failed turn keeps the message in it
                state.session = agent.new_session(incognito=state.incognito, pins=state.pins or None,
                                                  title=line.strip()[:60], user=state.user, persona=state.persona)
            result = agent.turn(line, session=state.session, incognito=state.incognito)
        except SentientError as exc:
            write(f"error: {exc.message}")
            continue
        except KeyboardInterrupt:
            saved = state.session is not None and not agent.is_incognito(state.session)
            kept = f"; your message is kept in session {state.session}" if saved else ""
            write(f"(cancelled{kept}. Ctrl-C again or Ctrl-D to leave)")
            continue
        state.session = result.session
        write(f"sentient> {result.text}")
        for held in result.held:
            write(f"  (held for your approval: {held.tool} {held.arguments}, because {held.reason})")
