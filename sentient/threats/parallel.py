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
rarely waits for it. Helpers are started on first use, in the background: no batch waits for
them, and one that is not ready when a batch begins takes its parts from when it is. A helper
loads the shipped pattern set while it starts, so that set is never sent; it keeps the last few
sets it was sent, by fingerprint, and ends when this process does (its input closes).

A helper that stops, hangs, answers with an error, or is left mid-message (an interrupt) is
never asked again: its parts are scanned here, and it is killed and replaced on a later batch.
A batch holds its helpers until it ends; no other batch, and no `shutdown()`, touches them.

SENTIENT_SCAN_HELPERS sets the number of helper processes; by default one fewer than the
machine's CPUs (none on one CPU), and 0 turns them off. Not on Windows, where a pipe cannot be
polled.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import selectors
import subprocess
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)

# Characters in a batch before helpers are worth it (about 10 ms of scanning). Below it, the
# wait for a helper's last answer and the parts' own fixed costs ate what they gained: 500
# notes of 96 B (48,000 characters) ran at 13-15 MB/s with a helper, 17-23 without.
PARALLEL_FROM = 200_000
PARTS_EACH = 4  # a batch is cut into this many parts for each process scanning it (balance) ...
PART_CHARS = 25_000  # ... of at least this many characters (about 1 ms of scanning each) ...
MAX_PART_CHARS = 200_000  # ... and at most this many (so that a waiting part fits in a pipe)
PIPE_BYTES = 1 << 20  # what a helper's input pipe is asked to hold (Linux; less elsewhere)
SETS_KEPT = 4  # pattern sets a helper keeps (a vault's set changes rarely)
START_SECONDS = 60.0  # a helper not ready after this long is replaced
ANSWER_SECONDS = 120.0  # a helper silent this long with a part is taken for stuck (a part takes < 1 s)
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
    """One helper process, the pattern sets it holds, and the parts it has been sent.

    Only the batch holding `in_use` talks to it, and only a holder of `in_use` stops it."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # where the sentient package is
        path = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from sentient.threats.parallel import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env={**os.environ, "PYTHONPATH": path},
        )  # fmt: skip
        assert self.process.stdin is not None and self.process.stdout is not None
        self.input, self.output = self.process.stdin.fileno(), self.process.stdout.fileno()
        self.capacity = _widen(self.input)  # bytes its input holds without a write waiting
        self.started = time.monotonic()
        self.ready = threading.Event()
        self.broken = False  # never asked again; stopped by the next batch or shutdown
        self.stopping = False
        self.known: OrderedDict[str, None] = OrderedDict()  # keys of the sets it keeps (`_key`), oldest first
        self.in_use = threading.Lock()
        self.sent: deque[int] = deque()  # numbers of the parts it has and has not answered yet
        threading.Thread(target=self._wait_ready, name="threat-scan-helper-start", daemon=True).start()

    def _wait_ready(self) -> None:
        try:
            said, loaded = pickle.loads(_read(self.output))
            if said == "ready":
                if loaded is not None:  # the shipped set, loaded while it started
                    self.known[loaded] = None
                self.ready.set()
                return
        except (OSError, EOFError, ValueError, pickle.UnpicklingError):
            pass
        self.broken = True
        if not self.stopping:
            log.warning("a threat-scan helper did not start (see its error above); scanning in this process")

    def usable(self) -> bool:
        if not self.ready.is_set() and time.monotonic() - self.started > START_SECONDS:
            self.broken = True
        return self.ready.is_set() and not self.broken

    def request(self, work: Work[Result], patterns: Any, texts: Sequence[str]) -> bytes:
        """The message asking for `work(texts, patterns)`; with the set, unless the helper keeps it."""
        key = _key(patterns)
        sent = None if key in self.known else _pickled(patterns)
        return _framed((key, sent, pickle.dumps((work, list(texts)), protocol=pickle.HIGHEST_PROTOCOL)))

    def send(self, number: int, message: bytes, key: str) -> None:
        try:
            _write(self.input, message)
        except OSError as error:
            self.broken = True
            raise HelperFailed(f"the helper stopped ({error})") from error
        except BaseException:  # interrupted mid-message: the helper's input is out of step
            self.broken = True
            raise
        self.known[key] = None  # as the helper does: keep the newest SETS_KEPT
        self.known.move_to_end(key)
        while len(self.known) > SETS_KEPT:
            self.known.popitem(last=False)
        self.sent.append(number)

    def answer(self) -> Any:
        """The results of the oldest part sent (`sent[0]`, which the caller then drops)."""
        try:
            status, value = pickle.loads(_read(self.output))
        except (OSError, EOFError, ValueError, pickle.UnpicklingError) as error:
            self.broken = True
            raise HelperFailed(f"the helper stopped ({error})") from error
        except BaseException:  # interrupted mid-message
            self.broken = True
            raise
        if status != "ok":
            self.known.clear()  # it may not hold the set it was sent: send it again next time
            raise HelperFailed(f"the helper failed on a part: {value}")
        return value

    def stop(self, patience: float) -> None:
        """End it: close its input and wait up to `patience` seconds, then kill it."""
        self.stopping = True
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()  # a helper ends at the end of its input
            self.process.wait(timeout=patience)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


_lock = threading.Lock()
_helpers: list[_Helper] = []
_pickled_sets: OrderedDict[str, bytes] = OrderedDict()


def _key(patterns: Any) -> str:
    """What a helper keeps a set by: its fingerprint, and whether it scans without Hyperscan
    (the benchmark's pure-Python set has the fingerprint of the set it is timed against)."""
    return str(patterns.fingerprint) + ("" if getattr(patterns, "use_hyperscan", True) else "+pure")


def _pickled(patterns: Any) -> bytes:
    key = _key(patterns)
    found = _pickled_sets.get(key)
    if found is None:
        found = _pickled_sets[key] = pickle.dumps(patterns)
        while len(_pickled_sets) > SETS_KEPT:
            _pickled_sets.popitem(last=False)
    return found


def _take() -> list[_Helper]:
    """The helpers no other batch holds, ready or still starting, now held by the caller (release
    `in_use`). Broken helpers nobody holds are stopped, and helpers started up to helper_count()."""
    ending: list[_Helper] = []
    taken: list[_Helper] = []
    with _lock:
        wanted = helper_count()
        for helper in list(_helpers):
            helper.usable()  # one that never started is broken by now
            if (helper.broken or len(_helpers) > wanted) and helper.in_use.acquire(blocking=False):
                _helpers.remove(helper)
                ending.append(helper)
        try:
            while len(_helpers) < wanted:
                _helpers.append(_Helper())
        except OSError as error:  # no processes to be had here: scan alone
            log.warning("could not start a threat-scan helper (%s); scanning in this process", error)
        for helper in _helpers:
            helper.usable()  # a start that takes too long breaks it
            if not helper.broken and helper.in_use.acquire(blocking=False):
                taken.append(helper)
    for helper in ending:
        helper.stop(patience=0 if helper.broken else 1.0)
    return taken


def _release(helpers: list[_Helper]) -> None:
    for helper in helpers:
        if helper.sent:  # left with parts unanswered (this process was interrupted)
            helper.broken = True
            helper.sent.clear()
        helper.in_use.release()


def warm_up() -> None:
    """Start the helpers now, in the background, for big batches soon to come (`sentient scan`
    of a folder): they get ready while this process reads the files."""
    _release(_take())


def start(timeout: float = 60.0) -> bool:
    """Start the helpers and wait until they are ready (the benchmark and tests use this; a
    batch never waits). False when there are none or they did not start."""
    warm_up()
    with _lock:
        helpers = list(_helpers)
    return bool(helpers) and all(helper.ready.wait(timeout) and not helper.broken for helper in helpers)


def shutdown() -> None:
    """Stop the helpers no batch is using now (a batch's own stop when it ends: see `_release`)."""
    with _lock:
        idle = [helper for helper in _helpers if helper.in_use.acquire(blocking=False)]
        busy = [helper for helper in _helpers if helper not in idle]
        _helpers[:] = busy
    for helper in busy:
        helper.broken = True  # its batch finishes with it; the next batch stops it
    for helper in idle:
        helper.stop(patience=0 if helper.broken or not helper.ready.is_set() else 1.0)


@atexit.register
def _at_exit() -> None:
    """At exit nothing is waited for: helpers still scanning for a daemon thread are killed."""
    with _lock:
        helpers, _helpers[:] = list(_helpers), []
    for helper in helpers:
        helper.stop(patience=0 if helper.broken or helper.in_use.locked() or not helper.ready.is_set() else 1.0)


def scan_parts(texts: Sequence[str], patterns: Any, work: Work[Result]) -> list[Result]:
    """`work(texts, patterns)`, with the texts cut into parts that this process and the free
    helpers scan side by side; a helper still starting joins in when it is ready. `work` must be
    a module-level function (helpers import it)."""
    helpers = _take()
    try:
        size = sum(map(len, texts)) // (PARTS_EACH * (len(helpers) + 1))
        parts = _cut(texts, min(max(size, PART_CHARS), MAX_PART_CHARS))
        if len(parts) < 2 or not helpers:
            last.here, last.helpers = len(parts), 0
            return work(texts, patterns)
        starting = [helper for helper in helpers if not helper.ready.is_set()]
        ready = [helper for helper in helpers if helper not in starting]
        return _share(parts, patterns, work, ready, starting)
    finally:
        _release(helpers)


def _share(parts: list[Sequence[str]], patterns: Any, work: Work[Result], helpers: list[_Helper],
           starting: list[_Helper]) -> list[Result]:  # fmt: skip
    """Scan the parts here and in the helpers (a helper that fails is dropped from `helpers`);
    each of the `starting` ones is asked too from when it is ready."""
    results: list[list[Result] | None] = [None] * len(parts)
    pending = deque(range(len(parts)))  # helpers take from the left, this process from the right
    mine: list[int] = []  # parts given back by a helper that failed: this process scans them
    by_helpers = 0
    watch = selectors.DefaultSelector()

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
                helper.send(pending[0], message, _key(patterns))
            except HelperFailed as error:  # the part stays pending
                give_back(helper, error)
                return
            pending.popleft()

    def give_back(helper: _Helper, error: Exception) -> None:
        log.warning("threat-scan helper: %s; scanning its parts in this process", error)
        helper.broken = True
        mine.extend(helper.sent)
        helper.sent.clear()
        helpers.remove(helper)
        watch.unregister(helper.output)

    def join(helper: _Helper) -> None:
        helpers.append(helper)
        watch.register(helper.output, selectors.EVENT_READ, helper)  # its "ready" has been read
        feed(helper)

    try:
        for helper in list(helpers):
            helpers.remove(helper)
            join(helper)
        quiet_since = time.monotonic()
        while pending or mine or any(helper.sent for helper in helpers):
            if mine or pending:
                number = mine.pop() if mine else pending.pop()
                results[number] = work(parts[number], patterns)
            for helper in [helper for helper in starting if helper.usable() or helper.broken]:
                starting.remove(helper)
                if not helper.broken:
                    join(helper)
            asked = any(helper.sent for helper in helpers)
            events = watch.select(timeout=0 if mine or pending else ANSWER_SECONDS) if asked else []
            for key, _ in events:
                helper = key.data
                if helper not in helpers:  # given back since
                    continue
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
                quiet_since = time.monotonic()
                feed(helper)
            if asked and not events and time.monotonic() - quiet_since >= ANSWER_SECONDS:  # they are stuck
                for helper in [helper for helper in helpers if helper.sent]:
                    give_back(helper, HelperFailed(f"no answer in {ANSWER_SECONDS:.0f} s"))
                quiet_since = time.monotonic()
    finally:
        watch.close()
    last.here, last.helpers = len(parts) - by_helpers, by_helpers
    return [result for part in results for result in part or ()]


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
    """Ask for a pipe that holds PIPE_BYTES (Linux); what it holds now (PIPE_BUF if unknown)."""
    try:
        import fcntl

        try:
            fcntl.fcntl(descriptor, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:  # past the user's limit of pipe pages: keep what it has
            pass
        return int(fcntl.fcntl(descriptor, fcntl.F_GETPIPE_SZ))
    except (ImportError, AttributeError, OSError):
        return 512  # the least a pipe holds in one write (POSIX PIPE_BUF)


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
    """A helper's life: load the shipped pattern set, say ("ready", its key or None), then answer
    requests (a set's key, the pickled set or None, pickled (work, texts)) with ("ok", results)
    or ("error", why) until its input ends."""
    requests, answers = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # nothing else may write to the answers
    sys.stdout = sys.stderr
    known: OrderedDict[str, Any] = OrderedDict()
    shipped = _shipped()
    if shipped is not None:
        known[_key(shipped)] = shipped
    _write(answers, _framed(("ready", None if shipped is None else _key(shipped))))
    while True:
        try:
            request = _read(requests)
        except EOFError:
            return
        try:  # a request it cannot read (a function it cannot import) is answered too
            key, sent, job = pickle.loads(request)
            if sent is not None:
                known[key] = pickle.loads(sent)
            if key in known:  # the newest, as the caller counts them (`_Helper.send`)
                known.move_to_end(key)
                while len(known) > SETS_KEPT:
                    known.popitem(last=False)
            work, texts = pickle.loads(job)
            answer: tuple[str, object] = ("ok", work(texts, known[key]))
        except Exception as error:  # the caller scans the part itself, and logs why
            answer = ("error", f"{type(error).__name__}: {error}")
        _write(answers, _framed(answer))


def _shipped() -> Any:
    """The shipped pattern set, with its Hyperscan databases loaded, while a helper starts: a
    set sent to it compiles its expressions on arrival, a tenth of a second of the first part.
    None when it cannot be loaded (a set is then sent like any other)."""
    from sentient.threats.patterns import PatternSet  # the scanner, imported before saying ready

    try:
        patterns = PatternSet.load()
        _ = patterns.prefilter
    except Exception as error:  # whatever it is, the set is sent instead
        print(f"threat-scan helper: the shipped patterns did not load ({error}); they will be sent", file=sys.stderr)
        return None
    return patterns
