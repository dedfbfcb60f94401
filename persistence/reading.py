"""Reading a history's chain and messages from Redis in calls that each hold Redis only briefly: the walk
from a checkpoint back to what the caller holds, and its messages in bounded pieces, overlapped with
parsing them. Part of :class:`persistence.store.CheckpointStore`."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from pydantic import ValidationError

from .base import RedisStore, _text
from .errors import CorruptRecordError
from .keys import ConversationKeys
from .models import MESSAGES, Message

WALK_PER_CALL = 500
"""Checkpoints one history-loading script call walks at most."""
WALK_FAST_PER_CALL = 2_000
"""Checkpoints one walk without messages covers at most (about 4 ms of Redis's time)."""
EPOCHS_PER_CALL = 500
"""Checkpoints one call of the walk through the earlier epochs looks at (about 1 ms of Redis's time): a worker's first
turn in a long thread walks thousands while other conversations' turns wait behind each call (at 100,000 messages,
another thread's reply meanwhile came 1.19x and 1.77x as late as alone with calls of 2,000, 1.08x and 1.11x with
500; load 10-12)."""
READS_IN_FLIGHT = 4
"""Calls reading a long history's messages sent at once: Redis gathers one while this process parses another."""
EPOCH_PIECE = 250
"""Messages one call returns at most when a worker reads the earlier epochs for recall, one call at a time: each is
parsed on the event loop as it arrives, and another conversation's turn waits behind one such parse at most."""
MESSAGES_PER_CALL = 500
"""Messages one history-loading script call returns at most (a few milliseconds of Redis's time: a long
history is read in several calls, so no other client waits long behind one)."""
SETTLED_EVERY = 1_000
"""Once this many messages were parsed since it was last done, what the process holds is taken out of the cyclic
garbage collector's sight (:func:`gc.freeze`, after collecting the young generations): read messages are
long-lived, and a full collection would otherwise scan every one of them, holding the event loop for a second
and more while a long lineage is read (``threadkeeper bench``: ``cold_worker_ack_ms_max``). Frozen objects are
still freed when nothing refers to them; only cyclic garbage older than the young generations stays. Often, so
the collector's own passes over the young generations stay small too: with 5,000, a worker reading 100,000
messages ran passes of 40-75 ms every fifth of a second; with 1,000, 25-35 ms at most (load 10-11)."""
_parsed = 0
"""Messages parsed since the collector was last given them (see :data:`SETTLED_EVERY`)."""


def _rows(raw: Any) -> list[tuple[str, str, int, bool]]:
    """A walk's lines ("id status count included", oldest first) as tuples."""
    return [(cid, status, int(count), included == "1")
            for cid, status, count, included in (line.split(" ") for line in (_text(raw) or "").split("\n") if line)]


class HistoryReader(RedisStore):
    """The store's history reads (a base of :class:`CheckpointStore`)."""

    async def _walk(self, keys: ConversationKeys, checkpoint_id: str, stops: list[str],
                    ) -> tuple[str | None, list[Any], list[tuple[str, str, list[Message]]]]:
        """The chain from ``checkpoint_id`` back to a stop (or its epoch's start): the stop reached, the
        checkpoint's record, and per walked checkpoint (oldest first) its id, status and messages.

        One call when the new part is small (the usual case before a turn). A longer chain is walked on
        without its messages, which are then read in pieces of at most ``MESSAGES_PER_CALL``, a few calls
        in flight at once, each parsed as it arrives while Redis gathers the next."""
        out = await self._run("LOAD", keys.durable, [checkpoint_id, WALK_PER_CALL, MESSAGES_PER_CALL, len(stops),
                                                     *stops])
        stop, more, record = _text(out[0]) or None, _text(out[1]) or None, list(out[2:8])
        rows = _rows(out[8])
        first = iter(self._parse(keys, checkpoint_id, out[9]))
        inline = {cid: [next(first) for _ in range(count)] for cid, _, count, included in rows if included}
        older: list[tuple[str, str, int, bool]] = []
        while more is not None:
            walked = await self._run("WALK", keys.durable, [more, WALK_FAST_PER_CALL, len(stops), *stops])
            stop, more = _text(walked[0]) or None, _text(walked[1]) or None
            older = _rows(walked[2]) + older
        read = await self._read(keys, [(cid, count) for cid, _, count, included in older + rows if not included])
        return stop, record, [(cid, status, inline[cid] if included else read[cid])
                              for cid, status, count, included in older + rows]

    async def _epochs(self, keys: ConversationKeys, where: str, at: str, roots: set[str], forks: set[str],
                      stopped: list[str] | None = None,
                      ) -> tuple[list[str], list[tuple[str, list[Any], list[tuple[str, int]]]]]:
        """The epochs before the one that begins at ``at`` (``where`` "root"; "fork": from the fork ``at`` on), newest
        first, without their messages, in calls that each look at :data:`EPOCHS_PER_CALL` checkpoints at most: the
        roots looked at, and per epoch the checkpoint its compaction forked from, that checkpoint's record and its chain
        (id, message count), oldest first. The walk stops at a root in ``roots`` or a fork in ``forks``, as
        :meth:`CheckpointStore.earlier_epochs` says; ``stopped`` gets the fork in ``forks`` it stopped at, if any."""
        stops = [len(roots), *roots, len(forks), *forks]
        fork = ""
        looked: list[str] = []
        epochs: list[tuple[str, list[Any], list[tuple[str, int]]]] = []
        records: list[Any] = []
        while where:
            out = await self._run("EPOCHS", keys.durable, [where, at, fork, EPOCHS_PER_CALL, *stops])
            where, at, fork = _text(out[0]) or "", _text(out[1]) or "", _text(out[2]) or ""
            records.extend(out[4:])
            for line in (_text(out[3]) or "").split("\n"):
                if line.startswith("R "):
                    looked.append(line[2:])
                elif line.startswith("K "):
                    if stopped is not None:
                        stopped.append(line[2:])
                elif line.startswith("E "):
                    epochs.append((line[2:], records[6 * len(epochs):6 * len(epochs) + 6], []))
                elif line:
                    cid, _, count = line.split(" ")
                    epochs[-1][2].append((cid, int(count)))
        for _, _, chain in epochs:
            chain.reverse()
        return looked, epochs

    async def _read(self, keys: ConversationKeys, wanted: list[tuple[str, int]], *, in_flight: int = READS_IN_FLIGHT,
                    piece: int = MESSAGES_PER_CALL) -> dict[str, list[Message]]:
        """The messages of ``wanted`` checkpoints (id, count), in calls of at most ``piece`` messages (a checkpoint
        that holds more alone, in ranges of ``MESSAGES_PER_CALL``), ``in_flight`` of them sent at once."""
        pieces: list[list[tuple[str, int]]] = [[]]
        size = 0
        for cid, count in wanted:
            if count > piece:  # one checkpoint larger than a call: read alone, in ranges
                continue
            if size + count > piece and pieces[-1]:
                pieces.append([])
                size = 0
            pieces[-1].append((cid, count))
            size += count
        gate = asyncio.Semaphore(in_flight)

        async def one(part: list[tuple[str, int]]) -> dict[str, list[Message]]:
            async with gate:
                raw = await self._run("SEGMENTS", keys.durable, [v for pair in part for v in pair])
            messages = iter(self._parse(keys, part[0][0], raw))
            return {cid: [next(messages) for _ in range(count)] for cid, count in part}

        out: dict[str, list[Message]] = {}
        for got in await asyncio.gather(*(one(p) for p in pieces if p)):
            out.update(got)
        for cid, count in wanted:
            if count > piece:
                out[cid] = await self._segment(keys, cid, count)
        return out

    async def _segment(self, keys: ConversationKeys, checkpoint_id: str, count: int) -> list[Message]:
        """A checkpoint's messages too many for one call, read in pieces of at most ``MESSAGES_PER_CALL``."""
        messages: list[Message] = []
        for start in range(0, count, MESSAGES_PER_CALL):
            raw = await self._run("SEGMENT", keys.durable, [checkpoint_id, start, min(count, start + MESSAGES_PER_CALL)])
            messages.extend(self._parse(keys, checkpoint_id, raw))
        return messages

    @staticmethod
    def _parse(keys: ConversationKeys, checkpoint_id: str, raw: Any) -> list[Message]:
        if raw is None:
            raise CorruptRecordError(keys.messages, f"messages of checkpoint {checkpoint_id} or its ancestors are missing")
        # The cyclic garbage collector is paused while thousands of long-lived messages are built at once: it
        # would otherwise scan them again and again (175 ms instead of 63 ms for 10,000 messages).
        collecting = gc.isenabled()
        gc.disable()
        try:
            messages = MESSAGES.validate_json(raw)
        except ValidationError as exc:
            raise CorruptRecordError(f"{keys.messages} (checkpoint {checkpoint_id})", str(exc).splitlines()[0]) from None
        finally:
            if collecting:
                gc.enable()
        settled(len(messages))
        return messages


def settled(count: int) -> None:
    """``count`` more long-lived objects were made (messages parsed, what recall holds of an epoch's): every
    :data:`SETTLED_EVERY`, what the process holds is taken out of the cyclic garbage collector's sight."""
    global _parsed
    _parsed += count
    if _parsed >= SETTLED_EVERY:
        _parsed = 0
        gc.collect(1)
        gc.freeze()
