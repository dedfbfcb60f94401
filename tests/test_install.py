"""The install the image and any host use (``deploy/install.sh``): a wheel built from this checkout, installed
with the pinned versions into a fresh virtualenv, holds one import namespace (``threadkeeper.*``) and runs the
console on its own, with nothing of the checkout on its path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_install_script_builds_a_fresh_virtualenv_whose_console_works(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV") and
           not k.startswith(("REDIS", "SLACK", "AI_", "THREADKEEPER"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
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
