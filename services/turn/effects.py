"""Non-message inbox items: edits, deletions and pins become conversation notes (one atomic write per turn), and
what memory derived from an edited or deleted message is retracted with it."""

from __future__ import annotations

from collections.abc import Sequence

from threadkeeper.persistence import InboxItem, NotesStore

from ..conversation import Conversation
from ..memory import Memory


class NoteEffects:
    def __init__(self, notes: NotesStore, memory: Memory | None = None) -> None:
        self.notes = notes
        self.memory = memory
        """Records of memory derived from an edited or deleted message are retracted with it."""

    async def apply(self, conversation: Conversation, items: Sequence[InboxItem]) -> None:
        await self.notes.apply(conversation.id, items)
        if self.memory is None:
            return
        for item in items:
            source = item.message.id if item.kind == "edit" and item.message is not None else \
                item.target_id if item.kind == "delete" else None
            if source:
                await self.memory.retract(conversation, source)
