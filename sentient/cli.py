"""The `sentient` command: parse, call one domain function, print.

What a command needs beyond the workspace and the scanner is imported by that command, not
here: the server (FastAPI, uvicorn) and the agent take most of a second to import, and the
model client, memory, doctor and knowledge modules another tenth, which every `sentient scan`
of one file would wait for.
"""

from __future__ import annotations

import argparse
import codecs
import errno
import json
import os
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, NamedTuple, TextIO

try:
    import readline
except ImportError:  # not on every platform; the chat works without line editing
    readline = None  # type: ignore[assignment]

from sentient import __version__
from sentient.config import NoVaultHere, Settings, load_settings
from sentient.errors import ConfigError, SentientError
from sentient.threats import Finding, PatternSet, parallel, scan_many
from sentient.vault.document import Document
from sentient.vault.kinds import KINDS, one_line
from sentient.workspace import Workspace, open_workspace

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
KIND_LABELS = {
    "memory": ("memory entry", "memory entries"),
    "note": ("pinned note", "pinned notes"),
    "plan": ("plan", "plans"),
    "skill": ("skill", "skills"),
    "session": ("session", "sessions"),
    "task": ("task", "tasks"),
    "notepad": ("notepad", "notepads"),
    "run": ("task run", "task runs"),
    "people": ("fact set", "fact sets"),
}


def _plural(count: int, kind: str) -> str:
    one, many = KIND_LABELS.get(kind, (kind, kind + "s"))
    return f"{count} {one if count == 1 else many}"


