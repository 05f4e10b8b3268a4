"""`pip install .` makes a working product: the wheel holds every file the code reads, and a
`sentient` installed from it, in a fresh venv outside the checkout, makes a vault, indexes it,
searches it and answers a chat turn (the scripted model, over HTTP).

Offline like CI: the wheel is installed with --no-deps, and the new venv finds the already
installed dependencies through a .pth file naming this interpreter's site-packages (the way a
`--system-site-packages` venv finds the system's). Those hold the checkout's editable install,
whose import hook a plain .pth line does not run; pip is told --ignore-installed so that it
neither skips the wheel for it nor uninstalls it, and the test checks that `sentient` is
imported from the new venv. Building the wheel fetches setuptools through pip's build isolation, from the package
index as any `pip wheel .` does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.scripted import call, text
from tests.scripted_http import ScriptedServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ folder of a fresh venv holding sentient from a wheel built off a copy of the
    package sources (so a file left lying in the checkout cannot slip into it)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "sentient", source / "sentient", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
                    "-w", str(work / "dist"), str(source)], check=True, cwd=work)
    (wheel,) = (work / "dist").glob("sentient-*.whl")
    target = work / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    ours = sysconfig.get_paths()
    (site / "installed_dependencies.pth").write_text(f"{ours['purelib']}\n{ours['platlib']}\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--ignore-installed", "--disable-pip-version-check", "-q", str(wheel)], check=True, cwd=work)
    return target / "bin"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SENTIENT_VAULT")}
    return {**env, "HOME": str(home), "SCRIPTED_KEY": "scripted", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _run(bin_dir: Path, *args: str, cwd: Path, stdin: str = "") -> str:
    done = subprocess.run([str(bin_dir / "sentient"), *args], cwd=cwd, env=_env(cwd), input=stdin,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"sentient {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_ships_the_templates_and_the_data(installed: Path) -> None:
    python = installed / "python"
    where = subprocess.run([str(python), "-c", "import sentient, sentient.prompts as p; "
                            "print(sentient.__file__); print(sorted(f.name for f in p.PACKAGE_TEMPLATES.iterdir()))"],
                           capture_output=True, text=True, check=True, cwd=installed, env=_env(installed)).stdout
    module, templates = where.splitlines()
    assert Path(module).is_relative_to(installed.parent), f"sentient imported from {module}, not the wheel"
    shipped = sorted(path.name for path in (ROOT / "sentient" / "templates").glob("*.j2"))
    assert templates == repr(shipped)


def test_an_installed_sentient_inits_indexes_searches_and_chats(installed: Path, tmp_path: Path) -> None:
    vault = tmp_path / "notes"
    print(_run(installed, "init", str(vault), cwd=tmp_path))
    (vault / "memory" / "anika.md").write_text("# Anika is a school teacher in Mysuru\n\nShe teaches maths.\n")
    with ScriptedServer() as model:
        with (vault / "sentient.yaml").open("a") as config:
            config.write(f"\nmodels:\n  chat:\n    model: openai/scripted\n    api_base: {model.base_url}\n"
                         "    api_key_env: SCRIPTED_KEY\n")
        indexed = _run(installed, "index", cwd=vault)
        assert "1 memory" in indexed, indexed
        found = _run(installed, "search", "Mysuru", cwd=vault)
        assert "anika" in found and "Anika is a school teacher in Mysuru" in found, found
        model.queue(call("memory_recall", query="Anika"), text("Anika teaches maths in Mysuru."))
        chatted = _run(installed, "chat", cwd=vault, stdin="Who is Anika?\n")
    assert "sentient> Anika teaches maths in Mysuru." in chatted, chatted
    first, second = model.requests[0], model.requests[1]
    assert first["messages"][0]["role"] == "system"  # rendered from the packaged system.md.j2
    assert "memory_recall" in [tool["function"]["name"] for tool in first["tools"]]
    assert "school teacher in Mysuru" in str(second["messages"])  # the tool ran in the installed package
