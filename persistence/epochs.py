"""What recall derives from a sealed epoch's messages, and the search segment they make, stored beside the
conversation (same hash tag, so Redis Cluster keeps it on the conversation's node): an epoch (the history at the
checkpoint a compaction forked from) never changes once forked, so what is derived from its messages is derived once,
by whichever worker first needs it, and a worker that starts cold reads it instead of deriving it again. One hash per
conversation, fields named after the epoch (the checkpoint it ends at): what was derived, the segment's header and
its buckets of postings (read a few at a time, for a question's terms), each written once (``HSETNX``). The values
are opaque here: the reader checks their format and what they were made from, and makes again what it cannot use (and
stores that in its place). Forgotten with the conversation (its key shares the conversation's base) and kept as long
as it (every read and write renews its expiry)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from redis.typing import EncodableT

from .base import RedisStore

READ_CHUNK = 500
"""Fields read per command (one round trip carries them all, pipelined)."""


class EpochIndexStore(RedisStore):
    async def get(self, conversation_id: str, fields: Sequence[str]) -> dict[str, bytes]:
        """What is stored in ``fields``, as bytes; a field with nothing stored is left out. One round trip, which also
        renews the key's expiry."""
        if not fields:
            return {}
        key = self.keys(conversation_id).recall
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, len(fields), READ_CHUNK):
            pipe.hmget(key, list(fields[start:start + READ_CHUNK]))
        pipe.expire(key, self.retention_seconds)
        answers = await self._call(pipe.execute())
        values = [v for chunk in answers[:-1] for v in chunk]
        return {e: bytes(v) for e, v in zip(fields, values, strict=True) if v is not None}

    async def put(self, conversation_id: str, derived: Mapping[str, bytes], *,
                  unusable: Mapping[str, bytes] | None = None) -> None:
        """Store what was derived and made per field where nothing is stored yet (what is stored never changes), and in
        place of what a reader found ``unusable`` (another format, corrupt); keep the key as long as the
        conversation's."""
        if not derived and not unusable:
            return
        key = self.keys(conversation_id).recall
        pipe = self.client.pipeline(transaction=False)
        for epoch, value in derived.items():
            pipe.hsetnx(key, epoch, value)
        if unusable:
            values: dict[EncodableT, EncodableT] = {k: v for k, v in unusable.items()}
            pipe.hset(key, mapping=values)
        pipe.expire(key, self.retention_seconds)
        await self._call(pipe.execute())

    async def drop(self, conversation_id: str, fields: Sequence[str]) -> None:
        """Remove ``fields``, which a reader found it cannot use and cannot make again itself (the next reader that
        can makes them again)."""
        if fields:
            await self._call(self.client.hdel(self.keys(conversation_id).recall, *fields))