class Progress:
    """A one-line progress bar on stderr, drawn only for a terminal and only for long work."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < 500 or (done % 200 and done != total):
            return
        width = 30
        filled = width * done // max(total, 1)
        bar = "#" * filled + "." * (width - filled)
        print(f"\r{self.label} [{bar}] {done}/{total}", end="", file=self.stream, flush=True)
        self.drawn = True

    def finish(self) -> None:
        if self.drawn:
            print(file=self.stream)


# --- commands ---------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    from sentient.vault.layout import init_vault
    for step in init_vault(Path(args.path)):
        print(step)
    print(f"next: cd {args.path} && sentient doctor")
    return 0


def cmd_index(args: argparse.Namespace, workspace: Workspace) -> int:
    progress = Progress("indexing")
    index = workspace.index
    report = index.rebuild(progress) if args.rebuild else index.sync(progress)
    progress.finish()
    counts: dict[str, int] = {}
    for doc in index.documents():
        counts[doc.kind] = counts.get(doc.kind, 0) + 1
    held = ", ".join(_plural(counts[k], k) for k in KINDS if counts.get(k))
    print(f"{workspace.vault.root}: {held or 'nothing yet'}")
    problems = f"; {report.problems} unreadable (see `sentient doctor`)" if report.problems else ""
    print(
        f"indexed in {report.elapsed:.2f} s: {report.added} added, {report.updated} updated, "
        f"{report.removed} removed, {report.unchanged} unchanged{problems}"
    )
    return 0


def cmd_search(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.memory import judge_hit
    query = utf8_argument(" ".join(args.query), "the query")
    workspace.index.sync()
    hits = workspace.index.search(query, kind=args.kind, limit=args.limit)
    judged = [judge_hit(workspace, hit.kind, hit.key) for hit in hits]
    if args.json:
        rows = [
            {
                "kind": hit.kind,
                "id": hit.key,
                "path": str(hit.path),
                "title": one_line(hit.title),
                "snippet": hit.snippet,
                "score": round(hit.score, 4),
                "flagged": entry is not None and entry.flagged,
                "withheld": entry is not None and entry.withheld,
                "patterns": list(entry.patterns) if entry is not None else [],
            }
            for hit, entry in zip(hits, judged, strict=True)
        ]
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return 0
    if not hits:
        print("no matches")
        return 0
    for rank, (hit, entry) in enumerate(zip(hits, judged, strict=True), 1):
        mark = "!" if entry is not None and entry.withheld else ("~" if entry is not None and entry.flagged else " ")
        print(f"{rank:>2}.{mark}[{hit.kind}] {hit.key}  {one_line(hit.title)}  ({hit.score:.2f})")
        print(f"    {hit.path}")
        if entry is not None and entry.flagged:
            state = "allowed by you at this revision" if entry.allowed else "flagged: withheld from the model"
            print(f"    {state} ({', '.join(entry.patterns)}); see `sentient memory show {entry.ref}`")
        if hit.snippet:
            print(f"    {hit.snippet}")
    return 0


def _doctors_patterns(settings: Settings) -> tuple[PatternSet, str | None]:
    """(the vault's set, None), or (the shipped set, why the vault's own do not load): doctor
    reports a broken pattern as one problem and still examines everything else."""
    from sentient.workspace import load_patterns
    try:
        return load_patterns(settings), None
    except ConfigError as exc:
        return PatternSet.load(), exc.message


def cmd_doctor(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.doctor import allow_command, examine
    from sentient.llm import LLM
    from sentient.record import record, stale
    broken = getattr(args, "patterns_error", None)
    if broken:
        print(f"error: the vault's own threat patterns do not load: {broken}\n"
              "      until they do, `sentient serve` refuses to start, and this report judges with the "
              "shipped patterns alone" + (" (so --record writes nothing)" if args.record else ""), file=sys.stderr)
    if args.record and not broken:
        recorded = record(workspace)
        print(f"recorded the revision and judgment of {_plural(len(recorded.written), 'file')}")
        for path in recorded.written:
            print(f"  {path}")
        for message in recorded.failed:
            print(f"  not recorded: {message}")
    llm = None if args.no_models else LLM(workspace.settings, os.environ)
    try:
        diagnosis = examine(workspace, llm)
    finally:
        if llm is not None:
            llm.close()
    held = ", ".join(_plural(n, k) for k, n in diagnosis.counts.items() if n)
    print(f"vault {diagnosis.vault}: {held or 'empty'}")
    for note in diagnosis.notes:
        print(note)
    for check in diagnosis.models:
        state = "answers" if check.ok else "does NOT answer"
        print(f"model {check.model} ({', '.join(check.roles)}) {state}: {check.message}")
    if diagnosis.withheld:
        print(f"\n{len(diagnosis.withheld)} file(s) read like instructions; they are kept but never shown to "
              "the model:")
        for entry in diagnosis.withheld:
            print(f"  ! {entry.path}")
            for match in entry.matches:
                print(f"      {match}")
            print(f"      fine after all? allow it: {allow_command(entry, memory=workspace.settings.features.memory)}")
    if diagnosis.allowed:
        print(f"\n{len(diagnosis.allowed)} file(s) read like instructions but you allowed them at their current "
              "revision, so the model is shown them (an edit judges them again):")
        for entry in diagnosis.allowed:
            print(f"  ~ {entry.path}")
            for match in entry.matches:
                print(f"      {match}")
    if diagnosis.problems:
        print(f"\n{len(diagnosis.problems)} file(s) could not be read and are left out:")
        for problem in diagnosis.problems:
            print(f"  {problem.path}")
            print(f"      {problem.reason}. {problem.fix}")
    else:
        print("every file reads fine")
    if not args.record and (edited := len(stale(workspace))):
        print(f"{_plural(edited, 'file')} edited outside Sentient: the revision and threat judgment in their "
              "frontmatter are out of date (harmless: the index has the current ones); "
              "`sentient doctor --record` writes the current ones in")
    if broken:
        return 2
    return 0 if diagnosis.healthy else 1


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
                                            "excerpt": f.excerpt} for f in findings]}, ensure_ascii=False))
            continue
        if not findings:
            print(f"{name}: clean")
            continue
        print(f"{name}: FLAGGED")
        for finding in findings:
            print(f"    {finding.pattern_id} ({finding.class_}): {finding.excerpt}")
    return 2 if unreadable_any else 1 if flagged_any else 0


BINARY = "not text (it holds binary data)"
# Inputs are read, then scanned in one batch (scan_many), then printed: at most this many, or
# fewer holding SCANNED_CHARS characters. A batch that big is shared with helper processes,
# and pays its fixed costs once for megabytes.
SCANNED_TOGETHER = 5000
SCANNED_CHARS = 4_000_000
# Byte-order marks, UTF-32's first: its little-endian one begins with UTF-16's.
BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


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


def cmd_memory_list(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.memory import list_entries
    entries = list_entries(workspace, category=args.category, scope=args.scope, flagged_only=args.flagged)
    if args.json:
        print(json.dumps([e.as_dict() for e in entries], ensure_ascii=False, indent=2))
        return _not_listed(workspace)
    for entry in entries:
        mark = "!" if entry.withheld else ("~" if entry.flagged else " ")
        print(f"{mark} {entry.id:<32} {entry.title}")
        if entry.flagged:
            state = "allowed at this revision" if entry.allowed else "flagged, withheld from the model"
            print(f"    {state}: {', '.join(entry.patterns)}  ({entry.path})")
    flagged, withheld = sum(e.flagged for e in entries), sum(e.withheld for e in entries)
    print(f"{len(entries)} entries" + (f", {flagged} flagged ({withheld} withheld from the model, {flagged - withheld} "
                                       "allowed by you; see `sentient memory show ID`)" if flagged else ""))
    return _not_listed(workspace)


def _not_listed(workspace: Workspace) -> int:
    """Warn on stderr of the memory `memory list` left out: each folder that cannot be listed,
    then how many files cannot be read (doctor tells why, file by file). 1 if any, else 0."""
    from sentient.memory import unreadable_memory
    missing = unreadable_memory(workspace)
    for problem in missing:
        print(f"warning: {problem} (the entries in it are not listed)", file=sys.stderr)
    unread = sum(problem.kind == "memory" and problem not in missing for problem in workspace.index.problems())
    if unread:
        print(f"warning: {_plural(unread, 'memory file')} could not be read, so not listed; "
              "`sentient doctor` says why and how to fix each", file=sys.stderr)
    return 1 if missing or unread else 0


def cmd_memory_show(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.memory import get_entry
    entry = get_entry(workspace, args.id)
    if args.json:
        print(json.dumps(entry.as_dict(body=True), ensure_ascii=False, indent=2))
        return 0
    print(entry.title)
    print(f"{entry.path} · {entry.category or '-'} · {entry.scope or '-'} · source {entry.source or '-'}")
    print(f"revision {entry.revision}" + ("  (edited outside the app)" if entry.edited_outside else ""))
    if entry.flagged:
        print(f"allow revision {entry.allow_revision} (of its title, text, category and source; for --revision)")
    if entry.flagged:
        state = "allowed by you at this revision" if entry.allowed else "WITHHELD from the model"
        print(f"! reads like instructions: {state}")
        for match in entry.matches:
            print(f"    {match}")
        if entry.withheld:
            print(f"  fine after all? allow it: sentient memory allow {entry.ref}")
    print()
    print(entry.body, end="" if entry.body.endswith("\n") else "\n")
    return 0


def cmd_memory_add(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.memory import create_entry
    title = utf8_argument(args.title, "the title")
    body = read_stdin() if args.text == "-" else utf8_argument(args.text, "the text")
    meta = {"category": utf8_argument(args.category, "--category"), "scope": utf8_argument(args.scope, "--scope")}
    entry = create_entry(workspace, title=title, body=body, id=args.id, meta=meta)
    print(f"saved memory {entry.id} ({entry.path})")
    if entry.flagged:
        print(f"! it reads like instructions ({', '.join(entry.patterns)}): kept, but withheld from the model")
    return 0


def cmd_memory_forget(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.memory import forget_entry
    print(f"forgot memory {args.id} (removed {forget_entry(workspace, args.id)})")
    return 0


def cmd_memory_allow(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.memory import allow_entry
    entry = allow_entry(workspace, args.id, args.revision)
    print(f"allowed {entry.kind} {entry.id} ({entry.path}) at {entry.allow_revision}; an edit will judge it again")
    return 0


def utf8_argument(text: str, name: str) -> str:
    """The argument as given, or a SentientError naming it when it was not UTF-8: Python hands
    over the bytes of an argument that are not UTF-8 as lone surrogates (surrogateescape), which
    no file of the vault can hold and no search can match."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        at = len(text[: exc.start].encode("utf-8"))
        raise SentientError(f"{name} is not UTF-8 (byte {at}); type it again in UTF-8, or set the terminal's "
                            "encoding and the locale to UTF-8 (LANG=C.UTF-8, say)") from None
    return text


