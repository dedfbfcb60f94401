"""The layout holds: one import namespace whose source tree agrees with its import names, dependencies that point one
way (bot → services → persistence), and within ``services/`` capabilities that point one way too, each reached from
outside only through its ``__init__``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"persistence": set(), "services": {"persistence"}, "bot": {"services", "persistence"},
          "evals": {"services", "persistence", "root", "settings", "stores"}}
"""Each folder → what of ``threadkeeper.*`` it may import (the evals build the one pipeline through the
composition root, like the command line)."""
CAPABILITIES = {
    "context": set(),
    "lexicon": set(),
    "safety": {"lexicon"},
    "models": {"context", "text"},
    "text": {"safety", "lexicon"},
    "recall": {"models", "text", "context", "lexicon"},
    "handoff": {"models", "safety", "text", "context", "lexicon"},
    "memory": {"models", "safety", "text", "context", "handoff", "recall", "lexicon"},
    "turn": {"models", "safety", "text", "context", "handoff", "recall", "memory", "lexicon"},
}
"""Each sub-package of ``services/`` → the other sub-packages it may import (``services``' own top-level modules,
such as ``tracing``, are open to all)."""
PRIVATE_DOORS = {"threadkeeper.services.models._litellm"}
"""Modules reached past their package's ``__init__`` on purpose: litellm configured before its first import, loaded
only where a real model is used."""


def _imports(path: Path) -> list[str]:
    """The absolute module names ``path`` imports (relative imports resolved against its place in the tree)."""
    rel = path.relative_to(ROOT).with_suffix("")
    package = ["threadkeeper", *rel.parts[:-1]] if rel.parts[0] in LAYERS else [*rel.parts[:-1]]
    if rel.name == "__init__":
        package = ["threadkeeper", *rel.parts[:-1]]
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                base = node.module
            elif node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                continue
            names.append(base)
            if node.level and not node.module:  # ``from . import refs``: the module itself
                names.extend(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def _sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_the_source_tree_and_the_import_names_agree() -> None:
    """``threadkeeper/<name>`` is the top-level folder ``<name>/`` itself (a link), so Python, the build and a type
    checker all find ``threadkeeper.services`` where the tree holds it."""
    for name in LAYERS:
        link = ROOT / "threadkeeper" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), name
    for path in _sources("services"):
        if path.name != "__init__.py":
            assert (path.parent / "__init__.py").exists(), f"{path} is outside a package"


def test_dependencies_point_one_way_within_one_namespace() -> None:
    wrong = []
    for layer, allowed in LAYERS.items():
        for path in _sources(layer):
            for name in _imports(path):
                top, _, rest = name.partition(".")
                if top in LAYERS:
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}: use threadkeeper.{name}")
                elif top == "threadkeeper":
                    target = rest.partition(".")[0]
                    if target != layer and target not in allowed:
                        wrong.append(f"{path.relative_to(ROOT)} imports {name} against the layering")
    assert not wrong, "\n".join(wrong)


def test_capabilities_point_one_way_and_meet_at_their_boundaries() -> None:
    """Within ``services/``, a capability imports only those below it, and only what their ``__init__`` exports;
    the bot, the evals and the application import a capability through its ``__init__`` too."""
    assert set(CAPABILITIES) == {p.name for p in (ROOT / "services").iterdir() if (p / "__init__.py").exists()}
    wrong = []
    for folder in ("services", "bot", "evals", "threadkeeper"):
        for path in _sources(folder):
            if folder == "threadkeeper" and path.parent != ROOT / "threadkeeper":
                continue  # the links to the other folders
            rel = path.relative_to(ROOT)
            home = rel.parts[1] if folder == "services" and len(rel.parts) > 2 else None
            for name in _imports(path):
                parts = name.split(".")
                if parts[:2] != ["threadkeeper", "services"] or len(parts) < 3 or parts[2] not in CAPABILITIES:
                    continue
                capability = parts[2]
                if capability == home:
                    continue
                if home is not None and capability not in CAPABILITIES[home]:
                    wrong.append(f"{rel} imports {name}: {home} may not depend on {capability}")
                if len(parts) > 3 and name not in PRIVATE_DOORS:
                    wrong.append(f"{rel} imports {name}: import threadkeeper.services.{capability} instead")
    assert not wrong, "\n".join(wrong)


TRANSPORTS = [*(ROOT / "bot").glob("*.py"),
              *(ROOT / "threadkeeper" / name for name in ("cli.py", "opscmd.py", "memorycmd.py", "evalcmd.py"))]
"""What talks to the application: the Slack bot, the console, the command line."""
INTERNALS = {"executor", "checkpoints", "inbox", "notes", "forgetter", "memory_store", "turns", "preview",
             "compactor", "recall", "memory"}
"""The application's insides: a transport reaches none of them."""
STORE_DOORS = {"where"}
"""What a transport may read of the stores it opened: where they are (to say so). The eval command also hands the
connection to the evals, which build their own stores under their own prefixes (``client``)."""
STORES = {"CheckpointStore", "Inbox", "NotesStore", "MemoryStore", "Forgetter", "LeaseManager", "ReplyExecutor",
          "Memory", "Recall", "Compactor"}


def _named(node: ast.expr) -> str:
    """The last name of an attribute chain's base (``h.pipeline`` → ``pipeline``)."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def test_the_bot_the_console_and_the_command_line_talk_to_the_application_only() -> None:
    """One face: a transport submits, runs, previews, forgets and administers memory through ``Pipeline``'s methods,
    never through the executor or a store (the composition root, which builds them, is the one exception)."""
    wrong = []
    for path in TRANSPORTS:
        doors = STORE_DOORS | ({"client"} if path.name == "evalcmd.py" else set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                base = _named(node.value)
                if (base == "pipeline" and node.attr in INTERNALS) or (base == "stores" and node.attr not in doors):
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} reaches {base}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("threadkeeper."):
                wrong.extend(f"{path.relative_to(ROOT)}:{node.lineno} imports {alias.name}"
                             for alias in node.names if alias.name in STORES)
    assert not wrong, "\n".join(wrong)


def test_every_row_of_the_mutation_table_still_names_code_that_exists_once() -> None:
    """A row whose text the code no longer holds breaks nothing and so proves nothing: each one-line breakage in
    ``tests/mutations.py`` must find its text exactly once in its file."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).with_name("mutations.py")
    spec = importlib.util.spec_from_file_location("mutation_table", path)
    assert spec is not None and spec.loader is not None
    table = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = table  # (its dataclass looks itself up there)
    try:
        spec.loader.exec_module(table)
    finally:
        del sys.modules[spec.name]
    stale = {m.name: (table.ROOT / m.path).read_text().count(m.original) for m in table.MUTANTS
             if (table.ROOT / m.path).read_text().count(m.original) != 1}
    assert not stale, stale
    assert len({m.name for m in table.MUTANTS}) == len(table.MUTANTS), "each row has a name of its own"


def test_search_has_one_term_rule() -> None:
    """Recall, memory and the search tool index and query by ``services.text.search_terms``; only the evals' simple
    baseline tokenizes its own way (bm25s's stock rule, on purpose: it is the baseline)."""
    allowed = {ROOT / "evals" / "baselines.py"}
    wrong = [f"{path.relative_to(ROOT)} tokenizes with bm25s" for folder in ("bot", "services", "persistence", "evals")
             for path in (ROOT / folder).rglob("*.py") if path not in allowed and "bm25s.tokenize" in path.read_text()]
    assert not wrong, "\n".join(wrong)
