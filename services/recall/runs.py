"""Sealed epochs merged into runs, so a worker that starts cold reads a few stored segments, not one per epoch.

Each sealed epoch's cards and search segment are stored under its own fields (:mod:`.cards`, :mod:`.postings`): a
worker that starts cold on a thread of 400 epochs read and decoded 400 of each, and a question's postings from 400
segments. Whoever holds the index merges them, once its reply is out (off the path of any reply), into runs of
consecutive epochs: :data:`FANOUT` epochs make a run, :data:`FANOUT` runs of one size make one of the next, the oldest
epochs first (:func:`plan`: 40 epochs are 5 runs of 8; 400 are 6 runs of 64 and 2 of 8), so each epoch is merged
again only a few times however long the thread grows. A run is stored as an epoch is, as one epoch whose chain is its
epochs' chains one after the other: its cards, its segment's header and buckets, under fields named after it
(:func:`name`), written from its parts' stored values (:func:`merge`), byte for byte what its messages would make.

The field ``runs`` lists the runs stored, oldest first: a line ``tk-runs <format>``, then one per run, its name, its
first and last epoch (their checkpoints) and how many epochs it covers. A worker that starts cold reads it with the
totals (:mod:`.totals`), takes each run that covers epochs the totals name, in order, as one epoch, and the others
epoch by epoch. A run whose stored values cannot be used (missing, corrupt, made for other epochs: its cards and its
segment's header say what they were made from) is read epoch by epoch instead. Runs a newer listing no longer names
(merged into a larger one) are removed when it is stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from threadkeeper.persistence import EpochIndexStore

from . import cards as stored_cards
from . import postings as stored_segment
from .derived import Unusable

if TYPE_CHECKING:
    import numpy as np
else:
    from .._numpy import np

FORMAT = 1
"""The listing's version: raise it when its form changes."""
FIELD = "runs"
"""The field of the ``:recall`` hash that lists the runs (an epoch's fields are named after its checkpoint: never
this)."""
FANOUT = 8
"""How many epochs, or runs of one size, make a run of the next size."""
PREFIX = "run:"


class Run(NamedTuple):
    """A run as the listing names it."""

    name: str
    first: str
    """Its first epoch (the checkpoint it ends at)."""
    last: str
    size: int
    """How many epochs it covers."""


def name(first: str, count: int) -> str:
    """The name a run's fields are stored under (the epochs a lineage seals after ``first`` never change)."""
    return f"{PREFIX}{first}:{count}"


def plan(count: int) -> list[tuple[int, int]]:
    """The runs over ``count`` sealed epochs, oldest first, as (first epoch's place, epochs): the largest power of
    :data:`FANOUT` that fits, from the oldest (an epoch left alone is read as itself, not as a run)."""
    out: list[tuple[int, int]] = []
    size = 1
    while size * FANOUT <= count:
        size *= FANOUT
    start = 0
    while size >= FANOUT:
        while start + size <= count:
            out.append((start, size))
            start += size
        size //= FANOUT
    return out


def encode(runs: Sequence[Run]) -> bytes:
    return "\n".join([f"tk-runs {FORMAT}", *(f"{r.name} {r.first} {r.last} {r.size}" for r in runs)]).encode()


def decode(raw: bytes | None) -> list[Run]:
    """The runs a listing names; none when nothing is stored or it cannot be used (each epoch is read as itself)."""
    if raw is None:
        return []
    try:
        lines = raw.decode().split("\n")
        if lines[0] != f"tk-runs {FORMAT}":
            return []
        out = []
        for line in lines[1:]:
            run, first, last, count = line.split(" ")
            if not run.startswith(PREFIX) or int(count) < 2:
                return []
            out.append(Run(run, first, last, int(count)))
        return out
    except (UnicodeDecodeError, ValueError):
        return []


def grouped(epochs: Sequence[str], runs: Sequence[Run]) -> list[tuple[int, int, str | None]]:
    """``epochs`` (their checkpoints, oldest first) as the reader takes them: per group, its first epoch's place, how
    many epochs it holds and the run that stores them together (None: an epoch read as itself). Each run listed
    whose epochs are among them, in order, takes them; the largest first where runs overlap."""
    at = {epoch: i for i, epoch in enumerate(epochs)}
    starting: dict[int, Run] = {}
    for run in runs:
        i = at.get(run.first, -1)
        if i >= 0 and i + run.size <= len(epochs) and epochs[i + run.size - 1] == run.last and (
                i not in starting or starting[i].size < run.size):
            starting[i] = run
    out: list[tuple[int, int, str | None]] = []
    i = 0
    while i < len(epochs):
        found = starting.get(i)
        if found is not None:
            out.append((i, found.size, found.name))
            i += found.size
        else:
            out.append((i, 1, None))
            i += 1
    return out


class Part(NamedTuple):
    """An epoch, or a run, as stored: what a run is merged from."""

    chain: tuple[tuple[str, int], ...]
    cards: bytes | None
    header: bytes | None
    buckets: Mapping[str, bytes]
    """Its buckets' fields as read (by field name)."""
    name: str