def read_stdin() -> str:
    """All of stdin, which must be UTF-8 (a byte-order mark is dropped); a SentientError saying
    where it is not."""
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SentientError(f"stdin is not UTF-8 (byte {exc.start}); convert it first, e.g. "
                            "`iconv -f latin1 -t utf-8 FILE | sentient memory add TITLE -`") from None


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (port 0: any free one), or a SentientError saying why not."""
    if not 0 <= port <= 65535:
        raise SentientError(f"--port {port}: a port is 1-65535, or 0 for any free port")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise SentientError(f"--host {host}: not an address to listen on ({exc}); use 127.0.0.1 (the default) "
                            "or an address of this machine") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)  # now: until it listens, a second server could bind the same port
    except OSError as exc:
        sock.close()
        fix = "choose another --port, or stop what listens there" if exc.errno == errno.EADDRINUSE else \
            "use 127.0.0.1 (the default), an address of this machine, or a port above 1023"
        raise SentientError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); {fix}") from None
    return sock


def bind(args: argparse.Namespace, settings: Settings) -> socket.socket:
    """The socket `serve` listens on, opened before the vault and its patterns load: a bad host
    or port, or one in use, is the first error (and the address printed is the real one)."""
    return listen(args.host or settings.api.host, settings.api.port if args.port is None else args.port)


def cmd_serve(args: argparse.Namespace, workspace: Workspace) -> int:
    import uvicorn

    from sentient.api.app import create_app
    from sentient.api.auth import load_or_create_token

    settings = workspace.settings
    host = args.host or settings.api.host
    sock: socket.socket = args.socket  # bound by `run` before anything else (see `bind`)
    port = sock.getsockname()[1]
    if host not in LOOPBACK:
        print(f"warning: listening on {host}, not only this machine: anyone who can reach it and has the "
              "token can read and change your vault", file=sys.stderr)
    token, created = load_or_create_token(settings.state_dir)
    shown_host = f"[{host}]" if ":" in host else host
    print(f"Sentient serves {settings.vault} at http://{shown_host}:{port}  (API docs: /docs?token=...)")
    if created:
        print(f"token (shown once; kept in {settings.state_dir / 'token'}): {token}")
    else:
        print(f"token: in {settings.state_dir / 'token'}")
    sys.stdout.flush()
    app = create_app(settings, environ=os.environ)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    with sock, suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn has stopped gracefully, then raises it again
        server.run(sockets=[sock])
    return 0 if server.started else 3  # 3: the app did not start (uvicorn logged why)


def cmd_chat(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.agent.turn import open_agent
    from sentient.chat import repl

    history = workspace.vault.state_dir / "chat_history"
    if readline is not None:
        with suppress(OSError):
            history.parent.mkdir(parents=True, exist_ok=True)
            readline.read_history_file(history)
    agent = open_agent(workspace, os.environ)
    try:
        return repl(agent, input, print)
    finally:
        agent.close()
        if readline is not None:
            with suppress(OSError):
                readline.write_history_file(history)


def cmd_session_list(args: argparse.Namespace, workspace: Workspace) -> int:
    workspace.index.sync()
    sessions = sorted(workspace.index.documents("session"), key=lambda d: d.updated or "", reverse=True)
    for doc in sessions[: args.limit]:
        print(f"{doc.key:<28} {doc.updated or '':<21} {doc.title}")
    return 0


def cmd_session_knowledge(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.agent.turn import session_knowledge

    knowledge, delivered, problems = session_knowledge(workspace, args.id)
    if knowledge is None:
        told = "no pin it may be shown" if problems else "no pins"
        print(f"nothing to tell this session ({told}, and no memory index in it)")
        for problem in problems:
            print(f"left out: {problem}")
        return 0
    print(knowledge.text, end="")
    state = "delivered: the session already carries it" if delivered else "not delivered: the next message carries it"
    print(f"\n{knowledge.signature}\n{state}")
    for problem in knowledge.problems:
        print(f"left out: {problem}")
    return 0


def cmd_session_pin(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.agent.turn import check_pins
    from sentient.knowledge import KnowledgeBuilder, require_pins
    from sentient.prompts import Prompts

    def pin(document: Document) -> Document:
        pinned = document.meta.get("pins") or []
        return document.replace({"pins": require_pins(workspace.vault, check_pins(args.pins), pinned)})

    pins = [str(ref) for ref in workspace.vault.update("session", args.id, transform=pin).meta["pins"]]
    print(f"pins of {args.id}: {', '.join(pins) or 'none'}")
    for problem in KnowledgeBuilder(workspace, Prompts(workspace.vault.root)).pin_problems(pins):
        print(f"  note: {problem}")
    return 0


# --- parser -----------------------------------------------------------------------------

Command = Callable[[argparse.Namespace, Workspace], int]
VAULT_HELP = ("the vault: a folder with a sentient.yaml (default: $SENTIENT_VAULT, else the nearest folder "
              "from the current one upwards that has a sentient.yaml)")


def count_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from low to high."""

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give one from {low} to {high}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range; give a number from {low} to {high}")
        return value

    return count


