"""Non-message inbox items: edits, deletions and pins become conversation notes (one atomic write per turn), and
what memory derived from a deleted message is retracted with it (from an edited one's earlier text: suspect until
extracted again)."""

from __future__ import annotations

from collections.abc import Sequence

from threadkeeper.persistence import InboxItem, NotesStore

from ..conversation import Conversation
from ..memory import Memory


class NoteEffects:
    def __init__(self, notes: NotesStore, memory: Memory | None = None) -> None:
        self.notes = notes
        self.memory = memory
        """Records of memory derived from a deleted message are retracted with it, from an edited one's earlier text
        marked suspect."""

    async def apply(self, conversation: Conversation, items: Sequence[InboxItem]) -> None:
        await self.notes.apply(conversation.id, items)
        if self.memory is None:
            return
        for item in items:
            if item.kind == "edit" and item.message is not None:
                await self.memory.revise(conversation, item.message)
            elif item.kind == "delete" and item.target_id:
                await self.memory.retract(conversation, item.target_id)
