"""Atomic, conditional file writes: a crash leaves the old file or the new one, never a torn one,
and a write never replaces a save it has not seen.

A conditional write (`expect`: the hash of the bytes the writer read) does not check the file and
then rename over it, since a person's editor can save in between. It reads the file under a read
lease (no other program may be writing it, and one that opens it for writing meanwhile is held
back and seen), checks the bytes and, last, that the name still holds that very file; then swaps
the new file and the old one in one step (Linux `renameat2(RENAME_EXCHANGE)`) and checks that what
came out is the file it read, not written since. If a save landed in the microseconds between, it
is swapped straight back, and what came back out is dropped only if it is exactly the text this
write put there (an editor that saved in that instant too has its save kept beside the file,
`<name>.conflict-<time>-<pid>-<n>`, named in the Conflict). Where there is no such swap (another
system, or a file system without it) the check and the rename are two steps, as
docs/vault-format.md says.

Temp files are named after their target, their writer's pid and the hashes of the text they were
made for and of the text it expected, so that `sweep` can tell, at the next start, a dead
writer's leftover (deleted) from a live writer's file (left alone) and from a save a write
displaced just before it was killed (moved to `.sentient/recovered/`, never deleted).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import os
import re
import signal
import stat
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path

from sentient.errors import AlreadyExists, BadFile, Conflict
from sentient.vault.document import TMP_SUFFIX, bytes_hash

log = logging.getLogger(__name__)

STALE_TEMP_SECONDS = 3600  # a write takes milliseconds: a temp file this old lost its writer, whatever its pid says
RECOVERED_DIR = "recovered"  # under .sentient/: saves a killed write had displaced and not yet put back


class _Absent:
    """Marker: the write requires that no file exists yet."""


ABSENT = _Absent()


def atomic_write(path: Path, text: str, expect: str | None | _Absent, temp_dir: Path | None = None, *,
                 durable: bool = True) -> str:
    """Write `text` to `path` so a crash leaves the old file or the new one, never a torn one.

    `durable=False` leaves out the two fsyncs (of the bytes, of the folder's entry): the write is
    still all or nothing, but a crash may lose it (the old file is then what is there). Only for
    what a crash may lose because it is recorded again anyway: a going run's step (a run cut off
    is marked failed at the next start). An fsync makes the file system commit its journal, and
    another process's durable write (a chat's session) waits for that commit.

    `expect` is the hash of the bytes the caller read (None: do not check; ABSENT: the file
    must not exist). If the file on disk is not those bytes, it is left as it is (or put back) and
    Conflict is raised; AlreadyExists when ABSENT and the file is there. The bytes go to a temp
    file first, in `temp_dir` when it is on the same file system (the person's folder, with
    whatever watches it, then sees one new name instead of a temp file made, written, closed and
    renamed), else beside the file. Returns the hash of the bytes written.
    """
    data = text.encode("utf-8")
    written = bytes_hash(data)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = _temp_file(path, temp_dir, written, None if isinstance(expect, _Absent) else expect)
    except OSError as exc:
        raise _unwritable(path, exc) from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), _mode_for(path))  # mkstemp makes 0600: the person's files keep theirs
            if durable:
                os.fsync(handle.fileno())
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _unwritable(path, exc) from None
        raise
    try:
        _place(tmp, path, expect, written)
    except OSError as exc:
        raise _unwritable(path, exc) from None
    if durable:
        _fsync_dir(path.parent)
    return written


def _place(tmp: Path, path: Path, expect: str | None | _Absent, written: str) -> None:
    """Give the written temp file the name `path`, on the condition `expect` (see atomic_write)."""
    if not isinstance(expect, str):
        try:
            if expect is None:
                os.replace(tmp, path)
            else:
                try:
                    os.link(tmp, path)  # fails if the file exists: no race with another creator
                except FileExistsError:
                    raise AlreadyExists(f"{path} already exists; choose another id or edit that file") from None
        finally:
            tmp.unlink(missing_ok=True)
        return
    try:
        # marked whole, and about to be swapped: from now on this name may hold the person's file
        ready = tmp.with_name(tmp.name.removesuffix(TMP_SUFFIX) + SWAP_MARK + TMP_SUFFIX)
        os.rename(tmp, ready)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    # a link (inside the vault: the vault reads no other) is written through: its file changes, it stays a link
    _swap_in(ready, Path(os.path.realpath(path)) if os.path.islink(path) else path, expect, written)


def file_hash_on_disk(path: Path) -> str | None:
    try:
        return bytes_hash(path.read_bytes())
    except FileNotFoundError:
        return None


def _swap_in(tmp: Path, path: Path, expect: str, written: str) -> None:
    """Put the temp file (`written`) at `path` if the file there is still `expect`.

    The file is opened and read, a read lease taken on it first where the system grants one (no
    other program may then be writing it, and one that opens it for writing is held back and
    seen), and checked (see _checked). Then the two files are swapped in one step, and what came
    out must be that same file, not written since: else a save landed in the microseconds
    between, and it is swapped straight back (see _settle). Where files cannot be swapped, the
    check and a rename are two steps (docs/vault-format.md)."""
    try:
        held = _Held(path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, FileNotFoundError):
            raise Conflict(path, expect, None) from None  # gone since it was read: nothing to replace
        raise
    with held:
        try:
            placed = _checked(held, path, expect)
            if not exchange(tmp, path):
                os.replace(tmp, path)
                return
        except BaseException as exc:
            tmp.unlink(missing_ok=True)  # nothing was swapped: it is this write's text
            if isinstance(exc, FileNotFoundError) and not os.path.lexists(path):
                raise Conflict(path, expect, None) from None
            raise
        _settle(tmp, path, held, placed, expect, written)


def _checked(held: _Held, path: Path, expect: str) -> tuple[int, int, int]:
    """The identity of the file named `path`, which must be the one `held` read, hold `expect`
    and not be open for writing by anyone; else Conflict, and nothing was touched."""
    if held.digest != expect:
        raise Conflict(path, expect, held.digest)  # changed: left as it is
    if not held.settled():
        raise Conflict(path, expect, held.digest, open_for_writing=True)  # being written: left as it is
    placed = _identity(path)  # the last step before the swap, the GIL held from here to it
    if not (stat.S_ISLNK(placed[2]) or placed[:2] == held.identity):  # a link: its file was read
        raise Conflict(path, expect, held.digest)  # replaced since it was read
    return placed


def _settle(tmp: Path, path: Path, held: _Held, placed: tuple[int, int, int], expect: str, written: str) -> None:
    """After the swap: keep it if what came out (`tmp`) is the file `held` read (`placed`), not
    written since; else swap back and raise Conflict. `tmp` holds the person's file or a save of
    theirs: nothing here deletes it unless it is exactly what was read or what was written."""
    try:
        if _identity(tmp) == placed and held.settled() and held.unchanged():
            os.unlink(tmp)  # the very file this write read, and nobody has written it since
            return
        # a save landed between the check and the swap: it goes straight back
        if not exchange(tmp, path):
            raise OSError(errno.EIO, "the file could not be swapped back", str(path))
        log.debug("%s: saved while a write was checking it; the save was put back", path)
    except BaseException:
        if os.path.lexists(tmp):
            _keep_beside(tmp, path, "a write failed half-way and could not put this save back")
        raise
    kept = _drop_if(tmp, written, path)  # what came back out: this write's text, or a save made meanwhile
    raise Conflict(path, expect, file_hash_on_disk(path), kept)


def _identity(path: Path) -> tuple[int, int, int]:
    """Which file has this name now, (device, inode, mode): the name itself, a link is not
    followed. By statx where there is one, without letting go of the GIL (see _libc)."""
    if _STATX is not None:
        return _STATX(path)
    found = os.lstat(path)
    return found.st_dev, found.st_ino, found.st_mode


def _drop_if(tmp: Path, digest: str, path: Path) -> Path | None:
    """Delete `tmp` if it holds exactly `digest` and nobody is writing it; else keep it beside
    `path` as a conflict copy and return where."""
    try:
        with _Held(tmp) as held:
            if held.digest == digest and held.settled():
                os.unlink(tmp)
                return None
    except OSError:
        pass  # unreadable now: kept, not guessed at
    return _keep_beside(tmp, path, "a save made while a write was putting the file back")


def _keep_beside(tmp: Path, path: Path, why: str) -> Path:
    """Move a save out of the temp folder to a new name beside `path`, never over a file."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    for number in range(1000):
        copy = path.with_name(f"{path.name}.conflict-{stamp}-{os.getpid()}-{number}")
        try:
            os.link(tmp, copy)
        except FileExistsError:
            continue
        except OSError:  # a file system without hard links: a new name, checked free just before
            if os.path.lexists(copy):
                continue
            os.rename(tmp, copy)
        else:
            os.unlink(tmp)
        log.warning("%s: %s; it is kept beside the file as %s", path, why, copy.name)
        return copy
    raise BadFile(path, f"{why}, and no free name was found beside it for it; it is still in {tmp}",
                  f"Move {tmp} beside the file and remove old '.conflict-' copies")


