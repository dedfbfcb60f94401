"""Mutable per-conversation notes: edits, deletions and pins of Slack messages.

Checkpoints are immutable; what Slack changes later (an edit, a delete, a pin) is recorded here and
applied when a handoff is built: facts whose evidence changed become SUSPECT, pins are kept verbatim.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from .base import RedisStore
from .errors import CorruptRecordError
from .models import InboxItem


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

    @classmethod
    def parse(cls, raw: Mapping[bytes, bytes] | Mapping[str, str], where: str) -> Notes:
        """The notes a stored hash holds (``where`` names it in the error when a field cannot be read)."""
        return cls()._with(raw.items(), where)

    def after(self, items: Sequence[InboxItem]) -> Notes:
        """These notes as ``items`` (a turn's edits, deletions and pins) leave them: what
        :meth:`NotesStore.apply` stores, computed without writing (a preview of the next turn uses it)."""
        return self.model_copy(deep=True)._with(effect_fields(items).items(), "a turn's effects")

    def _with(self, fields: Iterable[tuple[bytes | str, bytes | str]], where: str) -> Notes:
        for f, v in fields:
            field = f.decode() if isinstance(f, bytes) else f
            try:
                if field.startswith("change:"):
                    self.changes[field[7:]] = MessageChange.model_validate_json(v)
                elif field.startswith("pin:"):
                    self.pins[field[4:]] = bool(json.loads(v))
                elif field.startswith("flag:"):
                    self.flags[field[5:]] = str(json.loads(v))
            except (ValidationError, ValueError) as exc:
                raise CorruptRecordError(f"{where} field {field}", str(exc).splitlines()[0]) from None
        return self


def effect_fields(items: Sequence[InboxItem]) -> dict[str, str]:
    """The notes fields that edits, deletions and pins set (field → stored value; a later item wins): the one
    rule for what such an item changes, whether it is stored or only previewed."""
    out: dict[str, str] = {}
    for item in items:
        if item.kind == "edit" and item.message is not None:
            change = MessageChange(kind="edited", text=item.message.text, at=item.received_at)
            out[f"change:{item.message.id}"] = change.model_dump_json()
        elif item.kind == "delete" and item.target_id:
            out[f"change:{item.target_id}"] = MessageChange(kind="deleted", at=item.received_at).model_dump_json()
        elif item.kind in ("pin", "unpin") and item.target_id:
            out[f"pin:{item.target_id}"] = json.dumps(item.kind == "pin")
    return out


class NotesStore(RedisStore):
    """The notes of conversations. While this process holds a conversation's lease, its transport flags are the ones
    the turn's opening read with the lease (:meth:`hold`): its reads of them cost nothing, and its writes go to Redis
    and to that copy. Only the lease holder writes the flags a turn reads (what it shows, what it delivered), and
    its writes are fenced by that lease like its checkpoints' (``scripts.SET_NOTES``): once another worker holds
    it, they are refused (:class:`LeaseLostError`), so a worker that lost the lease never overwrites what the new
    holder recorded (the half-written reply it is about to ask Slack for, above all). Those written with an item
    (:meth:`Inbox.append`) are read by the opening that follows."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: dict[str, dict[str, str]] = {}
        self._tokens: dict[str, str] = {}
        """conversation → the lease token its writes carry while held."""

    def hold(self, conversation_id: str, flags: Mapping[str, str], token: str = "") -> None:
        """Serve the conversation's flags from ``flags`` (read with its lease) and fence its notes' writes by the
        lease ``token`` until :meth:`let_go`."""
        self._held[conversation_id] = dict(flags)
        self._tokens[conversation_id] = token

    def let_go(self, conversation_id: str) -> None:
        self._held.pop(conversation_id, None)
        self._tokens.pop(conversation_id, None)

    def heard(self, conversation_id: str, flags: Mapping[str, str]) -> None:
        """Flags this process wrote another way (with an inbox item): the held copy follows."""
        held = self._held.get(conversation_id)
        if held is not None:
            held.update(flags)

    async def apply(self, conversation_id: str, items: Sequence[InboxItem]) -> None:
        """Store what ``items`` (edits, deletions, pins) change, in one atomic step (see :func:`effect_fields`)."""
        fields = effect_fields(items)
        if fields:
            await self._set(conversation_id, fields)

    async def set_flag(self, conversation_id: str, name: str, value: str) -> None:
        await self._set(conversation_id, {f"flag:{name}": json.dumps(value)})
        self.heard(conversation_id, {name: value})

    async def flag(self, conversation_id: str, name: str) -> str | None:
        held = self._held.get(conversation_id)
        if held is not None:
            return held.get(name)
        raw = await self._call(self.client.hget(self.keys(conversation_id).notes, f"flag:{name}"))
        return json.loads(raw) if raw is not None else None

    async def arriving(self, conversation_id: str, flag: str, view: tuple[str, str] | None) -> tuple[str | None,
                                                                                                     str | None]:
        """Read from Redis (never the held copy) in one round trip, for a message arriving: the conversation's
        ``flag`` and, with ``view`` (workspace, user), what that person has open (:meth:`remember_view`)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self.keys(conversation_id).notes, f"flag:{flag}")
        if view is not None:
            pipe.get(self._view_key(*view))
        raw = await self._call(pipe.execute())
        seen = raw[1] if view is not None else None
        return (json.loads(raw[0]) if raw[0] is not None else None,
                seen.decode() if isinstance(seen, bytes) else seen)

    async def remember_thread(self, message_key: str, thread_ts: str) -> None:
        """Remember which thread a reply was posted in; ``message_key`` is the id its own ts would have as a
        thread (Slack's ``message_deleted`` names the reply's ts and, without ``previous_message``, not its
        thread)."""
        await self._call(self.client.set(self.keys(message_key).thread, thread_ts, ex=self.retention_seconds))

    async def thread_of(self, message_key: str) -> str | None:
        """The thread a reply was posted in (see :meth:`remember_thread`), or None."""
        raw = await self._call(self.client.get(self.keys(message_key).thread))
        return raw.decode() if isinstance(raw, bytes) else raw

    async def _set(self, conversation_id: str, fields: Mapping[str, str]) -> None:
        """Set ``fields`` of the notes in one script, fenced by the lease this process holds the conversation
        with (none: unfenced)."""
        args = [self.retention_seconds, *(x for pair in fields.items() for x in pair)]
        await self._fenced("SET_NOTES", conversation_id, self._tokens.get(conversation_id, ""), args)

    async def remember_view(self, workspace: str, user: str, view: str, *, seconds: int = 86_400) -> None:
        """What a person has open in Slack now (a channel, a message), as the transport said it: a hint for the
        turns that answer them, kept a day."""
        key = self._view_key(workspace, user)
        await self._call(self.client.set(key, view, ex=seconds) if view else self.client.delete(key))

    async def view_of(self, workspace: str, user: str) -> str | None:
        raw = await self._call(self.client.get(self._view_key(workspace, user)))
        return raw.decode() if isinstance(raw, bytes) else raw

    def _view_key(self, workspace: str, user: str) -> str:
        return f"{self.prefix}:{{view:{workspace}:{user}}}"

    async def get(self, conversation_id: str) -> Notes:
        key = self.keys(conversation_id).notes
        return Notes.parse(await self._call(self.client.hgetall(key)), key)
