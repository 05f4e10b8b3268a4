"""Helpers: other processes scanning parts of a big batch, so that a vault's text is judged on
every core, not one.

`scan_many` hands a batch of at least PARALLEL_FROM characters to `scan_parts`, cut into parts.
Helper processes scan parts while this process scans parts too: helpers take parts from the
front, this process from the back, so a slow helper costs only its own share. Each part is
scanned by the same function as a batch scanned here, so the findings do not depend on who
scanned what.

A helper is `python -c "...serve()"`: it imports the scanner, says it is ready, then answers
requests on its standard input and output (a length, then a pickle). It never imports the
program that started it (as multiprocessing's spawn would), so it is safe beside the server's
threads and under any script. This process talks to its helpers between its own parts, from
the thread scanning (a thread of its own would wait for the interpreter's lock for up to 5 ms
at every answer), and keeps a second part waiting in each helper's input, so that a helper
rarely waits for it. Helpers are started on first use, in the background (this process scans
everything until they are ready, so no batch waits for them); they keep the pattern sets they
were sent, by fingerprint, and end when this process does (their input closes).

SENTIENT_SCAN_HELPERS sets the number of helper processes; by default one fewer than the
machine's CPUs (none on one CPU), and 0 turns them off. Not on Windows, where a pipe cannot be
polled.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import select
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)

PARALLEL_FROM = 40_000  # characters in a batch before helpers are worth their messages (~3 ms)
PARTS_EACH = 4  # a batch is cut into this many parts for each process scanning it (balance) ...
PART_CHARS = 5_000  # ... of at least this many characters (a message costs well under 0.1 ms)
MAX_PART_CHARS = 200_000  # ... and at most this many (so that a waiting part fits in a pipe)
PIPE_BYTES = 1 << 20  # what a helper's input pipe is asked to hold (Linux; 64 KB elsewhere)
ENVIRONMENT = "SENTIENT_SCAN_HELPERS"

Result = TypeVar("Result")
Work = Callable[[Sequence[str], Any], list[Result]]  # (texts, pattern set) -> one result per text


@dataclass
class Shares:
    """Who scanned the parts of the last batch (for the benchmark and the tests)."""

    here: int = 0
    helpers: int = 0


last = Shares()


def helper_count() -> int:
    """How many helper processes to use: SENTIENT_SCAN_HELPERS, else one fewer than the CPUs."""
    if os.name == "nt":
        return 0
    value = os.environ.get(ENVIRONMENT, "").strip()
    if not value:
        return max(0, (os.cpu_count() or 1) - 1)
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        log.warning("%s=%r is not a whole number of 0 or more; scanning without helpers. "
                    "Set it to 0 (none) or a number of processes", ENVIRONMENT, value)  # fmt: skip
        return 0
    return count


class HelperFailed(Exception):
    """A helper stopped or answered with an error; its part is scanned here instead."""


class _Helper:
    """One helper process, the pattern sets it holds, and the parts it has been sent."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # where the sentient package is
        path = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from sentient.threats.parallel import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env={**os.environ, "PYTHONPATH": path},
        )  # fmt: skip
        assert self.process.stdin is not None and self.process.stdout is not None
        self._input, self._output = self.process.stdin.fileno(), self.process.stdout.fileno()
        self.capacity = _widen(self._input)  # bytes its input holds without a write waiting
        self.ready = threading.Event()
        self.broken = False
        self.known: set[str] = set()  # fingerprints of the pattern sets it holds
        self.in_use = threading.Lock()  # held by the batch using it (two batches never share one)
        self.sent: deque[int] = deque()  # numbers of the parts it has and has not answered yet
        threading.Thread(target=self._wait_ready, name="threat-scan-helper-start", daemon=True).start()

    def _wait_ready(self) -> None:
        try:
            if pickle.loads(_read(self._output)) == "ready":
                self.ready.set()
                return
        except (OSError, EOFError, pickle.UnpicklingError):
            pass
        self.broken = True
        log.warning("a threat-scan helper did not start (see its error above); scanning in this process")

    def request(self, work: Work[Result], patterns: Any, texts: Sequence[str]) -> bytes:
        """The message asking for `work(texts, patterns)` (with the set, the first time)."""
        sent = None if patterns.fingerprint in self.known else _pickled(patterns)
        return _framed((work, patterns.fingerprint, sent, list(texts)))

    def send(self, number: int, message: bytes, fingerprint: str) -> None:
        try:
            _write(self._input, message)
        except OSError as error:
            self.broken = True
            raise HelperFailed(f"the helper stopped ({error})") from error
        self.known.add(fingerprint)
        self.sent.append(number)

    def answer(self) -> Any:
        """The results of the oldest part sent (`sent[0]`, which the caller then drops)."""
        try:
            status, value = pickle.loads(_read(self._output))
        except (OSError, EOFError, pickle.UnpicklingError) as error:
            self.broken = True
            raise HelperFailed(f"the helper stopped ({error})") from error
        if status != "ok":
            raise HelperFailed(f"the helper failed on a part: {value}")
        return value

    def stop(self) -> None:
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()  # the helper ends at the end of its input
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


