"""A chat turn: decide memory once, build the prompt, run the loop, keep the transcript.

The session file is written as the turn goes (the person's message first, then every model
reply and tool result), so a crash loses at most the message in flight. Incognito sessions
live only in this process and are never written to the vault.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sentient.agent import compaction
from sentient.agent.context import Background, HeldCall, ToolContext, memory_allowed
from sentient.agent.loop import CallRecord, Message, cut_middle, run_loop
from sentient.agent.tools import ToolRegistry
from sentient.config import CHARS_PER_TOKEN, is_local
from sentient.errors import NotFound, SentientError, TooLong
from sentient.facts import FactKeeper, persons_messages
from sentient.knowledge import AGENT_TOOLS, Knowledge, KnowledgeBuilder, MemoryTools, parse_pin, require_pins
from sentient.llm import LLM, ContextTooLong
from sentient.personas import get_persona, prompt_of
from sentient.prompts import Prompts
from sentient.tools import build_registry
from sentient.tools.memory import relevant_memories
from sentient.vault import transcript
from sentient.vault.document import Document, check_id
from sentient.vault.kinds import check_key, one_line
from sentient.vault.store import iso, utc_now
from sentient.workspace import Workspace

HISTORY_MESSAGES = 40
# The role of the note a turn leaves when the model refused its message as too long (see history).
REFUSED = "refused"
log = logging.getLogger(__name__)
INCOGNITO_PREFIX = "incognito-"


class SessionMismatch(SentientError):
    """A message to a session naming another caller or persona than the session was started with."""

    status = 409


@dataclass(frozen=True)
class TurnResult:
    session: str
    text: str
    memory_allowed: bool
    incognito: bool
    untrusted: bool
    held: list[HeldCall] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    offered: list[str] = field(default_factory=list)
    untrusted_reasons: list[str] = field(default_factory=list)  # what made the turn untrusted
    usage: dict[str, int] = field(default_factory=dict)  # tokens of the turn's model calls (prompt, completion, total)


def check_pins(pins: list[str]) -> list[str]:
    """Pins as given, each checked: note:<id> or plan:<id>; SentientError otherwise."""
    for ref in pins:
        try:
            parse_pin(ref)
        except (ValueError, SentientError) as exc:
            message = exc.message if isinstance(exc, SentientError) else str(exc)
            raise SentientError(f"pins: {message}") from None
    return list(dict.fromkeys(pins))


def to_transcript(message: Message, time: str) -> transcript.Message:
    """A loop message (OpenAI format) as a transcript section."""
    role = message["role"]
    if role == "tool":
        result = {"id": message.get("tool_call_id"), "name": message.get("name"), "content": message["content"]}
        return transcript.Message("tool", time, tool_results=(result,))
    calls = tuple(
        {"id": call["id"], "name": call["function"]["name"], "arguments": _json(call["function"]["arguments"])}
        for call in message.get("tool_calls") or ()
    )
    return transcript.Message(role, time, message.get("content") or "", tool_calls=calls)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


# Tags of a knowledge block that carry memory: its index, or word that memory failed to load.
# Quoting writes every '<' of a pinned text that could open a tag as '&lt;', so only the real
# sections match.
MEMORY_TAGS = ("<memory-index", "<memory-unreadable")
# Why a turn of a session that read outside content before starts untrusted.
EARLIER_OUTSIDE = "this session's history, which holds outside content"


def holds_memory(block: str) -> bool:
    """Does a stored knowledge block carry something from memory?"""
    return any(tag in block for tag in MEMORY_TAGS)


def _tells(stored: str, block: str) -> bool:
    """Is a stored knowledge message this block (alone, or with the pinned messages after it)?
    The session file keeps a message without its trailing whitespace."""
    stored, block = stored.rstrip(), block.rstrip()
    if not stored.startswith(block):
        return False
    rest = stored[len(block) :]
    return not rest or (rest[:1] == "\n" and rest.lstrip("\n").startswith(compaction.PINNED_HEADING))


def history(
    messages: tuple[transcript.Message, ...],
    limit: int = HISTORY_MESSAGES,
    *,
    memory_allowed: bool = True,
    refused: int | None = None,
) -> list[Message]:
    """What the model sees of earlier turns: what the person and the agent said (and system
    messages a client sent along), with the latest knowledge block as the synthetic first part
    of the message that carried it. Tool calls and their results, helper runs and the reader's
    answers are never replayed. In a turn without memory a block that carries memory is left
    out; the turn sends its own block, made without memory.

    A message of the person's the model refused as too long (a `refused` message follows it in
    its turn) shows at most `refused` characters, its start and its end: sent whole, it would
    fail every later turn of its session too. The session file keeps it whole."""
    shown: list[Message] = []
    block: str | None = None
    latest = max((n for n, m in enumerate(messages) if m.role == "knowledge"), default=-1)
    too_long = _refused(messages) if refused is not None else set()
    for number, message in enumerate(messages):
        if message.role == "knowledge":
            fresh = number == latest and (memory_allowed or not holds_memory(message.text))
            block = message.text if fresh else None  # a newer block replaces older ones
        elif message.role == "system" and message.text.strip():
            shown.append({"role": "system", "content": message.text})
        elif message.role == "user" and message.text.strip():
            said = message.text
            if number in too_long and refused is not None:
                said = cut_middle(said, refused, "the message was too long for the model")
            if block is None:
                shown.append({"role": "user", "content": said})
            else:
                parts = [{"type": "text", "text": block}, {"type": "text", "text": said}]
                shown.append({"role": "user", "content": parts})
                block = None
        elif message.role == "assistant" and message.text.strip():
            if block is not None:  # a synthetic turn of its own (written by earlier versions)
                shown.append({"role": "user", "content": block})
                block = None
            shown.append({"role": "assistant", "content": message.text})
    return shown[-limit:]


def _refused(messages: tuple[transcript.Message, ...]) -> set[int]:
    """The numbers of the person's messages whose turn the model refused as too long."""
    found: set[int] = set()
    last: int | None = None
    for number, message in enumerate(messages):
        if message.role == "user":
            last = number
        elif message.role == REFUSED and last is not None:
            found.add(last)
    return found


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(part.get("text", "")) for part in content or () if isinstance(part, dict))


