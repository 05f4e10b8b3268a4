"""One extraction: the caller's unread turns and the current set in, a replacement set out,
checked, and written as the difference in one atomic conditional step.

The model answers `{"facts": [{"category": "...", "text": "..."}]}`, asked for under that JSON
schema (`reply_format`), which a model that decodes under a schema cannot leave. A reply is
refused whole (nothing written) when it is not that JSON, has a category that is not one short
lowercase word, a sentence that is empty, longer than facts.max_chars, more than one line or
saying one sentence twice (a small model looping), more facts than facts.max_facts, a fact that
reads like instructions (the model that wrote it read text that steers models, so none of its
reply is trusted), or fewer than half the facts the model was shown (a rewrite that loses that
much is more likely a slip than a change of mind). Duplicates (same category and text, ignoring
case and spacing) are dropped.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from sentient.config import CHARS_PER_TOKEN, FactSettings
from sentient.errors import SentientError
from sentient.facts.sets import FactSet, ShownFact
from sentient.knowledge import quoted
from sentient.prompts import Prompts
from sentient.vault.people import FACT_LINE, Fact

TEMPLATE = "fact_extraction.md.j2"
CATEGORY = re.compile(r"[a-z][a-z0-9-]{0,23}")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
KEEP_AT_LEAST = 0.5  # of the facts shown, for a set of MIN_GUARDED or more
MIN_GUARDED = 4


class Refused(SentientError):
    """A reply the extraction does not write; the message says why."""


class _Fact(BaseModel):
    model_config = ConfigDict(extra="ignore")

    category: str
    text: str

    @field_validator("category")
    @classmethod
    def _word(cls, value: str) -> str:
        word = value.strip().lower()
        if not CATEGORY.fullmatch(word):
            raise ValueError(f"{value!r} is not one short lowercase word (a-z, 0-9, '-', at most 24)")
        return word

    @field_validator("text")
    @classmethod
    def _sentence(cls, value: str) -> str:
        sentence = " ".join(value.split())
        if not sentence:
            raise ValueError("is empty")
        if len(value.strip().splitlines()) > 1:
            raise ValueError("is more than one line")
        parts = [part.lower().rstrip(".!?") for part in SENTENCE_END.split(sentence)]
        if len(set(parts)) < len(parts):
            raise ValueError("says the same sentence twice (the model is looping)")
        return sentence


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    facts: list[_Fact]


@dataclass(frozen=True)
class Turn:
    role: str  # user or assistant
    text: str


def prompt(prompts: Prompts, current: list[ShownFact], turns: list[Turn], settings: FactSettings) -> str:
    return prompts.render(TEMPLATE, facts=current, turns=[Turn(t.role, quoted(t.text.strip())) for t in turns],
                          max_facts=settings.max_facts, max_chars=settings.max_chars)


def fewest(shown: int) -> int:
    """The fewest facts a reply may hold when the model was shown `shown` (the half rule)."""
    return math.ceil(shown * KEEP_AT_LEAST) if shown >= MIN_GUARDED else 0


def reply_format(settings: FactSettings, shown: int) -> dict[str, Any]:
    """The OpenAI `response_format` an extraction asks for: JSON under the reply's schema (both
    caps and the half rule included), so a model that decodes under a schema (the embedded one,
    Ollama, OpenAI) can only answer in the shape `validate` takes; one that does not is still
    validated."""
    fact = {"type": "object", "additionalProperties": False, "required": ["category", "text"],
            "properties": {"category": {"type": "string", "pattern": f"^{CATEGORY.pattern}$"},
                           "text": {"type": "string", "minLength": 1, "maxLength": settings.max_chars}}}
    facts = {"type": "array", "minItems": min(fewest(shown), settings.max_facts), "maxItems": settings.max_facts,
             "items": fact}
    schema = {"type": "object", "additionalProperties": False, "required": ["facts"], "properties": {"facts": facts}}
    return {"type": "json_schema", "json_schema": {"name": "facts", "schema": schema}}


JSON_PER_FACT = 16  # tokens of the JSON around one fact: its category, keys, quotes and commas


def reply_tokens(settings: FactSettings, shown: list[ShownFact], turns: list[Turn]) -> int:
    """An extraction's max_tokens: room for what a reply can hold (the facts it keeps, what it
    adds from the conversation, the JSON around each), and never more than a whole set at both
    caps. A model's default for an answer is often shorter (a full set would be cut off), and a
    small model that loops inside the JSON stops here instead of running to facts.timeout."""
    text = sum(len(fact.sentence) + len(fact.category) for fact in shown) + sum(len(turn.text) for turn in turns)
    full = settings.max_facts * (settings.max_chars // CHARS_PER_TOKEN + JSON_PER_FACT) + JSON_PER_FACT
    return min(full, text // CHARS_PER_TOKEN + settings.max_facts * JSON_PER_FACT + JSON_PER_FACT)


def _json_object(text: str) -> Any:
    """The JSON object in a model's reply (a code fence or words around it are allowed); of a
    reply cut off inside its list of facts, the facts it finished (`_cut_off`)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise Refused("the reply holds no JSON object")
    try:
        return json.loads(text[start : end + 1])
    except ValueError as exc:
        finished = _cut_off(text[start:])
        if finished is None:
            raise Refused(f"the reply is not valid JSON ({exc})") from None
        return finished