def merge(run: str, parts: Sequence[Part]) -> dict[str, bytes]:
    """The fields of run ``run`` made from its ``parts``' stored values, oldest first: its cards and its segment, as if
    its messages were one epoch's (their postings' offsets moved by the messages before each part). Raises
    :class:`.derived.Unusable` when a part's values cannot be used (the run is not made: the next reply tries again)."""
    chain = tuple(link for part in parts for link in part.chain)
    taken: list[stored_cards.Cards] = []
    lengths = []
    held: dict[str, list[tuple[Any, Any]]] = {}
    before = 0
    for part in parts:
        if part.cards is None or part.header is None:
            raise Unusable(f"{part.name}: its cards or its segment are not stored")
        cards = stored_cards.decode(part.cards, part.chain)
        form = stored_segment.decode_header(part.header, cards.ids, np.frombuffer(cards.roles.encode(), dtype=np.uint8)
                                            != ord("-"))
        for bucket in range(form.buckets):
            if form.terms[bucket]:
                terms, sizes, offsets, counts = stored_segment.decode_whole(
                    part.buckets.get(stored_segment.bucket_field(part.name, bucket)), form, bucket)
                ends = np.cumsum(sizes).tolist()
                for term, start, end in zip(terms, [0, *ends], ends, strict=False):
                    held.setdefault(term, []).append((offsets[start:end] + before, counts[start:end]))
        taken.append(cards)
        lengths.append(np.asarray(form.lengths, dtype=np.int64))
        before += len(cards.ids)
    made = {term: (np.concatenate([o for o, _ in found]), np.concatenate([c for _, c in found]))
            for term, found in held.items()}
    ids = [i for cards in taken for i in cards.ids]
    out = stored_segment.encode_made(run, ids, np.concatenate(lengths).tolist() if lengths else [], made)
    out[stored_cards.field(run)] = stored_cards.joined(chain, taken)
    return out


def wanted(epochs: Sequence[str]) -> list[Run]:
    """The runs :func:`plan` makes of the sealed ``epochs`` (their checkpoints, oldest first)."""
    return [Run(name(epochs[start], count), epochs[start], epochs[start + count - 1], count)
            for start, count in plan(len(epochs))]


def complete(epochs: Sequence[str], listing: Sequence[Run]) -> bool:
    """Whether ``listing`` names every run :func:`plan` makes of ``epochs``."""
    return set(wanted(epochs)) <= set(listing)


Sealed = Sequence[tuple[str, tuple[tuple[str, int], ...]]]
"""Sealed epochs, oldest first: each one's checkpoint and its chain."""


async def update(store: EpochIndexStore, conversation_id: str, sealed: Sealed) -> int:
    """Store the runs :func:`plan` makes of the conversation's ``sealed`` epochs that are not stored yet, each merged
    from the runs stored within it and its other epochs (read in two round trips, merged in a thread; from its epochs
    alone when a run within it cannot be used), then the listing of them all, and remove the runs it no longer names.
    Nothing when the listing names a run over epochs ``sealed`` does not hold: a worker that saw more of them sealed
    stored it, and one that saw fewer (a turn in flight since before the last fork) leaves it as it is.
    How many runs were made (0: all were stored, or what their epochs store cannot be used yet: the reader of those
    epochs makes it again)."""
    epochs = [epoch for epoch, _ in sealed]
    listed = decode((await store.get(conversation_id, [FIELD])).get(FIELD))
    at = {epoch: i for i, epoch in enumerate(epochs)}
    if any(run.first not in at or run.last not in at for run in listed):
        return 0  # (another worker, which saw more epochs sealed, stored these: its listing stands)
    runs = wanted(epochs)
    missing = [run for run in runs if run not in set(listed)]
    if not missing:
        return 0
    stale = [run for run in listed if run not in set(runs)]
    fields: dict[str, bytes] | None = None
    held: dict[str, list[str]] = {}
    for within in ([run for run in listed if run.first in at], []):
        made: list[tuple[Run, list[tuple[str, tuple[tuple[str, int], ...]]]]] = []
        for run in missing:  # each from the runs stored within it, and its other epochs
            start = at[run.first]
            made.append((run, [(epochs[start + i] if part is None else part,
                                tuple(link for _, chain in sealed[start + i:start + i + n] for link in chain))
                               for i, n, part in grouped(epochs[start:start + run.size],
                                                         [r for r in within if r.size < run.size])]))
        parts = list(dict.fromkeys(part for _, listed_parts in made for part, _ in listed_parts))
        first = await store.get(conversation_id, [f for n in [*parts, *(r.name for r in stale)] for f in (
            stored_segment.header_field(n), stored_cards.field(n))])
        held = {}
        for n in [*parts, *(r.name for r in stale)]:
            try:
                held[n] = stored_segment.stored_fields(n, first[stored_segment.header_field(n)])
            except (KeyError, Unusable):
                continue
        buckets = await store.get(conversation_id, [f for n in parts for f in held.get(n, [])[1:]])
        try:
            fields = await asyncio.to_thread(_merged, made, first, buckets)
            break
        except (ValueError, IndexError):  # (Unusable is a ValueError)
            if len(parts) == sum(run.size for run in missing):  # (made of epochs alone already)
                break
    if fields is None:
        return 0
    await store.put(conversation_id, {}, unusable={**fields, FIELD: encode(runs)})
    await store.drop(conversation_id, [f for run in stale for f in (
        *held.get(run.name, [stored_segment.header_field(run.name)]), stored_cards.field(run.name))])
    return len(missing)


def _merged(made: Sequence[tuple[Run, Sequence[tuple[str, tuple[tuple[str, int], ...]]]]],
            first: Mapping[str, bytes], buckets: Mapping[str, bytes]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for run, parts in made:
        out.update(merge(run.name, [Part(chain, first.get(stored_cards.field(part)),
                                         first.get(stored_segment.header_field(part)), buckets, part)
                                    for part, chain in parts]))
    return out
