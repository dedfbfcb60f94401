"""numpy for the search indexes, imported at the first use of one of its names: a process that builds no index (a
console's first turn, which searches nothing) never pays its 10 MB. A worker that serves Slack imports it before it
listens (:func:`import_now`); another process about to build an index imports it in a thread first
(:func:`imported`): its first import takes a quarter of a second, and on the event loop every conversation's
acknowledgements would wait that long. Even in a thread it holds the interpreter 20 to 65 ms at a time, so a worker
does not leave it for a moment when it serves."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any


class _Numpy:
    def __getattr__(self, name: str) -> Any:
        """The name from numpy, kept on this object: only a name's first use comes here (and imports numpy)."""
        import numpy

        value = getattr(numpy, name)
        setattr(self, name, value)
        return value


np: Any = _Numpy()


_ready = False
"""Whether :func:`imported` has seen numpy imported (later calls return at once)."""


def import_now() -> None:
    """numpy imported now (a worker before it serves)."""
    global _ready
    importlib.import_module("numpy")
    _ready = True


async def imported() -> None:
    """numpy imported, in a thread while the event loop serves others (a caller that comes while another's import
    is under way waits for it in a thread of its own, on the import's lock)."""
    global _ready
    if not _ready:
        await asyncio.to_thread(importlib.import_module, "numpy")
        _ready = True
