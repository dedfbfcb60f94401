"""Non-message inbox items: edits, deletions and pins become conversation notes."""

from __future__ import annotations

from collections.abc import Sequence

from threadkeeper.persistence import InboxItem, MessageChange, NotesStore

from ..memory import Memory


class NoteEffects:
    def __init__(self, notes: NotesStore, memory: Memory | None = None) -> None:
        self.notes = notes
        self.memory = memory
        """Records of memory derived from an edited or deleted message are retracted with it."""

    async def apply(self, conversation_id: str, items: Sequence[InboxItem]) -> None:
        for item in items:
            if item.kind == "edit" and item.message is not None:
                await self.notes.record_change(conversation_id, item.message.id,
                                               MessageChange(kind="edited", text=item.message.text))
                if self.memory is not None:
                    await self.memory.retract(conversation_id, item.message.id)
            elif item.kind == "delete" and item.target_id:
                await self.notes.record_change(conversation_id, item.target_id, MessageChange(kind="deleted"))
                if self.memory is not None:
                    await self.memory.retract(conversation_id, item.target_id)
            elif item.kind in ("pin", "unpin") and item.target_id:
                await self.notes.set_pin(conversation_id, item.target_id, item.kind == "pin")
