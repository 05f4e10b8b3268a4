"""Facts about a caller: the body of `people/<user>/<persona>.md`, a markdown list of
`- **category**: one sentence`. Lines that are not facts are kept as they are."""

from __future__ import annotations

import re
from dataclasses import dataclass

FACT_LINE = re.compile(r"^- \*\*(?P<category>[^*\n]+)\*\*:[ \t]*(?P<sentence>.+?)[ \t]*$")


@dataclass(frozen=True)
class Fact:
    category: str
    sentence: str

    def render(self) -> str:
        return f"- **{self.category}**: {self.sentence}"


def parse_facts(body: str) -> list[Fact]:
    facts = []
    for line in body.splitlines():
        match = FACT_LINE.match(line)
        if match:
            facts.append(Fact(match.group("category").strip(), match.group("sentence")))
    return facts


def render_facts(facts: list[Fact]) -> str:
    return "".join(fact.render() + "\n" for fact in facts)
