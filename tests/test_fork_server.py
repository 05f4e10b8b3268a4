"""The fork server's ending: a SIGTERM from serve while it is already leaving (its socket closed,
the interpreter shutting down) ends it quietly, not with a traceback in serve's output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import os, signal, socket, sys
from sentient.tasks.forks import serve_forks
ours, theirs = socket.socketpair()
ours.close()  # serve gone: the loop returns at once
code = serve_forks(theirs.detach(), lambda payload: 0, idle=60)
print("ignored" if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN else "handled", flush=True)
os.kill(os.getpid(), signal.SIGTERM)  # serve stopping it as it leaves
sys.exit(code)
"""


def test_a_sigterm_while_the_fork_server_leaves_is_ignored() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.strip() == "ignored", done.stderr
    assert "Traceback" not in done.stderr


def test_the_first_sigterm_ends_the_loop_and_a_second_is_ignored() -> None:
    from sentient.tasks import forks

    before = signal.getsignal(signal.SIGTERM)
    try:
        try:
            forks._stop(signal.SIGTERM, None)
        except SystemExit as exc:
            assert exc.code == 0
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)
