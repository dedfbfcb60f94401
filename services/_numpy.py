"""numpy for the search indexes, imported at the first use of one of its names: a process that builds no index (a
console's first turn, which searches nothing) never pays its 10 MB."""

from __future__ import annotations

from typing import Any


class _Numpy:
    def __getattr__(self, name: str) -> Any:
        import numpy

        return getattr(numpy, name)


np: Any = _Numpy()
