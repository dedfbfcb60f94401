"""The install the image and any host use (``deploy/install.sh``): a wheel built from this checkout, installed
with the pinned versions into a fresh virtualenv, holds one import namespace (``threadkeeper.*``) and runs the
console on its own, with nothing of the checkout on its path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow(80)
def test_the_install_script_builds_a_fresh_virtualenv_whose_console_works(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV") and
           not k.startswith(("REDIS", "SLACK", "AI_", "THREADKEEPER"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    # pip leaves the installed modules uncompiled (most of the install's CPU, spent on modules the console never
    # imports); the console compiles the ones it imports as it starts
    env["PIP_COMPILE"] = "0"  # pip reads it as --no-compile
    installed = subprocess.run(["sh", str(ROOT / "deploy" / "install.sh"), str(venv)], env=env, cwd=tmp_path,
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-3000:]
    python = venv / "bin" / "python"
    where = subprocess.run([str(python), "-c", "import threadkeeper.bot, threadkeeper.services, threadkeeper.persistence,"
                            " threadkeeper.evals; print(threadkeeper.services.__file__)"],
                           env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0 and str(venv) in where.stdout and str(ROOT) not in where.stdout, where
    for name in ("bot", "services", "persistence", "evals"):
        alone = subprocess.run([str(python), "-c", f"import {name}"], env=env, cwd=tmp_path, capture_output=True)
        assert alone.returncode != 0, f"one namespace: no top-level {name!r} package is installed"
    extras = subprocess.run([str(python), "-c", "import pytest"], env=env, cwd=tmp_path, capture_output=True)
    assert extras.returncode != 0, "running installs only what running needs (no test extras)"
    console = subprocess.run([str(venv / "bin" / "threadkeeper"), "console"], input="track ABC-123 for me\n/quit\n",
                             env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert console.returncode == 0, console.stderr[-3000:]
    assert "threadkeeper> Offline model here" in console.stdout and "ABC-123" in console.stdout
    assert sys.executable not in console.stdout


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _make(tmp_path: Path, python: Path, venv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-s", "-C", str(ROOT), "install", f"PYTHON={python}", f"VENV={venv}"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_a_python_that_cannot_make_a_virtualenv_is_one_line_and_leaves_no_half_made_one(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # as Debian's python3 without python3-venv does: the folder and its python made, pip not, a long message
    python = _script(tmp_path / "python3", f'''if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin" && ln -s {sys.executable} "$3/bin/python"
  printf 'The virtual environment was not created successfully because ensurepip is not\\navailable.\\n\\n'
  printf '    apt install python3.11-venv\\n\\nFailing command: %s/bin/python3\\n' "$3"
  exit 1
fi
exec {sys.executable} "$@"''')
    for attempt in range(2):
        made = _make(tmp_path, python, venv)
        lines = [line for line in (made.stdout + made.stderr).splitlines()
                 if line.strip() and not line.startswith(("Setting up", "make"))]
        assert made.returncode != 0 and len(lines) == 1, (attempt, made.stdout, made.stderr)
        assert "sudo apt-get install python3-venv" in lines[0], lines
        assert not venv.exists(), "no half-made virtualenv is left for the next run to trip over"


def test_a_virtualenv_without_pip_is_one_line(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _script(venv / "bin" / "python", f'''case "$*" in *pip*) echo "No module named $2" >&2; exit 1;; esac
exec {sys.executable} "$@"''')
    made = _make(tmp_path, Path(sys.executable), venv)
    lines = [line for line in (made.stdout + made.stderr).splitlines()
             if line.strip() and not line.startswith(("Setting up", "make"))]
    assert made.returncode != 0 and lines == [f"{venv} has no pip and its Python cannot install one: remove it "
                                              "(make clean) and run make again"], (made.stdout, made.stderr)
