"""Mutable per-conversation notes: edits, deletions and pins of Slack messages.

Checkpoints are immutable; what Slack changes later (an edit, a delete, a pin) is recorded here and
applied when a handoff is built: facts whose evidence changed become SUSPECT, pins are kept verbatim.
"""

from __future__ import annotations

import json
import time
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from .base import RedisStore
from .errors import CorruptRecordError


class MessageChange(BaseModel):
    kind: Literal["edited", "deleted"]
    text: str | None = None
    at: float = Field(default_factory=time.time)


class Notes(BaseModel):
    changes: dict[str, MessageChange] = Field(default_factory=dict)
    pins: dict[str, bool] = Field(default_factory=dict)
    """Message id → pinned (True) or unpinned (False) by a Slack pin event."""
    flags: dict[str, str] = Field(default_factory=dict)
    """Conversation facts for transports (subscribed thread, assistant thread, …)."""


class NotesStore(RedisStore):
    async def record_change(self, conversation_id: str, message_id: str, change: MessageChange) -> None:
        await self._set(conversation_id, f"change:{message_id}", change.model_dump_json())

    async def set_pin(self, conversation_id: str, message_id: str, pinned: bool) -> None:
        await self._set(conversation_id, f"pin:{message_id}", json.dumps(pinned))

    async def set_flag(self, conversation_id: str, name: str, value: str) -> None:
        await self._set(conversation_id, f"flag:{name}", json.dumps(value))

    async def flag(self, conversation_id: str, name: str) -> str | None:
        raw = await self._call(self.client.hget(self.keys(conversation_id).notes, f"flag:{name}"))
        return json.loads(raw) if raw is not None else None

    async def remember_thread(self, message_key: str, thread_ts: str) -> None:
        """Remember which thread a reply was posted in; ``message_key`` is the id its own ts would have as a
        thread (Slack's ``message_deleted`` names the reply's ts and, without ``previous_message``, not its
        thread)."""
        await self._call(self.client.set(self.keys(message_key).thread, thread_ts, ex=self.retention_seconds))

    async def thread_of(self, message_key: str) -> str | None:
        """The thread a reply was posted in (see :meth:`remember_thread`), or None."""
        raw = await self._call(self.client.get(self.keys(message_key).thread))
        return raw.decode() if isinstance(raw, bytes) else raw

    async def _set(self, conversation_id: str, field: str, value: str) -> None:
        key = self.keys(conversation_id).notes
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, field, value)
        pipe.expire(key, self.retention_seconds)
        await self._call(pipe.execute())

    async def get(self, conversation_id: str) -> Notes:
        key = self.keys(conversation_id).notes
        raw = await self._call(self.client.hgetall(key))
        notes = Notes()
        for f, v in raw.items():
            field = f.decode() if isinstance(f, bytes) else f
            try:
                if field.startswith("change:"):
                    notes.changes[field[7:]] = MessageChange.model_validate_json(v)
                elif field.startswith("pin:"):
                    notes.pins[field[4:]] = bool(json.loads(v))
                elif field.startswith("flag:"):
                    notes.flags[field[5:]] = str(json.loads(v))
            except (ValidationError, ValueError) as exc:
                raise CorruptRecordError(f"{key} field {field}", str(exc).splitlines()[0]) from None
        return notes