class Agent:
    """One per process: the workspace, the model, the tools and the prompts."""

    def __init__(
        self,
        workspace: Workspace,
        llm: LLM,
        registry: ToolRegistry,
        *,
        prompts: Prompts | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.workspace = workspace
        self.settings = workspace.settings
        self.llm = llm
        self.registry = registry
        self.prompts = prompts or Prompts(workspace.vault.root)
        self.clock = clock
        self.background = Background()
        self._incognito: dict[str, list[transcript.Message]] = {}
        self._incognito_meta: dict[str, dict[str, Any]] = {}
        self.knowledge = KnowledgeBuilder(workspace, self.prompts)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        facts = workspace.settings.facts  # None: no `facts:` section, so no facts kept or told
        self.facts = FactKeeper(workspace, llm, self.prompts, facts, clock=clock) if facts is not None else None

    def close(self) -> None:
        """Let background helpers finish (briefly), stop the fact extractions (a queued one is
        run at the next start), then stop the model servers it started."""
        self.background.wait(5.0)
        if self.facts is not None:
            self.facts.close()
        self.llm.close()

    # --- sessions ----------------------------------------------------------------------

    def session_lock(self, key: str) -> threading.Lock:
        """Turns of one session run one at a time, in arrival order."""
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def new_session(
        self,
        *,
        incognito: bool = False,
        channel: str = "chat",
        pins: list[str] | None = None,
        title: str | None = None,
        key: str | None = None,
        scope: str | None = None,
        user: str | None = None,
        persona: str | None = None,
    ) -> str:
        """A new session; `user` and `persona` (checked: an unknown persona is a 404 naming
        the known ones) are kept in it for good."""
        pins = require_pins(self.workspace.vault, check_pins(pins or []))
        caller = self.check_caller(user, persona)
        if incognito:
            key = INCOGNITO_PREFIX + secrets.token_hex(4)
            self._incognito[key] = []
            self._incognito_meta[key] = {"pins": list(pins or []), **caller}
            return key
        key = key or self.clock().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
        meta = {"title": one_line(title or "") or "New chat", "scope": scope, "channel": channel, **caller,
                "pins": pins}
        self.workspace.vault.create("session", key, meta)
        return key

    def check_caller(self, user: str | None, persona: str | None,
                     names: tuple[str, str] = ("user_id", "character_id")) -> dict[str, str]:
        """{"user", "persona"} as a session keeps them; InvalidId for an id that cannot name a
        file, UnknownPersona (404, naming the known ones) for a persona the vault lacks. `names`:
        what the caller calls the two (the API's fields, the CLI's --user and --persona)."""
        caller: dict[str, str] = {}
        if user is not None:
            caller["user"] = check_id(user, names[0])
        if persona is not None:
            caller["persona"] = get_persona(self.workspace, persona, names[1]).id
        return caller

    def check_session_caller(self, key: str, user: str | None, persona: str | None) -> None:
        """SessionMismatch (409) when a message to a stored session names another caller or
        persona than the session was started with: a session keeps both."""
        if user is None and persona is None:
            return
        meta = self.session_meta(key)
        for name, given, field_name in (("user_id", user, "user"), ("character_id", persona, "persona")):
            kept = meta.get(field_name)
            if given is not None and given != kept:
                started = f"was started with {name} '{kept}'" if isinstance(kept, str) else \
                    f"was started without {name}"
                raise SessionMismatch(f"{name}: session {key} {started}, and a session keeps its caller and persona; "
                                      f"leave {name} out to continue it, or leave session_id out to start a new "
                                      f"session with {name} '{given}'")

    def set_pins(self, key: str, pins: list[str]) -> list[str]:
        """Replace a session's pins; the next message carries the changed block."""
        pins = require_pins(self.workspace.vault, check_pins(pins), self.session_settings(key)[0])
        if key in self._incognito:
            self._incognito_meta.setdefault(key, {})["pins"] = pins
        else:
            self.workspace.vault.update("session", key, {"pins": pins})
        return pins

    def is_incognito(self, key: str) -> bool:
        return key in self._incognito

    def messages_of(self, key: str, saved: Document | None = None) -> tuple[transcript.Message, ...]:
        """The session's messages (from `saved`, its file as just read, when given)."""
        if key in self._incognito:
            return tuple(self._incognito[key])
        return transcript.parse((saved or self.workspace.vault.get("session", key)).body).messages

    def record(self, key: str, *messages: transcript.Message, meta: Mapping[str, Any] | None = None) -> None:
        """Append messages (and set frontmatter fields) in one write, as the turn goes."""
        if key in self._incognito:
            self._incognito[key].extend(messages)
            self._incognito_meta.setdefault(key, {}).update(meta or {})
            return

        def add(document: Document) -> Document:
            body = document.body
            for message in messages:
                body = transcript.append(body, message)
            return document.replace(meta, body)

        self.workspace.vault.update("session", key, transform=add)

    # --- the turn ----------------------------------------------------------------------

    def context(self, *, incognito: bool, channel: str, session: str | None, **extra: Any) -> ToolContext:
        """The turn's one memory decision, made here and nowhere else."""
        allowed = memory_allowed(incognito=incognito, channel=channel, settings=self.settings)
        if session is not None and session not in self._incognito and "session_month" not in extra:
            path = self.workspace.vault.locate("session", session)
            extra["session_month"] = path.parent.name if path is not None else None  # sessions/<yyyy-mm>/
        return ToolContext(self, allowed, incognito, channel, session=session, **extra)

    def system_prompt(self, ctx: ToolContext, text: str, summary: str | None = None, role: str = "chat") -> str:
        """The system prompt of a turn (or a task run) whose model is `role`'s."""
        memories: list[Any] = []
        if ctx.memory_allowed:
            memories = relevant_memories(ctx, text, limit=3)
        for entry in memories:  # read into the prompt: the turn starts untrusted again
            if entry.untrusted:
                ctx.state.mark_untrusted(f"memory {entry.id}, written from outside content")
        return self.prompts.render(
            "system.md.j2",
            user_name=self.settings.user.name if ctx.memory_allowed else None,
            memory_allowed=ctx.memory_allowed,
            incognito=ctx.incognito,
            memories=memories,
            summary=summary,
            compact=self.settings.tool_profile(role) == "compact",
        )

    def turn(
        self,
        text: str,
        *,
        session: str | None = None,
        channel: str = "chat",
        incognito: bool = False,
        pins: list[str] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        on_text: Callable[[str], None] | None = None,
        prior: list[Message] | None = None,
        user: str | None = None,
        persona: str | None = None,
    ) -> TurnResult:
        """Answer one message from the person. `on_text` receives the answer as it streams;
        `prior` is earlier conversation a client sent along (for a session that has none);
        `user` and `persona` name the caller and persona of a new session (a stored session
        keeps its own: naming others is a SessionMismatch)."""
        if not text.strip():
            raise SentientError("the message is empty; type something to send")
        self.check_length(text)
        if session is None:
            title = transcript.writable(text.strip()[:60])  # as the message is kept (a terminal's bad bytes)
            session = self.new_session(incognito=incognito, channel=channel, pins=pins, title=title, user=user,
                                       persona=persona)
        else:
            if session not in self._incognito:
                check_key("session", session)  # a bad id is refused before anything waits on it
            self.check_session_caller(session, user, persona)
        incognito = session in self._incognito
        if not self.workspace.watching:
            try:
                self.workspace.index.sync()
            except SentientError as exc:  # an unusable index costs the turn its memories, not the send
                log.warning("index not synced before the turn: %s", exc.message)
        with self.session_lock(session):
            ctx = self.context(incognito=incognito, channel=channel, session=session, asked=text)
            return self._turn(ctx, session, text, tool_choice, on_text, prior or [])

    def check_length(self, text: str) -> None:
        """Refuse a message the embedded model could never read (its window is known; a remote
        model's is not, and its provider says when a message is too long): kept, it would fail
        every later message of its session too, as compaction keeps recent messages whole."""
        if not is_local(self.settings.role("chat").model or ""):
            return
        tokens, budget = len(text) // CHARS_PER_TOKEN, self.settings.context_budget
        if tokens > budget:
            raise TooLong(f"the message is about {tokens:,} tokens, and the embedded model takes about {budget:,} "
                          f"in one (its window of {self.settings.local.context:,} also holds the session's history, "
                          "pins and answer): shorten it or send it in parts")

    def dispatch(self, goal: str, *, pins: list[str] | None = None, scope: str | None = None) -> TurnResult:
        """Start a session the agent itself opens (no client involved) with `goal` as its
        first message; it gets the session knowledge like any chat."""
        session = self.new_session(channel="dispatch", pins=pins, scope=scope, title=goal.strip()[:60])
        return self.turn(goal, session=session, channel="dispatch")

    def session_meta(self, key: str, saved: Document | None = None) -> dict[str, Any]:
        """A session's frontmatter (from `saved`, its file as just read, when given)."""
        if key in self._incognito:
            return dict(self._incognito_meta.get(key, {}))
        return dict((saved or self.workspace.vault.get("session", key)).meta)

    def session_settings(self, key: str, saved: Document | None = None) -> tuple[list[str], str | None, str | None]:
        """(pins, scope, knowledge_delivered) of a session (from `saved`, its file as just read, when given)."""
        meta = self.session_meta(key, saved)
        pins = meta.get("pins") or []
        scope = meta.get("scope")
        delivered = meta.get("knowledge_delivered")
        return list(pins), scope if isinstance(scope, str) else None, delivered if isinstance(delivered, str) else None

    def _turn(
        self,
        ctx: ToolContext,
        session: str,
        text: str,
        tool_choice: str | dict[str, Any] | None,
        on_text: Callable[[str], None] | None,
        prior: list[Message],
    ) -> TurnResult:
        saved = None
        if session not in self._incognito:
            try:
                saved = self.workspace.vault.get("session", session)  # read under the session's lock
            except NotFound:
                raise NotFound(f"no session '{session}'; start a new one by leaving session out") from None
        meta = self.session_meta(session, saved)
        if meta.get("untrusted") is True:  # what it read earlier is still in its history
            ctx.state.mark_untrusted(EARLIER_OUTSIDE)
        marked = meta.get("untrusted") is True
        pins, scope, delivered = self.session_settings(session, saved)
        knowledge = self.knowledge.build(pins=pins, scope=scope, memory_allowed=ctx.memory_allowed)
        if knowledge is not None and knowledge.outside:  # in the prompt, told now or earlier: read again
            ctx.state.mark_untrusted(f"the pinned {', '.join(knowledge.outside)}, written from outside content")
        loaded = self.messages_of(session, saved)
        earlier = tuple(transcript.Message(m["role"], iso(self.clock()), _text_of(m["content"])) for m in prior)
        if earlier:  # what a client sent along becomes the session's history, so nothing is lost
            self.record(session, *earlier)
        current = compaction.window(loaded + earlier)
        caller = _caller(meta)
        persona = meta.get("persona")
        persona_prompt = prompt_of(self.workspace, persona) if isinstance(persona, str) and persona else None
        told = self._facts_told(ctx, caller)
        system = self.system_prompt(ctx, text, current.summary)
        compacted = False
        # the persona's prompt and the facts count towards the budget: compaction makes room for them
        if self._over_budget(_joined(system, persona_prompt, told), current, text):
            current, system, compacted = self._compact(ctx, session, current, text)
        synthetic, pending = self._synthetic(ctx, session, current, knowledge, delivered, compacted)
        if persona_prompt:  # the persona's own prompt follows Sentient's, in the same message
            system = _joined(system, persona_prompt)

        def provenance() -> dict[str, Any]:
            """`untrusted: true` for the session's frontmatter, once, as soon as the turn is."""
            nonlocal marked
            if ctx.untrusted and not marked:
                marked = True
                return {"untrusted": True}
            return {}

        now = iso(self.clock())
        content: str | list[dict[str, str]] = text
        said = [transcript.Message("user", now, text)]
        before = current.messages
        if synthetic is not None:
            said.insert(0, transcript.Message("knowledge", now, synthetic))
            content = [{"type": "text", "text": synthetic}, {"type": "text", "text": text}]
        if synthetic is not None or knowledge is None:
            # This one replaces them; and with nothing to tell now (a pin flagged since, memory
            # not allowed in this turn), a block told earlier is not told again.
            before = tuple(m for m in before if m.role != "knowledge")
        # the read mark of an extraction since (its worker never writes a session beside the turns)
        facts = self.facts if caller is not None else None
        read_mark = facts.read_mark(session, meta) if facts is not None else {}
        self.record(session, *said, meta={**provenance(), **read_mark} or None)
        if facts is not None and read_mark:
            facts.marked(session, read_mark["facts_read"])
        messages: list[Message] = [
            {"role": "system", "content": system},
            *([{"role": "system", "content": told}] if told is not None else []),
            *history(before, memory_allowed=ctx.memory_allowed, refused=self.settings.result_chars),
            {"role": "user", "content": content},
        ]

        def on_message(message: Message) -> None:
            nonlocal pending
            accepted = provenance()
            if pending is not None and message["role"] == "assistant":
                accepted["knowledge_delivered"] = pending  # the model call returned: accepted
                pending = None
            self.record(session, to_transcript(message, iso(self.clock())), meta=accepted or None)

        try:
            result = run_loop(
                self.llm,
                "chat",
                messages,
                self.registry.offered(ctx),
                ctx,
                tool_choice=tool_choice,
                on_message=on_message,
                on_text=on_text,
            )
        except ContextTooLong as exc:  # noted, so that later turns send only the message's start and end
            note = f"The model refused this turn as too long for its context window: {exc.message}"
            try:
                self.record(session, transcript.Message(REFUSED, iso(self.clock()), note))
            except SentientError as failed:  # the refusal is what the person must hear about
                log.warning("session %s: the refusal was not noted: %s", session, failed.message)
            raise
        if caller is not None and self.facts is not None and ctx.memory_allowed and not ctx.incognito:
            unread = persons_messages(loaded + earlier) - self.facts.read_count(session, meta)
            self.facts.turn_taken(caller[0], caller[1], session, unread, unread + 1)
        return TurnResult(
            session,
            result.text,
            ctx.memory_allowed,
            ctx.incognito,
            ctx.untrusted,
            list(ctx.state.held),
            result.calls,
            result.offered,
            list(ctx.state.untrusted_reasons),
            result.usage,
        )

    def _facts_told(self, ctx: ToolContext, caller: tuple[str, str] | None) -> str | None:
        """The facts message of a turn with a known caller and persona; None without facts,
        in a turn without memory, or when the set cannot be read (logged; the turn goes on)."""
        if caller is None or self.facts is None or not ctx.memory_allowed:
            return None
        told = self.facts.told(*caller)
        if told is None:
            return None
        if told.untrusted:  # read into the prompt: the turn starts untrusted again
            ctx.state.mark_untrusted(f"the facts about {caller[0]}, written from outside content")
        return told.text

    def _synthetic(
        self,
        ctx: ToolContext,
        session: str,
        current: compaction.Window,
        knowledge: Knowledge | None,
        delivered: str | None,
        compacted: bool,
    ) -> tuple[str | None, str | None]:
        """(the synthetic first part of the person's message, the knowledge signature it
        delivers). The block goes along when the session does not carry it: new or changed,
        compacted away, or carrying memory in a turn without memory (then left out of the
        history). Once the session has a summary, the pinned messages it took out of the
        window go along with the block, in the same part."""
        blocks = [m for m in current.messages if m.role == "knowledge"]
        withheld = bool(blocks) and not ctx.memory_allowed and holds_memory(blocks[-1].text)
        # The block the history would replay is not this one: never delivered (its turn failed
        # before the model answered, so `delivered` still names the one before), or not there.
        stale = knowledge is not None and not (blocks and _tells(blocks[-1].text, knowledge.text))
        parts: list[str] = []
        signature = None
        if knowledge is not None and (knowledge.signature != delivered or compacted or withheld or stale):
            parts.append(knowledge.text)
            signature = knowledge.signature
        if compacted or (parts and current.summary is not None):
            parts.append(compaction.pinned_block(compaction.compacted_pinned(self.messages_of(session))))
        joined = "\n\n".join(part for part in parts if part)
        return (joined or None), signature

    # --- compaction --------------------------------------------------------------------

    def _over_budget(self, system: str, current: compaction.Window, text: str) -> bool:
        """Is the conversation over its budget? The knowledge block is not counted: compaction
        cannot shrink it, and it is delivered again after compacting anyway."""
        said = tuple(m for m in current.messages if m.role != "knowledge")
        shown = history(said, refused=self.settings.result_chars)
        messages = [{"role": "system", "content": system}, *shown, {"role": "user", "content": text}]
        budget = self.settings.context_budget
        rough = sum(len(str(m["content"])) for m in messages) // CHARS_PER_TOKEN
        if rough < budget // 2:  # far below: skip the exact (and slower) count
            return False
        return self.llm.count_tokens("chat", messages) > budget

    def _compact(
        self, ctx: ToolContext, session: str, current: compaction.Window, text: str
    ) -> tuple[compaction.Window, str, bool]:
        """Summarise the older turns into a summary section. Returns the new window, its system
        prompt and whether it compacted. The knowledge block and the pinned messages then ride
        with the person's message (see _synthetic): no model call of their own. A failure here
        is logged and the turn goes on uncompacted."""
        older, recent = compaction.split(current, self.settings.chat.keep_messages)
        if not older:
            return current, self.system_prompt(ctx, text, current.summary), False
        try:
            summary = compaction.summarise(self.llm, self.prompts, current.summary, older,
                                           self.settings.reading_chars)
        except Exception as exc:
            log.warning("session %s was not compacted: %s", session, exc)
            return current, self.system_prompt(ctx, text, current.summary), False
        section = transcript.Message("summary", iso(self.clock()), summary)
        self._insert_summary(session, len(recent), section)
        return compaction.Window(summary, tuple(recent)), self.system_prompt(ctx, text, summary), True

    def _insert_summary(self, session: str, recent: int, section: transcript.Message) -> None:
        if session in self._incognito:
            messages = self._incognito[session]
            messages.insert(len(messages) - recent, section)
            return

        def insert(document: Document) -> Document:
            return document.replace(body=compaction.insert_summary(document.body, recent, section))

        self.workspace.vault.update("session", session, transform=insert)


def _joined(*parts: str | None) -> str:
    return "\n\n".join(part.strip() for part in parts if part) + "\n"


def _caller(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    """(user, persona) a session was started with, when it has both."""
    user, persona = meta.get("user"), meta.get("persona")
    return (user, persona) if isinstance(user, str) and isinstance(persona, str) and user and persona else None


def session_knowledge(
    workspace: Workspace, key: str, prompts: Prompts | None = None, *, memory: bool = True,
    tools: MemoryTools = AGENT_TOOLS,
) -> tuple[Knowledge | None, bool, tuple[str, ...]]:
    """What a stored session's next message would carry, whether the session already carries
    it, and what is left out of it and why (a pin withheld: also when nothing else is told):
    what the agent is told, for a person to see. `memory`: False for one who may not see what
    is remembered (an MCP client with memory off): the block without the memory index. `tools`:
    how its reader reads memory (an MCP client's tools are not the agent's)."""
    meta = workspace.vault.get("session", key).meta
    channel = meta.get("channel") if isinstance(meta.get("channel"), str) else "chat"
    allowed = memory and memory_allowed(incognito=False, channel=str(channel), settings=workspace.settings)
    builder = KnowledgeBuilder(workspace, prompts or Prompts(workspace.vault.root))
    scope = meta.get("scope")
    pins = list(meta.get("pins") or [])
    knowledge = builder.build(pins=pins, scope=scope if isinstance(scope, str) else None, memory_allowed=allowed,
                              tools=tools)
    delivered = knowledge is not None and knowledge.signature == meta.get("knowledge_delivered")
    return knowledge, delivered, left_out(builder, knowledge, pins)


def left_out(builder: KnowledgeBuilder, knowledge: Knowledge | None, pins: Sequence[str]) -> tuple[str, ...]:
    """What a block leaves out and why; with no block, what of the pins is left out."""
    return knowledge.problems if knowledge is not None else tuple(builder.pins(pins)[2])


def open_agent(workspace: Workspace, environ: Mapping[str, str],
               announce: Callable[[str], None] | None = None) -> Agent:
    """The agent of a process: its model client and every tool the process has. `announce`
    hears what a person waits for (the embedded model starting)."""
    return Agent(workspace, LLM(workspace.settings, environ, announce=announce), build_registry(workspace.settings))
