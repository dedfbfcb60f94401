"""The message ids a recall index holds, by position, packed: a thread's ids as one run of bytes with where each ends,
and, to find an id's position, their hashes in sorted runs beside the positions they stand for.

A long thread's index holds hundreds of thousands of ids. As a list of strings, a map from each to its position and
a list of the hits' targets they took about 130 bytes an id (tracemalloc: 1.24 MB at 10,000 bench messages, the
strings 0.64, the map and its numbers 0.51); packed, about 40 (its characters, where it ends, its hash and its
position; 0.43 MB as :meth:`Ids.memory` counts them)."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    import numpy as np
else:
    from .._numpy import np

RECENT = 1_024
"""Ids added one at a time are looked up in a map until this many are waiting; then they join the sorted runs."""
ID_BYTES = 20
"""What an id holds besides its characters: where it ends (8 bytes), its hash (8) and its position (4)."""


class Ids(Sequence[str]):
    """Message ids by position (each at most once: :meth:`find` gives its position)."""

    __slots__ = ("_blob", "_ends", "_recent", "_runs")

    def __init__(self, ids: Sequence[str] = ()) -> None:
        self._blob = bytearray()
        self._ends: array[int] = array("q")
        """Per position, where its id ends in :attr:`_blob`."""
        self._runs: list[tuple[array[int], array[int]]] = []
        """Sorted runs of the ids' hashes, each with the positions they stand for, in the order the hashes sort; a run
        as large as the one before it or more is merged into it (a few runs, however the ids came)."""
        self._recent: dict[str, int] = {}
        """The ids added one at a time, not in a run yet, by position."""
        if ids:
            self.extend(ids)

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, position: int) -> str: ...

    @overload
    def __getitem__(self, position: slice) -> list[str]: ...

    def __getitem__(self, position: int | slice) -> str | list[str]:
        if isinstance(position, slice):
            return [self[p] for p in range(*position.indices(len(self)))]
        if position < 0:
            position += len(self._ends)
        end = self._ends[position]  # (IndexError past the end)
        return self._blob[self._ends[position - 1] if position else 0:end].decode()

    def __iter__(self) -> Iterator[str]:
        return (self[p] for p in range(len(self._ends)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Ids):
            return self._blob == other._blob and self._ends == other._ends
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __contains__(self, ident: object) -> bool:
        return isinstance(ident, str) and self.find(ident) >= 0

    def append(self, ident: str) -> int:
        """Add ``ident`` (not held yet) at the next position; that position."""
        at = len(self._ends)
        self._blob += ident.encode()
        self._ends.append(len(self._blob))
        self._recent[ident] = at
        if len(self._recent) >= RECENT:
            recent = list(self._recent.items())
            self._recent = {}
            self._add_run(np.fromiter((hash(i) for i, _ in recent), dtype=np.int64, count=len(recent)),
                          np.fromiter((p for _, p in recent), dtype=np.int32, count=len(recent)))
        return at

    def extend(self, ids: Sequence[str], hashes: Any = None, *, ordered: tuple[Any, Any] | None = None) -> None:
        """Add ``ids`` (none held yet, none twice) at the next positions, in order; ``hashes``: theirs (``hash`` of
        each, as an array), when made already; ``ordered``: instead, their hashes sorted and the positions they take
        in that order (arrays), when sorted already."""
        if not ids:
            return
        first = len(self._ends)
        joined = "".join(ids)
        if joined.isascii():
            data, sizes = joined.encode("ascii"), np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        else:
            encoded = [i.encode() for i in ids]
            data, sizes = b"".join(encoded), np.fromiter(map(len, encoded), dtype=np.int64, count=len(ids))
        ends = np.cumsum(sizes)
        ends += len(self._blob)
        self._blob += data
        self._ends.frombytes(ends.tobytes())
        if ordered is not None:
            self._add_run(np.asarray(ordered[0], dtype=np.int64), np.asarray(ordered[1], dtype=np.int32), ordered=True)
            return
        if hashes is None:
            hashes = np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids))
        self._add_run(np.asarray(hashes, dtype=np.int64), np.arange(first, first + len(ids), dtype=np.int32))

    def _add_run(self, hashes: Any, positions: Any, *, ordered: bool = False) -> None:
        if not ordered:
            order = np.argsort(hashes)
            hashes, positions = hashes[order], positions[order]
        runs = [*self._runs, (hashes, positions)]
        while len(runs) > 1 and len(runs[-2][0]) <= len(runs[-1][0]):
            (later, at_later), (earlier, at_earlier) = runs.pop(), runs.pop()
            both = np.concatenate([np.frombuffer(earlier, dtype=np.int64) if isinstance(earlier, array) else earlier,
                                   later])
            where = np.concatenate([np.frombuffer(at_earlier, dtype=np.int32) if isinstance(at_earlier, array)
                                    else at_earlier, at_later])
            order = np.argsort(both, kind="stable")  # (two sorted runs: merged in one pass)
            runs.append((both[order], where[order]))
        self._runs = [(run if isinstance(run, array) else array("q", run.tobytes()),
                       at if isinstance(at, array) else array("i", at.tobytes())) for run, at in runs]

    def find(self, ident: str) -> int:
        """The position of ``ident``, -1 when it is not held."""
        at = self._recent.get(ident)
        if at is not None:
            return at
        wanted = hash(ident)
        encoded = b""
        for hashes, positions in self._runs:
            k = bisect_left(hashes, wanted)
            while k < len(hashes) and hashes[k] == wanted:
                position = positions[k]
                if not encoded:
                    encoded = ident.encode()
                if self._blob[self._ends[position - 1] if position else 0:self._ends[position]] == encoded:
                    return position
                k += 1
        return -1

    def memory(self) -> int:
        """What it holds in memory, in bytes (see :data:`ID_BYTES`), the ids added one at a time as a map's."""
        return len(self._blob) + ID_BYTES * len(self._ends) + 150 * len(self._recent)
