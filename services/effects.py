"""Non-message inbox items: edits, deletions and pins become conversation notes."""

from __future__ import annotations

from collections.abc import Sequence

from threadkeeper.persistence import InboxItem, MessageChange, NotesStore


class NoteEffects:
    def __init__(self, notes: NotesStore) -> None:
        self.notes = notes

    async def apply(self, conversation_id: str, items: Sequence[InboxItem]) -> None:
        for item in items:
            if item.kind == "edit" and item.message is not None:
                await self.notes.record_change(conversation_id, item.message.id,
                                               MessageChange(kind="edited", text=item.message.text))
            elif item.kind == "delete" and item.target_id:
                await self.notes.record_change(conversation_id, item.target_id, MessageChange(kind="deleted"))
            elif item.kind in ("pin", "unpin") and item.target_id:
                await self.notes.set_pin(conversation_id, item.target_id, item.kind == "pin")
