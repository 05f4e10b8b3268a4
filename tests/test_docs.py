"""Every setting and every command is documented."""

from __future__ import annotations

import argparse
from pathlib import Path

from sentient.cli import build_parser
from sentient.config import ModelRole, Settings
from sentient.sections import Section

DOCS = Path(__file__).resolve().parent.parent / "docs"


def setting_names(model: type[Section], prefix: str = "") -> list[str]:
    names = []
    for name, annotation in model.setting_types().items():
        optional = [arg for arg in getattr(annotation, "__args__", ()) if arg is not type(None)]
        if len(optional) == 1 and isinstance(optional[0], type) and issubclass(optional[0], Section):
            annotation = optional[0]  # a section that is None when absent (facts:)
        if name == "vault":
            continue
        if isinstance(annotation, type) and issubclass(annotation, Section) and annotation is not ModelRole:
            names += setting_names(annotation, f"{prefix}{name}.")
        elif annotation is ModelRole:
            names += [f"{prefix}{name}.{inner}" for inner in ModelRole.setting_types()] if name == "chat" else []
        else:
            names.append(prefix + name)
    return names


def test_every_setting_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text()
    missing = [name for name in setting_names(Settings) if f"`{name}`" not in text]
    assert missing == []
    assert "`models.helper.*`" in text and "`models.extraction.*`" in text


def commands(parser: argparse.ArgumentParser, prefix: str = "sentient") -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                inner = commands(sub, f"{prefix} {name}")
                found += inner or [f"{prefix} {name}"]
    return found


def test_every_command_is_documented() -> None:
    text = (DOCS / "cli.md").read_text()
    names = commands(build_parser(memory=True))
    assert "sentient memory allow" in names and "sentient serve" in names
    assert [name for name in names if f"`{name}" not in text] == []
