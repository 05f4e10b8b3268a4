"""Writes racing a person's editor: a write never replaces a save it has not seen (issue 21).

An editor process saves the way editors do (a temp file renamed over the file, or the file
rewritten in place), half its saves timed to land while a write is checking the file, while three
API clients PATCH the same entry and the agent's memory_remember updates it. Every save carries a
marker line; a save is accounted for when its marker is on disk at the end, or was in the text a
successful conditional write had read (and so carried on), or is in a copy kept beside the file
and named in a conflict message. Any other save was silently lost. Then each guard of
vault/atomic.py is driven step by step, with the save landing exactly where it guards.

Linux only: the editor watches with inotify, and the swap is renameat2's."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sentient.api.app import create_app
from sentient.config import load_settings
from sentient.errors import Conflict, SentientError
from sentient.tools.memory import memory_remember
from sentient.vault.atomic import _checked, _Held, _lease, _settle, _temp_file, atomic_write, exchange
from sentient.vault.document import bytes_hash
from tests.agent_support import SCRIPTED, agent_on
from tests.scripted import Scripted

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify and renameat2 are Linux's")

EDITOR_SAVES = 300
API_WRITERS = 3
API_SUCCESSES = 10  # PATCHes that must have gone through while the editor saved, or the race is run on
MARKER = re.compile(r"^editor-(\d+)$", re.MULTILINE)


def _markers(text: str) -> set[int]:
    return {int(found) for found in MARKER.findall(text)}


EDITOR = """
import ctypes, os, random, select, sys, time
path, first, saves, busy, slow = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
swap = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".swp")
libc = ctypes.CDLL(None, use_errno=True)
events = libc.inotify_init1(os.O_NONBLOCK)
assert libc.inotify_add_watch(events, os.path.dirname(path).encode(), 0x21) >= 0  # IN_OPEN | IN_ACCESS
pause = random.Random(first)


def drain():
    while True:
        try:
            os.read(events, 65536)
        except BlockingIOError:
            return


