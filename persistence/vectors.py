"""Embeddings of a conversation's messages, stored beside its history (same hash tag, so Redis Cluster keeps them on
the conversation's node): a message is embedded once, by whichever worker first needs it, and a worker that starts
cold reads them instead of asking the embedding model again. Keyed by what was embedded (a digest of the model and
the text), so another model or an edited text is never served a stale vector. Forgotten with the conversation (its
keys share the conversation's base) and expiring with it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from redis.typing import EncodableT

from .base import RedisStore

READ_CHUNK = 1000
"""Fields read per command (one round trip carries them all, pipelined)."""


class VectorStore(RedisStore):
    async def get(self, conversation_id: str, fields: Sequence[str]) -> dict[str, bytes]:
        """The stored vectors among ``fields``, as their bytes (a field not stored is left out)."""
        if not fields:
            return {}
        key = self.keys(conversation_id).vectors
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, len(fields), READ_CHUNK):
            pipe.hmget(key, list(fields[start:start + READ_CHUNK]))
        answers = await self._call(pipe.execute())
        values = [v for chunk in answers for v in chunk]
        return {f: bytes(v) for f, v in zip(fields, values, strict=True) if v is not None}

    async def put(self, conversation_id: str, vectors: Mapping[str, bytes]) -> None:
        """Store ``vectors`` by field, and keep the key as long as the conversation's."""
        if not vectors:
            return
        key = self.keys(conversation_id).vectors
        pipe = self.client.pipeline(transaction=False)
        values: dict[EncodableT, EncodableT] = {k: v for k, v in vectors.items()}
        pipe.hset(key, mapping=values)
        pipe.expire(key, self.retention_seconds)
        await self._call(pipe.execute())