# --- the swap -------------------------------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
# renameat2's system call number, for a C library older than its wrapper (glibc before 2.28)
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "arm64": 276}
# what renameat2 answers where it, or the swap, is not there
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV}


def _libc() -> ctypes.CDLL | None:
    """The C library, called without letting go of the GIL (PyDLL): from a swap to the check of
    what it displaced and the swap back, no other thread of this process runs, so the instant a
    write's text is at a name it may not keep is as short as the system calls themselves."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.PyDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def _renameat2() -> Callable[[bytes, bytes, int], int] | None:
    libc = _LIBC
    if libc is None:
        return None
    wrapper = getattr(libc, "renameat2", None)
    if wrapper is not None:
        wrapper.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        wrapper.restype = ctypes.c_int
        return lambda old, new, flags: int(wrapper(_AT_FDCWD, old, _AT_FDCWD, new, flags))
    import platform  # only where the C library has no renameat2 wrapper

    number = _SYS_RENAMEAT2.get(platform.machine())
    syscall = getattr(libc, "syscall", None)
    if number is None or syscall is None:
        return None
    syscall.restype = ctypes.c_long
    return lambda old, new, flags: int(syscall(ctypes.c_long(number), ctypes.c_int(_AT_FDCWD), old,
                                               ctypes.c_int(_AT_FDCWD), new, ctypes.c_uint(flags)))


_RENAMEAT2 = _renameat2()


def _statx() -> Callable[[Path], tuple[int, int, int]] | None:
    statx = getattr(_LIBC, "statx", None) if _LIBC is not None else None
    if statx is None:
        return None
    statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_char_p]
    statx.restype = ctypes.c_int

    def identity(path: Path) -> tuple[int, int, int]:
        buffer = ctypes.create_string_buffer(256)  # struct statx
        if statx(_AT_FDCWD, os.fsencode(path), _AT_SYMLINK_NOFOLLOW, _STATX_BASIC_STATS, buffer) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(path))
        mode, = struct.unpack_from("=H", buffer, 28)
        ino, = struct.unpack_from("=Q", buffer, 32)
        major, minor = struct.unpack_from("=II", buffer, 136)
        return os.makedev(major, minor), ino, mode

    return identity


_AT_SYMLINK_NOFOLLOW = 0x100
_STATX_BASIC_STATS = 0x7FF
_STATX = _statx()


def exchange(first: Path, second: Path) -> bool:
    """Swap two files' names in one step; False (nothing done) where that cannot be done."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(os.fsencode(first), os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), str(second))


