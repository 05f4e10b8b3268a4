"""A task as its `task.md` says, checked: its schedule, time zone, model role, tools and pins.

A schedule is absent (the task runs only when asked), a cron line (`0 9 * * 1`, or `@daily`),
`every 30m` (or `6h`, `1d`), or `once 2026-12-24T09:00`. Cron lines and `once` times without an
offset are read in the task's `timezone`, else the vault's `timezone` setting, else the
machine's. Cron lines are read by cronsim (a small, maintained parser whose next-time search
handles daylight-saving changes), not by hand.

A task whose file says something that cannot be run (a bad schedule, an unknown time zone,
tool or role) is a `TaskProblem`: `sentient doctor` and the API name the file and the fix,
and the other tasks run as usual.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from sentient.config import Settings, zone_named
from sentient.errors import BadFile
from sentient.vault.document import Document
from sentient.vault.kinds import one_line

ROLES = ("chat", "helper", "extraction")
SCHEDULE_FIX = ("Write a cron line such as '0 9 * * 1' (Mondays at 09:00), 'every 30m' (or 6h, 1d), "
                "'once 2026-12-24T09:00', or leave schedule out to run the task only when asked")
ALIASES = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@weekly": "0 0 * * 0",
           "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *"}
_EVERY = re.compile(r"every\s+(\d+)\s*(m|min|mins|minutes?|h|hours?|d|days?|w|weeks?)", re.IGNORECASE)
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
LONGEST_EVERY = timedelta(days=366)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")


class TaskProblem(BadFile):
    """A task file that reads fine but cannot be run as it is; the other tasks are not affected."""


@dataclass(frozen=True)
class Schedule:
    text: str
    kind: Literal["cron", "every", "once"]
    cron: str = ""  # the five fields (an @alias written out)
    every: timedelta = timedelta(0)
    once: datetime | None = None  # as written: naive means in the task's zone

    @property
    def recurring(self) -> bool:
        return self.kind != "once"

    def next_after(self, moment: datetime, zone: ZoneInfo) -> datetime | None:
        """The first time after `moment` this schedule names (UTC); None when it names none
        (a `once` time that has passed)."""
        if self.kind == "every":
            return moment + self.every
        if self.kind == "once":
            at = self.at(zone)
            return at if at > moment else None
        return next(CronSim(self.cron, moment.astimezone(zone))).astimezone(UTC)

    def at(self, zone: ZoneInfo) -> datetime:
        """A `once` schedule's time, in UTC."""
        assert self.once is not None
        return (self.once if self.once.tzinfo else self.once.replace(tzinfo=zone)).astimezone(UTC)

    def describe(self, zone: ZoneInfo) -> str:
        """In words: 'At 09:00 on Monday (Europe/Berlin)', 'every 30 minutes'."""
        if self.kind == "every":
            seconds = int(self.every.total_seconds())
            for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
                if seconds % size == 0:
                    count = seconds // size
                    return f"every {count} {unit}{'s' if count != 1 else ''}" if count != 1 else f"every {unit}"
        if self.kind == "once":
            return f"once, at {self.at(zone).astimezone(zone).strftime('%Y-%m-%d %H:%M')} ({zone_label(zone)})"
        try:
            said = CronSim(self.cron, datetime.now(zone)).explain()
        except Exception:  # explain() is a nicety; the line itself was checked
            said = self.cron
        return f"{said} ({zone_label(zone)})"


