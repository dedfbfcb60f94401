"""What memory lets go of: the records derived from a message that was edited or deleted (before the next turn), a
forgotten conversation's records and extraction job, one record, a whole workspace."""

from __future__ import annotations

from typing import Protocol

from threadkeeper.persistence import Message
from threadkeeper.persistence.memory import MemoryStore

from ..conversation import Conversation


class Sources(Protocol):
    """A conversation's messages, as extraction reads them (:meth:`~.extraction.Extractor.messages`)."""

    async def messages(self, cid: str) -> tuple[list[Message], dict[str, str | None]]: ...


class Cache(Protocol):
    """What keeps a workspace's records in memory (the read path's index)."""

    def drop(self, workspace: str) -> None: ...


class Forgetting:
    """Retraction and forgetting over one :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore, sources: Sources, cache: Cache) -> None:
        self.store, self.sources, self.cache = store, sources, cache

    async def retract(self, conversation: Conversation, message_id: str) -> int:
        """A source message was deleted or edited: every record derived from it goes; how many went."""
        where, conversation_id = conversation, conversation.id
        records = await self.store.records(where.workspace, now=0.0)
        doomed = [r.id for r in records if message_id in r.source_ids
                  and (r.conversation == conversation_id or r.channel == where.channel)]
        return await self.store.delete(where.workspace, doomed)

    async def forget_conversation(self, conversation: Conversation) -> int:
        """A conversation is being forgotten: every record derived from it goes too (merged ones included), and its
        extraction job; how many records went. Call it before the conversation's messages are deleted."""
        where, conversation_id = conversation, conversation.id
        messages, _ = await self.sources.messages(conversation_id)
        said = {m.id for m in messages}
        records = await self.store.records(where.workspace, now=0.0)
        doomed = [r.id for r in records if r.conversation == conversation_id
                  or (r.channel == where.channel and said.intersection(r.source_ids))]
        await self.store.forget_job(where.workspace, conversation_id)
        return await self.store.delete(where.workspace, doomed)

    async def forget(self, workspace: str, record_id: str) -> bool:
        return await self.store.delete(workspace, [record_id]) > 0

    async def forget_workspace(self, workspace: str) -> int:
        self.cache.drop(workspace)
        return await self.store.forget_workspace(workspace)
