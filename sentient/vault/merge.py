"""The merge driver `sentient sync` gives git for markdown files: the frontmatter fields the app
derives on every write (`revision:`, `updated:`) never make a conflict by themselves.

git runs it as `python -m sentient.vault.merge %O %A %B %P` (base, ours, theirs, the path) and
takes what it leaves in the file %A when it exits 0; exit 1 is a conflict (the sync then keeps
both sides whole, see sentient/vault/sync.py). Each side's derived lines are set aside and the
three texts merged line by line with `git merge-file`; a clean merge gets them back: the side's
whose text the merge is, or, when both sides changed, the later `updated` and a `revision` of
the merged text (only when both sides' revisions were their text's: otherwise the file stays
marked as edited outside, and is judged again).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath

from sentient.errors import SentientError
from sentient.vault.document import parse
from sentient.vault.kinds import classify, kind

DERIVED = ("revision", "updated")
_LINE = re.compile(r"^(revision|updated):[ \t]*(.*?)[ \t]*$")
_HELD = "<derived by sentient>"


def split_derived(text: str) -> tuple[str, dict[str, str]]:
    """The text with each derived frontmatter line's value held back, and those values."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r") != "---":
        return text, {}
    values: dict[str, str] = {}
    for number in range(1, len(lines)):
        line = lines[number].rstrip("\r")
        if line in ("---", "..."):
            break
        found = _LINE.match(line)
        if found is not None:
            values[found[1]] = found[2]
            lines[number] = f"{found[1]}: {_HELD}" + ("\r" if lines[number].endswith("\r") else "")
    return "\n".join(lines), values


def _revision(text: str, path: str) -> str | None:
    """The content revision of `text` as the app computes it for the file at `path`; None when it is no document."""
    found = classify(PurePosixPath(path))
    if found is None:
        return None
    try:
        return parse(text, kind=found[0], key=found[1], path=Path(path), fields=kind(found[0]).fields).revision
    except SentientError:  # a file that does not parse has no revision to keep right
        return None


def _recorded(text: str, values: dict[str, str], path: str) -> bool:
    return "revision" in values and values["revision"] == _revision(text, path)


def merge(base: str, ours: str, theirs: str, path: str) -> tuple[str, bool]:
    """(the merged text, whether it merged cleanly)."""
    held = [split_derived(text) for text in (base, ours, theirs)]
    with tempfile.TemporaryDirectory(prefix="sentient-merge-") as folder:
        names = []
        for name, (text, _) in zip(("base", "ours", "theirs"), held, strict=True):
            names.append(os.path.join(folder, name))
            Path(names[-1]).write_bytes(text.encode("utf-8", "surrogateescape"))
        done = subprocess.run(["git", "merge-file", "-L", "ours", "-L", "base", "-L", "theirs", names[1], names[0],
                               names[2]], capture_output=True, check=False)
        merged = Path(names[1]).read_bytes().decode("utf-8", "surrogateescape")
    if done.returncode != 0:
        return merged, False
    (_, mine), (_, other) = held[1], held[2]
    if merged == held[1][0]:
        chosen = mine
    elif merged == held[2][0]:
        chosen = other
    else:
        chosen = {**other, **mine}
        if "updated" in mine and "updated" in other:
            chosen["updated"] = max(mine["updated"], other["updated"])
        if _recorded(ours, mine, path) and _recorded(theirs, other, path):
            revision = _revision(_restore(merged, chosen), path)  # of its title and text alone
            if revision is not None:
                chosen["revision"] = revision
    merged = _restore(merged, chosen)
    return merged, _HELD not in merged


def _restore(text: str, values: dict[str, str]) -> str:
    """`text` with the derived values given put back in place of the held ones."""
    for name in DERIVED:
        if name in values:
            text = text.replace(f"{name}: {_HELD}", f"{name}: {values[name]}", 1)
    return text


def main(argv: list[str]) -> int:
    base, ours, theirs, path = argv
    texts = [Path(name).read_bytes().decode("utf-8", "surrogateescape") for name in (base, ours, theirs)]
    merged, clean = merge(texts[0], texts[1], texts[2], path)
    if not clean:
        return 1  # git keeps the conflict; the sync keeps both sides whole
    Path(ours).write_bytes(merged.encode("utf-8", "surrogateescape"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