def entry_text(text: str) -> str:
    """An argparse type: an entry's text, which must say something (like its title)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty; write what the entry says, or - to read it from stdin")
    return text


def accept_global_options(parser: argparse.ArgumentParser) -> None:
    """--vault after the command as well as before it (`sentient search --vault X tea`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.add_argument("--vault", type=Path, default=argparse.SUPPRESS, help=VAULT_HELP)
                accept_global_options(child)


def build_parser(*, memory: bool = True) -> argparse.ArgumentParser:
    """The command line. With memory absent from the process there is no `memory` command."""
    parser = argparse.ArgumentParser(
        prog="sentient",
        description="A personal knowledge agent whose memory is a vault of markdown files.",
    )
    parser.add_argument("--vault", type=Path, help=VAULT_HELP)
    parser.add_argument("--version", action="version", version=f"sentient {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = sub.add_parser("init", help="make a new vault (git-ready)")
    init.add_argument("path", help="folder for the new vault")
    init.set_defaults(handler=None)

    index = sub.add_parser("index", help="bring the search index up to date")
    index.add_argument("--rebuild", action="store_true", help="redo the index from the files")
    index.set_defaults(handler=cmd_index)

    search = sub.add_parser("search", help="search the vault")
    search.add_argument("query", nargs="+", help="words to look for")
    search.add_argument("--kind", choices=sorted(KINDS), help="only this kind of file")
    search.add_argument("--limit", type=count_in(1, 100), default=10, help="how many hits, 1-100 (default 10)")
    search.add_argument("--json", action="store_true", help="print JSON")
    search.set_defaults(handler=cmd_search)

    doctor = sub.add_parser("doctor", help="report unreadable and flagged files and what to do")
    doctor.add_argument("--no-models", action="store_true", help="skip asking each model for a one-token answer")
    doctor.add_argument("--record", action="store_true",
                        help="write the current revision and threat judgment into files edited outside Sentient")
    doctor.set_defaults(handler=cmd_doctor)

    scan_cmd = sub.add_parser("scan", help="judge any text with the threat patterns")
    scan_cmd.add_argument("paths", nargs="*", help="files, folders, or - for stdin (default)")
    scan_cmd.add_argument("--json", action="store_true", help="one JSON object per input")
    scan_cmd.set_defaults(handler=cmd_scan)

    serve = sub.add_parser("serve", help="run the local API (chat, /v1, memory, sessions) and the file watcher")
    serve.add_argument("--host", help="address to listen on (default api.host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port, 1-65535 (default api.port, 8765; 0 picks a free one)")
    serve.set_defaults(handler=cmd_serve)

    chat = sub.add_parser("chat", help="chat with the agent in the terminal")
    chat.set_defaults(handler=cmd_chat)

    session = sub.add_parser("session", help="list sessions, show what a session is told, set its pins")
    verbs = session.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="recent sessions")
    listing.add_argument("--limit", type=count_in(1, 500), default=20, help="how many, 1-500 (default 20)")
    listing.set_defaults(handler=cmd_session_list)
    knowledge = verbs.add_parser("knowledge", help="the knowledge block of a session and whether it is delivered")
    knowledge.add_argument("id")
    knowledge.set_defaults(handler=cmd_session_knowledge)
    pin = verbs.add_parser("pin", help="set a session's pins (none to clear)")
    pin.add_argument("id")
    pin.add_argument("pins", nargs="*", help="note:ID or plan:ID")
    pin.set_defaults(handler=cmd_session_pin)
    if memory:
        add_memory_commands(sub)
    accept_global_options(parser)
    return parser


def add_memory_commands(sub: Any) -> None:
    """`sentient memory ...`: only where memory exists in the process."""
    memory = sub.add_parser("memory", help="list, show, add, forget and allow memory entries")
    verbs = memory.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="every entry, flagged ones marked")
    listing.add_argument("--category")
    listing.add_argument("--scope")
    listing.add_argument("--flagged", action="store_true", help="only flagged entries")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_memory_list)
    show = verbs.add_parser("show", help="one entry in full, with its judgment")
    show.add_argument("id", help="a memory entry's id, or note:ID, plan:ID, skill:ID ... or a path in the vault")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cmd_memory_show)
    add = verbs.add_parser("add", help="write a new entry")
    add.add_argument("title")
    add.add_argument("text", type=entry_text, help="the entry's text, or - to read it from stdin")
    add.add_argument("--id", help="its id (default: made from the title)")
    add.add_argument("--category", default="general")
    add.add_argument("--scope", default="global")
    add.set_defaults(handler=cmd_memory_add)
    forget = verbs.add_parser("forget", help="remove an entry's file")
    forget.add_argument("id")
    forget.set_defaults(handler=cmd_memory_forget)
    allow = verbs.add_parser("allow", help="let exactly this revision of a flagged entry through")
    allow.add_argument("id", help="a memory entry's id, or note:ID, plan:ID, skill:ID ... or a path in the vault")
    allow.add_argument("--revision", help="the revision you looked at (refused if it changed since)")
    allow.set_defaults(handler=cmd_memory_allow)