for number in range(first, first + saves):
    # Every other save comes as someone reads the file while a write is under way (its temp file
    # in .sentient/tmp/): a person saving at the worst moment. The others come after a while.
    drain()
    deadline = time.monotonic() + pause.uniform(0.002, 0.025) * slow
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([events] if number % 2 else [], [], [], left)[0]:
            break
        drain()
        if os.listdir(busy):
            break
    with open(path, encoding="utf-8") as handle:
        text = handle.read().rstrip("\\n") + f"\\neditor-{number}\\n"
    if number % 3 == 2:  # rewritten in place (the same inode), as vim with backupcopy=yes
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:  # a temp file renamed over it, as most editors save
        with open(swap, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(swap, path)
    print(number, flush=True)
"""


def _editor(path: Path, first: int, saves: int, slow: float = 1) -> list[int]:
    """A person's editor, in its own process: reads the file, adds a line, saves; two saves in
    three by renaming a temp file over it, one in three by rewriting the file in place, after
    2-25 ms (times `slow`) or as a write is under way. Returns the numbers of the saves it made."""
    busy = path.parent.parent / ".sentient" / "tmp"
    done = subprocess.run([sys.executable, "-c", EDITOR, str(path), str(first), str(saves), str(busy), str(slow)],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return [int(line) for line in done.stdout.split()]


def _api_writer(client: TestClient, number: int, done: threading.Event, bases: list[str],
                messages: list[str], failures: list[str]) -> None:
    """An API client: GET the entry, PATCH it with a line added, If-Match the revision it read."""
    count = 0
    while not done.is_set():
        got = client.get("/api/memory/shared")
        if got.status_code != 200:
            failures.append(f"GET {got.status_code}: {got.text}")
            continue
        entry = got.json()
        body = entry["body"].rstrip("\n") + f"\napi-{number}-{count}\n"
        sent = client.patch("/api/memory/shared", json={"body": body}, headers={"If-Match": entry["revision"]})
        if sent.status_code == 200:
            bases.append(entry["body"])  # the text this write had read, and carried on
        elif sent.status_code in (409, 412):
            messages.append(sent.json()["error"]["message"])
        else:
            failures.append(f"PATCH {sent.status_code}: {sent.text}")
        count += 1


def _agent_writer(vault: Path, done: threading.Event, texts: list[str], failures: list[str]) -> None:
    """The agent: reads the entry, then memory_remember with a line added (an update of its own
    entry when nobody edited it since, else a new entry beside it)."""
    agent = agent_on(vault)
    ctx = agent.context(incognito=False, channel="chat", session=agent.new_session())
    count = 0
    try:
        while not done.is_set():
            try:
                body = agent.workspace.vault.get("memory", "shared").body
            except SentientError:
                continue  # read mid-save: the model would read it again
            text = body.strip() + f"\nremember-{count}"
            said = memory_remember.call(ctx, {"title": "Shared", "text": text})
            if said == "Updated memory shared (memory/shared.md).":
                texts.append(text)
            count += 1
    except Exception as exc:
        failures.append(f"memory_remember: {exc!r}")
    finally:
        agent.workspace.close()


def test_no_editor_save_is_lost_to_api_or_agent_writes(
        make_vault: Callable[[str], Path], scripted: Scripted, caplog: pytest.LogCaptureFixture) -> None:
    vault = make_vault("basic")
    starter = agent_on(vault)
    ctx = starter.context(incognito=False, channel="chat", session=starter.new_session())
    assert memory_remember.call(ctx, {"title": "Shared", "text": "What the agent first remembered."}) \
        == "Saved memory shared (memory/shared.md)."
    starter.workspace.close()
    path = vault / "memory" / "shared.md"
    app = create_app(load_settings(vault, {"SENTIENT_MODEL": SCRIPTED}), environ={}, watch=False, schedule=False)
    bases: list[str] = []
    texts: list[str] = []
    messages: list[str] = []
    failures: list[str] = []
    done = threading.Event()
    caplog.set_level(logging.WARNING)
    with TestClient(app, base_url="http://localhost", headers={"Authorization": f"Bearer {app.state.token}"}) as client:
        writers = [threading.Thread(target=_api_writer, args=(client, n, done, bases, messages, failures))
                   for n in range(API_WRITERS)]
        writers.append(threading.Thread(target=_agent_writer, args=(vault, done, texts, failures)))
        for writer in writers:
            writer.start()
        saved = _editor(path, 0, EDITOR_SAVES)
        while len(bases) < API_SUCCESSES and len(saved) < 4 * EDITOR_SAVES:  # a busy machine: race on, the
            saved += _editor(path, len(saved), EDITOR_SAVES // 3, slow=4)  # editor slower, so writes get through
        done.set()
        for writer in writers:
            writer.join()
    assert failures == []
    assert saved == list(range(len(saved)))
    assert len(bases) >= API_SUCCESSES, "the API writers hardly wrote: no race was run"
    kept = sorted(path.parent.glob(f"{path.name}.conflict-*"))
    reported = "\n".join([*messages, *(record.getMessage() for record in caplog.records)])
    assert [copy.name for copy in kept if copy.name not in reported] == []  # every copy kept is named
    accounted = _markers(path.read_text(encoding="utf-8"))
    for text in [*bases, *texts, *(copy.read_text(encoding="utf-8") for copy in kept)]:
        accounted |= _markers(text)
    lost = sorted(set(saved) - accounted)
    assert lost == [], f"{len(lost)} of {len(saved)} editor saves silently lost: {lost}"


# --- each guard of a conditional write, driven step by step on real files ------------------------

PERSON = b"the person's save\n"
OURS = "the write's text\n"


def _leases_granted(folder: Path) -> bool:
    probe = folder / "probe"
    probe.write_bytes(b"")
    fd = os.open(probe, os.O_RDONLY)
    try:
        return _lease(fd) is True
    finally:
        os.close(fd)
        probe.unlink()


def _temp(path: Path, text: str) -> Path:
    """A temp file as atomic_write makes it, holding `text`, ready to be swapped in."""
    fd, name = _temp_file(path, None, bytes_hash(text.encode()), None)
    os.write(fd, text.encode())
    os.close(fd)
    return Path(name)


def _rename_save(path: Path, data: bytes) -> None:
    """An editor's save: a temp file renamed over the file."""
    swap = path.with_name(f".{path.name}.swp")
    swap.write_bytes(data)
    os.replace(swap, path)


@pytest.fixture
def note(tmp_path: Path) -> Path:
    path = tmp_path / "note.md"
    path.write_bytes(PERSON)
    return path


def test_a_write_on_a_file_changed_since_it_was_read_touches_nothing(note: Path) -> None:
    before = os.stat(note)
    with pytest.raises(Conflict) as caught:
        atomic_write(note, OURS, bytes_hash(b"what the writer read, before the person saved\n"))
    after = os.stat(note)
    assert note.read_bytes() == PERSON
    assert (after.st_ino, after.st_ctime_ns) == (before.st_ino, before.st_ctime_ns)  # not even swapped out and back
    assert caught.value.found == bytes_hash(PERSON) and caught.value.kept is None
    assert [path.name for path in note.parent.iterdir()] == ["note.md"]  # no temp file left, no copy
    assert atomic_write(note, OURS, bytes_hash(PERSON)) == bytes_hash(OURS.encode())
    assert note.read_text() == OURS and [path.name for path in note.parent.iterdir()] == ["note.md"]


def test_a_write_on_a_file_removed_since_it_was_read_makes_none(note: Path) -> None:
    note.unlink()
    with pytest.raises(Conflict) as caught:
        atomic_write(note, OURS, bytes_hash(PERSON))
    assert caught.value.found is None and list(note.parent.iterdir()) == []


def test_a_write_while_an_editor_has_the_file_open_for_writing_waits_for_the_save(note: Path) -> None:
    if not _leases_granted(note.parent):
        pytest.skip("this file system grants no leases: only the bytes can tell")
    with open(note, "r+b") as editor:  # an editor that saves in place, between opening and writing
        before = os.stat(note)
        with pytest.raises(Conflict) as caught:
            atomic_write(note, OURS, bytes_hash(PERSON))
        assert "is open for writing in another program" in str(caught.value)  # not "changed": it has not
        after = os.stat(note)
        assert (after.st_ino, after.st_ctime_ns) == (before.st_ino, before.st_ctime_ns)
        editor.write(b"saved in place\n")
        editor.truncate()
    assert note.read_bytes() == b"saved in place\n"
    assert [path.name for path in note.parent.iterdir()] == ["note.md"]


def test_a_save_between_reading_and_checking_the_file_is_a_conflict(note: Path) -> None:
    with _Held(note) as held:
        _rename_save(note, b"saved just after the read\n")
        with pytest.raises(Conflict):
            _checked(held, note, bytes_hash(PERSON))
    assert note.read_bytes() == b"saved just after the read\n"


def test_a_save_between_the_check_and_the_swap_is_swapped_straight_back(note: Path) -> None:
    tmp = _temp(note, OURS)
    with _Held(note) as held:
        placed = _checked(held, note, bytes_hash(PERSON))
        _rename_save(note, b"saved just before the swap\n")
        assert exchange(tmp, note)
        with pytest.raises(Conflict) as caught:
            _settle(tmp, note, held, placed, bytes_hash(PERSON), bytes_hash(OURS.encode()))
    assert note.read_bytes() == b"saved just before the swap\n"
    assert caught.value.kept is None
    assert [path.name for path in note.parent.iterdir()] == ["note.md"]


def test_a_save_made_while_the_write_swaps_back_is_kept_beside_and_named(
        note: Path, caplog: pytest.LogCaptureFixture) -> None:
    tmp = _temp(note, OURS)
    with _Held(note) as held:
        placed = _checked(held, note, bytes_hash(PERSON))
        _rename_save(note, b"first save\n")
        assert exchange(tmp, note)
        _rename_save(note, b"second save\n")  # over the write's text, in the instant it was there
        with pytest.raises(Conflict) as caught:
            _settle(tmp, note, held, placed, bytes_hash(PERSON), bytes_hash(OURS.encode()))
    kept = caught.value.kept
    assert kept is not None and kept.parent == note.parent and kept.name.startswith("note.md.conflict-")
    assert note.read_bytes() == b"first save\n" and kept.read_bytes() == b"second save\n"
    assert f"kept beside it as {kept.name}" in str(caught.value)
    assert kept.name in caplog.text
    assert sorted(path.name for path in note.parent.iterdir()) == sorted(["note.md", kept.name])


def test_an_editor_opening_the_file_for_writing_during_the_swap_keeps_its_save(note: Path) -> None:
    if not _leases_granted(note.parent):
        pytest.skip("this file system grants no leases: only the bytes can tell")
    tmp = _temp(note, OURS)

    def save_in_place() -> None:
        with open(note, "wb") as handle:  # held back by the lease until the write lets go
            handle.write(b"saved in place\n")

    with _Held(note) as held:
        placed = _checked(held, note, bytes_hash(PERSON))
        editor = threading.Thread(target=save_in_place)
        editor.start()
        deadline = time.monotonic() + 10
        while held.settled():
            assert time.monotonic() < deadline, "the editor never opened the file"
            time.sleep(0.001)
        assert exchange(tmp, note)
        with pytest.raises(Conflict):
            _settle(tmp, note, held, placed, bytes_hash(PERSON), bytes_hash(OURS.encode()))
    editor.join()
    assert note.read_bytes() == b"saved in place\n"
    assert [path.name for path in note.parent.iterdir()] == ["note.md"]


def test_a_write_through_a_link_writes_its_file_and_the_link_stays(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.md"
    target.write_bytes(PERSON)
    link = tmp_path / "note.md"
    link.symlink_to("elsewhere.md")
    atomic_write(link, OURS, bytes_hash(PERSON))
    assert link.is_symlink() and os.readlink(link) == "elsewhere.md"
    assert target.read_text() == OURS