_FACTS_OPEN = re.compile(r'\{\s*"facts"\s*:\s*\[')


def _cut_off(text: str) -> dict[str, Any] | None:
    """{"facts": [...the whole facts...]} of a reply that stops inside its list of facts, as a small
    model's does when it repeats itself until max_tokens; None for any other broken JSON (a list
    that closes, or nothing whole in it), which is refused as it is."""
    opened = _FACTS_OPEN.match(text)
    if opened is None:
        return None
    decoder, position, facts = json.JSONDecoder(), opened.end(), []
    while True:
        position = len(text) - len(text[position:].lstrip())
        try:
            fact, position = decoder.raw_decode(text, position)
        except ValueError:
            break
        facts.append(fact)
        rest = text[position:].lstrip()
        if not rest.startswith(","):
            return None  # the list goes on with something else, or closes: not a reply cut off
        position = len(text) - len(rest) + 1
    return {"facts": facts} if facts and "]" not in text[position:] else None


def key_of(fact: Fact) -> tuple[str, str]:
    """What two facts are the same by: category and text, ignoring case and spacing."""
    return " ".join(fact.category.lower().split()), " ".join(fact.sentence.lower().split())


def validate(text: str, shown: list[ShownFact], settings: FactSettings, flagged: Any) -> list[Fact]:
    """The replacement set in a reply, checked (see the module's docstring); Refused otherwise.
    `flagged(text) -> tuple[str, ...]` gives the threat patterns a fact matches."""
    try:
        reply = _Reply.model_validate(_json_object(text))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        shape = '{"facts": [{"category", "text"}]}'
        raise Refused(f"the reply is not {shape}: {where}: {first['msg']}") from None
    facts: list[Fact] = []
    seen: set[tuple[str, str]] = set()
    for item in reply.facts:
        if len(item.text) > settings.max_chars:
            raise Refused(f"a fact is {len(item.text)} characters, over facts.max_chars ({settings.max_chars}): "
                          f"{item.text[:60]!r}...")
        fact = Fact(item.category, item.text)
        if key_of(fact) in seen:
            continue
        seen.add(key_of(fact))
        facts.append(fact)
    if len(facts) > settings.max_facts:
        raise Refused(f"the reply has {len(facts)} facts, over facts.max_facts ({settings.max_facts})")
    for fact in facts:
        patterns = flagged(fact.render())
        if patterns:
            raise Refused(f"a fact reads like instructions ({', '.join(patterns)}): {fact.render()[:80]!r}; "
                          "none of the reply is kept")
    if len(facts) < fewest(len(shown)):
        raise Refused(f"the reply keeps {len(facts)} of the {len(shown)} facts it was shown; a rewrite that loses "
                      "more than half is taken for a slip and not written")
    return facts


def merged_body(body: str, shown: list[ShownFact], new: list[Fact]) -> str:
    """The body with the difference applied: facts the model was shown and left out are
    removed, facts it kept stay as written where they are, new ones follow the last fact line.
    Lines that are not facts, and withheld facts (the model never saw them), stay as they are."""
    wanted = {key_of(fact) for fact in new}
    shown_keys = {key_of(fact.fact) for fact in shown if not fact.withheld}
    kept: set[tuple[str, str]] = set()
    lines: list[str] = []
    last_fact = -1
    for line in body.splitlines():
        match = FACT_LINE.match(line)
        if match:
            key = key_of(Fact(match.group("category").strip(), match.group("sentence")))
            if key in shown_keys and key not in wanted:
                continue  # shown and dropped
            kept.add(key)
            last_fact = len(lines)
        lines.append(line)
    added = [fact.render() for fact in new if key_of(fact) not in kept]
    if last_fact < 0:
        while lines and not lines[-1].strip():
            lines.pop()
        if lines:
            lines.append("")
        lines += added
    else:
        lines[last_fact + 1 : last_fact + 1] = added
    return "\n".join(lines) + "\n" if lines else ""


def changed(current: FactSet, new: list[Fact]) -> bool:
    """Does the replacement differ from what the model was shown?"""
    return {key_of(fact.fact) for fact in current.visible} != {key_of(fact) for fact in new}