# --- is anyone still writing it? --------------------------------------------------------------

_F_SETLEASE = getattr(fcntl, "F_SETLEASE", None)
_F_GETLEASE = getattr(fcntl, "F_GETLEASE", None)
_F_SETSIG = getattr(fcntl, "F_SETSIG", None)


class _Held:
    """A file open for reading while a write decides about it: its hash, its identity, and
    whether another program may be writing it (an editor that saves in place). Linux tells by a
    read lease: refused while any open file writes to it, and broken, with the opener held back
    until this is closed, by the next open for writing (or truncate)."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.leased = _lease(self.fd)
            self.digest = _digest(self.fd)
            found = os.fstat(self.fd)
        except BaseException:
            os.close(self.fd)
            raise
        self.identity = (found.st_dev, found.st_ino)

    def settled(self) -> bool:
        """True unless another program was writing the file when it was read, or has opened it
        for writing since (where leases are not granted, only the bytes can tell)."""
        if self.leased is None:
            return True
        if not self.leased or _F_GETLEASE is None:
            return False
        return bool(fcntl.fcntl(self.fd, _F_GETLEASE) == fcntl.F_RDLCK)

    def unchanged(self) -> bool:
        """Whether it still holds the bytes read: the lease tells, where there is none they are read again."""
        return self.leased is True or _digest(self.fd) == self.digest

    def __enter__(self) -> _Held:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # releases the lease: a writer held back opens the file where it now is


def _digest(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return bytes_hash(b"".join(chunks))


def _lease(fd: int) -> bool | None:
    """Take a read lease: True, False when the file is open for writing, None when this system
    or file system grants none (not the file's owner, leases off, NFS...)."""
    if _F_SETLEASE is None or _F_SETSIG is None:
        return None
    try:
        # A broken lease signals its holder, SIGIO by default, which would end the process:
        # SIGURG is ignored unless handled, and no owner means no signal at all.
        fcntl.fcntl(fd, _F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_RDLCK)
    except BlockingIOError:
        return False
    except OSError:
        return None
    fcntl.fcntl(fd, fcntl.F_SETOWN, 0)
    return True


# --- temp files -----------------------------------------------------------------------------------

# .<name>.<pid>-<12 hex of the text written>-<12 hex of the text expected, or 'none'>.<random>[.swap].sentient-tmp
SWAP_MARK = ".swap"  # added once the temp file is whole, just before it is swapped with the file
_TEMP_NAME = re.compile(r"\.(.+)\.(\d+)-([0-9a-f]{12})-([0-9a-f]{12}|none)\.([a-z0-9_]+)((?:\.swap)?)"
                        + re.escape(TMP_SUFFIX))


def _temp_file(path: Path, temp_dir: Path | None, written: str, expect: str | None) -> tuple[int, str]:
    """A new temp file to write `path` through (see atomic_write): (its descriptor, its name)."""
    expected = expect.removeprefix("sha256:")[:12] if expect else "none"
    prefix = f".{path.name}.{os.getpid()}-{written.removeprefix('sha256:')[:12]}-{expected}."
    if temp_dir is not None:
        try:
            if os.stat(temp_dir).st_dev == os.stat(path.parent).st_dev:
                return tempfile.mkstemp(prefix=prefix, suffix=TMP_SUFFIX, dir=temp_dir)
        except OSError:  # gone, or not writable: beside the file, as always works
            pass
    return tempfile.mkstemp(prefix=prefix, suffix=TMP_SUFFIX, dir=path.parent)


def sweep(folder: Path) -> list[Path]:
    """Clear the temp files writers killed mid-write left in `folder` (.sentient/tmp/), at a
    process's start; returns what was moved to `.sentient/recovered/`.

    A temp file whose writer (the pid in its name) is alive is left alone, unless it is over an
    hour old (the pid was reused). A dead writer's is deleted unless it was marked for a swap
    (SWAP_MARK) and holds neither the text that writer was writing nor the text it had read: that
    is a save it displaced and was killed before putting back, moved to `.sentient/recovered/`
    and logged."""
    recovered: list[Path] = []
    cutoff = time.time() - STALE_TEMP_SECONDS
    with suppress(OSError), os.scandir(folder) as scan:
        for entry in scan:
            with suppress(OSError):
                if not entry.name.endswith(TMP_SUFFIX) or not entry.is_file(follow_symlinks=False):
                    continue
                old = entry.stat(follow_symlinks=False).st_mtime < cutoff
                named = _TEMP_NAME.fullmatch(entry.name)
                if named is None:  # named by an earlier version: by its age alone
                    if old:
                        os.unlink(entry.path)
                    continue
                if _alive(int(named[2])) and not old:
                    continue
                if not named[6]:  # never swapped: the writer's own text, whole or torn
                    os.unlink(entry.path)
                    continue
                digest = file_hash_on_disk(Path(entry.path))
                short = (digest or "").removeprefix("sha256:")[:12]
                if digest is None or short in (named[3], named[4]):
                    os.unlink(entry.path)
                    continue
                recovered.append(_recover(folder, Path(entry.path), named[1]))
    return recovered


def _recover(folder: Path, leftover: Path, target: str) -> Path:
    place = folder.parent / RECOVERED_DIR
    place.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    kept = place / f"{target}.{stamp}.{os.urandom(3).hex()}"
    os.rename(leftover, kept)
    log.warning("%s was a save of %s that a write killed mid-way had swapped out; it is kept as %s: "
                "compare it with the file and keep what you want", leftover.name, target, kept)
    return kept


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False
    return True


# --- the rest of a write ----------------------------------------------------------------------


def _unwritable(path: Path, exc: OSError) -> BadFile:
    """Why `path` cannot be written, naming the folder in the way when there is one."""
    for folder in path.parents:
        if os.path.isdir(folder):
            break
        if os.path.islink(folder):
            target = os.readlink(folder)
            return BadFile(folder, f"is a link to {target}, which does not exist, so nothing can be written in it",
                           "Fix the link or make it a folder")
        if os.path.lexists(folder):
            return BadFile(folder, "is a file where a folder should be, so nothing can be written in it",
                           "Move the file away and let Sentient make the folder")
    return BadFile(path, f"cannot be written ({exc.strerror or exc}); nothing was changed",
                   "Check that its folder can be written (permissions, free space)")


def _process_umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it: done once, at import
    os.umask(mask)
    return mask


_NEW_FILE_MODE = 0o666 & ~_process_umask()


def _mode_for(path: Path) -> int:
    """The permission bits a write gives `path`: the file's own, else what a new file gets (umask)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return _NEW_FILE_MODE


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