def parse_schedule(text: str) -> Schedule:
    """A schedule from its text; ValueError saying what is wrong (SCHEDULE_FIX says how to write one)."""
    written = " ".join(text.split())
    lowered = written.lower()
    if lowered.startswith("every"):
        match = _EVERY.fullmatch(written)
        if match is None:
            raise ValueError(f"'{written}' is not an interval: write every 30m, every 6h or every 1d")
        seconds = int(match.group(1)) * _UNITS[match.group(2)[0].lower()]
        if seconds > LONGEST_EVERY.total_seconds():
            raise ValueError(f"'{written}' is longer than a year: use a cron line or 'once' for something that rare")
        every = timedelta(seconds=seconds)
        if every < timedelta(minutes=1):
            raise ValueError(f"'{written}' is too often: a task runs at most once a minute")
        return Schedule(written, "every", every=every)
    if lowered.startswith("once"):
        when = written[4:].strip()
        try:
            moment = datetime.fromisoformat(when)
        except ValueError:
            raise ValueError(f"'{when}' is not an ISO time such as 2026-12-24T09:00") from None
        return Schedule(written, "once", once=moment)
    line = ALIASES.get(lowered, written)
    if len(line.split()) != 5:
        raise ValueError(f"'{written}' is not a cron line: it needs five fields (minute hour day month weekday)")
    try:
        next(CronSim(line, datetime(2026, 1, 1, tzinfo=UTC)))
    except (CronSimError, StopIteration, ValueError) as exc:
        raise ValueError(f"'{written}' is not a cron line ({exc or 'it never fires'})") from None
    return Schedule(written, "cron", cron=line)


def zone_label(zone: ZoneInfo) -> str:
    return zone.key or str(zone)


def machine_zone() -> ZoneInfo:
    """The machine's time zone: $TZ, else the zone /etc/localtime names, else UTC."""
    for name in (os.environ.get("TZ", "").lstrip(":"), _localtime_name()):
        if name:
            try:
                return ZoneInfo(name)
            except (ZoneInfoNotFoundError, ValueError, OSError):
                continue
    return ZoneInfo("UTC")


def _localtime_name() -> str:
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        return ""
    _, found, name = target.partition("/zoneinfo/")
    return name if found else ""


def vault_zone(settings: Settings) -> ZoneInfo:
    """The zone a task without `timezone:` uses: the vault's setting, else the machine's."""
    return zone_named(settings.timezone) if settings.timezone else machine_zone()


@dataclass(frozen=True)
class TaskSpec:
    """What a task's file says, checked."""

    id: str
    path: Path
    title: str
    body: str  # goal, plan and anything else the person wrote, as written
    schedule: Schedule | None
    zone: ZoneInfo
    enabled: bool
    scope: str | None
    role: str
    tools: tuple[str, ...] | None  # None: every tool the run may have
    pins: tuple[str, ...]
    notify: bool
    created: datetime | None
    revision: str

    @property
    def recurring(self) -> bool:
        """Does it repeat (a cron line or an interval)? Its runs then remember the earlier ones."""
        return self.schedule is not None and self.schedule.recurring

    @property
    def goal(self) -> str:
        return sections(self.body)[0]

    @property
    def plan(self) -> str:
        return sections(self.body)[1]

    def describe(self) -> str:
        if self.schedule is None:
            return "when asked"
        return self.schedule.describe(self.zone)