_lock = threading.Lock()
_helpers: list[_Helper] = []
_pickled_sets: dict[str, bytes] = {}


def _pickled(patterns: Any) -> bytes:
    found = _pickled_sets.get(patterns.fingerprint)
    if found is None:
        found = _pickled_sets[patterns.fingerprint] = pickle.dumps(patterns)
    return found


def _running() -> list[_Helper]:
    """The helpers, started now if there are fewer than helper_count() (broken ones replaced)."""
    with _lock:
        for helper in [helper for helper in _helpers if helper.broken and not helper.in_use.locked()]:
            _helpers.remove(helper)
            helper.stop()
        wanted = helper_count()
        while len(_helpers) > wanted and not _helpers[-1].in_use.locked():
            _helpers.pop().stop()
        try:
            while len(_helpers) < wanted:
                _helpers.append(_Helper())
        except OSError as error:  # no processes to be had here: scan alone
            log.warning("could not start a threat-scan helper (%s); scanning in this process", error)
        return list(_helpers)


def start(timeout: float = 60.0) -> bool:
    """Start the helpers and wait until they are ready (the benchmark and tests use this; a
    batch never waits). False when there are none or they did not start."""
    helpers = _running()
    return bool(helpers) and all(helper.ready.wait(timeout) for helper in helpers)


@atexit.register
def shutdown() -> None:
    """Stop the helpers (they start again on the next big batch)."""
    with _lock:
        while _helpers:
            _helpers.pop().stop()


def scan_parts(texts: Sequence[str], patterns: Any, work: Work[Result]) -> list[Result]:
    """`work(texts, patterns)`, with the texts cut into parts that this process and the ready,
    free helpers scan side by side. `work` must be a module-level function (helpers import it)."""
    helpers = [h for h in _running() if h.ready.is_set() and not h.broken and h.in_use.acquire(blocking=False)]
    try:
        size = sum(map(len, texts)) // (PARTS_EACH * (len(helpers) + 1))
        parts = _cut(texts, min(max(size, PART_CHARS), MAX_PART_CHARS))
        if len(parts) < 2 or not helpers:
            last.here, last.helpers = len(parts), 0
            return work(texts, patterns)
        return _share(parts, patterns, work, list(helpers))
    finally:
        for helper in helpers:
            if helper.sent:  # left with parts unanswered (this process failed): replaced next time
                helper.broken = True
                helper.sent.clear()
            helper.in_use.release()


