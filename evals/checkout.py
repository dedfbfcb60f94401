"""Reading a public checkout the evals measure against: a work tree or a bare git directory (``git clone --bare``),
read at run time and never stored in this repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

from threadkeeper.persistence.errors import ThreadkeeperError


class CheckoutError(ThreadkeeperError):
    """A checkout given to an eval is missing, or is neither a work tree nor a git directory."""


class Checkout:
    """The files of ``path`` at its newest commit: from the work tree when it has one, else from the git directory."""

    def __init__(self, path: str | Path, *, needs: str) -> None:
        self.path = Path(path)
        self.tree = (self.path / needs).exists()
        """``needs`` (a file or folder the eval reads) is in the work tree."""
        if not self.tree and not (self.path / "HEAD").is_file():
            raise CheckoutError(f"{self.path} holds no {needs} and is no git directory")

    def git(self, *args: str) -> str:
        git_dir = self.path / ".git" if (self.path / ".git").exists() else self.path
        done = subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise CheckoutError(f"git {' '.join(args[:2])} failed in {self.path}: {done.stderr.strip()}")
        return done.stdout

    def files(self, folder: str, suffix: str) -> list[str]:
        """Paths (from the checkout's root, sorted) of the files directly in ``folder`` ("" for the root) whose name
        ends in ``suffix``."""
        if self.tree or not (self.path / "HEAD").is_file():
            base = self.path / folder if folder else self.path
            return sorted(str(f.relative_to(self.path)) for f in base.glob(f"*{suffix}") if f.is_file())
        listing = self.git("ls-tree", "--name-only", "HEAD", f"{folder.rstrip('/')}/" if folder else ".")
        return sorted(n for n in listing.split() if n.endswith(suffix))

    def read(self, name: str) -> str:
        if self.tree or not (self.path / "HEAD").is_file():
            return (self.path / name).read_text(encoding="utf-8")
        return self.git("show", f"HEAD:{name}")

    def commit(self) -> str:
        """The checkout's newest commit ("" when it has no history)."""
        try:
            return self.git("rev-parse", "--short", "HEAD").strip()
        except CheckoutError:
            return ""
