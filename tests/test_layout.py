"""The layout holds: one import namespace, and dependencies that point one way (bot → services → persistence)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"persistence": set(), "services": {"persistence"}, "bot": {"services", "persistence"},
          "evals": {"services", "persistence", "root", "settings", "stores"}}
"""Each folder → what of ``threadkeeper.*`` it may import (the evals build the one pipeline through the
composition root, like the command line)."""


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_dependencies_point_one_way_within_one_namespace() -> None:
    wrong = []
    for layer, allowed in LAYERS.items():
        for path in sorted((ROOT / layer).glob("*.py")):
            for name in _imported(path):
                top, _, rest = name.partition(".")
                if top in LAYERS:
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}: use threadkeeper.{name}")
                elif top == "threadkeeper":
                    target = rest.partition(".")[0]
                    if target != layer and target not in allowed:
                        wrong.append(f"{path.relative_to(ROOT)} imports {name} against the layering")
    assert not wrong, "\n".join(wrong)
