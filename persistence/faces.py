"""Package faces that import each name they export from its home module when it is first asked for, so a process
that uses a few of a package's names does not import (and hold) the rest."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_names(package: str, homes: Mapping[str, Sequence[str]]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: a name of ``homes`` (a module, relative to ``package``, and the names
    it holds) is imported from its module when first read, and kept in the package, so later reads cost nothing."""
    where = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
