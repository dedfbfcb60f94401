"""numpy for the search indexes, imported at the first use of one of its names: a process that builds no index (a
console's first turn, which searches nothing) never pays its 10 MB."""

from __future__ import annotations

from typing import Any


class _Numpy:
    def __getattr__(self, name: str) -> Any:
        """The name from numpy, kept on this object: only a name's first use comes here (and imports numpy)."""
        import numpy

        value = getattr(numpy, name)
        setattr(self, name, value)
        return value


np: Any = _Numpy()
