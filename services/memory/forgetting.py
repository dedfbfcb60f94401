"""What memory lets go of: the records derived from a message that was edited or deleted (before the next turn), a
forgotten conversation's records and extraction job, one record, a whole workspace."""

from __future__ import annotations

import logging
from typing import Protocol

from threadkeeper.persistence import Message
from threadkeeper.persistence.memory import MemoryRecord, MemoryStore, RecordChangedError, message_mark

from ..conversation import Conversation

log = logging.getLogger("threadkeeper.memory")
STRIP_ATTEMPTS = 20
"""How often a retraction reads again when another writer changed a record it was rewriting."""


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
        """A source message was deleted or edited: its tombstone first (from then on no writer writes a record citing
        it), then every record derived from it goes, a merged one only losing that part; how many records lost it."""
        where = conversation
        mark = message_mark(where.channel, message_id)
        await self.store.tombstone(where.workspace, [mark])
        return await self._strip(where.workspace, {mark})

    async def forget_conversation(self, conversation: Conversation) -> int:
        """A conversation is being forgotten: every message it said is retracted (tombstoned, then taken out of the
        records derived from it, merged ones included), and its extraction job goes; how many records lost a source.
        Call it before the conversation's messages are deleted."""
        where, conversation_id = conversation, conversation.id
        messages, _ = await self.sources.messages(conversation_id)
        marks = {message_mark(where.channel, m.id) for m in messages}
        await self.store.tombstone(where.workspace, sorted(marks))
        await self.store.forget_job(where.workspace, conversation_id)
        return await self._strip(where.workspace, marks)

    async def _strip(self, workspace: str, marks: set[str]) -> int:
        """Take the retracted sources ``marks`` out of the stored records: a record made only of them goes, a merged
        one keeps its other parts. The write checks the tombstones again, so a concurrent writer cannot bring one
        back, and that every record it rewrites is still as it was read, so a merge landing in between is never
        undone (then it reads again). How many records were changed or removed."""
        for _ in range(STRIP_ATTEMPTS):
            records = await self.store.records(workspace, now=0.0, retracted=True)
            hit = [r for r in records if r.marks() & marks]
            rewritten: list[MemoryRecord] = []
            doomed: list[str] = []
            for r in hit:
                left = r.without(marks)
                if left is None:
                    doomed.append(r.id)
                else:
                    rewritten.append(left)
            try:
                await self.store.put(workspace, rewritten, removed=doomed, unchanged=hit)
            except RecordChangedError:
                continue  # another writer changed one of them meanwhile: strip what it wrote
            return len(rewritten) + len(doomed)
        # Readers never see a retracted part (they read through the tombstones): what is left goes at the scope's next
        # consolidation or the next retraction.
        log.warning("memory of workspace %s kept changing while a retraction rewrote it; readers hide the retracted "
                    "parts until its next consolidation", workspace)
        return 0

    async def forget(self, workspace: str, record_id: str) -> bool:
        return await self.store.delete(workspace, [record_id]) > 0

    async def forget_workspace(self, workspace: str) -> int:
        self.cache.drop(workspace)
        return await self.store.forget_workspace(workspace)