def task_spec(document: Document, settings: Settings, tools: frozenset[str] | None = None) -> TaskSpec:
    """The task a `task.md` describes. TaskProblem (naming the field and the fix) when it cannot be
    run as it is. `tools`: the tools this process has, to check the task's list against."""
    meta = document.meta

    def problem(reason: str, fix: str) -> TaskProblem:
        return TaskProblem(document.path, reason, fix)

    schedule = None
    raw = meta.get("schedule")
    if isinstance(raw, str) and raw.strip():
        try:
            schedule = parse_schedule(raw)
        except ValueError as exc:
            raise problem(f"schedule: {exc}", SCHEDULE_FIX) from None
    zone = None
    own = meta.get("timezone")
    if isinstance(own, str) and own.strip():
        try:
            zone = zone_named(own)
        except ValueError as exc:
            raise problem(f"timezone: {exc}", "Fix the 'timezone:' line, or remove it to use the vault's") from None
    role = meta.get("role") if isinstance(meta.get("role"), str) else "chat"
    if role not in ROLES:
        raise problem(f"role: '{role}' is not a model role", f"Use one of {', '.join(ROLES)} (or remove the line)")
    listed = meta.get("tools")
    wanted = None
    if isinstance(listed, list) and "tools" in meta:
        wanted = tuple(str(name) for name in listed)
        unknown = [name for name in wanted if tools is not None and name not in tools]
        if unknown:
            raise problem(f"tools: no tool named {', '.join(unknown)}",
                          f"Use names from: {', '.join(sorted(tools or ()))}")
    pins = tuple(str(ref) for ref in meta.get("pins") or [])
    for ref in pins:
        kind, _, key = ref.partition(":")
        if kind not in ("note", "plan") or not key:
            raise problem(f"pins: {ref!r} is not a pin", "Write note:<id> or plan:<id>")
    created = meta.get("created")
    scope = meta.get("scope")
    zone = zone or vault_zone(settings)
    if schedule is not None:
        try:  # a time it can name (a date past year 9999 in its zone, say, cannot be)
            if schedule.kind == "once":
                schedule.at(zone)
            else:
                schedule.next_after(datetime.now(UTC), zone)
        except (OverflowError, ValueError) as exc:
            raise problem(f"schedule: '{schedule.text}' names no time Sentient can keep ({exc})",
                          SCHEDULE_FIX) from None
    return TaskSpec(
        id=document.key,
        path=document.path,
        title=one_line(document.title),
        body=document.body,
        schedule=schedule,
        zone=zone,
        enabled=meta.get("enabled") is not False,
        scope=scope if isinstance(scope, str) else None,
        role=role,
        tools=wanted,
        pins=pins,
        notify=meta.get("notify") is True,
        created=_moment(created) if isinstance(created, str) else None,
        revision=document.revision,
    )


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def sections(body: str) -> tuple[str, str]:
    """(goal, plan) of a task's body: the text under its 'Goal' and 'Plan' headings. A body without
    a Plan heading is all plan (but its Goal section)."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    rest: list[str] = []
    for line in body.splitlines():
        heading = _HEADING.match(line)
        if heading is not None:
            name = heading.group(1).strip().lower()
            current = found.setdefault(name, []) if name in ("goal", "plan") else rest
            if current is rest:
                rest.append(line)
            continue
        (current if current is not None else rest).append(line)
    goal = "\n".join(found.get("goal", [])).strip()
    plan = "\n".join(found["plan"]).strip() if "plan" in found else "\n".join(rest).strip()
    return goal, plan


def replace_sections(body: str, *, goal: str | None = None, plan: str | None = None) -> str:
    """The body with the text under its Goal and Plan headings replaced (each when given; a
    section it lacks is added). A body without a Plan heading is all plan (but its Goal):
    a new plan replaces it. Other sections stay as they are."""
    old_goal, old_plan = sections(body)
    lines = body.splitlines()
    has = {m.group(1).strip().lower() for m in map(_HEADING.match, lines) if m is not None}
    if "plan" not in has:
        return task_body(old_goal if goal is None else goal, old_plan if plan is None else plan)
    out: list[str] = []
    skipping = False
    for line in lines:
        heading = _HEADING.match(line)
        if heading is not None:
            name = heading.group(1).strip().lower()
            new = {"goal": goal, "plan": plan}.get(name)
            skipping = new is not None
            out.append(line)
            if skipping:
                out += ["", str(new).strip(), ""]
            continue
        if not skipping:
            out.append(line)
    text = "\n".join(out).rstrip("\n") + "\n"
    if goal is not None and "goal" not in has and goal.strip():
        text = f"## Goal\n\n{goal.strip()}\n\n" + text
    return text


def task_body(goal: str, plan: str) -> str:
    """A task's body from its goal and plan, as `sentient task add` and the API write it."""
    parts = []
    if goal.strip():
        parts.append(f"## Goal\n\n{goal.strip()}\n")
    parts.append(f"## Plan\n\n{plan.strip()}\n")
    return "\n".join(parts)
