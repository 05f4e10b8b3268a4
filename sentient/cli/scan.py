"""`sentient scan`: judge files, folders or stdin with the threat patterns, a batch at a time."""

from __future__ import annotations

import argparse
import codecs
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from sentient.threats import Finding, PatternSet
    from sentient.workspace import Workspace

BINARY = "not text (it holds binary data)"
# Inputs are read, then scanned in one batch (scan_many), then printed: at most this many, or
# fewer holding SCANNED_CHARS characters. A batch that big is shared with helper processes,
# and pays its fixed costs once for megabytes.
SCANNED_TOGETHER = 5000
SCANNED_CHARS = 4_000_000
# Byte-order marks, UTF-32's first: its little-endian one begins with UTF-16's.
BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def add_parser(sub: Any) -> None:
    scan_cmd = sub.add_parser("scan", help="judge any text with the threat patterns")
    scan_cmd.add_argument("paths", nargs="*", help="files, folders, or - for stdin (default)")
    scan_cmd.add_argument("--json", action="store_true", help="one JSON object per input")
    scan_cmd.set_defaults(handler=cmd_scan)


def cmd_scan(args: argparse.Namespace, workspace: Workspace) -> int:
    flagged_any = unreadable_any = False
    for given, findings in _scanned(read_inputs(args.paths), workspace.judge.patterns):
        name, text = given.name, given.text
        if text is None:
            unreadable_any = True  # not judged: it must not pass for clean
            reason = given.error or given.not_text or BINARY
            if args.json:  # one object for every input, read or not
                print(json.dumps({"input": name, "flagged": False, "scanned": False, "reason": reason},
                                 ensure_ascii=False))
            if given.error is not None:
                sys.stdout.flush()  # after what was printed of the inputs before it
                print(f"error: {given.error}", file=sys.stderr)
            elif not args.json:
                print(f"{name}: {reason}, not scanned")
            continue
        flagged_any = flagged_any or bool(findings)
        if args.json:
            print(json.dumps({"input": name, "flagged": bool(findings),
                              "findings": [{"pattern": f.pattern_id, "class": f.class_, "description": f.description,
                                            "excerpt": f.excerpt, **({} if f.score is None else {"score": f.score})}
                                           for f in findings]}, ensure_ascii=False))  # fmt: skip
            continue
        if not findings:
            print(f"{name}: clean")
            continue
        print(f"{name}: FLAGGED")
        for finding in findings:
            print(f"    {finding.pattern_id} ({finding.class_}): {finding.excerpt}")
    return 2 if unreadable_any else 1 if flagged_any else 0


class Input(NamedTuple):
    """One input of `sentient scan`: its text; None when it is not text (`not_text` says why:
    binary data, or not UTF-8) or could not be read (`error` says why)."""

    name: str
    text: str | None
    error: str | None = None
    not_text: str | None = None


def _scanned(inputs: Iterator[Input], patterns: PatternSet) -> Iterator[tuple[Input, list[Finding]]]:
    """Each input with its findings, in order, scanned a batch at a time (see SCANNED_TOGETHER),
    so that a folder of many files is scanned as one batch would be (and by helper processes
    too)."""
    while True:
        group: list[Input] = []
        size = 0
        for given in inputs:
            group.append(given)
            size += len(given.text or "")
            if len(group) >= SCANNED_TOGETHER or size >= SCANNED_CHARS:
                break
        from sentient.threats import scan_many

        found = iter(scan_many([given.text for given in group if given.text is not None], patterns))
        for given in group:
            yield given, (next(found) if given.text is not None else [])
        if not group or (len(group) < SCANNED_TOGETHER and size < SCANNED_CHARS):
            return


def read_inputs(paths: Sequence[str]) -> Iterator[Input]:
    """Each input: '-' is stdin, a folder means every text file in it. A file that is not text
    has None for its text: a named one, or a .md file in a folder (it should be text); other
    binary files in a folder (images, say) are passed over. One that cannot be read has the
    reason as its error, and the inputs after it are read all the same."""
    for raw in paths or ["-"]:
        if raw == "-":
            text, why = decode(sys.stdin.buffer.read())
            yield Input("<stdin>", text, not_text=why)
            continue
        named = str(Path(raw))  # as the path is printed: "./notes/" is "notes", "./" is "."
        unlisted: list[OSError] = []
        files = _files_in(named, unlisted) if os.path.isdir(named) else [named]
        for error in unlisted:  # a folder that cannot be listed: what it holds is not scanned
            yield Input(str(error.filename), None, f"{error.filename}: the folder cannot be read ({error.strerror}); "
                                                   "check its permissions")
        for file in files:
            try:
                with open(file, "rb") as handle:
                    data = handle.read()
            except OSError as exc:
                yield Input(file, None, f"{file}: cannot be read ({exc.strerror}); check the path and its permissions")
                continue
            text, why = decode(data)
            # Binary files in a folder (images, say) are passed over; text that is not UTF-8 is not.
            if why != BINARY or file == named or Path(file).suffix == ".md":
                yield Input(file, text, not_text=why)


def _files_in(folder: str, errors: list[OSError]) -> list[str]:
    """The files under a folder but in .git and .sentient, named as pathlib joins them (no "./"
    in front) and in the order of their paths' parts (as pathlib sorts them); the folders it
    cannot list go to `errors`, in that order too. Symbolic links to files count (and links to
    nothing, which then cannot be read), links to folders are not followed (as os.walk).
    Strings and os.scandir, not Path objects: for a folder of thousands of notes that was a
    third of `sentient scan`'s reading."""
    found: list[tuple[str, ...]] = []
    folders: list[tuple[str, ...]] = [()]  # to list, the next one last
    while folders:
        parts = folders.pop()
        here = os.path.join(folder, *parts)
        try:
            with os.scandir(here) as listing:
                entries = sorted(listing, key=lambda entry: entry.name, reverse=True)
        except OSError as exc:
            errors.append(exc)
            continue
        for entry in entries:
            try:
                if entry.is_dir():
                    if entry.name not in (".git", ".sentient") and not entry.is_symlink():
                        folders.append((*parts, entry.name))
                elif entry.is_file() or (entry.is_symlink() and not os.path.exists(entry.path)):
                    found.append((*parts, entry.name))  # a link to nothing: reported, not passed over
            except OSError:  # gone since it was listed
                continue
    found.sort()
    if folder == ".":
        return [os.path.join(*parts) for parts in found]
    return [os.path.join(folder, *parts) for parts in found]


def decode(data: bytes) -> tuple[str | None, str | None]:
    """(the text of a file's bytes, None) by its byte-order mark (UTF-8, UTF-16 or UTF-32), else
    as UTF-8; (None, why not) for binary data (a NUL, without a mark that explains it) and for
    bytes that are not text in that encoding. Nothing is replaced by U+FFFD to be scanned: a
    byte of another encoding can hide an instruction ("ig\\xadnore", a Latin-1 soft hyphen)."""
    codec, start = "utf-8", 0
    for bom, named in BOMS:
        if data.startswith(bom):
            codec, start = named, len(bom)
            break
    else:
        if b"\x00" in data:
            return None, BINARY
    try:
        return data[start:].decode(codec), None
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start : exc.start + 1].hex().upper()
        name = codec.removesuffix("-le").removesuffix("-be").upper()
        return None, f"not {name} text (byte {start + exc.start:,} is 0x{byte}; re-save it as UTF-8)"