def _share(parts: list[Sequence[str]], patterns: Any, work: Work[Result], helpers: list[_Helper]) -> list[Result]:
    """Scan the parts here and in the helpers (a helper that stops is dropped from `helpers`)."""
    results: list[list[Result] | None] = [None] * len(parts)
    pending = deque(range(len(parts)))  # helpers take from the left, this process from the right
    mine: list[int] = []  # parts given back by a helper that failed: this process scans them
    by_helpers = 0

    def feed(helper: _Helper) -> None:
        """Keep two parts with the helper, one it scans and one waiting in its input, while
        there are more parts left than processes (a waiting part cannot be taken back)."""
        while pending and len(helper.sent) < 2 and not helper.broken:
            if helper.sent and len(pending) <= len(helpers) + 1:
                return
            message = helper.request(work, patterns, parts[pending[0]])
            if helper.sent and len(message) > helper.capacity:  # it would wait to be read
                return
            try:
                helper.send(pending[0], message, patterns.fingerprint)
            except HelperFailed as error:  # the part stays pending
                give_back(helper, error)
                return
            pending.popleft()

    def give_back(helper: _Helper, error: HelperFailed) -> None:
        log.warning("threat-scan helper: %s; scanning its parts in this process", error)
        mine.extend(helper.sent)
        helper.sent.clear()
        helpers.remove(helper)

    for helper in list(helpers):
        feed(helper)
    while pending or mine or any(helper.sent for helper in helpers):
        if mine or pending:
            number = mine.pop() if mine else pending.pop()
            results[number] = work(parts[number], patterns)
        for helper in _answering(helpers, wait=not (mine or pending)):
            try:
                answer = helper.answer()
            except HelperFailed as error:
                if helper.broken:
                    give_back(helper, error)
                    continue
                log.warning("threat-scan helper: %s; scanning that part in this process", error)
                mine.append(helper.sent.popleft())
            else:
                results[helper.sent.popleft()] = answer
                by_helpers += 1
            feed(helper)
    last.here, last.helpers = len(parts) - by_helpers, by_helpers
    return [result for part in results for result in part or ()]


def _answering(helpers: list[_Helper], wait: bool) -> list[_Helper]:
    """The helpers with an answer ready (waiting for one when `wait`)."""
    asked = {helper._output: helper for helper in helpers if helper.sent}
    if not asked:
        return []
    readable, _, _ = select.select(list(asked), [], [], None if wait else 0)
    return [asked[fd] for fd in readable]


def _cut(texts: Sequence[str], part_chars: int) -> list[Sequence[str]]:
    """Consecutive runs of texts of about `part_chars` characters each (at least one text)."""
    parts: list[Sequence[str]] = []
    start, size = 0, 0
    for number, text in enumerate(texts):
        size += len(text)
        if size >= part_chars:
            parts.append(texts[start : number + 1])
            start, size = number + 1, 0
    if start < len(texts):
        parts.append(texts[start:])
    return parts


def _widen(descriptor: int) -> int:
    """Ask for a pipe that holds PIPE_BYTES (Linux); what it holds now."""
    try:
        import fcntl

        fcntl.fcntl(descriptor, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        return int(fcntl.fcntl(descriptor, fcntl.F_GETPIPE_SZ))
    except (ImportError, AttributeError, OSError):
        return 1 << 16  # the usual size elsewhere


def _framed(value: object) -> bytes:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(8, "big") + data


def _write(descriptor: int, message: bytes) -> None:
    view = memoryview(message)
    while view:
        view = view[os.write(descriptor, view) :]


def _read(descriptor: int) -> bytes:
    """One message: its length, then that many bytes."""
    size = int.from_bytes(_exactly(descriptor, 8), "big")
    return _exactly(descriptor, size)


def _exactly(descriptor: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(descriptor, min(size, 1 << 20))
        if not chunk:
            raise EOFError("the helper's output ended")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def serve() -> None:
    """A helper's life: answer requests (work, fingerprint, pickled set or None, texts) with
    ("ok", results) or ("error", why) until its input ends."""
    requests, answers = sys.stdin.fileno(), sys.stdout.fileno()
    sys.stdout = sys.stderr  # nothing else may write to the answers
    import sentient.threats  # noqa: F401  (the scanner, imported before saying ready)

    known: dict[str, Any] = {}
    _write(answers, _framed("ready"))
    while True:
        try:
            request = _read(requests)
        except EOFError:
            return
        try:  # a request it cannot even read (a function it cannot import) is answered too
            work, fingerprint, sent, texts = pickle.loads(request)
            if sent is not None:
                known[fingerprint] = pickle.loads(sent)
            answer: tuple[str, object] = ("ok", work(texts, known[fingerprint]))
        except Exception as error:  # the caller scans the part itself, and logs why
            answer = ("error", f"{type(error).__name__}: {error}")
        _write(answers, _framed(answer))