def _settings_for(argv: list[str]) -> Settings:
    """Settings of the vault the arguments name, read before the full parse (memory may be
    absent from the process, and then so are its commands)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--vault", type=Path)
    known, _ = pre.parse_known_args(argv)
    return load_settings(known.vault, os.environ)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = run(argv)
        sys.stdout.flush()  # here, so that a reader gone away is noticed here and not at exit
        return code
    except BrokenPipeError:  # `sentient doctor | head -1`: the reader has what it wanted
        with suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so that the flush at exit fails no more
        return 128 + 13  # as a process killed by SIGPIPE


def run(argv: list[str]) -> int:
    try:
        settings: Settings | None = _settings_for(argv)
        failure: SentientError | None = None
    except SentientError as exc:  # reported below unless the command needs no vault (init, --help)
        settings, failure = None, exc
    parser = build_parser(memory=settings is None or settings.features.memory)
    args = parser.parse_args(argv)
    try:
        if args.command == "init":
            return cmd_init(args)
        if settings is None and args.command == "scan" and isinstance(failure, NoVaultHere):
            settings = Settings(vault=Path.cwd())  # scan needs no vault: the packaged patterns judge
        if settings is None:
            raise failure or SentientError("no vault")
        handler: Command = args.handler
        if args.command == "scan" and any(os.path.isdir(path) for path in args.paths):
            parallel.warm_up()  # a folder may hold megabytes: helpers start while the patterns load
        if args.command == "doctor":
            args.patterns, args.patterns_error = _doctors_patterns(settings)
            if args.patterns_error is None:
                with open_workspace(settings, args.patterns) as workspace:
                    return handler(args, workspace)
            with tempfile.TemporaryDirectory(prefix="sentient-doctor-") as apart:  # an index of its own
                with open_workspace(settings, args.patterns, Path(apart) / "index.sqlite") as workspace:
                    return handler(args, workspace)
        if args.command != "serve":
            with open_workspace(settings) as workspace:
                return handler(args, workspace)
        with bind(args, settings) as args.socket, open_workspace(settings) as workspace:
            return handler(args, workspace)
    except SentientError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
