"""What memory lets go of: the records derived from a message that was deleted (before the next turn) or from an
edited message's earlier text (suspect until its conversation is extracted again), a forgotten conversation's records
and extraction job, one record, a whole workspace."""

from __future__ import annotations

import logging
from typing import Protocol

from threadkeeper.persistence import Message
from threadkeeper.persistence.memory import (
    MemoryRecord,
    MemoryStore,
    RecordChangedError,
    any_channel_mark,
    message_mark,
    text_version,
)

from ..conversation import Conversation
from ..handoff import prose

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
        """A source message was deleted: its tombstone first (from then on no writer writes a record citing it), then
        every record derived from it goes, a merged one only losing that part; how many records lost it."""
        where = conversation
        marks = source_marks(where.channel, message_id)
        await self.store.tombstone(where.workspace, sorted(marks))
        return await strip(self.store, where.workspace, marks)

    async def revise(self, conversation: Conversation, message: Message) -> int:
        """A source message was edited (``message`` with its new text): its tombstone names the new text's version
        (from then on no writer writes a record citing an earlier text, and a record citing the new one is current);
        a merged record loses the parts citing an earlier text while it has another part, and a record with no other
        part stays, shown as suspect, until the conversation is extracted again (the edit puts it back in the idle
        sweep's registry, and extraction reads an edited message again). How many records lost a part."""
        where = conversation
        marks = source_marks(where.channel, message.id)
        await self.store.tombstone(where.workspace, sorted(marks), version=source_version(message))
        return await strip(self.store, where.workspace, marks, edited=False)

    async def forget_conversation(self, conversation: Conversation) -> int:
        """A conversation is being forgotten: every message it said is retracted (tombstoned, then taken out of the
        records derived from it, merged ones included), and its extraction job goes; how many records lost a source.
        Call it before the conversation's messages are deleted."""
        where, conversation_id = conversation, conversation.id
        messages, _ = await self.sources.messages(conversation_id)
        marks = {mark for m in messages for mark in source_marks(where.channel, m.id)}
        await self.store.tombstone(where.workspace, sorted(marks))
        await self.store.forget_job(where.workspace, conversation_id)
        return await strip(self.store, where.workspace, marks)

    async def forget(self, workspace: str, record_id: str) -> bool:
        return await self.store.delete(workspace, [record_id]) > 0

    async def forget_workspace(self, workspace: str) -> int:
        self.cache.drop(workspace)
        return await self.store.forget_workspace(workspace)


def source_marks(channel: str, message_id: str) -> set[str]:
    """The tombstones of a retracted source message: by its channel, and by its id alone (what records merged before
    merged records kept their parts cite)."""
    return {message_mark(channel, message_id), any_channel_mark(message_id)}


def source_version(message: Message) -> str:
    """The version of a source message's text that records derived from it cite: the one rule for an edit's tombstone
    and for extraction."""
    return text_version(prose(message))


async def strip(store: MemoryStore, workspace: str, marks: set[str], *, edited: bool = True) -> int:
    """Take what the tombstones ``marks`` retract out of the stored records: a record made only of retracted parts
    goes (unless ``edited`` is False and it lost only parts citing an edited message's earlier text: it stays, shown
    as suspect), a merged one keeps its other parts. The write checks the tombstones again, so a concurrent writer
    cannot bring one back, and that every record it rewrites is still as it was read, so a merge landing in between
    is never undone (then it reads again). How many records were changed or removed."""
    for _ in range(STRIP_ATTEMPTS):
        snapshot = await store.snapshot(workspace, now=0.0, retracted=True)
        gone = {m: v for m, v in snapshot.gone.items() if m in marks}
        hit: list[MemoryRecord] = []
        rewritten: list[MemoryRecord] = []
        doomed: list[str] = []
        for r in snapshot.written:
            if not r.marks() & marks:
                continue
            left = r.without(gone)
            if left is r:
                continue  # it cites the version now
            if left is None and not edited and r.edited_only(gone):
                continue  # suspect until its conversation is extracted again
            hit.append(r)
            if left is None:
                doomed.append(r.id)
            else:
                rewritten.append(left)
        try:
            await store.put(workspace, rewritten, removed=doomed, unchanged=hit)
        except RecordChangedError:
            continue  # another writer changed one of them meanwhile: strip what it wrote
        return len(rewritten) + len(doomed)
    # Readers never see a retracted part (they read through the tombstones): what is left goes at the scope's next
    # consolidation or the next retraction.
    log.warning("memory of workspace %s kept changing while a retraction rewrote it; readers hide the retracted "
                "parts until its next consolidation", workspace)
    return 0
